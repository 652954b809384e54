//! Protects `Tokenizer::from_gguf` (feature `gguf`): the real tokenizer-only GGUF files give the same tokenizer
//! as the parts, and a GGUF with another tokenizer model or pre-tokenizer, or missing keys, is refused by name.
#![cfg(feature = "gguf")]

mod common;

use common::{Vocab, corpus, tokenizer};
use diskformer_bpe::{Error, PreTokenizer, Tokenizer};
use diskformer_gguf::{Array, Gguf, GgufFile, GgufWriter, Header, PrefixParse, Value};

#[test]
fn real_vocabularies_from_gguf() {
    for v in Vocab::ALL {
        let Some(parts) = tokenizer(v) else { continue };
        let gguf = GgufFile::open(v.gguf_path()).unwrap();
        let tok = Tokenizer::from_gguf(&gguf).unwrap();
        assert_eq!(tok.n_tokens(), parts.n_tokens());
        assert_eq!(tok.eos_token_id(), parts.eos_token_id());
        assert_eq!(tok.bos_token_id(), parts.bos_token_id());
        assert_eq!(tok.padding_token_id(), parts.padding_token_id());
        assert!(!tok.add_bos_token());
        for doc in corpus().iter().step_by(10) {
            assert_eq!(tok.encode(doc, true), parts.encode(doc, true), "{}", v.name());
        }
        // The header alone (what the engine parses from header.bin) is enough.
        let bytes = std::fs::read(v.gguf_path()).unwrap();
        let PrefixParse::Complete(header) = Header::parse_prefix(&bytes).unwrap() else {
            panic!("whole file given")
        };
        assert_eq!(Tokenizer::from_header(&header).unwrap().n_tokens(), parts.n_tokens());
    }
}

/// A tokenizer-only GGUF: the 256 bytes, "ab", and the given model and pre-tokenizer.
fn tiny_gguf(model: &str, pre: Option<&str>, with_tokens: bool) -> Vec<u8> {
    tiny_gguf_with(model, pre, with_tokens, None)
}

/// [`tiny_gguf`] with `tokenizer.chat_template` set to `template`.
fn tiny_gguf_with(model: &str, pre: Option<&str>, with_tokens: bool, template: Option<Value>) -> Vec<u8> {
    let mut w = GgufWriter::new();
    if let Some(template) = template {
        w.add_metadata("tokenizer.chat_template", template).unwrap();
    }
    w.add_metadata("general.architecture", Value::String("qwen3moe".into())).unwrap();
    w.add_metadata("tokenizer.ggml.model", Value::String(model.into())).unwrap();
    if let Some(pre) = pre {
        w.add_metadata("tokenizer.ggml.pre", Value::String(pre.into())).unwrap();
    }
    let mut tokens: Vec<String> = (0..=255u8).map(diskformer_bpe::byte_level_text).collect();
    tokens.push("ab".into());
    tokens.push("<|im_end|>".into());
    let mut types = vec![1i32; 257];
    types.push(3);
    if with_tokens {
        w.add_metadata("tokenizer.ggml.tokens", Value::Array(Array::String(tokens))).unwrap();
    }
    w.add_metadata("tokenizer.ggml.token_type", Value::Array(Array::I32(types))).unwrap();
    w.add_metadata("tokenizer.ggml.merges", Value::Array(Array::String(vec!["a b".into()]))).unwrap();
    w.add_metadata("tokenizer.ggml.eos_token_id", Value::U32(257)).unwrap();
    let mut bytes = Vec::new();
    w.write_to(&mut bytes).unwrap();
    bytes
}

fn from_bytes(bytes: Vec<u8>) -> Result<Tokenizer, Error> {
    Tokenizer::from_gguf(&Gguf::from_bytes(bytes).unwrap())
}

#[test]
fn tiny_gguf_works() {
    let tok = from_bytes(tiny_gguf("gpt2", Some("qwen35"), true)).unwrap();
    assert_eq!(tok.pre_tokenizer(), PreTokenizer::Qwen35);
    assert_eq!(tok.encode("ab<|im_end|>", true), [256, 257]);
    assert_eq!(tok.eos_token_id(), Some(257));
    assert_eq!(tok.bos_token_id(), None);
}

#[test]
fn other_tokenizers_are_refused_by_name() {
    assert!(matches!(
        from_bytes(tiny_gguf("llama", Some("qwen2"), true)),
        Err(Error::UnsupportedModel { model }) if model == "llama"
    ));
    assert!(matches!(
        from_bytes(tiny_gguf("gpt2", Some("llama3"), true)),
        Err(Error::UnsupportedPreTokenizer { pre }) if pre == "llama3"
    ));
    assert!(matches!(
        from_bytes(tiny_gguf("gpt2", None, true)),
        Err(Error::Gguf { key, .. }) if key == "tokenizer.ggml.pre"
    ));
    assert!(matches!(
        from_bytes(tiny_gguf("gpt2", Some("qwen2"), false)),
        Err(Error::Gguf { key, .. }) if key == "tokenizer.ggml.tokens"
    ));
}

#[test]
fn builder_from_metadata_can_ignore_merges() {
    let Some(_) = tokenizer(Vocab::Qwen35) else { return };
    let gguf = GgufFile::open(Vocab::Qwen35.gguf_path()).unwrap();
    let b = diskformer_bpe::TokenizerBuilder::from_metadata(gguf.metadata()).unwrap();
    // " بزرگ" is a token that no split into two tokens makes: only tiktoken's whole-piece rule emits it.
    let text = "کار بزرگ";
    let tiktoken = b.clone().ignore_merges(true).build().unwrap();
    let merges = b.build().unwrap();
    assert_eq!(tiktoken.encode(text, false).len(), 2);
    assert!(merges.encode(text, false).len() > 2);
    assert_eq!(tiktoken.decode(&tiktoken.encode(text, false)), merges.decode(&merges.encode(text, false)));
}

#[test]
fn the_models_chat_template_comes_with_the_tokenizer() {
    use diskformer_bpe::chat::{ChatOptions, Message};
    let template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}";
    let tok = from_bytes(tiny_gguf_with("gpt2", Some("qwen2"), true, Some(Value::String(template.into()))))
        .unwrap();
    assert_eq!(tok.render_chat(&[Message::user("ab")], &ChatOptions::default()), "<user>ab");
    // Not a string: refused by name.
    let err = from_bytes(tiny_gguf_with("gpt2", Some("qwen2"), true, Some(Value::U32(1)))).unwrap_err();
    assert!(err.to_string().contains("tokenizer.chat_template"), "{err}");
}
