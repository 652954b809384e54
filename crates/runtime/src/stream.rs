//! How a model's experts stream, whatever the model: the options ([`StreamOptions`], [`CpuTierOptions`]),
//! what they resolve to on this host and store ([`StreamSetup::resolve`]: O_DIRECT or the page cache,
//! checked reads, reader threads, the host tier's budget, the read split, whether the CPU tier runs), the
//! staging rings' share of the GPU budget, and the expert pool built from all of it ([`expert_pool`]).

use std::sync::Arc;

use diskformer_cpu_kernels::Math;
use diskformer_expert_stream::{
    EvictionPolicy, ExpertPool, GpuBackend, GpuPool, HostHandoff, PoolConfig, StagingRing, TierConfig,
    UploadMethod,
};
use diskformer_kernels::Context;
use diskformer_store::{ExpertLayout, ReaderProbe, RecordChecks, RecordReader, Store};

use crate::{Error, Result};

/// How expert records are read and reach the GPU pool while experts stream (none of it matters when every
/// expert fits).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct StreamOptions {
    /// Start loading the next layers' likely experts while this layer computes (default on; no guesses with
    /// the CPU tier, see [`CpuTierOptions::enabled`]).
    pub prefetch: bool,
    /// Layers ahead whose routers guess (default 2).
    pub lookahead: u32,
    /// Which resident expert makes room (default cyclic: LRU aware of the layer cycle, which keeps far more
    /// demands hits than LRU at a small budget).
    pub policy: EvictionPolicy,
    /// Threads reading demand misses. `None` (default): 8 through the page cache; with O_DIRECT, the count the
    /// disk serves fastest among 1, 2, 4 and 8, measured while the model loads
    /// ([`RecordReader::probe_readers`](diskformer_store::RecordReader::probe_readers): 32 random records at
    /// each count, ~0.6 GB). Disks differ: some serve one outstanding read fastest, NVMe drives want many.
    pub readers: Option<usize>,
    /// Read records with O_DIRECT, bypassing the page cache. `None`, the default: where the expert records
    /// are more bytes than the host's available memory ([`records_exceed_memory`]), whose page cache could
    /// not hold them (each read would push out another record), else through the page cache.
    pub direct_io: Option<bool>,
    /// How records reach the pool (default: each reader's ring of 2 mapped staging buffers, read into
    /// directly through the page cache).
    pub upload: UploadMethod,
    /// Pieces a demand miss's record (and a speculative read's) is read, staged and uploaded in, each
    /// copied to the device as soon as it is staged (prefetch loads read whole records): through the page
    /// cache on as many threads while at most two loads run, with O_DIRECT one after another while the
    /// previous piece is staged. `None`, the default, picks [`READ_SPLIT_IN_GGUF`] for experts read in
    /// place from the GGUF, [`READ_SPLIT_DIRECT`] (whole records) with `direct_io`,
    /// [`READ_SPLIT_CHECKED`] through the page cache with `check_reads`, else [`READ_SPLIT_PAGE_CACHE`].
    pub read_split: Option<usize>,
    /// A one-token step queues up to this many layers past the last one whose picks the host has checked
    /// (0 reads each layer's picks back before its experts run; `None`, the default, picks
    /// [`ROUTE_AHEAD_DIRECT`] with `direct_io`, else [`ROUTE_AHEAD_PAGE_CACHE`]). The GPU turns the picks
    /// into slots through a table of what the pool holds; a layer that needs an expert the pool lacks runs
    /// again from its router once the expert is loaded, and the layers queued after it with it. Layers whose
    /// experts are all resident then cost no round trip to the host (with 1 the next layer is only made
    /// ready while this one is checked, and submitted after); a thread keeps each layer's commands recorded
    /// ahead, so queueing a layer again costs the host a submit. A wider window queues more layers that a
    /// miss makes run again, and lets `speculative_reads` guess further ahead. Applies with prefetch off
    /// (`lookahead` 0: a guess loaded meanwhile could replace an expert a queued layer reads), without the
    /// CPU tier, and to the fused decode layer (top-k ≤ 64, expert FFN a multiple of 16).
    pub route_ahead: Option<u32>,
    /// With route-ahead: records of host memory (5 MB each for Q8_0 experts of hidden 2048, FFN 768) that
    /// guessed misses
    /// are read into while a layer's loads run, so that the disk goes on while the GPU runs the layer again
    /// and the ones after it. The guesses are the experts the queued layers picked and the pool lacks (they
    /// ran on a state without the missing experts, so most of their picks stand); each waits for demand
    /// reads between its pieces, and none evicts a slot (default 32, 160 MB at that size; 0 off).
    pub speculative_reads: usize,
    /// Opening a GGUF: copy the experts into the store (default), or read a K-quant (records of blocks)
    /// file's experts, and its dense tensors but the Q8_0 ones, in place from the GGUF, so the model takes
    /// its own size on disk once ([`IngestOptions::copy_experts`]); a Q8_0 or Q4_0 file's experts are
    /// copied either way. A complete store of the same file made the other way is used as it is
    /// ([`IngestOptions::either_mode`]): delete it, or name another store, to have it made this way.
    ///
    /// [`IngestOptions::copy_experts`]: diskformer_store::IngestOptions::copy_experts
    /// [`IngestOptions::either_mode`]: diskformer_store::IngestOptions::either_mode
    pub copy_experts: bool,
    /// Checks every expert record against the store's checksum where it is read, before anything computes
    /// on it (default on): each GPU pool load, each host tier read, and each record the CPU tier maps, at
    /// its first use. A record that does not match is read again once past the page cache, then stops the
    /// step with the store's [`DamagedRecord`](diskformer_store::Error::DamagedRecord) error naming it.
    pub check_reads: bool,
    /// A streaming prefill chunk queues the next layer's experts before it waits for this layer's, not
    /// after: the pool's prefetch threads then load the next layer while its demand readers load this one,
    /// both busy while the host waits (after, the prefetch threads idle through each wait). Applies where the
    /// pool holds three layers' experts (the layer before, this one and the next); default on.
    pub early_chunk_prefetch: bool,
    /// While experts stream, keep every expert record in host memory that the GPU's kernels read over the
    /// bus, beside the device pool (its **arena**, filled once at load: a copy of the store's records,
    /// pinned, counted apart from the GPU budget); prefill chunks then take the experts the device slots
    /// lack from it (see `chunk_arena_copies`) instead of reading them from the store. `None`, the default:
    /// where the device can bind host memory, is not a software renderer (whose memory is the host's
    /// already), reads go through the page cache with no host tier, and the records take at most half the
    /// host's available memory ([`arena_default`]).
    pub host_arena: Option<bool>,
    /// With the host arena, outside split residency: a prefill chunk has the copy engine copy the experts
    /// its device slots lack from the arena into the pool's slots, the next layer's queued while this one
    /// runs, instead of its GEMMs reading them over the bus (the default): each record then crosses the
    /// bus once, where a GEMM reading over the bus reads some twice, but the copies and the GEMMs take
    /// turns on the queue (BENCHMARKS.md says which has been measured).
    pub chunk_arena_copies: bool,
    /// With the host arena and routing on the GPU: **split residency**, the resident step driver over the
    /// device's slots and the arena (every expert within the kernels' reach, the hottest moved onto the
    /// device by heat, `Placement`), with no readback between layers and no CPU tier. Off, one-token steps
    /// stream through the pool and the CPU tier, which shares each layer's misses with the GPU taking them
    /// from the arena (`diskformer_expert_stream::ArenaShare`, and [`CpuTierOptions::arena_over_bus`]); the
    /// arena serves chunks. `None`, the default: off where the CPU tier runs (the faster on the hosts
    /// measured, BENCHMARKS.md), on elsewhere.
    pub split_residency: Option<bool>,
}

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions {
            prefetch: true,
            lookahead: 2,
            policy: EvictionPolicy::Cyclic,
            readers: None,
            direct_io: None,
            upload: UploadMethod::StagingRing(2),
            read_split: None,
            route_ahead: None,
            speculative_reads: 32,
            copy_experts: true,
            check_reads: true,
            early_chunk_prefetch: true,
            host_arena: None,
            chunk_arena_copies: false,
            split_residency: None,
        }
    }
}

