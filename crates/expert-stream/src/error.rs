//! The one error type of this crate.

use std::sync::Arc;

use crate::{ExpertKey, Slot};

/// What a [`Backend`](crate::Backend) returns when a read or an upload fails.
pub type BackendError = Box<dyn std::error::Error + Send + Sync>;

/// A shared backend error: one failed load is reported to every caller that waited for it.
pub type SharedError = Arc<dyn std::error::Error + Send + Sync>;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the expert pool.
///
/// Messages are lowercase and say what was wrong and what to do. The type is `Clone` because one failed load
/// is reported to every `ensure` that waited for it.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Every slot is pinned or loading, so a demand miss has nowhere to go.
    #[error(
        "expert pool exhausted: all {slots} slots are pinned ({pinned}) or loading ({loading}) and {needed} more \
         are needed; raise the pool size (slots) to at least {wanted}, or release slots after each submit"
    )]
    PoolExhausted {
        /// Slots in the pool.
        slots: usize,
        /// Slots pinned by callers.
        pinned: usize,
        /// Slots being read or uploaded (not evictable until done).
        loading: usize,
        /// Free slots this `ensure` needed beyond those it could get.
        needed: usize,
        /// A pool size that would have served this call.
        wanted: usize,
    },
    /// A layer or expert index past the model's counts.
    #[error("expert {key} is out of range: the pool was built for {layers} layers × {experts} experts")]
    OutOfRange {
        /// The key asked for.
        key: ExpertKey,
        /// `block_count` the pool was configured with.
        layers: u32,
        /// `expert_count` the pool was configured with.
        experts: u32,
    },
    /// The pool configuration cannot work.
    #[error("invalid expert pool config: {field} {reason}")]
    InvalidConfig {
        /// The field of [`PoolConfig`](crate::PoolConfig).
        field: &'static str,
        /// What is wrong with it and what to use instead.
        reason: String,
    },
    /// The backend failed to read a record; its slot was freed.
    #[error("reading expert record {key} failed: {source}; check the store (re-ingest if it is corrupt)")]
    Read {
        /// The record.
        key: ExpertKey,
        /// The backend's error.
        source: SharedError,
    },
    /// The backend read fewer bytes than a record holds; the slot was freed.
    #[error(
        "short read of expert record {key}: got {got} of {expected} bytes; the store is truncated, re-ingest it"
    )]
    ShortRead {
        /// The record.
        key: ExpertKey,
        /// Bytes the backend read.
        got: usize,
        /// Bytes of one record.
        expected: usize,
    },
    /// The backend failed to upload a record into its slot; the slot was freed.
    #[error("uploading expert record {key} into {slot} failed: {source}")]
    Upload {
        /// The record.
        key: ExpertKey,
        /// The slot it was going to.
        slot: Slot,
        /// The backend's error.
        source: SharedError,
    },
    /// The backend panicked while loading a record; the slot was freed.
    #[error("the backend panicked while loading expert record {key}; this is a bug in the backend")]
    BackendPanicked {
        /// The record.
        key: ExpertKey,
    },
    /// [`clear`](crate::ExpertPool::clear) ran while this `ensure` waited; nothing it asked for is pinned.
    #[error("the expert pool was cleared while this ensure waited; call ensure again")]
    Cleared,
    /// A reader thread could not be started.
    #[error("could not start an expert reader thread: {0}")]
    Spawn(Arc<std::io::Error>),
}
