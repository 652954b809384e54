//! Protects special-token handling: control tokens only with parse_special, user-defined tokens always,
//! longest first, never inside ordinary pieces; and the real vocabularies' special ids.

mod common;

use common::{Vocab, tokenizer};
use diskformer_bpe::{PreTokenizer, TokenType, TokenizerBuilder};

#[test]
fn qwen3_special_tokens() {
    let Some(tok) = tokenizer(Vocab::Qwen3) else { return };
    let im_start = tok.special_token_id("<|im_start|>").unwrap();
    let think = tok.special_token_id("<think>").unwrap();
    assert_eq!((im_start, think), (151644, 151667));
    assert_eq!(tok.token_type(im_start), Some(TokenType::Control));
    assert_eq!(tok.token_type(think), Some(TokenType::UserDefined));
    assert_eq!(tok.eos_token_id(), Some(151645));
    assert_eq!(tok.n_tokens(), 151_936);
    assert_eq!(tok.token_type(151_935), Some(TokenType::Unused));
    assert_eq!(tok.token_to_piece(151_935), Some(&b""[..]));
    // llama.cpp makes FIM markers control tokens at load; it ends generation on these.
    let fim = tok.special_token_id("<|fim_prefix|>").unwrap();
    assert_eq!(tok.token_type(fim), Some(TokenType::Control));
    assert_eq!(tok.end_of_generation_ids(), [151643, 151645, 151662, 151663, 151664]);
    assert!(tok.is_end_of_generation(151645) && !tok.is_end_of_generation(151644));

    let ids = tok.encode("<|im_start|>user\n<think>hi</think>", true);
    assert_eq!(ids[0], im_start);
    assert!(ids.contains(&think));
    let plain = tok.encode("<|im_start|>user\n<think>hi</think>", false);
    assert!(!plain.contains(&im_start), "control text is spelled out without parse_special");
    assert!(plain.contains(&think), "user-defined tokens are matched either way (llama.cpp, tokenizers)");
    assert_eq!(tok.decode(&plain), tok.decode(&ids));
}

#[test]
fn qwen35_special_tokens() {
    let Some(tok) = tokenizer(Vocab::Qwen35) else { return };
    assert_eq!(tok.n_tokens(), 248_320);
    assert_eq!(tok.special_token_id("<|im_end|>"), Some(248046));
    assert_eq!(tok.encode("<|im_end|>", true), [248046]);
    assert_eq!(tok.pre_tokenizer(), PreTokenizer::Qwen35);
}

#[test]
fn longest_special_first_and_overlaps() {
    let mut tokens: Vec<String> = (0..=255u8).map(diskformer_bpe::byte_level_text).collect();
    tokens.extend(["<a>".into(), "<a><b>".into(), "b><c".into(), "<u>".into()]);
    let mut types = vec![TokenType::Normal; 256];
    types.extend([TokenType::Control, TokenType::Control, TokenType::Control, TokenType::UserDefined]);
    let tok = TokenizerBuilder::new(PreTokenizer::Qwen2, tokens, types, vec![]).build().unwrap();
    // "<a><b>" (longest) wins over "<a>" and over the overlapping "b><c".
    assert_eq!(tok.encode("<a><b><c", true), [257, u32::from(b'<'), u32::from(b'c')]);
    // With "<a><b>" absent, "b><c" claims its text first (longer), then "<a>" the rest.
    assert_eq!(tok.encode("<a>b><c", true), [256, 258]);
    assert_eq!(tok.encode("x<u>", false), [u32::from(b'x'), 259]);
    assert_eq!(tok.encode("<a>", false).len(), 3);
}