/// [`StreamOptions::route_ahead`]'s window through the page cache.
pub const ROUTE_AHEAD_PAGE_CACHE: u32 = 4;
/// [`StreamOptions::route_ahead`]'s window with O_DIRECT: a wider window keeps a cold disk reading more of
/// the time.
pub const ROUTE_AHEAD_DIRECT: u32 = 8;

/// [`StreamOptions::read_split`] through the page cache: each piece read on its own thread while few loads
/// run.
pub const READ_SPLIT_PAGE_CACHE: usize = 4;
/// [`StreamOptions::read_split`] with O_DIRECT: whole records, which a disk serves at a higher rate.
pub const READ_SPLIT_DIRECT: usize = 1;
/// [`StreamOptions::read_split`] through the page cache with [`StreamOptions::check_reads`]: whole records.
/// A checked load's pieces are read in record order, as its hash takes them, so pieces run one after
/// another on one thread, each paying a staging ring's wait and a submit.
pub const READ_SPLIT_CHECKED: usize = 1;
/// [`StreamOptions::read_split`] for experts read in place from the GGUF ([`StreamOptions::copy_experts`]
/// off): whole records, each three reads of its parts (a piece would add reads at every part boundary).
pub const READ_SPLIT_IN_GGUF: usize = 1;

/// The CPU tier: while experts stream, one-token steps compute each layer's misses on the CPU from their
/// records in host memory while the GPU computes the hits, instead of waiting for their upload.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct CpuTierOptions {
    /// Turns the tier on or off. With it, the store is mapped from the page cache (or read into the host
    /// tier, `ram_budget`); a miss picked again within a few tokens is also uploaded in the background
    /// (`admission`); steps read each layer's picks back (no route-ahead), and the routers' prefetch
    /// guesses are off. Chunks still upload their experts. `None`, the default, turns it on where the CPU
    /// kernels have SIMD kernels for every expert type (Q8_0, Q4_0, Q2_K to Q6_K, IQ4_NL, IQ4_XS): through
    /// the page cache, or with `direct_io` through the host tier; off with `direct_io` where the host tier
    /// has no budget.
    pub enabled: Option<bool>,
    /// The host tier, for stores larger than RAM: the CPU tier keeps its records in this many bytes of host
    /// memory, each read whole with O_DIRECT when first picked and the least recently used leaving first
    /// ([`HostRecords`](diskformer_expert_stream::HostRecords)), instead of mapping the store from the page
    /// cache; the misses it admits into the GPU pool load from there, not from the disk again. Turns the
    /// tier on; its reads use [`StreamOptions::readers`] threads (with none given, the count a probe of the
    /// disk finds). Refused when it holds fewer records than top-k, exceeds the host's available memory, or
    /// comes with the tier off. `None`, the default: with `direct_io` (and the tier not turned off) half the
    /// host's available memory, at most the store's records; else no host tier (the page cache holds the
    /// records).
    pub ram_budget: Option<u64>,
    /// Threads of the tier, the stepping thread's included (`None`:
    /// [`default_threads`](crate::cpu_tier::default_threads): every core but a quarter, at least two).
    pub threads: Option<usize>,
    /// How the tier takes its inputs (the token row before gate‖up, the activation before down), where its
    /// records take quantised ones (Q8_0 and Q4_0, or K-quant records whose every tensor is Q4_K, Q5_K or
    /// Q6_K on a CPU with AVX2 or AVX-512 VNNI; else f32):
    /// - `None` (default): [`Math::Q16`] on K-quant records whose every tensor is Q4_K, Q5_K or Q6_K (their
    ///   fused kernels), else f32 (a Q16 input on Q8_0 or Q4_0 records would run as two Q8 passes). Both
    ///   compute a pick as the GPU does to about f32's rounding, so a step's result does not depend on which
    ///   picks the pool held when the layer was planned (which background loads move from run to run);
    ///   Q16's integer kernels run nearly at Q8's speed.
    /// - `Some(Math::Q8)`: quantised to Q8_0 as llama.cpp's CPU backend does; a pick then moves by ~1e-2 in
    ///   log-probability between the tiers. The engine's int8 decode (`KernelOptions::int8_decode`) chooses
    ///   it too.
    pub math: Option<Math>,
    /// Which misses the tier also uploads into the GPU pool.
    pub admission: TierConfig,
    /// With the host arena (and split residency off): the fraction of each layer's misses the GPU reads
    /// from the arena, fixed, in 0..=1. `None`, the default: from the bus's time a record, probed at open,
    /// and the tier's own, measured as it runs, corrected each layer toward the side that finished last
    /// (`diskformer_expert_stream::ArenaShare`).
    pub arena_share: Option<f64>,
    /// With the host arena's share (above): the expert kernels read the GPU's share of the misses from the
    /// arena over the bus, instead of the copy engine copying them first into device slots of their own
    /// (the default: the copies are what the share's probe times, and the bus carries each record once in
    /// large transfers, whatever rate the host's shaders read host memory at).
    pub arena_over_bus: bool,
}

