//! The engine: loads a store onto the GPU (dense weights, KV cache, scratch, expert pool) and runs the
//! forward pass. While experts stream: one-token steps queue layers ahead of the host's checks of their
//! picks, routing through a GPU table of what the pool holds and running a layer again where `ensure` had
//! to load (route-ahead); with prefetch on, and for chunks, one readback of the picks per layer, `ensure`
//! of their slots, and prefetch guesses for the next layers. When every expert fits: all loaded at start,
//! a token's picks become slots on the GPU, with no readback until the logits, each step's commands are
//! recorded while the GPU runs the step before, and a greedy or sampled step queues the next on the GPU's
//! own pick (run-ahead).
//!
//! Loading is in [`open`]; each step driver is a module of its own: [`resident`] (every expert on the GPU),
//! [`route_ahead`] (one-token steps while experts stream) and [`per_layer`] (chunks while they stream, and
//! one-token steps with prefetch or the CPU tier). [`Engine::run`] picks one a step.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use diskformer_bpe::Tokenizer;
use diskformer_cpu_kernels::Math;
use diskformer_expert_stream::{
    EvictionPolicy, ExpertPool, GpuBackend, Pinned, SpeculativeReads, Stats as PoolStats, TierConfig,
    UploadMethod,
};
use diskformer_kernels::{Context, Kernels, PENALTY_MAX_N, SampleStep, cpu};
use diskformer_store::ReaderProbe;

use crate::cpu_tier::CpuTier;
use crate::graph::{Bindings, ExpertKernels, Graph, KvCache, Scratch};
use crate::unit_stock::{UnitBuffers, UnitStock};
use crate::weights::Weights;
use crate::{Config, Error, Result, Sampler, SamplingOptions};
use diskformer_runtime::{EngineStats, GpuBytes};
use diskformer_runtime::{ForcedRoutes, RouteRecorder, Routing};

mod open;
mod per_layer;
mod resident;
mod route_ahead;

use open::chunk_bound;
pub use open::{FALLBACK_GPU_BUDGET, auto_gpu_budget, default_store_dir, records_exceed_memory};
use resident::RunAhead;

