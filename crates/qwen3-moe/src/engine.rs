//! The engine: loads a store onto the GPU (dense weights, KV cache, scratch, expert pool) and runs the
//! forward pass. While experts stream: one-token steps queue layers ahead of the host's checks of their
//! picks, routing through a GPU table of what the pool holds and running a layer again where `ensure` had
//! to load (route-ahead); with prefetch on, and for chunks, one readback of the picks per layer, `ensure`
//! of their slots, and prefetch guesses for the next layers. When every expert fits: all loaded at start,
//! a token's picks become slots on the GPU, with no readback until the logits, each step's commands are
//! recorded while the GPU runs the step before, and a greedy or sampled step queues the next on the GPU's
//! own pick (run-ahead).

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use diskformer_bpe::Tokenizer;
use diskformer_cpu_kernels::Math;
use diskformer_expert_stream::{
    EvictionPolicy, ExpertKey, ExpertPool, GpuBackend, GpuBudget, GpuPool, HostHandoff, Pinned, PoolConfig,
    RouteShape, SlotView, SpeculativeReads, StagingRing, Stats as PoolStats, Tier, TierConfig, UploadMethod,
};
use diskformer_gguf::GgufModel;
use diskformer_kernels::{
    Context, EXPERT_GEMM_TILED_GROUP, Kernels, PENALTY_MAX_N, SampleStep, cpu, expert_gemm_groups,
};
use diskformer_store::{ExpertLayout, IngestOptions, ReaderProbe, Store};

