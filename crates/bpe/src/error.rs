//! The crate's error type.

use crate::TokenId;

/// Everything that can go wrong building a tokenizer; encoding and decoding cannot fail.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `tokenizer.ggml.model` names a tokenizer other than byte-level BPE (`gpt2`).
    #[error("unsupported tokenizer model {model:?}: only byte-level BPE (\"gpt2\") is implemented")]
    UnsupportedModel {
        /// The value found.
        model: String,
    },
    /// `tokenizer.ggml.pre` names a pre-tokenizer this crate does not implement.
    #[error("unsupported pre-tokenizer {pre:?}: only \"qwen2\" and \"qwen35\" are implemented")]
    UnsupportedPreTokenizer {
        /// The value found.
        pre: String,
    },
    /// The vocabulary is empty or larger than token ids can address.
    #[error("vocabulary of {n_tokens} tokens: it must hold between 256 and 2^31 tokens")]
    VocabularySize {
        /// The number of tokens given.
        n_tokens: usize,
    },
    /// The token list and the token type list have different lengths.
    #[error("{n_tokens} tokens but {n_types} token types: give one type per token")]
    TokenTypeCount {
        /// Length of the token list.
        n_tokens: usize,
        /// Length of the token type list.
        n_types: usize,
    },
    /// A token type value that is not one of llama.cpp's (1 normal … 6 byte).
    #[error("token {id} has unknown type {value}: expected 1 (normal) to 6 (byte)")]
    UnknownTokenType {
        /// The token.
        id: TokenId,
        /// The type value found.
        value: i32,
    },
    /// A normal token whose text holds a character outside GPT-2's byte-to-unicode alphabet.
    #[error("token {id} ({text:?}) is not byte-level text: character {ch:?} maps to no byte")]
    NotByteLevel {
        /// The token.
        id: TokenId,
        /// Its text.
        text: String,
        /// The first character that maps to no byte.
        ch: char,
    },
    /// Two normal tokens stand for the same bytes.
    #[error("tokens {first} and {second} both stand for the bytes {bytes:?}: the vocabulary must not repeat")]
    DuplicateToken {
        /// The lower id.
        first: TokenId,
        /// The higher id.
        second: TokenId,
        /// Their bytes.
        bytes: Vec<u8>,
    },
    /// A byte has no single-byte normal token, so some text could not be encoded.
    #[error("no token for the single byte {byte:#04x}: a byte-level vocabulary needs all 256")]
    MissingByteToken {
        /// The byte.
        byte: u8,
    },
    /// A merge that is not `"left right"` with both sides and their concatenation normal tokens.
    #[error("merge {index} ({merge:?}) is malformed: {reason}")]
    InvalidMerge {
        /// Its position in the merge list (its rank).
        index: usize,
        /// Its text.
        merge: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A special token id (BOS, EOS, padding) outside the vocabulary.
    #[error("{key} = {id} is outside the vocabulary of {n_tokens} tokens")]
    SpecialIdOutOfRange {
        /// Which id (`bos_token_id`, …).
        key: &'static str,
        /// The id found.
        id: TokenId,
        /// The vocabulary size.
        n_tokens: usize,
    },
    /// A metadata key is missing or has the wrong type.
    #[cfg(feature = "gguf")]
    #[error("gguf metadata key {key}: {source}")]
    Gguf {
        /// The key read.
        key: String,
        /// What the GGUF reader said.
        source: diskformer_gguf::Error,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
