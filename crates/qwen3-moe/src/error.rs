//! The one error type of this crate.

/// Everything that can go wrong loading or running a Qwen3-MoE model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `general.architecture` is not the one asked for.
    #[error("model architecture is {found:?}; {expected}")]
    WrongArchitecture {
        /// The architecture found (empty when the key is missing).
        found: String,
        /// What was wanted, and what runs it.
        expected: &'static str,
    },
    /// Metadata keys the config needs are absent, all of them listed.
    #[error("the model's metadata lacks {}: the GGUF is incomplete", keys.join(", "))]
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
    /// A tensor the engine needs is missing, of a type it does not run, or of the wrong shape.
    #[error("tensor {name:?}: {what}")]
    BadTensor {
        /// The tensor's GGUF name.
        name: String,
        /// What is wrong with it.
        what: String,
    },
    /// An option given to the engine is out of range.
    #[error("option {option}: {what}")]
    BadOption {
        /// The option.
        option: &'static str,
        /// What is wrong and what is allowed.
        what: String,
    },
    /// A token id past the vocabulary.
    #[error("token id {id} is past the vocabulary of {vocab} tokens")]
    BadToken {
        /// The id.
        id: u32,
        /// Vocabulary rows.
        vocab: u32,
    },
    /// The KV cache cannot take the tokens asked for.
    #[error("context full: {needed} positions needed, the cache holds {ctx} (raise --ctx or start over)")]
    ContextFull {
        /// Positions the step needs.
        needed: usize,
        /// Positions the cache holds.
        ctx: u32,
    },
    /// A GGUF could not be read or written.
    #[error(transparent)]
    Gguf(#[from] diskformer_gguf::Error),
    /// The store could not be ingested, opened or read.
    #[error(transparent)]
    Store(#[from] diskformer_store::Error),
    /// The tokenizer could not be built.
    #[error(transparent)]
    Tokenizer(#[from] diskformer_bpe::Error),
    /// No usable GPU, or a kernel refused its shapes.
    #[error(transparent)]
    Kernels(#[from] diskformer_kernels::Error),
    /// The expert pool failed (budget, read, upload).
    #[error(transparent)]
    Pool(#[from] diskformer_expert_stream::Error),
    /// The host's expert kernels refused their input.
    #[error(transparent)]
    CpuExperts(#[from] diskformer_cpu_kernels::Error),
    /// The device failed (out of memory, lost, a readback that did not map).
    #[error("GPU: {0}")]
    Gpu(String),
    /// A file outside the store could not be read.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

impl From<diskformer_runtime::Error> for Error {
    fn from(e: diskformer_runtime::Error) -> Self {
        use diskformer_runtime::Error as R;
        match e {
            R::BadOption { option, what } => Error::BadOption { option, what },
            R::Store(e) => Error::Store(e),
            R::Pool(e) => Error::Pool(e),
            R::CpuExperts(e) => Error::CpuExperts(e),
            R::Gpu(e) => Error::Gpu(e),
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