use crate::cpu_tier::{CpuTier, HostTier};
use crate::graph::{
    Bindings, CpuJoin, ExpertKernels, Graph, JoinVia, KvCache, LayerGraph, Scratch, ScratchSizes,
    fused_decode, gemm_groups_len, record,
};
use crate::unit_stock::{UnitBuffers, UnitKind, UnitStock};
use crate::weights::Weights;
use crate::{Config, Error, Result, Sampler, SamplingOptions};
use diskformer_runtime::{EngineStats, GpuBytes};
use diskformer_runtime::{ForcedRoutes, RouteRecorder, Routing};

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
    /// Loads the model of `gguf`, ingesting it into `store_dir` first when the store is missing, stale or
    /// incomplete (resuming an interrupted ingest). `store_dir` defaults to [`default_store_dir`]. The
    /// GGUF's architecture and hyperparameters are checked before anything is copied.
    ///
    /// # Errors
    /// [`Error::Gguf`] for a file that does not parse or a broken gguf-split set (`gguf` may be a set's
    /// first shard); [`Error::WrongArchitecture`], [`Error::MissingKeys`] or [`Error::BadValue`] for a model
    /// this engine does not run; [`Error::BadTensor`] for a tensor type it cannot run; any ingest error; then
    /// as [`Engine::open`].
    pub fn open_gguf(
        gguf: &Path,
        store_dir: Option<&Path>,
        opts: &EngineOptions,
        progress: &mut dyn FnMut(LoadProgress),
    ) -> Result<Engine> {
        let model = GgufModel::open(gguf)?;
        Config::from_metadata(model.metadata())?;
        // Every tensor's type, from the header (a split set's merged one): a file the kernels cannot run is
        // refused before it is copied.
        let header = model.header()?;
        check_types(&diskformer_store::Layout::plan(&header)?)?;
        let dir = store_dir.map_or_else(|| default_store_dir(gguf), Path::to_owned);
        let ingest =
            IngestOptions { copy_experts: opts.copy_experts, either_mode: true, ..IngestOptions::default() };
        diskformer_store::ingest(gguf, &dir, &ingest, &mut |p| {
            progress(LoadProgress::Ingest { done: p.done, total: p.total, bytes_per_sec: p.bytes_per_sec })
        })?;
        Self::open(&dir, opts, progress)
    }

    /// Loads the model of a complete store on the default GPU ([`Context::new`]).
    ///
    /// # Errors
    /// Store, config, tokenizer and tensor errors; [`Error::Kernels`] without a usable GPU;
    /// [`Error::Pool`] for a budget that cannot hold the dense part, the KV cache, scratch and `2 × top-k`
    /// records (with the numbers); [`Error::BadOption`] for an option out of range.
    pub fn open(
        store_dir: &Path,
        opts: &EngineOptions,
        progress: &mut dyn FnMut(LoadProgress),
    ) -> Result<Engine> {
        Self::open_on(Context::new()?, store_dir, opts, progress)
    }

    /// [`Engine::open`] on a given GPU context.
    ///
    /// # Errors
    /// As [`Engine::open`].
    pub fn open_on(
        ctx: Context,
        store_dir: &Path,
        opts: &EngineOptions,
        progress: &mut dyn FnMut(LoadProgress),
    ) -> Result<Engine> {
        let store = Store::open(store_dir)?;
        let config = Config::from_metadata(&store.header().metadata)?;
        let tokenizer = Arc::new(Tokenizer::from_header(store.header())?);
        check_types(store.layout())?;
        let experts = store.layout().experts.clone().ok_or_else(|| Error::BadTensor {
            name: "blk.0.ffn_gate_exps.weight".into(),
            what: "the store holds no routed experts".into(),
        })?;
        if config.value_length != config.key_length {
            return Err(Error::BadValue {
                key: "qwen3moe.attention.value_length".into(),
                what: format!(
                    "{} differs from key_length {}; the attention kernels need one head dim",
                    config.value_length, config.key_length
                ),
            });
        }
        if opts.lookahead > 8 {
            return Err(Error::BadOption {
                option: "lookahead",
                what: format!("{} layers; allowed 0..=8", opts.lookahead),
            });
        }
        let gpu_budget = opts.gpu_budget.unwrap_or_else(|| auto_gpu_budget(&ctx));
        let ctx_len = opts.max_context.unwrap_or(config.context_length.min(4096));
        if ctx_len == 0 || ctx_len > config.context_length {
            return Err(Error::BadOption {
                option: "max_context",
                what: format!(
                    "{ctx_len} positions; allowed 1..={} (the model's context length)",
                    config.context_length
                ),
            });
        }
        if opts.ram_budget.is_some() && opts.cpu_experts == Some(false) {
            return Err(Error::BadOption {
                option: "ram_budget",
                what: "the host tier feeds the CPU tier, which cpu_experts turns off; drop one of them"
                    .into(),
            });
        }
        let top_k = config.expert_used_count;
        // The CPU tier is on by default only where its kernels multiply every expert type with SIMD: on the
        // portable path (Q5_K) it took 325 ms a token at 4 GB on the H200, 10× slower than leaving it off.
        let cpu_default = cpu_tier_fast(&experts) && opts.cpu_experts != Some(false);
        let direct_io = opts.direct_io.unwrap_or_else(|| records_exceed_memory(&experts));
        let ram_budget = opts.ram_budget.or_else(|| {
            (direct_io && (opts.cpu_experts == Some(true) || cpu_default))
                .then(|| default_ram_budget(&experts, top_k as usize))
                .flatten()
        });
        // The disk probe runs once the options are known good (it reads ~0.6 GB); the staging rings are sized
        // by the readers it picks.
        let checks = opts.check_reads.then(|| store.record_checks()).transpose()?;
        let mut reader = store.record_reader(direct_io)?;
        if let Some(checks) = &checks {
            reader = reader.with_checks(checks.clone());
        }
        let reader_probe = match opts.readers {
            None if reader.is_direct() => Some(reader.probe_readers(&PROBE_READERS, PROBE_RECORDS)?),
            // The host tier reads with O_DIRECT whatever the pool does.
            None if ram_budget.is_some() => {
                Some(store.record_reader(true)?.probe_readers(&PROBE_READERS, PROBE_RECORDS)?)
            }
            _ => None,
        };
        let readers = match (opts.readers, &reader_probe) {
            (Some(n), _) => n.max(1),
            (None, Some(probe)) => probe.best,
            (None, None) => DEFAULT_READERS,
        };
        let all = (config.block_count * config.expert_count) as usize;
        let cpu_experts = opts.cpu_experts.unwrap_or(cpu_default && (!direct_io || ram_budget.is_some()));
        // The CPU tier runs without the routers' guesses: its admissions take the pool's background loads
        // (the configuration measured, BENCHMARKS.md).
        let mut lookahead =
            if opts.prefetch && !cpu_experts { opts.lookahead.min(config.block_count - 1) } else { 0 };
        let window =
            opts.route_ahead.unwrap_or(if direct_io { ROUTE_AHEAD_DIRECT } else { ROUTE_AHEAD_PAGE_CACHE });
        let read_split = opts.read_split.unwrap_or(if store.experts_in_gguf().is_some() {
            READ_SPLIT_IN_GGUF
        } else if direct_io {
            READ_SPLIT_DIRECT
        } else {
            READ_SPLIT_PAGE_CACHE
        });
        // The CPU tier reads every layer's picks back: no route-ahead with it.
        let recording = opts.record_routing.is_some();
        // Route-ahead runs layers again from their router in the fused decode layer, on planes alone.
        let expert_kernels = ExpertKernels::of(&experts)?;
        let fused = fused_decode(&config)
            && !matches!(expert_kernels, ExpertKernels::Blocks(_))
            && dense_q8(store.layout());
        let mut route_ahead = if lookahead == 0 && fused && !cpu_experts && !recording { window } else { 0 };
        let shape = RouteShape {
            layers: config.block_count,
            experts: config.expert_count,
            top_k: config.expert_used_count,
        };
        // Both before anything is uploaded: a bad path fails the open at once.
        let forced = ForcedRoutes::open(&opts.routing, shape)?;
        let recorder = opts.record_routing.as_deref().map(|p| RouteRecorder::create(p, top_k)).transpose()?;
        let vocab = store.layout().dense_tensor("token_embd.weight").map_or(0, |t| t.dims[1] as u32);

        // Size everything but the pool, then the pool from what the budget leaves.
        let dense = Weights::device_bytes(&store, false);
        let kv_bytes = KvCache::bytes(&config, ctx_len);
        let probe_batch = opts.max_batch.clamp(1, 1024);
        // Each reader (and, with prefetch, each prefetch thread) keeps a ring of mapped staging buffers. They
        // may be device memory (resizable BAR), so they count against the budget.
        // The CPU tier admits misses into the pool through the same background loads as prefetch.
        let prefetch_threads =
            if opts.prefetch || cpu_experts { PoolConfig::new(1, 1, 1).max_prefetch_in_flight } else { 0 };
        let staging = match opts.upload {
            UploadMethod::StagingRing(len) => {
                let record = experts.record_bytes as usize;
                let demand = StagingRing::bytes(record, len, read_split);
                readers as u64 * demand + prefetch_threads as u64 * StagingRing::bytes(record, len, 1)
            }
            _ => 0,
        };
        // The pool from what the budget leaves; while experts stream a chunk is at most slots / top-k
        // tokens, so the scratch is sized again for that chunk and the pool once more. `streams`: with the
        // buffers of prefetch guesses and route-ahead (else as every expert resident needs).
        let slots_for_dense = |batch: u32, streams: bool, dense: u64| -> Result<usize> {
            let (lookahead, route_ahead) = if streams { (lookahead, route_ahead > 0) } else { (0, false) };
            let sizes = ScratchSizes {
                vocab,
                ctx: ctx_len,
                max_t: batch,
                lookahead,
                route_ahead,
                forced: forced.is_some(),
            };
            let scratch = Scratch::estimate(&config, sizes) + staging;
            let budget = GpuBudget { budget: gpu_budget, dense, kv_cache: kv_bytes, scratch };
            Ok(budget.expert_slots(experts.record_bytes, top_k)?.min(all))
        };
        let slots_for = |batch: u32| slots_for_dense(batch, true, dense);
        let (slots, sized_batch) = match opts.pool_slots {
            Some(s) if s < 2 * top_k as usize => {
                return Err(Error::BadOption {
                    option: "pool_slots",
                    what: format!("{s}; the pool needs at least 2 × top-k = {} slots", 2 * top_k),
                });
            }
            Some(s) => (s.min(all), probe_batch),
            None => {
                let first = slots_for(probe_batch)?;
                let streamed_batch = probe_batch.min(chunk_bound(first, &config)).max(1);
                if first == all || streamed_batch == probe_batch {
                    (first, probe_batch)
                } else {
                    (slots_for(streamed_batch)?, streamed_batch)
                }
            }
        };
        // Resident routing also puts the embedding on the GPU (see `Weights`): all must fit with it.
        let with_embedding = Weights::device_bytes(&store, true);
        let resident = opts.gpu_routing
            && !recording
            && slots == all
            && (opts.pool_slots.is_some() || slots_for_dense(sized_batch, false, with_embedding)? == all);
        if resident {
            lookahead = 0;
            route_ahead = 0;
        }
        let pool_bound = if resident { u32::MAX } else { chunk_bound(slots, &config) };
        let max_batch = sized_batch.min(pool_bound).min(ctx_len).max(1);

        let device = ctx.device.clone();
        let weights = Weights::upload(&store, &config, &device, &ctx.queue, resident, &mut |done, total| {
            progress(LoadProgress::Upload { done, total })
        })?;
        if weights.head.rows() != vocab {
            return Err(Error::BadTensor {
                name: "output.weight".into(),
                what: format!("has {} rows; the embedding has {vocab}", weights.head.rows()),
            });
        }
        let kv = KvCache::new(&device, &config, ctx_len);
        let sizes = ScratchSizes {
            vocab,
            ctx: ctx_len,
            max_t: max_batch,
            lookahead,
            route_ahead: route_ahead > 0,
            forced: forced.is_some(),
        };
        let scratch = Scratch::new(&device, &config, sizes);
        let gpu_pool = GpuPool::new(&ctx, &experts, slots)?;
        let mut backend =
            GpuBackend::new(gpu_pool, reader)?.with_method(opts.upload).with_read_split(read_split);
        // The host tier's admissions and chunks hand their records to the pool's loads.
        let handoff = ram_budget.map(|_| Arc::new(HostHandoff::default()));
        if let Some(handoff) = &handoff {
            backend = backend.with_handoff(Arc::clone(handoff));
        }
        // route_ahead is 0 when resident: nothing streams.
        if route_ahead > 0 && opts.speculative_reads > 0 {
            backend = backend.with_speculation(opts.speculative_reads, read_split)?;
        }
        let mut pc = PoolConfig::new(slots, config.block_count, config.expert_count);
        pc.policy = opts.policy;
        pc.readers = readers;
        pc.max_prefetch_in_flight = prefetch_threads;
        pc.prefetch_reserve = top_k as usize;
        let pool = ExpertPool::new(backend, pc)?;
        let gpu_bytes = GpuBytes {
            dense: weights.bytes,
            pool: pool.backend().pool().device_bytes(),
            kv: kv_bytes,
            scratch: scratch.bytes(),
            staging,
        };
        let resident_table = if resident {
            let table = load_every_expert(&pool, &config, progress)?;
            let buffer = crate::weights::storage(
                &device,
                "resident slots",
                4 * table.len() as u64,
                wgpu::BufferUsages::empty(),
            );
            ctx.queue.write_buffer(&buffer, 0, bytemuck::cast_slice(&table));
            Some((buffer, table))
        } else {
            None
        };
        let route_table = (route_ahead > 0).then(|| {
            let len = (config.block_count * config.expert_count) as usize;
            let buffer =
                crate::weights::storage(&device, "route table", 4 * len as u64, wgpu::BufferUsages::empty());
            // Written before each step from the pool (`sync_route_table`).
            (buffer, Vec::new())
        });
        let host = ram_budget.zip(handoff).map(|(budget, handoff)| HostTier {
            budget,
            min_records: top_k as usize,
            readers,
            handoff,
        });
        let cpu_tier = (cpu_experts && !resident)
            .then(|| {
                let math = if opts.int8_decode { Some(Math::Q8) } else { opts.cpu_math };
                CpuTier::open(&store, &experts, opts.cpu_threads, opts.cpu_tiers, math, host, checks.clone())
            })
            .transpose()?;
        let kernels = Kernels::new(&ctx);
        let kernels_coop = kernels.cooperative_matrix();
        let mut engine = Engine {
            gpu_budget,
            direct_io,
            config,
            tokenizer,
            vocab,
            ctx,
            kernels,
            weights,
            kv,
            scratch,
            pool,
            graphs: HashMap::new(),
            chunk_graphs: VecDeque::new(),
            resident_table,
            route_table,
            route_ahead,
            route_units: None,
            read_split,
            lookahead,
            max_batch,
            reader_probe,
            cached: Vec::new(),
            held: None,
            next_step: None,
            run_ahead: None,
            run_ahead_enabled: opts.run_ahead && forced.is_none() && !recording,
            draw: None,
            next_draw: None,
            expert_kernels,
            int8_prefill: opts.int8_prefill,
            tensor_prefill: opts.tensor_prefill && kernels_coop,
            int8_decode: opts.int8_decode,
            stats: EngineStats::default(),
            gpu_bytes,
            store_dir: store_dir.to_owned(),
            cpu_tier,
            forced,
            recorder,
        };
        engine.graph(1)?;
        Ok(engine)
    }

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
        let graph = &self.graphs[&t];
        let (k, layers) = (self.config.expert_used_count as usize, self.config.block_count);
        let lookahead = if t == 1 { self.lookahead } else { 0 };
        let device = &self.ctx.device;
        let s = &self.scratch;
        let shape = self.head_shape(t);
        if graph.groups_on_gpu {
            // A chunk with every expert resident: routing and the grouping of its pairs stay on the GPU, so
            // the whole step is one submission.
            let commands =
                timed(&mut self.stats.record_time, || record_resident_step(device, graph, s, want, shape, 0));
            let submission = timed(&mut self.stats.submit_time, || queue.submit([commands]));
            return read_output(device, s, want, shape, 0, Some(submission), &mut self.stats.gpu_wait);
        }

        // Streaming (or routing off the GPU): a readback of the picks per layer, `ensure`, then the layer's
        // experts; chunks group their pairs by slot for the expert GEMM on the host.
        let mut enc = device.create_command_encoder(&Default::default());
        debug_assert!(self.held.is_none());
        let pairs = t as usize * k;
        let hidden = self.config.embedding_length as usize;
        if let Some(tier) = self.cpu_tier.as_mut().filter(|_| t == 1) {
            tier.next_token();
        }
        let mut recorded = Vec::with_capacity(if self.recorder.is_some() { layers as usize } else { 0 });
        let tier_on = t == 1 && self.cpu_tier.is_some();
        let cpu_layer = |lg: &LayerGraph| tier_on && lg.cpu_join.is_some();
        // A layer's attention and router, recorded and finished while the host computed the experts of
        // the layer before (the CPU tier); else recorded into `enc` at the layer's start.
        let mut head_ready: Option<wgpu::CommandBuffer> = None;
        for l in 0..layers {
            let lg = &graph.layers[l as usize];
            let guesses = lookahead.min(layers - 1 - l);
            let on_cpu = cpu_layer(lg);
            let (rb, rb_bytes) = readback_of_picks(s, on_cpu, k, hidden, pairs);
            let commands = match head_ready.take() {
                Some(commands) => commands,
                None => timed(&mut self.stats.record_time, || {
                    record_layer_head(&mut enc, lg, s, on_cpu, k, hidden, pairs);
                    std::mem::replace(&mut enc, device.create_command_encoder(&Default::default())).finish()
                }),
            };
            let picked = timed(&mut self.stats.submit_time, || queue.submit([commands]));
            // The guesses in a submission of their own, so that the host maps the picks and loads the
            // layer's misses while the GPU runs them (each of their 2 · lookahead dependent dispatches costs
            // several µs in the chain).
            let guessed_by = (guesses > 0).then(|| {
                let mut enc = device.create_command_encoder(&Default::default());
                timed(&mut self.stats.record_time, || record(&mut enc, &lg.guesses));
                for j in 0..guesses {
                    let at = 4 * (j as usize * k) as u64;
                    enc.copy_buffer_to_buffer(
                        &s.guess_ids[j as usize],
                        0,
                        &s.guess_readback,
                        at,
                        4 * k as u64,
                    );
                }
                timed(&mut self.stats.submit_time, || queue.submit([enc.finish()]))
            });
            if let Some(p) = self.held.take() {
                self.pool.release(p);
            }
            let read: Vec<u32> =
                readback(device, rb, rb_bytes, Some(picked), SPIN_FOR_PICKS, &mut self.stats.gpu_wait)?;
            let picks = &read[..pairs];
            if self.recorder.is_some() {
                recorded.push(picks.to_vec());
            }

            let ensure_started = Instant::now();
            let mut cpu_work = None;
            let (pinned, slots) = if let Some(tier) = self.cpu_tier.as_mut().filter(|_| on_cpu) {
                // Hits run on the GPU, misses on the CPU (their slots absent: the expert kernels skip them).
                // One look under the pool's lock: which picks it holds ready, and whether loads are queued.
                let (may_admit, ready) = self.pool.inspect(|core| {
                    let ready: Vec<bool> =
                        picks.iter().map(|&e| core.slot_of(ExpertKey::new(l, e)).is_some()).collect();
                    (core.queued() == 0, ready)
                });
                let resident = |e: u32| picks.iter().zip(&ready).any(|(&p, &r)| p == e && r);
                let plan = tier.plan(l, picks, may_admit, resident)?;
                let hits: Vec<u32> = picks
                    .iter()
                    .zip(&plan.tiers)
                    .filter(|(_, t)| **t == Tier::Gpu)
                    .map(|(&e, _)| e)
                    .collect();
                let pinned = self.pool.ensure(l, &hits)?;
                let mut hit_slots = pinned.slots().iter();
                let slots: Vec<u32> = (plan.tiers.iter())
                    .map(|t| match t {
                        Tier::Gpu => hit_slots.next().expect("a slot for every hit").0,
                        Tier::Cpu => ABSENT,
                    })
                    .collect();
                let ids: Vec<u32> = plan.cpu_picks().map(|i| picks[i]).collect();
                // The host tier reads what it lacks first, so that the admissions load from host memory.
                tier.fetch(l, &ids, &plan.admit)?;
                if !plan.admit.is_empty() {
                    self.stats.cpu_admitted += self.pool.prefetch(l, &plan.admit)? as u64;
                }
                let floats = |r: &[u32]| r.iter().map(|&b| f32::from_bits(b)).collect::<Vec<f32>>();
                let (mut weights, xn) = (floats(&read[k..2 * k]), floats(&read[2 * k..2 * k + hidden]));
                let cpu_weights: Vec<f32> = plan.cpu_picks().map(|i| weights[i]).collect();
                // The unfused combine adds every pick's down row: the host's sum comes in as its first
                // pick's, with weight 1, and its other picks count zero (their rows hold an earlier step's
                // finite values).
                let sum_row = plan.cpu_picks().next();
                if let (Some(first), Some(CpuJoin { via: JoinVia::AsPick, .. })) = (sum_row, &lg.cpu_join) {
                    plan.cpu_picks().for_each(|i| weights[i] = 0.0);
                    weights[first] = 1.0;
                    queue.write_buffer(&s.pick_weights, 0, bytemuck::cast_slice(&weights));
                }
                let weights = cpu_weights;
                if let Some(first) = sum_row {
                    cpu_work = Some((ids, weights, xn, first));
                }
                (Some(pinned), slots)
            } else if let Some((_, table)) = &self.resident_table {
                let base = (l * self.config.expert_count) as usize;
                (None, picks.iter().map(|&id| table[base + id as usize]).collect::<Vec<u32>>())
            } else if t == 1 {
                let pinned = self.pool.ensure(l, picks)?;
                let slots: Vec<u32> = pinned.slots().iter().map(|s| s.0).collect();
                (Some(pinned), slots)
            } else {
                let mut union = picks.to_vec();
                union.sort_unstable();
                union.dedup();
                if let Some(tier) = self.cpu_tier.as_mut() {
                    // Through the host tier, a chunk's misses are read into host memory once and loaded from
                    // there: the steps after the prompt find them held instead of reading them again.
                    let pool = &self.pool;
                    let missing: Vec<u32> = union
                        .iter()
                        .copied()
                        .filter(|&e| pool.slot_of(ExpertKey::new(l, e)).is_none())
                        .collect();
                    tier.stage_for_pool(l, &missing)?;
                }
                let pinned = self.pool.ensure(l, &union)?;
                if let Some(next) = self.chunk_guesses(l, t) {
                    // The next layer's experts load while the GPU runs this one's and the next router.
                    self.pool.prefetch(l + 1, &next)?;
                }
                let slots = picks
                    .iter()
                    .map(|id| pinned.slots()[union.binary_search(id).expect("every pick is in the union")].0)
                    .collect();
                (Some(pinned), slots)
            };
            self.stats.ensure_time += ensure_started.elapsed();
            if t == 1 {
                queue.write_buffer(&s.slot_idx[l as usize], 0, bytemuck::cast_slice(&slots));
            } else {
                let len = gemm_groups_len(&self.config, t) as usize;
                let (groups, order) = expert_gemm_groups(&slots, EXPERT_GEMM_TILED_GROUP, len);
                queue.write_buffer(&s.gemm_groups[l as usize], 0, bytemuck::cast_slice(&groups));
                queue.write_buffer(&s.gemm_order[l as usize], 0, bytemuck::cast_slice(&order));
            }
            if let Some(submission) = guessed_by {
                let (bytes, wait) = (4 * (guesses as usize * k) as u64, &mut self.stats.gpu_wait);
                let guessed =
                    readback(device, &s.guess_readback, bytes, Some(submission), Duration::ZERO, wait)?;
                for (j, ids) in guessed.chunks(k).enumerate() {
                    self.pool.prefetch(l + 1 + j as u32, ids)?;
                }
            }
            self.held = pinned;
            match (cpu_work, &lg.cpu_join) {
                (Some((ids, weights, xn, sum_row)), Some(CpuJoin { at: down_from, via })) => {
                    // gate‖up of the hits (and, unfused, their down) runs while the host computes the
                    // misses; their sum joins the residual stream before the GPU's combine adds the hits'.
                    // Meanwhile this thread submits the hits' gate‖up and records (and finishes: most of
                    // wgpu's encoding cost) what follows the sum: the join, down and the combine, and the
                    // next layer up to its picks.
                    let (record_time, submit_time) =
                        (&mut self.stats.record_time, &mut self.stats.submit_time);
                    let next = graph.layers.get(l as usize + 1);
                    let meanwhile = || {
                        let gate_up = timed(record_time, || {
                            record(&mut enc, &lg.experts[..*down_from]);
                            std::mem::replace(&mut enc, device.create_command_encoder(&Default::default()))
                                .finish()
                        });
                        timed(submit_time, || queue.submit([gate_up]));
                        timed(record_time, || {
                            if let JoinVia::Add(join) = via {
                                record(&mut enc, std::slice::from_ref(join));
                                enc.copy_buffer_to_buffer(&s.cpu_joined, 0, &s.x, 0, 4 * hidden as u64);
                            }
                            record(&mut enc, &lg.experts[*down_from..]);
                            next.map(|next| {
                                record_layer_head(&mut enc, next, s, cpu_layer(next), k, hidden, pairs);
                                std::mem::replace(
                                    &mut enc,
                                    device.create_command_encoder(&Default::default()),
                                )
                                .finish()
                            })
                        })
                    };
                    let tier = self.cpu_tier.as_mut().expect("CPU work comes from the tier");
                    let (sum, took, (next_head, recording)) =
                        tier.compute_while(l, &ids, &weights, &xn, meanwhile)?;
                    head_ready = next_head;
                    self.stats.cpu_experts += ids.len() as u64;
                    self.stats.cpu_time += took;
                    self.stats.cpu_recording_time += recording;
                    self.stats.cpu_pool += tier.take_pool_times();
                    let (first_uses, first_use_time) = tier.take_first_uses();
                    self.stats.cpu_first_uses += first_uses;
                    self.stats.cpu_first_use_time += first_use_time;
                    match via {
                        JoinVia::Add(_) => queue.write_buffer(&s.cpu_sum, 0, bytemuck::cast_slice(&sum)),
                        JoinVia::AsPick => {
                            let row = 4 * (sum_row * hidden) as u64;
                            queue.write_buffer(&s.down, row, bytemuck::cast_slice(&sum));
                        }
                    }
                }
                _ => timed(&mut self.stats.record_time, || record(&mut enc, &lg.experts)),
            }
        }

        timed(&mut self.stats.record_time, || record_head(&mut enc, graph, s, want, shape, 0));
        timed(&mut self.stats.submit_time, || queue.submit([enc.finish()]));
        if let Some(recorder) = &mut self.recorder {
            recorder.write_step(&recorded)?;
        }
        let out = read_output(device, s, want, shape, 0, None, &mut self.stats.gpu_wait)?;
        // Writes for the next step (ids, positions, slots, uploads into freed slots) are ordered after
        // this submit by the queue, so nothing waits here.
        if let Some(p) = self.held.take() {
            self.pool.release(p);
        }
        Ok(out)
    }

    /// A one-token step while experts stream, with up to [`EngineOptions::route_ahead`] layers queued past
    /// the last one the host has checked. Each layer is its own submission: its attention and router (the
    /// picks turned into slots through the route table), a copy of the residual stream the router read,
    /// its picks and slots copied out, then its experts. The host checks the layers in order: a layer whose
    /// slots are those `ensure` pins stands, and one more is queued; otherwise `ensure` loaded what it
    /// lacked, and the layer runs again from its router on its saved residual stream through the updated
    /// table, at the head of the next layer's submission, with the layers after it queued again (what ran
    /// of them read a wrong state; every write they made is made again, the keys and values at this
    /// position included).
    fn route_ahead_step(&mut self, want: Want) -> Result<Output> {
        let layers = self.graphs[&1].layers.len();
        let k = self.config.expert_used_count as usize;
        let window = self.route_ahead as usize;
        if self.route_units.is_none() {
            let hidden = self.config.embedding_length;
            let buffers = UnitBuffers::new(&self.scratch, hidden, k as u32);
            let (graph, device, b) = (self.graphs[&1].clone(), self.ctx.device.clone(), buffers.clone());
            let stock = UnitStock::start(layers, move |kind, l| b.commands(&device, &graph, kind, l));
            self.route_units = Some((buffers, stock.ok()));
        }
        self.sync_route_table();
        let mut units = RoutedUnits::new(layers);
        let mut next = self.queue_routed(0, window, want, None, &mut units);
        for l in 0..layers {
            // The next unit to queue is made ready (from the stock, or recorded) while the GPU runs what is
            // queued.
            self.prepare_routed(next, want, &mut units);
            // The stock records what was taken while the host waits for this layer's picks and loads.
            if let Some((_, Some(stock))) = &self.route_units {
                stock.refill();
            }
            let rb = &self.scratch.route_readback[l];
            let copied = units.copied[l].clone();
            let read = readback(
                &self.ctx.device,
                rb,
                8 * k as u64,
                copied,
                Duration::ZERO,
                &mut self.stats.gpu_wait,
            )?;
            let (picks, found) = read.split_at(k);
            let started = Instant::now();
            let (device, s) = (&self.ctx.device, &self.scratch);
            let (copied, lacked) = (&units.copied[..layers], &mut units.lacked[..]);
            let mut guessed = Ok(());
            let pinned = match self.pool.backend().speculation() {
                // While this layer's loads run, the disk may as well read what the layers queued after it lack.
                Some(spec) => {
                    let (units, next) = (l + 1..(l + 1 + window).min(layers), l + 1);
                    let mut guesses = MissGuesses { device, s, copied, lacked, units, next, k, spec };
                    self.pool.ensure_meanwhile(l as u32, picks, || {
                        guesses.step().unwrap_or_else(|e| {
                            guessed = Err(e);
                            false
                        })
                    })
                }
                None => self.pool.ensure(l as u32, picks),
            };
            self.stats.ensure_time += started.elapsed();
            let pinned = pinned?;
            guessed?;
            let mut rerun = None;
            if pinned.slots().iter().map(|s| s.0).eq(found.iter().copied()) {
                self.stats.layers_routed_ahead += 1;
            } else {
                self.sync_route_table();
                // The run again finds its slots in the table; nothing reads them back.
                debug_assert!(self.route_table.as_ref().is_some_and(|(_, table)| {
                    let base = l * self.config.expert_count as usize;
                    picks.iter().zip(pinned.slots()).all(|(&id, slot)| table[base + id as usize] == slot.0)
                }));
                self.stats.layers_rerun += 1;
                (rerun, next) = (Some(l), l + 1);
            }
            next = self.queue_routed(next, l + 1 + window, want, rerun, &mut units);
            // Whatever reads these slots is submitted; loads into them are ordered after it.
            self.pool.release(pinned);
        }
        let (device, s, shape) = (&self.ctx.device, &self.scratch, self.head_shape(1));
        read_output(device, s, want, shape, 0, units.copied[layers].clone(), &mut self.stats.gpu_wait)
    }

    /// Takes route-ahead unit `unit` (plain, no run again) ahead of a later [`Engine::queue_routed`],
    /// unless it is past the head or taken already: recorded while the GPU runs what is queued.
    fn prepare_routed(&mut self, unit: usize, want: Want, units: &mut RoutedUnits) {
        if units.prepared.get(unit).is_some_and(Option::is_none) {
            units.prepared[unit] = Some(self.routed_unit(UnitKind::Layer, unit, want));
        }
    }

    /// Submits route-ahead units `from..upto` (at most through unit `layers`, the head), each on its own
    /// (as [`Engine::prepare_routed`] took it, else [`Engine::routed_unit`]; `rerun`, a layer to run again
    /// from its router, goes in the first's submission), noting the submission each one copies out by.
    /// Returns where it stopped.
    fn queue_routed(
        &mut self,
        from: usize,
        upto: usize,
        want: Want,
        mut rerun: Option<usize>,
        units: &mut RoutedUnits,
    ) -> usize {
        let end = upto.min(units.copied.len()).max(from + usize::from(rerun.is_some()));
        for unit in from..end {
            let again = rerun.take().map(|l| self.routed_unit(UnitKind::Rerun, l, want));
            let commands = match units.prepared[unit].take() {
                Some(commands) => commands,
                None => self.routed_unit(UnitKind::Layer, unit, want),
            };
            let submit = || self.ctx.queue.submit(again.into_iter().chain([commands]));
            units.copied[unit] = Some(timed(&mut self.stats.submit_time, submit));
        }
        end
    }

    /// Route-ahead unit `unit`'s commands (see [`Engine::route_ahead_step`]): a layer's, whole or run again,
    /// from the stock when it holds one, else recorded here; the head's (unit `layers`, `kind` ignored),
    /// recorded here for `want`.
    fn routed_unit(&mut self, kind: UnitKind, unit: usize, want: Want) -> wgpu::CommandBuffer {
        let shape = self.head_shape(1);
        let (device, graph, s) = (&self.ctx.device, &self.graphs[&1], &self.scratch);
        let (buffers, stock) = self.route_units.as_ref().expect("route_ahead_step starts the stock");
        if unit == graph.layers.len() {
            return timed(&mut self.stats.record_time, || {
                let mut enc = device.create_command_encoder(&Default::default());
                record_head(&mut enc, graph, s, want, shape, 0);
                enc.finish()
            });
        }
        if let Some(commands) = stock.as_ref().and_then(|stock| stock.take(kind, unit)) {
            self.stats.units_recorded_ahead += 1;
            return commands;
        }
        timed(&mut self.stats.record_time, || buffers.commands(device, graph, kind, unit))
    }

    /// Writes the route table again where the pool changed since it was last written.
    fn sync_route_table(&mut self) {
        let Some((buffer, written)) = &mut self.route_table else { return };
        let experts = self.config.expert_count;
        let len = (self.config.block_count * experts) as usize;
        let table = self.pool.inspect(|core| {
            let mut table = vec![ABSENT; len];
            for (slot, view) in core.snapshot().0.iter().enumerate() {
                if let SlotView::Ready { key, .. } = view {
                    table[(key.layer * experts + key.expert) as usize] = slot as u32;
                }
            }
            table
        });
        if table != *written {
            self.ctx.queue.write_buffer(buffer, 0, bytemuck::cast_slice(&table));
            *written = table;
        }
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

    /// A one-token step with every expert resident: the token's graph embeds it and turns picks into slots
    /// itself, one submit a token. Its inputs are in buffers written ahead of the submit, so the commands
    /// are recorded before the token is known: each step submits what the previous one recorded and records
    /// the next while the GPU runs, hiding the host's recording (a few ms a token) behind the GPU's work.
    ///
    /// With run-ahead and a pick asked for (the argmax, or a draw with the next step's draw given), the
    /// step also queues the next one, whose token is this step's pick, copied on the GPU: the host reads the
    /// pick while the GPU already runs on. `queued` is such a step from the call before; it is this step
    /// when it runs `id` at this position for the same kind of pick.
    fn resident_step(&mut self, id: u32, want: Want, queued: Option<RunAhead>) -> Result<Output> {
        let position = self.cached.len() as u32;
        self.graph(1)?;
        let queue = self.ctx.queue.clone();
        let (slot, submission) = match queued {
            Some(q)
                if q.position == position
                    && q.token == Some(id)
                    && want.picks()
                    && q.want == want
                    && q.draw == self.draw =>
            {
                (q.slot, q.submission)
            }
            // A queued step for another token (or none) is left to run unused; later writes and submits are
            // ordered after it.
            _ => {
                queue.write_buffer(&self.scratch.token_ids, 0, bytemuck::bytes_of(&id));
                if self.weights.gpu_embedding.is_none() {
                    // An embedding the GPU does not hold (not Q8_0): the host writes the row.
                    let row = self.weights.embedding.rows(&[id]);
                    queue.write_buffer(&self.scratch.x, 0, bytemuck::cast_slice(&row));
                }
                self.write_positions(position, 1);
                self.write_sampling(want, position);
                let commands = self.resident_commands(want, 0);
                (0, timed(&mut self.stats.submit_time, || queue.submit([commands])))
            }
        };
        let ahead = self.queues_next(position)
            && (want == Want::Argmax || (matches!(want, Want::Sample(_)) && self.next_draw.is_some()));
        let next_slot = if ahead {
            // The queued step's position, table and draw; its token arrives by the copy at this step's end.
            self.write_positions(position + 1, 1);
            self.write_draw(want, self.next_draw);
            let commands = self.resident_commands(want, 1 - slot);
            let submission = timed(&mut self.stats.submit_time, || queue.submit([commands]));
            let (position, slot, draw) = (position + 1, 1 - slot, self.next_draw);
            self.run_ahead = Some(RunAhead { position, token: None, want, draw, slot, submission });
            slot
        } else {
            0
        };
        let next = self.record_resident(want, next_slot);
        self.next_step = Some((want, next_slot, next));
        let (device, s, shape) = (&self.ctx.device, &self.scratch, self.head_shape(1));
        let out = read_output(device, s, want, shape, slot, Some(submission), &mut self.stats.gpu_wait)?;
        if let (Some(q), Output::Pick(pick)) = (&mut self.run_ahead, &out) {
            q.token = Some(*pick);
        }
        Ok(out)
    }

    /// The commands of a resident one-token step: those recorded during the step before when they match,
    /// else recorded now.
    fn resident_commands(&mut self, want: Want, slot: usize) -> wgpu::CommandBuffer {
        match self.next_step.take() {
            Some((w, sl, commands)) if w == want && sl == slot => commands,
            _ => self.record_resident(want, slot),
        }
    }

    /// Records a resident one-token step now ([`record_resident_step`]), timed as recording.
    fn record_resident(&mut self, want: Want, slot: usize) -> wgpu::CommandBuffer {
        let shape = self.head_shape(1);
        let (device, graph, s) = (&self.ctx.device, &self.graphs[&1], &self.scratch);
        timed(&mut self.stats.record_time, || record_resident_step(device, graph, s, want, shape, slot))
    }

    /// What a chunk of `tokens` tokens streaming through the pool loads of layer `l + 1` while layer `l`
    /// runs: every expert of it when the chunk's picks are at least as many as the layer's experts (a chunk
    /// of 16 tokens at 128 experts and top-8 touches ~64 % of them under uniform routing, a 512-token
    /// chunk all), so that the loads of one layer overlap the GPU's work on the one before instead of
    /// following it; none for smaller chunks, for the last layer, through the host tier (whose reads a
    /// chunk's misses go through), and for a pool of less than two layers' experts (the union of a chunk's
    /// picks may need every slot that loads of guesses would hold).
    fn chunk_guesses(&self, l: u32, tokens: u32) -> Option<Vec<u32>> {
        let (experts, k) = (self.config.expert_count, self.config.expert_used_count);
        let through_host = self.cpu_tier.as_ref().is_some_and(|t| t.host_stats().is_some());
        let fits = chunk_bound(self.pool_slots(), &self.config) == u32::MAX;
        (l + 1 < self.config.block_count && tokens * k >= experts && fits && !through_host)
            .then(|| (0..experts).collect())
    }

    /// What the head's copies need to know of a step of `tokens` tokens.
    fn head_shape(&self, tokens: u32) -> HeadShape {
        HeadShape { hidden: self.config.embedding_length, vocab: self.vocab, tokens }
    }
}