/// Demand readers when [`StreamOptions::readers`] is `None` and reads go through the page cache.
const DEFAULT_READERS: usize = 8;
/// Reader counts the O_DIRECT probe tries, and the random records it reads at each.
const PROBE_READERS: [usize; 4] = [1, 2, 4, 8];
const PROBE_RECORDS: usize = 32;

/// Whether `experts`' records are more bytes than the host's available memory (`false` where it does not
/// say): [`StreamOptions::direct_io`]'s default then reads them with O_DIRECT.
pub fn records_exceed_memory(experts: &ExpertLayout) -> bool {
    diskformer_expert_stream::available_memory().is_some_and(|available| experts.file_bytes() > available)
}

/// Whether the pool gets its arena ([`StreamOptions::host_arena`]) for `experts` streaming as `setup` says on
/// `ctx`: as asked, or by default where the device binds host memory, is no software renderer, reads go
/// through the page cache with no host tier, and the records fit in half the host's available memory (the
/// page cache the CPU tier reads holds them too).
///
/// # Errors
/// [`Error::BadOption`] for an arena asked for on a device that cannot bind host memory.
pub fn arena_wanted(
    asked: Option<bool>,
    ctx: &Context,
    experts: &ExpertLayout,
    setup: &StreamSetup,
) -> Result<bool> {
    match asked {
        Some(true) if !ctx.host_storage => Err(Error::BadOption {
            option: "host_arena",
            what: format!(
                "{} cannot bind host memory to its kernels (wgpu's mappable-primary-buffers feature); turn the \
                 arena off",
                ctx.info.name
            ),
        }),
        Some(on) => Ok(on),
        None => Ok(arena_default(
            ctx.host_storage && !ctx.is_software() && !setup.direct_io && setup.ram_budget.is_none(),
            experts.file_bytes(),
            diskformer_expert_stream::available_memory(),
        )),
    }
}