/// How to load and run a model. Build with [`EngineOptions::default`] and adjust the fields.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct EngineOptions {
    /// GPU memory the engine may use, in bytes: what the dense weights, KV cache and scratch leave becomes
    /// expert slots (all experts when they fit). `None`, the default: [`auto_gpu_budget`] of the adapter.
    pub gpu_budget: Option<u64>,
    /// An explicit number of expert slots (overrides the budget), at least `2 × top-k`.
    pub pool_slots: Option<usize>,
    /// KV-cache positions (default min(4096, the model's context length)).
    pub max_context: Option<u32>,
    /// Start loading the next layers' likely experts while this layer computes (default on; no guesses with
    /// the CPU tier, see `cpu_experts`).
    pub prefetch: bool,
    /// Layers ahead whose routers guess (default 2).
    pub lookahead: u32,
    /// Which resident expert makes room (default cyclic, LRU aware of the layer cycle: on the H200 at a 4 GB
    /// budget it kept 90 % of demands hits where LRU kept 44 %, see BENCHMARKS.md).
    pub policy: EvictionPolicy,
    /// Threads reading demand misses. `None` (default): 8 through the page cache; with O_DIRECT, the count the
    /// disk serves fastest among 1, 2, 4 and 8, measured while the model loads
    /// ([`RecordReader::probe_readers`](diskformer_store::RecordReader::probe_readers): 32 random records at
    /// each count, ~0.6 GB). Disks differ: the H200 machine's served one outstanding read fastest, and there
    /// cold decode ran 37 % faster with 1 reader than with 8 (BENCHMARKS.md); NVMe drives want many.
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
    /// place from the GGUF, [`READ_SPLIT_DIRECT`] (whole records) with `direct_io`, else
    /// [`READ_SPLIT_PAGE_CACHE`]: on the H200 at a 4 GB budget, 4 pieces decoded 11-20 %
    /// faster than whole records through the page cache (and prefilled 13 % slower), whole records 11 %
    /// faster than 4 pieces from a cold disk, which served them at a higher rate (BENCHMARKS.md).
    pub read_split: Option<usize>,
    /// Most tokens per prefill chunk (default 512: a chunk reads each picked expert once per 32 of its pairs
    /// (Q4_0: 8) and each dense weight once per 32 tokens, and at 128 experts and top-8 a 512-token chunk
    /// gives an expert 32 pairs on average, one full tile; on the H200 a 512-token prompt prefilled 1,395
    /// tok/s against 1,277 in chunks of 256, before the tiled chunk attention. While experts stream, also
    /// bounded by the pool: chunk × top-k ≤ slots, unless the pool holds two layers' experts, which any
    /// chunk's union of a layer's picks fits).
    pub max_batch: u32,
    /// When every expert fits, load them all at start and route on the GPU: no readback or `ensure` per
    /// layer (default on; off keeps the streaming path for comparison). The token embedding then goes to the
    /// GPU too, and must fit in the budget with the experts.
    pub gpu_routing: bool,
    /// With every expert resident: [`Engine::step_greedy`] and [`Engine::step_sampled`] queue the next step
    /// on the GPU's own pick before they read this one, so that the GPU does not wait for the host between
    /// tokens (default on; off for comparison). A caller that next runs anything but the same kind of step
    /// on that pick leaves the queued step's work unused (and waits for it).
    pub run_ahead: bool,
    /// Chunks multiply Q8_0 weights (the lm head's too) by Q8_0-quantised activations with int8 dot
    /// products, as llama.cpp's CPU path and its GPU MMQ kernels do: on the golden fixtures the prompt's
    /// log-probabilities then lie within 0.02-0.03 of llama.cpp's run on the Q8_0 file itself, where the f32
    /// chunks lie 0.05-0.27 from it (default off: the f32 chunks match llama.cpp's F32 twins to 2e-3, as
    /// one-token steps do). Q4_0 experts keep f32.
    pub int8_prefill: bool,
    /// Chunks run their Q8_0 GEMMs on tensor cores where the device has cooperative matrices
    /// (`Kernels::cooperative_matrix`; elsewhere this does nothing): each weight `q · d` and each
    /// activation rounded to f16, the products summed in f32, finer than `int8_prefill`'s quantised
    /// activations (which go first when both are set). Q4_0 experts keep their kernels.
    pub tensor_prefill: bool,
    /// One-token steps multiply Q8_0 weights (dense, experts, lm head) by Q8_0-quantised activations with
    /// int8 dot products, each 32-value block quantised as the GEMV reads it, or for gate‖up by the router
    /// kernel that writes its input: `int8_prefill`'s arithmetic for one-token steps (on the golden
    /// fixtures 0.016-0.029 from llama.cpp's run on the Q8_0 file in log-probability, the f32 steps
    /// 0.05-0.27; default off: the f32 steps match llama.cpp's F32 twins to 2e-3; on the H200 int8 steps
    /// decoded 6 % slower before gate‖up took the router's quantised row, BENCHMARKS.md; not measured
    /// since). Q4_0 experts keep f32. Applies to the fused decode layer (top-k ≤ 64, expert FFN a multiple
    /// of 16); other shapes' steps stay f32. Sets `cpu_math` to Q8 too.
    pub int8_decode: bool,
    /// While experts stream, a one-token step queues up to this many layers past the last one whose picks
    /// the host has checked (0 reads each layer's picks back before its experts run; `None`, the default,
    /// picks [`ROUTE_AHEAD_DIRECT`] with `direct_io`, else [`ROUTE_AHEAD_PAGE_CACHE`]). The GPU turns the
    /// picks into slots through a table of what the pool holds; a layer that needs an expert the pool lacks
    /// runs again from its router once the expert is loaded, and the layers queued after it with it. Layers
    /// whose experts are all resident then cost no round trip to the host (with 1 the next layer is only
    /// made ready while this one is checked, and submitted after); a thread keeps each layer's commands
    /// recorded ahead, so queueing a layer again costs the host a submit. A wider window queues more
    /// layers that a miss makes run again, and lets `speculative_reads` guess further ahead: from the page
    /// cache the first costs more than the second gains, from a cold disk the other way round
    /// (BENCHMARKS.md). Applies with prefetch off (`lookahead` 0: a guess loaded meanwhile could replace an
    /// expert a queued layer reads) and the fused decode layer (top-k ≤ 64, expert FFN a multiple of 16).
    pub route_ahead: Option<u32>,
    /// With route-ahead while experts stream: records of host memory (5 MB each at the Qwen3-30B-A3B
    /// shape) that guessed misses are read into while a layer's loads run, so that the disk goes on while
    /// the GPU runs the layer again and the ones after it. The guesses are the experts the queued layers
    /// picked and the pool lacks (they ran on a state without the missing experts, so most of their picks
    /// stand); each waits for demand reads between its pieces, and none evicts a slot (default 32, 160 MB
    /// at that shape; 0 off). On the H200 at 4 GB from a cold disk, 32 buffers with a route-ahead window
    /// of 4 decoded 8.98 tok/s, 16 with a window of 2 7.55, none with 2 6.71 (means of 6-10 alternating
    /// rows; 98-99 % of the guesses read were taken), the disk then busy 85-88 %, 75-77 % and 67-71 % of
    /// the time; the same within noise from the page cache (BENCHMARKS.md).
    pub speculative_reads: usize,
    /// While experts stream, one-token steps compute each layer's misses on the CPU from their records in
    /// host memory (the store mapped from the page cache) while the GPU computes the hits, instead of
    /// waiting for their upload; a miss picked again within a few tokens is also uploaded in the
    /// background ([`TierConfig`]). Steps then read each layer's picks back (no route-ahead). Chunks still
    /// upload their experts. With it the routers' prefetch guesses are off (its admissions use the pool's
    /// background loads either way). `None`, the default, turns it on where the CPU kernels have SIMD
    /// kernels for every expert type (Q8_0, Q4_0, Q2_K to Q6_K, IQ4_NL, IQ4_XS): through the page cache, or with
    /// `direct_io` through the host tier (`ram_budget`); off with `direct_io` where the host tier has no
    /// budget. On the H200 at a 4 GB budget it decoded faster than the prefetch path and route-ahead under
    /// both a calibrated routing trace and uniform routing, from the page cache and from a cold disk
    /// (BENCHMARKS.md).
    pub cpu_experts: Option<bool>,
    /// The host tier, for stores larger than RAM: the CPU tier keeps its records in this many bytes of host
    /// memory, each read whole with O_DIRECT when first picked and the least recently used leaving first
    /// ([`HostRecords`](diskformer_expert_stream::HostRecords)), instead of mapping the store from the page
    /// cache; the misses it admits into the GPU pool load from there, not from the disk again. Turns the
    /// CPU tier on; its reads use `readers` threads (with none given, the count a probe of the disk finds).
    /// Refused when it holds fewer records than top-k, exceeds the host's available memory, or comes with
    /// `cpu_experts` off. `None`, the default: with `direct_io` (and the CPU tier not turned off) half the
    /// host's available memory, at most the store's records; else no host tier (the page cache holds the
    /// records). From a cold disk on the H200 at a 4 GB budget it decoded several times faster than
    /// uploading every miss (BENCHMARKS.md).
    pub ram_budget: Option<u64>,
    /// Threads of the CPU tier, the stepping thread's included (`None`: every core but two).
    pub cpu_threads: Option<usize>,
    /// How the CPU tier takes its inputs (the token row before gate‖up, the activation before down), where
    /// its records take quantised ones (Q8_0 and Q4_0, or K-quant records whose every tensor is Q4_K, Q5_K
    /// or Q6_K on a CPU with AVX2 or AVX-512 VNNI; else f32):
    /// - `None` (default): [`Math::Q16`] on such K-quant records, else f32. Both compute a pick as the GPU
    ///   does to about f32's rounding, so a step's result does not depend on which picks the pool held when
    ///   the layer was planned (which background loads move from run to run); Q16's integer kernels run
    ///   nearly at Q8's speed.
    /// - `Some(Math::Q8)`: quantised to Q8_0 as llama.cpp's CPU backend does; a pick then moves by ~1e-2 in
    ///   log-probability between the tiers. `int8_decode` chooses it too.
    pub cpu_math: Option<Math>,
    /// The CPU tier's admission rules.
    pub cpu_tiers: TierConfig,
    /// Where the experts' picks come from: the router's own top-k (default), or forced from a workload for
    /// measuring streaming on routing like a trained model's whatever the weights (ROUTING.md). Forced
    /// picks turn run-ahead off (a step queued ahead would take the next token's picks).
    pub routing: Routing,
    /// Writes every step's picks to this file as a routing trace (one line a token), so a run on real
    /// weights can be measured and shared as a workload. Steps then read every layer's picks back (no
    /// routing on the GPU, no route-ahead, no run-ahead).
    pub record_routing: Option<PathBuf>,
    /// [`Engine::open_gguf`]: copy the experts into the store (default), or read a K-quant (records of
    /// blocks) file's experts, and its dense tensors but the Q8_0 ones, in place from the GGUF, so the model
    /// takes its own size on disk once ([`IngestOptions::copy_experts`]); a Q8_0 or Q4_0 file's experts are
    /// copied either way. A complete store of the same file made the other way is used as it is
    /// ([`IngestOptions::either_mode`]): delete it, or name another store, to have it made this way.
    pub copy_experts: bool,
    /// Checks every expert record against the store's checksum where it is read, before anything computes
    /// on it (default on): each GPU pool load, each host tier read, and each record the CPU tier maps, at
    /// its first use. A record that does not match is read again once past the page cache, then stops the
    /// step with [`Error::Store`]'s [`DamagedRecord`](diskformer_store::Error::DamagedRecord) naming it. Off,
    /// page-cache loads read their pieces in parallel straight into mapped staging memory.
    pub check_reads: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            gpu_budget: None,
            pool_slots: None,
            max_context: None,
            prefetch: true,
            lookahead: 2,
            policy: EvictionPolicy::Cyclic,
            readers: None,
            direct_io: None,
            upload: UploadMethod::StagingRing(2),
            read_split: None,
            max_batch: 512,
            gpu_routing: true,
            run_ahead: true,
            int8_prefill: false,
            tensor_prefill: false,
            int8_decode: false,
            route_ahead: None,
            speculative_reads: 32,
            check_reads: true,
            cpu_experts: None,
            ram_budget: None,
            cpu_threads: None,
            cpu_math: None,
            cpu_tiers: TierConfig::default(),
            routing: Routing::Router,
            record_routing: None,
            copy_experts: true,
        }
    }
}

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
    /// Loading every expert into the pool (when all fit and `gpu_routing` is on): records done of total.
    Experts {
        /// Records loaded.
        done: u64,
        /// Records in the model.
        total: u64,
    },
}

