//! Protects lossless round trips: decode(encode(s)) == s for arbitrary Unicode, both vocabularies; the
//! streaming decoder emits exactly the text, only ever complete UTF-8; long pieces stay exact; and on Qwen3
//! merge-rank BPE and tiktoken's whole-piece rule agree everywhere.

mod common;

use common::{Vocab, tokenizer};
use proptest::prelude::*;

fn arbitrary_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[ \\t\\r\\n'a-zA-Z0-9.,<|>_]{0,64}",
        "(<\\|im_start\\|>|<\\|im_end\\|>|<think>|</think>|<\\|endoftext\\|>|\\PC|\\s|'[sS]){0,24}",
    ]
}

fn check(v: Vocab, text: &str) -> Result<(), TestCaseError> {
    let Some(tok) = tokenizer(v) else { return Ok(()) };
    for parse_special in [false, true] {
        let ids = tok.encode(text, parse_special);
        prop_assert_eq!(tok.decode(&ids), text.as_bytes(), "{} parse_special={}", v.name(), parse_special);
        let mut stream = tok.decode_stream();
        let mut streamed = String::new();
        for &id in &ids {
            if let Some(s) = stream.step(id) {
                streamed.push_str(&s);
            }
        }
        prop_assert!(stream.flush().is_none(), "nothing left over at the end of valid text");
        prop_assert_eq!(&streamed, text);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn qwen3_round_trips(text in arbitrary_text()) {
        check(Vocab::Qwen3, &text)?;
    }

    #[test]
    fn qwen35_round_trips(text in arbitrary_text()) {
        check(Vocab::Qwen35, &text)?;
    }
}

#[test]
fn stream_holds_back_split_characters() {
    let Some(tok) = tokenizer(Vocab::Qwen3) else { return };
    // "😀" is four bytes; byte tokens split it.
    let bytes = "😀".as_bytes();
    let ids: Vec<u32> = bytes.iter().map(|b| tok.token_id(&[*b]).unwrap()).collect();
    let mut stream = tok.decode_stream();
    assert_eq!(stream.step(ids[0]), None);
    assert_eq!(stream.step(ids[1]), None);
    assert_eq!(stream.step(ids[2]), None);
    assert_eq!(stream.pending().len(), 3);
    assert_eq!(stream.step(ids[3]).as_deref(), Some("😀"));
    // An invalid byte comes out replaced; an unfinished character at the end is flushed lossily.
    let ff = tok.token_id(&[0xff]).unwrap();
    let a = tok.token_id(b"a").unwrap();
    assert_eq!(stream.step(ff).as_deref(), Some("\u{fffd}"));
    assert_eq!(stream.step(ids[0]), None);
    assert_eq!(stream.step(a).as_deref(), Some("\u{fffd}a"));
    assert_eq!(stream.step(ids[0]), None);
    assert_eq!(stream.flush().as_deref(), Some("\u{fffd}"));
}

#[test]
fn long_pieces_stay_fast_and_exact() {
    // One piece each, hundreds of kilobytes: the heap merge keeps this O(n log n).
    for v in [Vocab::Qwen3, Vocab::Qwen35] {
        let Some(tok) = tokenizer(v) else { return };
        for text in
            ["a".repeat(200_000), "日本語".repeat(30_000), " ".repeat(100_000), "ก\u{e34}".repeat(40_000)]
        {
            let ids = tok.encode(&text, true);
            assert!(ids.len() < text.len() / 2, "{} merged", v.name());
            assert_eq!(tok.decode(&ids), text.as_bytes());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Every Qwen3 token is reached by its merges, so tiktoken's whole-piece rule never changes an id there.
    #[test]
    fn qwen3_merges_equal_tiktoken_rule(text in arbitrary_text()) {
        let (Some(merges), Some(tiktoken)) = (tokenizer(Vocab::Qwen3), common::tokenizer_tiktoken(Vocab::Qwen3))
        else {
            return Ok(());
        };
        prop_assert_eq!(merges.encode(&text, true), tiktoken.encode(&text, true));
    }
}