/// A route-ahead step's units (its layers, then the head at index `layers`).
struct RoutedUnits {
    /// The submission that last copied each unit's picks out (the head's: its output).
    copied: Vec<Option<wgpu::SubmissionIndex>>,
    /// Units recorded ahead of their submission ([`Engine::prepare_routed`]).
    prepared: Vec<Option<wgpu::CommandBuffer>>,
    /// The experts each unit last read back picked and the route table lacked ([`MissGuesses`]).
    lacked: Vec<Vec<ExpertKey>>,
}

impl RoutedUnits {
    fn new(layers: usize) -> Self {
        RoutedUnits {
            copied: vec![None; layers + 1],
            prepared: (0..=layers).map(|_| None).collect(),
            lacked: vec![Vec::new(); layers],
        }
    }
}

/// The route table's entry for an expert the pool does not hold (no pool part binds it, so the expert
/// kernels skip the pick).
const ABSENT: u32 = u32::MAX;

/// Whether the CPU tier's kernels multiply every expert part of `layout` with SIMD (else it computes them on
/// its portable path, dequantising each block first).
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

fn cpu_tier_fast(layout: &ExpertLayout) -> bool {
    layout.part_types().all(|ty| ty.is_none_or(diskformer_cpu_kernels::has_simd_kernel))
}