/// What the head of a step returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Want {
    /// Nothing (a prefill chunk that is not the last).
    Nothing,
    /// The greedy token (argmax on the GPU, 4 bytes read back).
    Argmax,
    /// A sampled token (drawn on the GPU with the engine's `draw`, 4 bytes read back), with the penalties
    /// applied first when `true`.
    Sample(bool),
    /// The last token's logits.
    Logits,
}

impl Want {
    /// Whether the GPU picks the token (so a step can be queued on it).
    fn picks(self) -> bool {
        matches!(self, Want::Argmax | Want::Sample(_))
    }
}

/// What a step returned.
#[derive(Debug)]
pub(crate) enum Output {
    Nothing,
    /// The GPU's pick (greedy or sampled).
    Pick(u32),
    Logits(Vec<f32>),
}

/// A loaded Qwen3-MoE model: GPU weights, KV cache, expert pool, tokenizer.
pub struct Engine {
    /// The GPU budget it was sized for (the option's, or [`auto_gpu_budget`]'s).
    gpu_budget: u64,
    /// Whether records are read with O_DIRECT ([`EngineOptions::direct_io`], or its default's choice).
    direct_io: bool,
    config: Config,
    tokenizer: Arc<Tokenizer>,
    vocab: u32,
    ctx: Context,
    kernels: Kernels,
    weights: Weights,
    kv: KvCache,
    scratch: Scratch,
    pool: ExpertPool<GpuBackend>,
    /// Shared with the route-ahead unit stock's thread.
    graphs: HashMap<u32, Arc<Graph>>,
    /// The chunk sizes (> 1) with a graph, least recently used first: at most [`CHUNK_GRAPHS`] are kept.
    chunk_graphs: VecDeque<u32>,
    /// `[layers · experts]` pool slots when every expert is resident and routing stays on the GPU (on the
    /// device for one-token steps, on the host for chunks).
    resident_table: Option<(wgpu::Buffer, Vec<u32>)>,
    /// With route-ahead: the `[layers · experts]` slots of what the pool holds ([`ABSENT`] for the rest),
    /// on the device and as last written.
    route_table: Option<(wgpu::Buffer, Vec<u32>)>,
    /// [`EngineOptions::route_ahead`] where it applies, else 0.
    route_ahead: u32,
    /// With route-ahead, once a one-token step ran: what its layer units copy between, and the stock of
    /// them a thread keeps recorded (`None` if that thread could not start: the host then records them all).
    route_units: Option<(UnitBuffers, Option<UnitStock<wgpu::CommandBuffer>>)>,
    /// [`EngineOptions::read_split`], resolved.
    read_split: usize,
    lookahead: u32,
    max_batch: u32,
    /// What the disk probe measured, when it chose the readers.
    reader_probe: Option<ReaderProbe>,
    /// Token ids whose keys and values the cache holds, position i at index i.
    cached: Vec<u32>,
    /// Slots pinned for the layer whose experts are recorded but not yet submitted.
    held: Option<Pinned>,
    /// With every expert resident: the next one-token step's commands, recorded while the GPU ran the
    /// previous step, for the output it asked for and the argmax readback it copies to.
    next_step: Option<(Want, usize, wgpu::CommandBuffer)>,
    /// The step queued on the GPU's pick of the step before, with [`EngineOptions::run_ahead`].
    run_ahead: Option<RunAhead>,
    run_ahead_enabled: bool,
    /// A sampled step's draw, written before its submit ([`Engine::step_sampled`] sets it).
    draw: Option<SampleStep>,
    /// The draw of the sampled step queued behind this one, when one is to be queued.
    next_draw: Option<SampleStep>,
    /// Which expert kernels the store's records take.
    expert_kernels: ExpertKernels,
    /// [`EngineOptions::int8_prefill`].
    int8_prefill: bool,
    /// [`EngineOptions::tensor_prefill`] where the device has cooperative matrices.
    tensor_prefill: bool,
    /// [`EngineOptions::int8_decode`].
    int8_decode: bool,
    stats: EngineStats,
    gpu_bytes: GpuBytes,
    store_dir: PathBuf,
    /// [`EngineOptions::cpu_experts`] while experts stream.
    cpu_tier: Option<CpuTier>,
    /// [`EngineOptions::routing`] when forced.
    forced: Option<ForcedRoutes>,
    /// [`EngineOptions::record_routing`].
    recorder: Option<RouteRecorder>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.config)
            .field("adapter", &self.ctx.info.name)
            .field("store", &self.store_dir)
            .field("cached", &self.cached.len())
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// The model's hyper-parameters.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The model's tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    pub(crate) fn tokenizer_arc(&self) -> Arc<Tokenizer> {
        Arc::clone(&self.tokenizer)
    }

    /// Vocabulary rows of the embedding and lm head.
    pub fn vocab(&self) -> u32 {
        self.vocab
    }

    /// The GPU memory budget it was sized for, in bytes ([`EngineOptions::gpu_budget`], or
    /// [`auto_gpu_budget`]'s when that was `None`).
    pub fn gpu_budget(&self) -> u64 {
        self.gpu_budget
    }

    /// Whether it reads records with O_DIRECT ([`EngineOptions::direct_io`], or what its default chose).
    pub fn direct_io(&self) -> bool {
        self.direct_io
    }

    /// KV-cache positions.
    pub fn max_context(&self) -> u32 {
        self.kv.ctx
    }

    /// Tokens whose keys and values the cache holds.
    pub fn cached_tokens(&self) -> &[u32] {
        &self.cached
    }

    /// Expert slots in the pool.
    pub fn pool_slots(&self) -> usize {
        self.pool.backend().pool().slots()
    }

    /// Threads reading demand misses: [`EngineOptions::readers`], or the count the disk probe picked.
    pub fn readers(&self) -> usize {
        self.pool.config().readers
    }

    /// The disk probe's rates, when it chose [`Engine::readers`] (O_DIRECT and no count given).
    pub fn reader_probe(&self) -> Option<&ReaderProbe> {
        self.reader_probe.as_ref()
    }

    /// Whether every expert is resident and routing stays on the GPU (no per-layer readback).
    pub fn routes_on_gpu(&self) -> bool {
        self.resident_table.is_some()
    }

    /// Layers a one-token step queues past the last one the host checked while experts stream:
    /// [`EngineOptions::route_ahead`] where it applies (streaming, prefetch off, the fused decode layer),
    /// else 0.
    pub fn route_ahead(&self) -> u32 {
        self.route_ahead
    }

    /// Pieces a demand miss's record is read in ([`EngineOptions::read_split`], its default resolved).
    pub fn read_split(&self) -> usize {
        self.read_split
    }

    /// Most tokens one prefill chunk runs.
    pub fn max_batch(&self) -> u32 {
        self.max_batch
    }

    /// The GPU adapter, one line.
    pub fn adapter(&self) -> String {
        self.ctx.describe()
    }

    /// Whether the GPU is a software renderer on the CPU (lavapipe and the like): correct, and slow.
    pub fn software_adapter(&self) -> bool {
        self.ctx.is_software()
    }

    /// Forgets the cached tokens (the next prefill starts at position 0); the pool keeps its experts.
    pub fn reset(&mut self) {
        self.cached.clear();
        self.run_ahead = None;
    }

    /// Whether chunks run their Q8_0 GEMMs on tensor cores ([`EngineOptions::tensor_prefill`] asked for,
    /// and the device has cooperative matrices).
    pub fn tensor_prefill(&self) -> bool {
        self.tensor_prefill
    }

    /// Engine and pool counters since the load or [`reset_stats`](Self::reset_stats).
    pub fn stats(&self) -> crate::Stats {
        let backend = self.pool.backend();
        let speculative = backend.speculation().map(SpeculativeReads::stats);
        let disk = backend.reader().activity();
        let mut stats = crate::Stats::new(
            &self.stats,
            self.pool.stats(),
            speculative,
            disk,
            self.gpu_bytes,
            self.pool_slots(),
        );
        stats.cpu_isa = self.cpu_tier.as_ref().map(|t| (t.isa(), t.threads()));
        stats.cpu_math = self.cpu_tier.as_ref().map(CpuTier::math);
        stats.host = self.cpu_tier.as_ref().and_then(CpuTier::host_stats);
        stats
    }

    /// Zeroes the counters.
    pub fn reset_stats(&mut self) {
        self.stats = EngineStats::default();
        self.pool.reset_stats();
        if let Some(tier) = self.cpu_tier.as_mut() {
            tier.reset_host_stats();
            tier.take_pool_times();
        }
        let backend = self.pool.backend();
        backend.reader().reset_activity();
        if let Some(spec) = backend.speculation() {
            spec.reset_stats();
        }
    }

    /// The pool's own counters.
    pub fn pool_stats(&self) -> PoolStats {
        self.pool.stats()
    }

    /// Runs `ids` after the cached prefix they share with the cache (at least the last id runs), and returns
    /// the last token's logits. With `batched`, tokens run in chunks of up to [`max_batch`](Self::max_batch)
    /// (per layer the union of a chunk's experts ensured once); otherwise one at a time.
    ///
    /// # Errors
    /// [`Error::BadToken`], [`Error::ContextFull`], pool and GPU errors. On an error the cache is reset.
    pub fn prefill(&mut self, ids: &[u32], batched: bool) -> Result<Vec<f32>> {
        if ids.is_empty() {
            return Err(Error::BadOption {
                option: "prefill ids",
                what: "empty; give at least one token".into(),
            });
        }
        let common = self.cached.iter().zip(ids).take_while(|(a, b)| a == b).count().min(ids.len() - 1);
        self.cached.truncate(common);
        let rest = &ids[common..];
        self.check(rest)?;
        let started = Instant::now();
        let chunk = if batched { self.max_batch as usize } else { 1 };
        if chunk > 1 && self.resident_table.is_none() {
            // A chunk may need every slot: let prefetch loads still running from decode finish first.
            self.pool.drain();
        }
        let mut out = Output::Nothing;
        for (i, part) in rest.chunks(chunk).enumerate() {
            let last = (i + 1) * chunk >= rest.len();
            out = self.run(part, if last { Want::Logits } else { Want::Nothing })?;
        }
        self.stats.prefill_tokens += rest.len() as u64;
        self.stats.prefill_time += started.elapsed();
        match out {
            Output::Logits(l) => Ok(l),
            _ => unreachable!("the last chunk asks for logits"),
        }
    }

    /// Runs one token after the cache and returns its logits.
    ///
    /// # Errors
    /// As [`Engine::prefill`].
    pub fn step(&mut self, id: u32) -> Result<Vec<f32>> {
        match self.decode(id, Want::Logits)? {
            Output::Logits(l) => Ok(l),
            _ => unreachable!("asked for logits"),
        }
    }

    /// Runs one token and returns the greedy next token (argmax on the GPU, no logits read back). With
    /// every expert resident and [`EngineOptions::run_ahead`], the step after it is already queued on the
    /// GPU, on this pick, when it returns: a loop `next = step_greedy(next)` never leaves the GPU idle.
    ///
    /// # Errors
    /// As [`Engine::prefill`].
    pub fn step_greedy(&mut self, id: u32) -> Result<u32> {
        match self.decode(id, Want::Argmax)? {
            Output::Pick(t) => Ok(t),
            _ => unreachable!("asked for the argmax"),
        }
    }

    /// Runs one token and returns the next one drawn on the GPU as `sampler` draws
    /// ([`Sampler::gpu_step`]: repetition and presence penalties over the cached tokens and `id`, top-k,
    /// temperature, top-p, min-p; 4 bytes read back instead of the logits).
    /// With every expert resident and [`EngineOptions::run_ahead`], the step after it is already queued on
    /// the GPU, on this draw, when it returns, as [`Engine::step_greedy`] does. Each call takes one uniform
    /// from the sampler (the queued step only peeks at the next), so a seed draws the same tokens with
    /// run-ahead or without, resident or streaming, whatever the caller runs between.
    ///
    /// # Errors
    /// [`Error::BadOption`] where [`Engine::samples_on_gpu`] says no; else as [`Engine::prefill`].
    pub fn step_sampled(&mut self, id: u32, sampler: &mut Sampler) -> Result<u32> {
        if !self.samples_on_gpu(sampler.options()) {
            let what = format!(
                "{:?} with a {}-token vocabulary needs the CPU sampler (Engine::step)",
                sampler.options(),
                self.vocab
            );
            return Err(Error::BadOption { option: "sampling", what });
        }
        // Checked before a uniform is taken, so that a refused step leaves the sampler as it was.
        self.check(&[id])?;
        let position = self.cached.len() as u32;
        // One uniform per step; the step queued behind it only peeks at the next (a queued step runs only
        // with the draw its position then takes).
        self.draw = sampler.gpu_step();
        self.next_draw = if self.queues_next(position) { sampler.peek_gpu_step() } else { None };
        let penalised = self.draw.is_some_and(|d| d.penalised());
        let out = self.decode(id, Want::Sample(penalised));
        (self.draw, self.next_draw) = (None, None);
        match out? {
            Output::Pick(t) => Ok(t),
            _ => unreachable!("asked for a draw"),
        }
    }

    /// Whether [`Engine::step_sampled`] can draw with `opts` on this model: the options allow it
    /// ([`SamplingOptions::samples_on_gpu`]) and the vocabulary is short enough for the GPU sampler.
    pub fn samples_on_gpu(&self, opts: &SamplingOptions) -> bool {
        opts.samples_on_gpu() && self.graphs.get(&1).is_some_and(|g| g.sample.is_some())
    }

    /// Whether a one-token step at `position` that picks on the GPU queues the next step behind it (which
    /// the GPU embeds: a Q8_0 embedding).
    fn queues_next(&self, position: u32) -> bool {
        self.resident_table.is_some()
            && self.run_ahead_enabled
            && self.weights.gpu_embedding.is_some()
            && position + 1 < self.kv.ctx
    }

    /// One decode step, counted in the decode stats.
    fn decode(&mut self, id: u32, want: Want) -> Result<Output> {
        self.check(&[id])?;
        let started = Instant::now();
        let out = self.run(&[id], want)?;
        self.stats.decode_tokens += 1;
        self.stats.decode_time += started.elapsed();
        Ok(out)
    }

    fn check(&self, ids: &[u32]) -> Result<()> {
        if let Some(&id) = ids.iter().find(|&&id| id >= self.vocab) {
            return Err(Error::BadToken { id, vocab: self.vocab });
        }
        let needed = self.cached.len() + ids.len();
        if needed > self.kv.ctx as usize {
            return Err(Error::ContextFull { needed, ctx: self.kv.ctx });
        }
        Ok(())
    }

    fn graph(&mut self, t: u32) -> Result<&Graph> {
        if t > 1 {
            self.chunk_graphs.retain(|&c| c != t);
            self.chunk_graphs.push_back(t);
            if self.chunk_graphs.len() > CHUNK_GRAPHS
                && let Some(old) = self.chunk_graphs.pop_front()
            {
                self.graphs.remove(&old);
            }
        }
        if !self.graphs.contains_key(&t) {
            let b = Bindings {
                kernels: &self.kernels,
                config: &self.config,
                weights: &self.weights,
                kv: &self.kv,
                scratch: &self.scratch,
                pool: self.pool.backend().pool(),
                lookahead: if t == 1 { self.lookahead } else { 0 },
                resident_table: (self.resident_table.as_ref())
                    .or(self.route_table.as_ref().filter(|_| t == 1))
                    .map(|(b, _)| b),
                resident_slots: self.resident_table.as_ref().map(|(_, t)| t.as_slice()),
                experts: &self.expert_kernels,
                int8_prefill: self.int8_prefill,
                tensor_prefill: self.tensor_prefill,
                int8_decode: self.int8_decode,
                embedding: self.weights.gpu_embedding.as_ref().map(|e| e.m()),
                forced: self.forced.is_some(),
            };
            let g = Graph::build(&b, t)?;
            self.graphs.insert(t, Arc::new(g));
        }
        Ok(&self.graphs[&t])
    }

    /// One forward step of `ids` at the positions after the cache. On an error the cache is reset, since
    /// some layers may have stored keys for positions that never completed.
    fn run(&mut self, ids: &[u32], want: Want) -> Result<Output> {
        let started = Instant::now();
        let waited = self.stats.gpu_wait + self.stats.ensure_time;
        let result = self.run_inner(ids, want);
        if let Some(p) = self.held.take() {
            // A step that failed between a layer's `ensure` and the next submit: unpin its slots.
            self.pool.release(p);
        }
        let waited_here = self.stats.gpu_wait + self.stats.ensure_time - waited;
        self.stats.host_time += started.elapsed().saturating_sub(waited_here);
        match &result {
            Ok(_) => self.cached.extend_from_slice(ids),
            Err(_) => {
                self.cached.clear();
                self.run_ahead = None;
            }
        }
        result
    }

    fn run_inner(&mut self, ids: &[u32], want: Want) -> Result<Output> {
        let t = ids.len() as u32;
        if let Some(forced) = &mut self.forced {
            let mask = forced.next_mask(t)?;
            self.ctx.queue.write_buffer(&self.scratch.route_mask, 0, bytemuck::cast_slice(&mask));
        }
        let queued = self.run_ahead.take();
        if self.resident_table.is_some() && t == 1 {
            return self.resident_step(ids[0], want, queued);
        }
        let start = self.cached.len() as u32;
        self.write_positions(start, t);
        self.write_sampling(want, start);
        if want == Want::Sample(true) {
            // The penalties read the step's token from token_ids (resident steps write it anyway).
            self.ctx.queue.write_buffer(&self.scratch.token_ids, 0, bytemuck::bytes_of(&ids[0]));
        }
        let queue = self.ctx.queue.clone();
        queue.write_buffer(&self.scratch.x, 0, bytemuck::cast_slice(&self.weights.embedding.rows(ids)));
        self.graph(t)?;
        if t == 1 && self.route_ahead > 0 {
            return self.route_ahead_step(want);
        }
        if self.graphs[&t].groups_on_gpu {
            return self.resident_chunk(t, want);
        }
        self.per_layer_step(t, want)
    }

    /// Writes a sampled step's draw for the next submit (nothing for other steps).
    fn write_draw(&self, want: Want, draw: Option<SampleStep>) {
        if let (Want::Sample(_), Some(d)) = (want, draw) {
            self.ctx.queue.write_buffer(&self.scratch.sample_step, 0, bytemuck::bytes_of(&d));
        }
    }

    /// What a sampled step the host submits itself at `position` reads besides its token: its draw and,
    /// penalised, the recent tokens (nothing for other steps).
    fn write_sampling(&self, want: Want, position: u32) {
        self.write_draw(want, self.draw);
        if want == Want::Sample(true) {
            self.write_recent(position);
        }
    }

    /// Writes the cached tokens of the `PENALTY_MAX_N - 1` positions before `position` into the ring of
    /// recent tokens, for a penalised step the host submits itself (the step writes its own token at
    /// `position`; a step queued behind it finds the ring as that one left it).
    fn write_recent(&self, position: u32) {
        let ring = PENALTY_MAX_N as usize;
        let mut recent = vec![0u32; ring];
        for q in (position as usize + 1).saturating_sub(ring)..position as usize {
            recent[q % ring] = self.cached[q];
        }
        self.ctx.queue.write_buffer(&self.scratch.recent, 0, bytemuck::cast_slice(&recent));
    }

    /// Writes the positions `start..start + t` and their RoPE table for the next submit.
    fn write_positions(&self, start: u32, t: u32) {
        let positions: Vec<u32> = (start..start + t).collect();
        let rope = cpu::rope_cos_sin(&positions, self.config.key_length as usize, self.config.rope_freq_base);
        self.ctx.queue.write_buffer(&self.scratch.positions, 0, bytemuck::cast_slice(&positions));
        self.ctx.queue.write_buffer(&self.scratch.rope, 0, bytemuck::cast_slice(&rope));
    }

    /// What the head's copies need to know of a step of `tokens` tokens.
    fn head_shape(&self, tokens: u32) -> HeadShape {
        HeadShape { hidden: self.config.embedding_length, vocab: self.vocab, tokens }
    }
}