/// [`arena_wanted`]'s default: `eligible`, and `records` bytes at most half of `available` (known).
pub fn arena_default(eligible: bool, records: u64, available: Option<u64>) -> bool {
    eligible && available.is_some_and(|a| records <= a / 2)
}

/// The host tier's budget when `direct_io` asks for none: half the host's available memory, at most the
/// whole store's records (`None` where the host does not say, or half holds fewer than `min_records`).
fn default_ram_budget(experts: &ExpertLayout, min_records: usize) -> Option<u64> {
    let half = diskformer_expert_stream::available_memory()? / 2;
    let stride = experts.record_bytes.next_multiple_of(diskformer_store::BUFFER_ALIGN as u64);
    (half / stride >= min_records as u64).then(|| half.min(experts.file_bytes().next_multiple_of(stride)))
}

/// Whether the CPU tier's kernels multiply every expert part of `layout` with SIMD (else it computes them on
/// its portable path, dequantising each block first).
fn cpu_tier_fast(layout: &ExpertLayout) -> bool {
    layout.part_types().all(|ty| ty.is_none_or(diskformer_cpu_kernels::has_simd_kernel))
}

/// What the streaming options resolve to on this host and store.
#[derive(Debug)]
pub struct StreamSetup {
    /// Records read with O_DIRECT.
    pub direct_io: bool,
    /// The host tier's budget, when it runs.
    pub ram_budget: Option<u64>,
    /// The records' checksums, when reads are checked.
    pub checks: Option<RecordChecks>,
    /// The disk probe's rates, when it ran (O_DIRECT, readers not given).
    pub reader_probe: Option<ReaderProbe>,
    /// Threads reading demand misses (and the host tier's reads).
    pub readers: usize,
    /// Pieces a demand miss is read in.
    pub read_split: usize,
    /// Whether the CPU tier runs (while experts stream).
    pub cpu_experts: bool,
}

