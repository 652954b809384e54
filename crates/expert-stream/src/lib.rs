//! The expert slot pool of diskformer: which routed experts sit in the device's fixed slot pool, and getting
//! the missing ones there.
//!
//! - [`PoolCore`] is the policy as a plain state machine: `demand` pins hits (moving them to most recent),
//!   joins loads already running (late hits, never read twice) and picks slots for misses; `prefetch` queues
//!   guesses and starts at most `max_prefetch_in_flight` of them, never evicting what demand needs;
//!   eviction is [`EvictionPolicy::Lru`], [`EvictionPolicy::Hot`] (decayed heat), [`EvictionPolicy::Lfu`] or
//!   [`EvictionPolicy::Cyclic`] (LRU aware of the layer cycle); [`Stats`] counts hits, late hits, misses,
//!   evictions, bytes, times and prefetch use per layer.
//! - [`ExpertPool`] runs that policy with reader threads over a [`Backend`] (read a record, upload it into a
//!   slot): `ensure(layer, ids)` returns [`Pinned`] slots in id order, `release` unpins them after the submit
//!   that reads them.
//! - [`GpuBackend`] is the device side: a [`GpuPool`] (the four plane buffers the expert kernels bind,
//!   `gate_up_q`, `gate_up_scales`, `down_q`, `down_scales`, slot `s` at `s × plane bytes`) filled from the
//!   store's [`RecordReader`](diskformer_store::RecordReader), uploading with `queue.write_buffer` or a
//!   per-thread ring of mapped staging buffers ([`UploadMethod`]), a record in pieces that each go to the
//!   device as soon as they are read ([`GpuPool::upload_pieces`], [`GpuPool::upload_read_ahead`]).
//! - [`SpeculativeReads`] reads guessed records into host memory while the disk would idle (a demand read
//!   goes first); [`GpuBackend::with_speculation`] then stages a guessed miss from there. Guesses touch no
//!   slot, so they are safe while the engine queues layers ahead of its checks.
//! - [`TierPolicy`] says where each of a layer's picks runs when the host computes experts too: hits on the
//!   GPU, misses on the CPU, and a miss seen again within a few tokens uploaded in the background.
//! - Routing workloads ([`UniformRoutes`], [`TraceRoutes`], [`TraceWriter`]): forced picks for measuring
//!   streaming on routing like a trained model's, whatever the weights (ROUTING.md).
//! - [`HostRecords`] is the host tier for stores larger than RAM: whole records read with O_DIRECT into a
//!   fixed budget of host memory, the least recently used leaving first ([`HostLru`]); the CPU tier
//!   computes from them, and the GPU pool loads the ones it admits from there ([`HostHandoff`]).
//! - [`Placement`] is split residency's policy: with every record in the pool's arena in host memory (which
//!   the kernels read over the bus), which of them the device's slots hold, moved by heat.
//! - [`GpuBudget::expert_slots`] turns a GPU budget into a slot count, refusing one under `2 × top-k` records.
//! - [`MemoryBackend`] keeps records and slots in RAM, with hooks to hold, fail and watch loads.
//!
//! The policy core knows no wgpu and no store format; the record size is whatever the backend says. It does
//! not run kernels or own the dense weights: the engine binds the pool's buffers.
//!
//! ```
//! use diskformer_expert_stream::{ExpertKey, ExpertPool, MemoryBackend, PoolConfig};
//!
//! // 4 slots for a model of 2 layers × 8 experts, records of 64 bytes.
//! let pool = ExpertPool::new(MemoryBackend::new(8, 64, 4), PoolConfig::new(4, 2, 8))?;
//! let pinned = pool.ensure(0, &[5, 2])?; // two misses, read in parallel
//! assert_eq!(pool.backend().slot_bytes(pinned[0]), pool.backend().record(ExpertKey::new(0, 5)));
//! pool.release(pinned); // after the submit that reads the slots
//!
//! let again = pool.ensure(0, &[2])?; // a hit
//! pool.release(again);
//! let stats = pool.stats();
//! assert_eq!((stats.hits, stats.misses), (1, 2));
//! println!("{stats}");
//! # Ok::<(), diskformer_expert_stream::Error>(())
//! ```

mod backend;
mod budget;
mod calibrated;
mod config;
mod core;
mod error;
mod gpu;
mod heat;
mod host;
mod key;
mod memory;
mod placement;
mod pool;
mod speculative;
mod staging_times;
mod stats;
mod tiers;
mod workload;

pub use backend::Backend;
pub use budget::GpuBudget;
pub use calibrated::{
    CalibratedRoutes, LruReplay, Popularity, ReuseStats, TraceFigures, lru_hit_rate, lru_replay, popularity,
    reuse_stats, static_hot_hit_rate,
};
pub use config::{EvictionPolicy, PoolConfig};
pub use core::{LoadJob, LoadReport, Pinned, PoolCore, Progress, SlotView, Ticket};
pub use error::{BackendError, Error, Result, SharedError};
pub use gpu::{GpuBackend, GpuPool, GpuStaging, Plane, PoolPart, StagingRing, UploadMethod};
pub use host::{
    HostFetch, HostHandoff, HostLru, HostPlan, HostRecords, HostStats, available_memory, host_slots,
};
pub use key::{ExpertKey, LoadId, Slot};
pub use memory::{Event, Fault, Gate, MemoryBackend, MemoryStaging};
pub use placement::{Move, Placement, PlacementConfig};
pub use pool::{ExpertPool, load_record};
pub use speculative::{DemandRead, Held, ReadPart, SpeculativeReads, SpeculativeStats};
pub use staging_times::StagingTimes;
pub use stats::Stats;
pub use tiers::{ArenaShare, LayerPlan, Tier, TierConfig, TierPolicy};
pub use workload::{RouteShape, RouteSource, SeededRng, TokenPicks, TraceRoutes, TraceWriter, UniformRoutes};
