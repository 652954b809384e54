#![doc = include_str!("../README.md")]

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