/// Checks that the kernels multiply every matrix of `layout` (dense and experts), naming the first they
/// do not.
fn check_types(layout: &diskformer_store::Layout) -> Result<()> {
    crate::weights::check_dense_types(layout)?;
    layout.experts.as_ref().map_or(Ok(()), |x| ExpertKernels::of(x).map(|_| ()))
}

/// Whether every dense matrix of the store is Q8_0 planes (norms and routers are F32), as the fused decode
/// layer reads them; the token embedding may be of any type (the host embeds it).
fn dense_q8(layout: &diskformer_store::Layout) -> bool {
    layout
        .dense
        .iter()
        .filter(|t| t.name != "token_embd.weight" || layout.dense_tensor("output.weight").is_none())
        .all(|t| t.ty == "q8_0" || t.ty == "f32")
}

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

/// Demand readers when [`EngineOptions::readers`] is `None` and reads go through the page cache.
const DEFAULT_READERS: usize = 8;
/// Reader counts the O_DIRECT probe tries, and the random records it reads at each.
const PROBE_READERS: [usize; 4] = [1, 2, 4, 8];
const PROBE_RECORDS: usize = 32;

/// A one-token step queued before the pick it runs on was read (see [`EngineOptions::run_ahead`]).
struct RunAhead {
    /// The position it runs at.
    position: u32,
    /// The token it runs: the step before's pick, once read.
    token: Option<u32>,
    /// How it picks its own token: the argmax, or a draw with `draw`.
    want: Want,
    draw: Option<SampleStep>,
    /// The argmax readback it copies its own pick to.
    slot: usize,
    submission: wgpu::SubmissionIndex,
}

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