/// The route table's entry for an expert the pool does not hold (no pool part binds it, so the expert
/// kernels skip the pick).
const ABSENT: u32 = u32::MAX;

/// [`EngineOptions::route_ahead`]'s window through the page cache: on the H200 at 4 GB, 4 layers decoded
/// 42.0 tok/s against 40.6 with 8 (means of 3 alternating rows, the layers a miss runs again recorded
/// ahead on a thread; with the host recording them, 38.5 against 32.2).
pub const ROUTE_AHEAD_PAGE_CACHE: u32 = 4;
/// [`EngineOptions::route_ahead`]'s window with O_DIRECT: on the H200 at 4 GB from a cold disk, 8 layers
/// kept the disk reading 90-93 % of the time against 86-89 % with 4, and decoded 8.9 tok/s against 8.2
/// (means of 12 alternating rows over two calls).
pub const ROUTE_AHEAD_DIRECT: u32 = 8;

/// [`EngineOptions::read_split`] through the page cache: on the H200 at 4 GB, 4 pieces a record decoded
/// 11-20 % faster than whole records (each piece read on its own thread while few loads run).
pub const READ_SPLIT_PAGE_CACHE: usize = 4;
/// [`EngineOptions::read_split`] with O_DIRECT, whole records: on the H200 at 4 GB from a cold disk, with a
/// route-ahead window of 8, they decoded 9.9 tok/s against 8.9 in 4 pieces (means of 10 alternating rows),
/// the disk serving them at 1.88 GB/s while it had one in flight against 1.61.
pub const READ_SPLIT_DIRECT: usize = 1;

