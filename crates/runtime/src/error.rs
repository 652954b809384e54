//! The runtime's error: an option out of range, or what the store, the pool or the CPU's expert kernels
//! refused.

/// What can go wrong setting up or running the parts of a streaming engine the runtime holds. Not
/// `non_exhaustive`: the engines match every variant onto their own errors, and a new one should make them
/// say where it goes.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An option out of range, or two that do not go together.
    #[error("option {option}: {what}")]
    BadOption {
        /// The option.
        option: &'static str,
        /// What is wrong and what is allowed.
        what: String,
    },
    /// The store could not be read (its checksums, the disk probe, a damaged record).
    #[error(transparent)]
    Store(#[from] diskformer_store::Error),
    /// The pool could not be built or failed.
    #[error(transparent)]
    Pool(#[from] diskformer_expert_stream::Error),
    /// The host's expert kernels refused their input.
    #[error(transparent)]
    CpuExperts(#[from] diskformer_cpu_kernels::Error),

    /// A GPU operation the device refused (or the device lost).
    #[error("GPU: {0}")]
    Gpu(String),
}

/// Shorthand for results of the runtime's streaming parts.
pub type Result<T, E = Error> = std::result::Result<T, E>;