/// Records a step with every expert resident (one token, or a chunk that groups its pairs on the GPU):
/// every layer, then the head, and for a pick its copy into `token_ids`, where a step queued behind this
/// one finds its token.
fn record_resident_step(
    device: &wgpu::Device,
    graph: &Graph,
    s: &Scratch,
    want: Want,
    shape: HeadShape,
    slot: usize,
) -> wgpu::CommandBuffer {
    let mut enc = device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        for lg in &graph.layers {
            for d in lg.attention.iter().chain(&lg.guesses).chain(&lg.experts) {
                d.record(&mut pass);
            }
        }
    }
    record_head(&mut enc, graph, s, want, shape, slot);
    if want.picks() {
        enc.copy_buffer_to_buffer(&s.argmax, 0, &s.token_ids, 0, 4);
    }
    enc.finish()
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

/// Records layer `lg`'s attention and router, and the copies of what the host reads back after them
/// (see [`readback_of_picks`]).
fn record_layer_head(
    enc: &mut wgpu::CommandEncoder,
    lg: &LayerGraph,
    s: &Scratch,
    on_cpu: bool,
    k: usize,
    hidden: usize,
    pairs: usize,
) {
    record(enc, &lg.attention);
    let (rb, _) = readback_of_picks(s, on_cpu, k, hidden, pairs);
    if on_cpu {
        let (w, x) = (4 * k as u64, 4 * hidden as u64);
        enc.copy_buffer_to_buffer(&s.pick_ids, 0, rb, 0, w);
        enc.copy_buffer_to_buffer(&s.pick_weights, 0, rb, w, w);
        enc.copy_buffer_to_buffer(s.xn(), 0, rb, 2 * w, x);
    } else {
        enc.copy_buffer_to_buffer(&s.pick_ids, 0, rb, 0, 4 * pairs as u64);
    }
}