/// [`EngineOptions::read_split`] for experts read in place from the GGUF ([`EngineOptions::copy_experts`]
/// off): whole records, each three reads of its parts (a piece would add reads at every part boundary);
/// measured in BENCHMARKS.md against the store's 4 pieces.
pub const READ_SPLIT_IN_GGUF: usize = 1;

/// Chunk graphs kept, the most recently used: a graph holds a uniform buffer and a bind group for each of its
/// dispatches, and a long chat prefills prompts of every length, so one kept for each length up to
/// `max_batch` would grow without a bound (rebuilding one costs its bind groups, little beside a chunk).
const CHUNK_GRAPHS: usize = 4;

/// What the head's copies need to know of a step.
#[derive(Clone, Copy)]
struct HeadShape {
    hidden: u32,
    vocab: u32,
    /// Tokens of the step (the head reads the last one's row).
    tokens: u32,
}

impl HeadShape {
    /// Bytes the step reads back for `want`: the argmax (4) or the logits; `None` for nothing.
    fn output_bytes(self, want: Want) -> Option<u64> {
        match want {
            Want::Nothing => None,
            Want::Argmax | Want::Sample(_) => Some(4),
            Want::Logits => Some(4 * u64::from(self.vocab)),
        }
    }
}

/// Records what a step returns after its last layer: for logits or a pick, the last token's normed row, the
/// head, the argmax or the draw, and the copy into the readback buffer (for a pick, argmax readback
/// `slot`); nothing for [`Want::Nothing`].
fn record_head(
    enc: &mut wgpu::CommandEncoder,
    graph: &Graph,
    s: &Scratch,
    want: Want,
    shape: HeadShape,
    slot: usize,
) {
    let Some(bytes) = shape.output_bytes(want) else { return };
    let h = 4 * u64::from(shape.hidden);
    enc.copy_buffer_to_buffer(s.xn(), (u64::from(shape.tokens) - 1) * h, &s.last_n, 0, h);
    let pick = match want {
        Want::Argmax => Some(&graph.argmax),
        // step_sampled checked the graph has it.
        Want::Sample(_) => graph.sample.as_ref(),
        _ => None,
    };
    {
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        graph.head.record(&mut pass);
        if want == Want::Sample(true) {
            graph.penalties.record(&mut pass);
        }
        if let Some(p) = pick {
            p.record(&mut pass);
        }
    }
    let (src, dst) = output_buffers(s, want, slot);
    enc.copy_buffer_to_buffer(src, 0, dst, 0, bytes);
}

