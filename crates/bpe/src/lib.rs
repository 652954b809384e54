//! Exact byte-level BPE for the Qwen model families, read from GGUF tokenizer metadata.
//!
//! - [`Tokenizer`]: llama.cpp's `tokenizer.ggml.model = gpt2` with the `qwen2` (Qwen2/2.5/3) and `qwen35`
//!   (Qwen3.5/3.6) pre-tokenizers, hand-written ([`PreTokenizer`], checked against the regex); GPT-2
//!   byte-level alphabet; merge-rank BPE; special tokens matched in text longest first. Built from parts
//!   with [`TokenizerBuilder`], or from GGUF metadata with the `gguf` feature (`Tokenizer::from_gguf`).
//! - Ids identical to tiktoken and Hugging Face tokenizers on the test corpus for both vocabularies
//!   (`tests/exactness.rs`); faster than tiktoken on one thread (`benches/encode.rs`).
//! - [`DecodeStream`] emits only complete UTF-8 while generating; [`chat`] renders the Qwen chat templates.
//!
//! It does not normalise text (no NFC, as llama.cpp), run other tokenizer models (SentencePiece, WordPiece)
//! or other pre-tokenizers (refused, never replaced), nor evaluate arbitrary Jinja templates.
//!
//! ```
//! use diskformer_bpe::{PreTokenizer, TokenType, TokenizerBuilder};
//!
//! let mut tokens: Vec<String> = (0..=255u8).map(diskformer_bpe::byte_level_text).collect();
//! tokens.extend(["he".into(), "ll".into(), "hell".into(), "hello".into(), "<|im_end|>".into()]);
//! let mut types = vec![TokenType::Normal; tokens.len()];
//! *types.last_mut().unwrap() = TokenType::Control;
//! let merges = ["h e", "l l", "he ll", "hell o"].map(String::from).to_vec();
//! let tok = TokenizerBuilder::new(PreTokenizer::Qwen2, tokens, types, merges).build()?;
//!
//! let ids = tok.encode("hello<|im_end|>", true);
//! assert_eq!(ids, [259, 260]);
//! assert_eq!(tok.encode("hello<|im_end|>", false).len(), 1 + 10); // special text spelled out in bytes
//! assert_eq!(tok.decode_lossy(&ids), "hello<|im_end|>");
//! # Ok::<(), diskformer_bpe::Error>(())
//! ```

mod byte_level;
pub mod chat;
mod decode;
mod error;
#[cfg(feature = "gguf")]
mod gguf;
mod hash;
mod pairs;
mod pretokenizer;
mod special;
mod tokenizer;
mod unicode;
mod vocab;

pub use decode::{DecodeStream, Utf8Stream};
pub use error::{Error, Result};
pub use pretokenizer::{Pieces, PreTokenizer};
pub use tokenizer::{Tokenizer, TokenizerBuilder};
pub use vocab::{Rank, TokenId, TokenType};

/// A byte written as GPT-2 byte-level text (`' '` → `"Ġ"`), the form of `tokenizer.ggml.tokens` entries.
pub fn byte_level_text(byte: u8) -> String {
    byte_level::byte_to_char(byte).to_string()
}

/// Bytes written as GPT-2 byte-level text.
pub fn bytes_to_byte_level(bytes: &[u8]) -> String {
    byte_level::encode_bytes(bytes)
}
