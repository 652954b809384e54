//! Loading, whatever the model: a GGUF ingested into a store once ([`ingest_gguf`], [`default_store_dir`]),
//! the GPU budget when none is given ([`auto_gpu_budget`]), how long a chunk may be for the pool it streams
//! through ([`chunk_bound`]), every expert loaded when all fit ([`load_every_expert`]) or into the host
//! arena ([`fill_arena`]) with the bus's rate from it measured ([`probe_arena`]), and what a load reports
//! while it works ([`LoadProgress`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use diskformer_expert_stream::{
    Backend, Error as PoolError, ExpertKey, ExpertPool, GpuBackend, Slot, load_record,
};
use diskformer_kernels::Context;
use diskformer_store::IngestOptions;

use crate::{Error, Result};

/// What a load reports while it works.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LoadProgress {
    /// Ingesting the GGUF into the store: bytes done of total, rate.
    Ingest {
        /// Bytes of the GGUF done.
        done: u64,
        /// Its size.
        total: u64,
        /// Bytes per second so far.
        bytes_per_sec: f64,
    },
    /// Uploading the dense weights: bytes done of total.
    Upload {
        /// Bytes uploaded.
        done: u64,
        /// Bytes to upload.
        total: u64,
    },
    /// Loading every expert into the pool (when all fit and the engine routes on the GPU), or into its arena
    /// in host memory ([`fill_arena`]): records done of total.
    Experts {
        /// Records loaded.
        done: u64,
        /// Records in the model.
        total: u64,
    },
}

/// Ingests `gguf` (one file, or a gguf-split set's first shard) into `store_dir` when the store there is
/// missing, stale or incomplete, resuming an interrupted ingest; a complete store of the same file is used
/// as it is, made with its experts copied or not ([`IngestOptions::either_mode`]). `copy_experts` off reads
/// a K-quant file's experts in place from the GGUF ([`IngestOptions::copy_experts`]).
///
/// # Errors
/// The store's errors.
pub fn ingest_gguf(
    gguf: &Path,
    store_dir: &Path,
    copy_experts: bool,
    progress: &mut dyn FnMut(LoadProgress),
) -> Result<()> {
    let ingest = IngestOptions { copy_experts, either_mode: true, ..IngestOptions::default() };
    diskformer_store::ingest(gguf, store_dir, &ingest, &mut |p| {
        progress(LoadProgress::Ingest { done: p.done, total: p.total, bytes_per_sec: p.bytes_per_sec })
    })?;
    Ok(())
}

/// The store directory used for a GGUF when none is given: `<file>.diskformer/` beside it.
pub fn default_store_dir(gguf: &Path) -> PathBuf {
    let mut name = gguf.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".diskformer");
    gguf.with_file_name(name)
}

/// The budget when none is given: 90 % of the adapter's device-local memory (the rest left to the driver and
/// the display), or [`FALLBACK_GPU_BUDGET`] where the backend does not tell it or the adapter is a software
/// renderer (whose memory is the host's, which the page cache and the CPU tier use too).
pub fn auto_gpu_budget(ctx: &Context) -> u64 {
    match ctx.device_memory() {
        Some(bytes) if !ctx.is_software() => bytes / 10 * 9,
        _ => FALLBACK_GPU_BUDGET,
    }
}

/// [`auto_gpu_budget`] where the adapter's memory is unknown or the host's.
pub const FALLBACK_GPU_BUDGET: u64 = 4_000_000_000;

/// The context when none is given: room for a thinking model's long replies (Qwen3 suggests up to 32,768
/// generated tokens), at most the model's own, and at most what a KV cache of an eighth of the GPU budget
/// holds (`kv_bytes_per_position` each), so that a small budget keeps its room for experts; never below
/// [`MIN_DEFAULT_CONTEXT`] (or the model's, if that is less).
pub fn default_context(model_context: u32, kv_bytes_per_position: u64, gpu_budget: u64) -> u32 {
    let fits = gpu_budget / 8 / kv_bytes_per_position.max(1);
    let most = model_context.min(THINKING_CONTEXT);
    (fits.min(u64::from(most)) as u32).max(MIN_DEFAULT_CONTEXT.min(model_context))
}