/// Where a layer's picks are read back from, and how many bytes: the picks of the step's `pairs`, or for
/// the CPU tier the token's `k` picks with their weights and the layer's normed state (`hidden` values).
fn readback_of_picks(
    s: &Scratch,
    on_cpu: bool,
    k: usize,
    hidden: usize,
    pairs: usize,
) -> (&wgpu::Buffer, u64) {
    if on_cpu { (&s.cpu_readback, 4 * (2 * k + hidden) as u64) } else { (&s.readback, 4 * pairs as u64) }
}

/// How long the per-layer path's readback of a layer's picks polls before it blocks: a blocking wait wakes
/// ~25 µs later than a spinning one (H200, `submit-latency` in the kernels crate), once a layer. Other
/// readbacks block at once: they wait for a whole step, and with them polling too resident decode ran
/// slower on the H200 (BENCHMARKS.md).
const SPIN_FOR_PICKS: Duration = Duration::from_millis(1);

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

/// Hands a [`SpeculativeReads`] the experts that route-ahead units (those queued already, nearest first)
/// picked and the route table lacked, one unit's readback a step while a layer's loads run. They ran on a
/// state without the missing experts of the layer before, so most of their picks stand once it runs again.
/// Each step hands every unit's latest known misses at once (a unit not read back yet this layer keeps
/// those of its last readback), so the nearest reads start while the farther units still run, and a
/// step cut short by the loads drops no guess still likely.
struct MissGuesses<'a> {
    device: &'a wgpu::Device,
    s: &'a Scratch,
    copied: &'a [Option<wgpu::SubmissionIndex>],
    lacked: &'a mut [Vec<ExpertKey>],
    /// The units to guess for (layers only, not the head); `next` the next to read back.
    units: std::ops::Range<usize>,
    next: usize,
    k: usize,
    spec: &'a SpeculativeReads,
}