/// Where the head's output is and where it is copied to be mapped.
fn output_buffers(s: &Scratch, want: Want, slot: usize) -> (&wgpu::Buffer, &wgpu::Buffer) {
    match want {
        Want::Argmax | Want::Sample(_) => (&s.argmax, &s.argmax_readback[slot]),
        _ => (&s.logits, &s.readback),
    }
}

/// Reads what [`record_head`] copied, once the GPU is done with `submission` (else with everything
/// submitted).
fn read_output(
    device: &wgpu::Device,
    s: &Scratch,
    want: Want,
    shape: HeadShape,
    slot: usize,
    submission: Option<wgpu::SubmissionIndex>,
    wait: &mut Duration,
) -> Result<Output> {
    let Some(bytes) = shape.output_bytes(want) else { return Ok(Output::Nothing) };
    let read = readback(device, output_buffers(s, want, slot).1, bytes, submission, Duration::ZERO, wait)?;
    Ok(match want {
        Want::Argmax | Want::Sample(_) => Output::Pick(read[0]),
        _ => Output::Logits(bytemuck::cast_slice(&read).to_vec()),
    })
}

/// Runs `f`, adding its time to `total`.
fn timed<T>(total: &mut Duration, f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = f();
    *total += started.elapsed();
    out
}

/// Maps the first `bytes` of `buffer`, waits for the GPU to finish `submission` (else everything
/// submitted; polling without blocking for up to `spin` first; adding the wait to `wait`), and copies them
/// out.
pub(crate) fn readback(
    device: &wgpu::Device,
    buffer: &wgpu::Buffer,
    bytes: u64,
    submission: Option<wgpu::SubmissionIndex>,
    spin: Duration,
    wait: &mut Duration,
) -> Result<Vec<u32>> {
    let started = Instant::now();
    let slice = buffer.slice(..bytes);
    let (tx, rx) = mpsc::channel();
    slice.map_async(wgpu::MapMode::Read, move |r| {
        let _ = tx.send(r);
    });
    let mapped = loop {
        if let Ok(mapped) = rx.try_recv() {
            break mapped;
        }
        if started.elapsed() >= spin {
            device
                .poll(wgpu::PollType::Wait { submission_index: submission, timeout: None })
                .map_err(|e| Error::Gpu(e.to_string()))?;
            break rx.recv().map_err(|_| Error::Gpu("the readback was dropped before it mapped".into()))?;
        }
        device.poll(wgpu::PollType::Poll).map_err(|e| Error::Gpu(e.to_string()))?;
    };
    mapped.map_err(|e| Error::Gpu(format!("readback did not map: {e}")))?;
    let out = bytemuck::pod_collect_to_vec(&slice.get_mapped_range().expect("mapped just now"));
    buffer.unmap();
    *wait += started.elapsed();
    Ok(out)
}
