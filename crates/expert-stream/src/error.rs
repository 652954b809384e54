//! The one error type of this crate.

use std::sync::Arc;

use crate::budget::{gb, needed};
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
    /// A routing trace line that is not a token's picks for this model.
    #[error("routing trace {path}, line {line}: {what}")]
    Trace {
        /// The trace file.
        path: std::path::PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it and what was expected.
        what: String,
    },
    /// A routing trace with fewer tokens than the run asked for.
    #[error("routing trace {path} ended after {tokens} tokens; the run needs more (write a longer trace)")]
    TraceEnded {
        /// The trace file.
        path: std::path::PathBuf,
        /// Tokens it held.
        tokens: usize,
    },
    /// A routing trace could not be read or written.
    #[error("routing trace {path}: {source}")]
    TraceIo {
        /// The trace file.
        path: std::path::PathBuf,
        /// The cause.
        source: Arc<std::io::Error>,
    },
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
    #[error("reading expert record {key} failed: {source}")]
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
    /// The GPU budget leaves fewer than `2 × top-k` records for the expert pool.
    #[error(
        "GPU budget {} is too small: dense weights {}, KV cache {}, scratch {} leave {}, and the expert cache \
         needs {} (2 × top-k = {min_slots} records of {:.2} MB): {} short; raise the budget to at \
         least {} or shorten the context",
        gb(*.budget), gb(*.dense), gb(*.kv_cache), gb(*.scratch), gb(*.left),
        gb(.min_slots.saturating_mul(*.record_bytes)), *.record_bytes as f64 / 1e6,
        gb(needed(*.dense, *.kv_cache, *.scratch, *.min_slots, *.record_bytes).saturating_sub(*.budget)),
        gb(needed(*.dense, *.kv_cache, *.scratch, *.min_slots, *.record_bytes))
    )]
    BudgetTooSmall {
        /// The whole GPU budget.
        budget: u64,
        /// Dense weights.
        dense: u64,
        /// KV cache.
        kv_cache: u64,
        /// Working buffers.
        scratch: u64,
        /// What those leave for the expert pool (zero when they exceed the budget).
        left: u64,
        /// Bytes of one expert record.
        record_bytes: u64,
        /// The fewest slots the pool can work with: `2 × top-k`.
        min_slots: u64,
    },
    /// One slot of a pool plane would be larger than the device's largest buffer (pools of many slots are
    /// split into parts; a single slot cannot be).
    #[error(
        "one slot of the {plane} plane needs {bytes} bytes, more than the device's largest buffer ({max} bytes): \
         this model's experts cannot be pooled on this device"
    )]
    SlotTooLarge {
        /// The plane (`gate_up_q`, `gate_up_scales`, `down_q`, `down_scales`).
        plane: &'static str,
        /// Bytes of one slot of it.
        bytes: u64,
        /// `max_buffer_size` of the device.
        max: u64,
    },
    /// The expert kernels could not bind the pool: not even one aligned group of slots fits a storage binding.
    #[error(
        "the {plane} plane cannot be bound by the expert kernels: {slots_per_step} slots ({bytes} bytes) is the \
         smallest 256-byte-aligned split, over the device's max storage binding of {max_binding} bytes"
    )]
    Unbindable {
        /// The plane.
        plane: &'static str,
        /// Slots in the smallest split step.
        slots_per_step: u64,
        /// Bytes of those slots in that plane.
        bytes: u64,
        /// `max_storage_buffer_binding_size` of the device.
        max_binding: u64,
    },
    /// The device could not allocate the pool's planes.
    #[error(
        "the device could not allocate the expert pool ({bytes} bytes): {detail}; use a smaller GPU budget"
    )]
    Allocation {
        /// Bytes of all four planes.
        bytes: u64,
        /// The device's error.
        detail: String,
    },
    /// The host memory of the pool's arena (`GpuPool::with_arena`) could not be allocated.
    #[error(
        "the host memory for the expert arena ({:.2} GB) could not be allocated: {detail}; turn the arena off \
         (--no-host-arena, StreamOptions::host_arena)",
        *.bytes as f64 / 1e9
    )]
    ArenaAllocation {
        /// Bytes of the arena's planes.
        bytes: u64,
        /// The device's error.
        detail: String,
    },
    /// The host tier's RAM budget cannot work (see [`host_slots`](crate::host_slots)).
    #[error("RAM budget {} for the host tier: {what}", gb(*.budget))]
    HostBudget {
        /// The budget asked for, in bytes.
        budget: u64,
        /// What is wrong, with the numbers, and what to do.
        what: String,
    },
    /// The store's record layout cannot be uploaded into pool planes.
    #[error("expert record layout unsupported by the GPU pool: {reason}")]
    BadLayout {
        /// What is wrong.
        reason: String,
    },
}