impl MissGuesses<'_> {
    /// Reads the next queued unit's picks back (waiting for the GPU to run it; the wait overlaps the
    /// loads) and hands the guesses. Returns whether a unit is left.
    fn step(&mut self) -> Result<bool> {
        let queued = self.units.contains(&self.next).then(|| self.copied[self.next].clone()).flatten();
        if let Some(submission) = queued {
            let mut overlapped = Duration::ZERO;
            let rb = &self.s.route_readback[self.next];
            let k = self.k;
            let read =
                readback(self.device, rb, 8 * k as u64, Some(submission), Duration::ZERO, &mut overlapped)?;
            let (picks, found) = read.split_at(k);
            let lacked = picks.iter().zip(found).filter(|&(_, &slot)| slot == ABSENT);
            let unit = self.next as u32;
            self.lacked[self.next] = lacked.map(|(&expert, _)| ExpertKey::new(unit, expert)).collect();
            self.next += 1;
        } else {
            self.next = self.units.end;
        }
        self.spec.guess(&self.lacked[self.units.clone()].concat());
        Ok(self.next < self.units.end)
    }
}

/// Whether `experts`' records are more bytes than the host's available memory (`false` where it does not
/// say): [`EngineOptions::direct_io`]'s default then reads them with O_DIRECT.
pub fn records_exceed_memory(experts: &ExpertLayout) -> bool {
    diskformer_expert_stream::available_memory().is_some_and(|available| experts.file_bytes() > available)
}