/// [`default_context`]'s most: Qwen3's suggested output length for thinking, with room for the prompt.
pub const THINKING_CONTEXT: u32 = 32_768;
/// [`default_context`]'s least, whatever the budget (the model's own where it is shorter).
pub const MIN_DEFAULT_CONTEXT: u32 = 4_096;

/// The most tokens a chunk may have while experts stream through `slots` slots of a model whose layers
/// have `experts` experts and pick `top_k`: a chunk pins the union of a layer's picks, at most
/// `chunk · top_k` experts and at most `experts`. A pool of two layers' experts holds any union with room to
/// spare, so chunks are then unbounded here (`u32::MAX`: each layer's experts read once a chunk, not once
/// every `slots / top_k` tokens); a smaller pool bounds them by `slots / top_k`.
pub fn chunk_bound(slots: usize, experts: u32, top_k: u32) -> u32 {
    if slots >= 2 * experts as usize { u32::MAX } else { (slots / top_k as usize) as u32 }
}

/// Loads every expert of `layers` × `experts` into the pool (all fit), returning the `[layers · experts]`
/// slot table; the pool's stats are zeroed after.
///
/// # Errors
/// The pool's (a read or an upload failed).
pub fn load_every_expert(
    pool: &ExpertPool<GpuBackend>,
    layers: u32,
    experts: u32,
    progress: &mut dyn FnMut(LoadProgress),
) -> Result<Vec<u32>> {
    let ids: Vec<u32> = (0..experts).collect();
    let mut table = Vec::with_capacity((layers * experts) as usize);
    let total = u64::from(layers * experts);
    for l in 0..layers {
        let pinned = pool.ensure(l, &ids)?;
        table.extend(pinned.slots().iter().map(|s| s.0));
        pool.release(pinned);
        progress(LoadProgress::Experts { done: u64::from((l + 1) * experts), total });
    }
    pool.reset_stats();
    Ok(table)
}

/// Fills the pool's arena (see `GpuPool::with_arena`) with every record of `layers` × `experts`, on the pool's
/// reader count of threads, each through its own staging, each record loaded as the pool's readers load
/// theirs ([`load_record`]: checked, a short read refused); returns once the device has them all, the
/// arena marked filled (the pool's loads then copy from it: `GpuPool::mark_arena_filled`).
///
/// # Errors
/// The first read or upload that failed, naming its record.
pub fn fill_arena(
    pool: &ExpertPool<GpuBackend>,
    layers: u32,
    experts: u32,
    progress: &mut dyn FnMut(LoadProgress),
) -> Result<()> {
    let backend = pool.backend();
    let total = u64::from(layers * experts);
    let threads = pool.config().readers.clamp(1, total.max(1) as usize);
    let done = AtomicU64::new(0);
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| -> Result<()> {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (tx, done) = (tx.clone(), &done);
                scope.spawn(move || -> Result<()> {
                    // Whole records a load: nothing waits for one in particular.
                    let mut staging = backend.staging(true);
                    for i in (t as u64..total).step_by(threads) {
                        let key =
                            ExpertKey::new((i / u64::from(experts)) as u32, (i % u64::from(experts)) as u32);
                        let slot = backend.arena_slot(key).ok_or_else(|| PoolError::InvalidConfig {
                            field: "arena_slots",
                            reason: format!(
                                "are {}; the model has {total} records",
                                backend.pool().arena_slots()
                            ),
                        })?;
                        load_record(backend, key, slot, &mut staging)?;
                        done.fetch_add(1, Ordering::Relaxed);
                        let _ = tx.send(());
                    }
                    Ok(())
                })
            })
            .collect();
        drop(tx);
        // Progress from this thread (the callback is not `Send`) as the workers count records.
        while rx.recv().is_ok() {
            progress(LoadProgress::Experts { done: done.load(Ordering::Relaxed), total });
        }
        workers
            .into_iter()
            .try_for_each(|w| w.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    })?;
    backend.pool().wait_for_uploads().map_err(|e| {
        let key = ExpertKey::new(layers - 1, experts - 1);
        let slot = backend.arena_slot(key).expect("every record was given its arena slot");
        PoolError::Upload { key, slot, source: e.into() }
    })?;
    // From now on the pool's loads copy from the arena on the device.
    backend.pool().mark_arena_filled();
    Ok(())
}