impl StreamSetup {
    /// Resolves `stream` and `cpu` for `store`'s `experts` (a layer picking `top_k`), returning the reader
    /// the pool reads records with: O_DIRECT where asked or where the records exceed the host's memory,
    /// checked where asked; the readers a probe of the disk finds fastest when O_DIRECT is used and none
    /// are given (it reads ~0.6 GB); the CPU tier where its kernels are fast for every expert type, through
    /// the page cache or, with O_DIRECT, through the host tier.
    ///
    /// # Errors
    /// [`Error::BadOption`] for a host tier asked for with the CPU tier off, or an arena share outside
    /// 0..=1; store errors reading the checksums or probing.
    pub fn resolve(
        store: &Store,
        experts: &ExpertLayout,
        stream: &StreamOptions,
        cpu: &CpuTierOptions,
        top_k: u32,
    ) -> Result<(StreamSetup, RecordReader)> {
        if let Some(share) = cpu.arena_share.filter(|f| !(0.0..=1.0).contains(f)) {
            return Err(Error::BadOption {
                option: "arena_share",
                what: format!("{share}; a fraction of the misses, 0 to 1 (or none: the measured rates')"),
            });
        }
        if cpu.ram_budget.is_some() && cpu.enabled == Some(false) {
            return Err(Error::BadOption {
                option: "ram_budget",
                what: "the host tier feeds the CPU tier, which cpu_experts turns off; drop one of them"
                    .into(),
            });
        }
        // The CPU tier is on by default only where its kernels multiply every expert type with SIMD: on the
        // portable path (Q5_K) it took 325 ms a token at 4 GB on the H200, 10× slower than leaving it off.
        let cpu_default = cpu_tier_fast(experts) && cpu.enabled != Some(false);
        let direct_io = stream.direct_io.unwrap_or_else(|| records_exceed_memory(experts));
        let ram_budget = cpu.ram_budget.or_else(|| {
            (direct_io && (cpu.enabled == Some(true) || cpu_default))
                .then(|| default_ram_budget(experts, top_k as usize))
                .flatten()
        });
        // The disk probe runs once the options are known good (it reads ~0.6 GB); the staging rings are sized
        // by the readers it picks.
        let checks = stream.check_reads.then(|| store.record_checks()).transpose()?;
        let mut reader = store.record_reader(direct_io)?;
        if let Some(checks) = &checks {
            reader = reader.with_checks(checks.clone());
        }
        let reader_probe = match stream.readers {
            None if reader.is_direct() => Some(reader.probe_readers(&PROBE_READERS, PROBE_RECORDS)?),
            // The host tier reads with O_DIRECT whatever the pool does.
            None if ram_budget.is_some() => {
                Some(store.record_reader(true)?.probe_readers(&PROBE_READERS, PROBE_RECORDS)?)
            }
            _ => None,
        };
        let readers = match (stream.readers, &reader_probe) {
            (Some(n), _) => n.max(1),
            (None, Some(probe)) => probe.best,
            (None, None) => DEFAULT_READERS,
        };
        let cpu_experts = cpu.enabled.unwrap_or(cpu_default && (!direct_io || ram_budget.is_some()));
        let read_split = stream.read_split.unwrap_or(if store.experts_in_gguf().is_some() {
            READ_SPLIT_IN_GGUF
        } else if direct_io {
            READ_SPLIT_DIRECT
        } else if checks.is_some() {
            READ_SPLIT_CHECKED
        } else {
            READ_SPLIT_PAGE_CACHE
        });
        let setup =
            StreamSetup { direct_io, ram_budget, checks, reader_probe, readers, read_split, cpu_experts };
        Ok((setup, reader))
    }

