//! How to load and run a model: [`EngineOptions`], with the options that only matter together in their own
//! groups: how experts stream ([`StreamOptions`]), the CPU tier ([`CpuTierOptions`]) and the arithmetic of
//! the GPU's matrix products ([`KernelOptions`]). Defaults were chosen by measurement: BENCHMARKS.md has
//! the figures behind each.

use std::path::PathBuf;

use diskformer_cpu_kernels::Math;
use diskformer_expert_stream::{EvictionPolicy, TierConfig, UploadMethod};
use diskformer_runtime::Routing;

/// How to load and run a model. Build with [`EngineOptions::default`] and adjust the fields.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct EngineOptions {
    /// GPU memory the engine may use, in bytes: what the dense weights, KV cache and scratch leave becomes
    /// expert slots (all experts when they fit). `None`, the default: [`auto_gpu_budget`] of the adapter.
    ///
    /// [`auto_gpu_budget`]: crate::auto_gpu_budget
    pub gpu_budget: Option<u64>,
    /// An explicit number of expert slots (overrides the budget), at least `2 × top-k`.
    pub pool_slots: Option<usize>,
    /// KV-cache positions (default min(4096, the model's context length)).
    pub max_context: Option<u32>,
    /// Most tokens per prefill chunk (default 512: a chunk reads each picked expert once per 32 of its pairs
    /// (Q4_0: 8) and each dense weight once per 32 tokens, and at 128 experts and top-8 a 512-token chunk
    /// gives an expert 32 pairs on average, one full tile). While experts stream, also bounded by the pool:
    /// chunk × top-k ≤ slots, unless the pool holds two layers' experts, which any chunk's union of a
    /// layer's picks fits.
    pub max_batch: u32,
    /// When every expert fits, load them all at start and route on the GPU: no readback or `ensure` per
    /// layer (default on; off keeps the streaming path for comparison). The token embedding then goes to the
    /// GPU too, and must fit in the budget with the experts.
    pub gpu_routing: bool,
    /// With every expert resident: [`Engine::step_greedy`] and [`Engine::step_sampled`] queue the next step
    /// on the GPU's own pick before they read this one, so that the GPU does not wait for the host between
    /// tokens (default on; off for comparison). A caller that next runs anything but the same kind of step
    /// on that pick leaves the queued step's work unused (and waits for it).
    ///
    /// [`Engine::step_greedy`]: crate::Engine::step_greedy
    /// [`Engine::step_sampled`]: crate::Engine::step_sampled
    pub run_ahead: bool,
    /// How expert records reach the GPU pool while experts stream.
    pub stream: StreamOptions,
    /// Experts computed on the CPU while they stream.
    pub cpu: CpuTierOptions,
    /// The arithmetic of the GPU's matrix products.
    pub kernels: KernelOptions,
    /// Where the experts' picks come from: the router's own top-k (default), or forced from a workload for
    /// measuring streaming on routing like a trained model's whatever the weights (ROUTING.md). Forced
    /// picks turn run-ahead off (a step queued ahead would take the next token's picks).
    pub routing: Routing,
    /// Writes every step's picks to this file as a routing trace (one line a token), so a run on real
    /// weights can be measured and shared as a workload. Steps then read every layer's picks back (no
    /// routing on the GPU, no route-ahead, no run-ahead).
    pub record_routing: Option<PathBuf>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            gpu_budget: None,
            pool_slots: None,
            max_context: None,
            max_batch: 512,
            gpu_routing: true,
            run_ahead: true,
            stream: StreamOptions::default(),
            cpu: CpuTierOptions::default(),
            kernels: KernelOptions::default(),
            routing: Routing::Router,
            record_routing: None,
        }
    }
}

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
    ///
    /// [`records_exceed_memory`]: crate::records_exceed_memory
    pub direct_io: Option<bool>,
    /// How records reach the pool (default: each reader's ring of 2 mapped staging buffers, read into
    /// directly through the page cache).
    pub upload: UploadMethod,
    /// Pieces a demand miss's record (and a speculative read's) is read, staged and uploaded in, each
    /// copied to the device as soon as it is staged (prefetch loads read whole records): through the page
    /// cache on as many threads while at most two loads run, with O_DIRECT one after another while the
    /// previous piece is staged. `None`, the default, picks [`READ_SPLIT_IN_GGUF`] for experts read in
    /// place from the GGUF, [`READ_SPLIT_DIRECT`] (whole records) with `direct_io`, else
    /// [`READ_SPLIT_PAGE_CACHE`].
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
    /// With route-ahead: records of host memory (5 MB each at the Qwen3-30B-A3B shape) that guessed misses
    /// are read into while a layer's loads run, so that the disk goes on while the GPU runs the layer again
    /// and the ones after it. The guesses are the experts the queued layers picked and the pool lacks (they
    /// ran on a state without the missing experts, so most of their picks stand); each waits for demand
    /// reads between its pieces, and none evicts a slot (default 32, 160 MB at that shape; 0 off).
    pub speculative_reads: usize,
    /// [`Engine::open_gguf`]: copy the experts into the store (default), or read a K-quant (records of
    /// blocks) file's experts, and its dense tensors but the Q8_0 ones, in place from the GGUF, so the model
    /// takes its own size on disk once ([`IngestOptions::copy_experts`]); a Q8_0 or Q4_0 file's experts are
    /// copied either way. A complete store of the same file made the other way is used as it is
    /// ([`IngestOptions::either_mode`]): delete it, or name another store, to have it made this way.
    ///
    /// [`Engine::open_gguf`]: crate::Engine::open_gguf
    /// [`IngestOptions::copy_experts`]: diskformer_store::IngestOptions::copy_experts
    /// [`IngestOptions::either_mode`]: diskformer_store::IngestOptions::either_mode
    pub copy_experts: bool,
    /// Checks every expert record against the store's checksum where it is read, before anything computes
    /// on it (default on): each GPU pool load, each host tier read, and each record the CPU tier maps, at
    /// its first use. A record that does not match is read again once past the page cache, then stops the
    /// step with [`Error::Store`]'s [`DamagedRecord`](diskformer_store::Error::DamagedRecord) naming it.
    ///
    /// [`Error::Store`]: crate::Error::Store
    pub check_reads: bool,
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
    /// Threads of the tier, the stepping thread's included (`None`: every core but two).
    pub threads: Option<usize>,
    /// How the tier takes its inputs (the token row before gate‖up, the activation before down), where its
    /// records take quantised ones (Q8_0 and Q4_0, or K-quant records whose every tensor is Q4_K, Q5_K or
    /// Q6_K on a CPU with AVX2 or AVX-512 VNNI; else f32):
    /// - `None` (default): [`Math::Q16`] on such K-quant records, else f32. Both compute a pick as the GPU
    ///   does to about f32's rounding, so a step's result does not depend on which picks the pool held when
    ///   the layer was planned (which background loads move from run to run); Q16's integer kernels run
    ///   nearly at Q8's speed.
    /// - `Some(Math::Q8)`: quantised to Q8_0 as llama.cpp's CPU backend does; a pick then moves by ~1e-2 in
    ///   log-probability between the tiers. [`KernelOptions::int8_decode`] chooses it too.
    pub math: Option<Math>,
    /// Which misses the tier also uploads into the GPU pool.
    pub admission: TierConfig,
}