/// Records [`probe_arena`] copies a round (~0.1 GB of Qwen3-30B-A3B's Q4_K_M records): long enough that a
/// submit's few tens of µs count little.
const PROBE_RECORDS: u32 = 32;

/// The bus's time for one record from the pool's host arena to the GPU: copies of up to 32 (`PROBE_RECORDS`)
/// arena records into the device's slots, timed twice (the faster kept: the first may wake the link). The
/// copy engine reads host memory within a few % of the expert kernels' own rate (BENCHMARKS.md, twentieth
/// session). Call it on a pool whose device slots hold nothing yet, before any step: it overwrites them.
///
/// # Errors
/// A pool without an arena, or with records already on the device; a copy or wait the device refused.
pub fn probe_arena(pool: &ExpertPool<GpuBackend>) -> Result<Duration> {
    let gpu = pool.backend().pool();
    let (device_slots, arena_slots) = (gpu.slots() as u32, gpu.arena_slots() as u32);
    let held = pool.inspect(|core| core.resident() + core.in_flight());
    if arena_slots == 0 || device_slots == 0 || held > 0 {
        return Err(PoolError::InvalidConfig {
            field: "arena",
            reason: format!(
                "for the bus probe: it needs an arena and empty device slots; the pool has {arena_slots} \
                 arena slots and {device_slots} device slots, {held} of them held"
            ),
        }
        .into());
    }
    let n = PROBE_RECORDS.min(device_slots).min(arena_slots);
    let mut best = Duration::MAX;
    for _ in 0..2 {
        let mut enc = gpu.device().create_command_encoder(&Default::default());
        for i in 0..n {
            gpu.copy_from_arena(&mut enc, Slot(device_slots + i * (arena_slots / n)), Slot(i))
                .map_err(|e| Error::Gpu(format!("the bus probe's copy: {e}")))?;
        }
        let started = Instant::now();
        gpu.queue().submit([enc.finish()]);
        gpu.wait_for_uploads().map_err(|e| Error::Gpu(format!("the bus probe's wait: {e}")))?;
        best = best.min(started.elapsed() / n);
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_bounded_only_by_a_pool_of_less_than_two_layers() {
        assert_eq!(chunk_bound(256, 128, 8), u32::MAX);
        assert_eq!(chunk_bound(255, 128, 8), 31);
        assert_eq!(chunk_bound(16, 128, 8), 2);
    }

    /// 98,304 bytes a position: Qwen3-30B-A3B's f16 cache (48 layers, 4 KV heads of 128).
    #[test]
    fn the_default_context_fits_an_eighth_of_the_budget_between_4096_and_32768() {
        let kv = 98_304;
        assert_eq!(default_context(40_960, kv, 4_000_000_000), 5_086);
        assert_eq!(default_context(40_960, kv, 72_000_000_000), 32_768);
        assert_eq!(default_context(40_960, kv, 1_000_000_000), 4_096);
        assert_eq!(default_context(2_048, kv, 72_000_000_000), 2_048);
        assert_eq!(default_context(2_048, kv, 1_000), 2_048);
    }

    #[test]
    fn the_store_goes_beside_the_gguf() {
        assert_eq!(default_store_dir(Path::new("/m/q.gguf")), Path::new("/m/q.gguf.diskformer"));
    }
}