/// The host tier's budget when `direct_io` asks for none: half the host's available memory, at most the
/// whole store's records (`None` where the host does not say, or half holds fewer than `min_records`).
fn default_ram_budget(experts: &ExpertLayout, min_records: usize) -> Option<u64> {
    let half = diskformer_expert_stream::available_memory()? / 2;
    let stride = experts.record_bytes.next_multiple_of(diskformer_store::BUFFER_ALIGN as u64);
    (half / stride >= min_records as u64).then(|| half.min(experts.file_bytes().next_multiple_of(stride)))
}

/// The most tokens a chunk may have while experts stream through `slots` slots: a chunk pins the union of
/// a layer's picks, at most `chunk · top-k` experts and at most the layer's `expert_count`. A pool of two
/// layers' experts holds any union with room to spare, so chunks are then bounded only by
/// [`EngineOptions::max_batch`] (each layer's experts read once a chunk, not once every `slots / top-k`
/// tokens); a smaller pool bounds them by `slots / top-k`.
fn chunk_bound(slots: usize, config: &Config) -> u32 {
    if slots >= 2 * config.expert_count as usize {
        u32::MAX
    } else {
        (slots / config.expert_used_count as usize) as u32
    }
}

/// Loads every expert into the pool (all fit), returning the `[layers · experts]` slot table.
fn load_every_expert(
    pool: &ExpertPool<GpuBackend>,
    config: &Config,
    progress: &mut dyn FnMut(LoadProgress),
) -> Result<Vec<u32>> {
    let (layers, experts) = (config.block_count, config.expert_count);
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

/// The store directory used for a GGUF when none is given: `<file>.diskformer/` beside it.
pub fn default_store_dir(gguf: &Path) -> PathBuf {
    let mut name = gguf.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".diskformer");
    gguf.with_file_name(name)
}