    /// Mapped staging bytes the readers' rings take with `upload` (each demand reader's ring of records in
    /// the read split's pieces, each of `prefetch_threads`' of whole records): they may be device memory
    /// (resizable BAR), so they count against the GPU budget.
    pub fn staging_bytes(&self, upload: UploadMethod, record_bytes: u64, prefetch_threads: usize) -> u64 {
        match upload {
            UploadMethod::StagingRing(len) => {
                let record = record_bytes as usize;
                let demand = StagingRing::bytes(record, len, self.read_split);
                self.readers as u64 * demand + prefetch_threads as u64 * StagingRing::bytes(record, len, 1)
            }
            _ => 0,
        }
    }
}

/// The shape of the pool [`expert_pool`] builds.
#[derive(Clone, Copy, Debug)]
pub struct PoolShape {
    /// Slots (records) in the pool.
    pub slots: usize,
    /// The model's layers and routed experts a layer.
    pub layers: u32,
    /// See `layers`.
    pub experts: u32,
    /// Experts a token picks in a layer: the slots a prefetch leaves for demand.
    pub top_k: u32,
    /// Threads loading guesses and the CPU tier's admissions (0: none).
    pub prefetch_threads: usize,
    /// Whether demand misses are read ahead as guessed ([`StreamOptions::speculative_reads`] records).
    pub speculate: bool,
    /// Whether the pool has an arena of every record in host memory ([`StreamOptions::host_arena`]).
    pub arena: bool,
    /// Device slots past the pool's own (out of `slots`) that a layer's misses are copied into from the
    /// arena for the GPU's share of them ([`CpuTierOptions::arena_over_bus`] off): top-k, or 0.
    pub stage_slots: usize,
}

/// The GPU pool of `shape.slots` records of `layout` on `ctx` (its cache all but the last
/// `shape.stage_slots`), filled by `reader` as `setup` and `stream` say, and the hand-off through which the
/// host tier (when `setup` has one) gives the pool its records.
///
/// # Errors
/// The pool's errors (a layout the kernels do not read, the device's memory, the speculative reads'
/// buffers).
pub fn expert_pool(
    ctx: &Context,
    layout: &ExpertLayout,
    reader: RecordReader,
    setup: &StreamSetup,
    stream: &StreamOptions,
    shape: PoolShape,
) -> Result<(ExpertPool<GpuBackend>, Option<Arc<HostHandoff>>)> {
    let arena_slots = if shape.arena { (shape.layers * shape.experts) as usize } else { 0 };
    let gpu_pool = GpuPool::with_arena(ctx, layout, shape.slots, arena_slots)?;
    let mut backend =
        GpuBackend::new(gpu_pool, reader)?.with_method(stream.upload).with_read_split(setup.read_split);
    // The host tier's admissions and chunks hand their records to the pool's loads.
    let handoff = setup.ram_budget.map(|_| Arc::new(HostHandoff::default()));
    if let Some(handoff) = &handoff {
        backend = backend.with_handoff(Arc::clone(handoff));
    }
    if shape.speculate && stream.speculative_reads > 0 {
        backend = backend.with_speculation(stream.speculative_reads, setup.read_split)?;
    }
    let mut pc = PoolConfig::new(shape.slots - shape.stage_slots, shape.layers, shape.experts);
    pc.policy = stream.policy;
    pc.readers = setup.readers;
    pc.max_prefetch_in_flight = shape.prefetch_threads;
    pc.prefetch_reserve = shape.top_k as usize;
    Ok((ExpertPool::new(backend, pc)?, handoff))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arena_is_on_by_default_where_half_the_available_memory_holds_it() {
        assert!(arena_default(true, 10, Some(20)));
        assert!(!arena_default(true, 11, Some(20)));
        assert!(!arena_default(true, 1, None), "a host that does not say");
        assert!(!arena_default(false, 1, Some(20)), "a device, reader or tier that rules it out");
    }
}
