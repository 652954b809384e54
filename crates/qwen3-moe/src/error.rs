//! The one error type of this crate.

/// Everything that can go wrong loading or running a Qwen3-MoE model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `general.architecture` is not one this engine runs.
    #[error("model architecture is {found:?}; this engine runs \"qwen3moe\" models")]
    WrongArchitecture {
        /// The architecture found (empty when the key is missing).
        found: String,
    },
    /// Metadata keys the config needs are absent, all of them listed.
    #[error("the model's metadata lacks {}: the GGUF is incomplete or not a qwen3moe model", keys.join(", "))]
    MissingKeys {
        /// Every missing key.
        keys: Vec<String>,
    },
    /// A metadata value is of the wrong type or out of range.
    #[error("metadata key {key:?}: {what}")]
    BadValue {
        /// The key.
        key: String,
        /// What is wrong with it.
        what: String,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
