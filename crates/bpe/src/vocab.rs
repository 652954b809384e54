//! Token ids and token types.

use crate::{Error, Result};

/// A token id: an index into the vocabulary (`tokenizer.ggml.tokens`).
pub type TokenId = u32;

/// A merge rank: lower merges first (the index of the merge in `tokenizer.ggml.merges`).
pub type Rank = u32;

/// A token's type, as GGUF `tokenizer.ggml.token_type` stores it (llama.cpp's `llama_token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TokenType {
    /// 1: ordinary byte-level BPE token.
    Normal,
    /// 2: the unknown token (matched as whole text when special text is parsed).
    Unknown,
    /// 3: control token such as `<|im_start|>`: matched as a whole only when special text is parsed.
    Control,
    /// 4: user-defined token such as `<think>`: always matched as a whole (as llama.cpp and Hugging Face do).
    UserDefined,
    /// 5: unused (`[PADn]` filling the vocabulary to the embedding size): never produced, decodes to nothing.
    Unused,
    /// 6: byte token (SentencePiece vocabularies); treated as normal byte-level text here.
    Byte,
}

impl TokenType {
    /// The type a GGUF value stands for.
    pub fn from_gguf(value: i32) -> Option<Self> {
        Some(match value {
            1 => Self::Normal,
            2 => Self::Unknown,
            3 => Self::Control,
            4 => Self::UserDefined,
            5 => Self::Unused,
            6 => Self::Byte,
            _ => return None,
        })
    }

    /// The GGUF value.
    pub fn to_gguf(self) -> i32 {
        match self {
            Self::Normal => 1,
            Self::Unknown => 2,
            Self::Control => 3,
            Self::UserDefined => 4,
            Self::Unused => 5,
            Self::Byte => 6,
        }
    }

    /// Converts a whole `tokenizer.ggml.token_type` array.
    ///
    /// # Errors
    /// [`Error::UnknownTokenType`] naming the first token with a value outside 1..=6.
    pub fn from_gguf_values(values: &[i32]) -> Result<Vec<Self>> {
        values
            .iter()
            .enumerate()
            .map(|(i, &value)| {
                Self::from_gguf(value).ok_or(Error::UnknownTokenType { id: i as TokenId, value })
            })
            .collect()
    }

    /// Whether the token's text is byte-level BPE text (normal and byte tokens), rather than literal text.
    pub fn is_byte_level(self) -> bool {
        matches!(self, Self::Normal | Self::Byte)
    }
}