/// The arithmetic of the GPU's matrix products: exact f32 by default (matching llama.cpp's F32 twins of a
/// model to 2e-3 in log-probability), or quantised activations or f16 operands as llama.cpp's own GPU
/// kernels use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KernelOptions {
    /// Chunks multiply Q8_0 weights (the lm head's too) by Q8_0-quantised activations with int8 dot
    /// products, as llama.cpp's CPU path and its GPU MMQ kernels do: on the golden fixtures the prompt's
    /// log-probabilities then lie within 0.02-0.03 of llama.cpp's run on the Q8_0 file itself, where the f32
    /// chunks lie 0.05-0.27 from it (default off). Q4_0 experts keep f32.
    pub int8_prefill: bool,
    /// Chunks run their Q8_0 GEMMs on tensor cores where the device has cooperative matrices
    /// (`Kernels::cooperative_matrix`; elsewhere this does nothing): each weight `q · d` and each
    /// activation rounded to f16, the products summed in f32, finer than `int8_prefill`'s quantised
    /// activations (which go first when both are set). Q4_0 experts keep their kernels.
    pub tensor_prefill: bool,
    /// One-token steps multiply Q8_0 weights (dense, experts, lm head) by Q8_0-quantised activations with
    /// int8 dot products, each 32-value block quantised as the GEMV reads it, or for gate‖up by the router
    /// kernel that writes its input: `int8_prefill`'s arithmetic for one-token steps (default off). Q4_0
    /// experts keep f32. Applies to the fused decode layer (top-k ≤ 64, expert FFN a multiple of 16); other
    /// shapes' steps stay f32. Sets [`CpuTierOptions::math`] to Q8 too.
    pub int8_decode: bool,
}
