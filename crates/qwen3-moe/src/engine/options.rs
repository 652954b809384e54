//! How to load and run a model: [`EngineOptions`], with the options that only matter together in their own
//! groups: how experts stream ([`StreamOptions`]), the CPU tier ([`CpuTierOptions`]) and the arithmetic of
//! the GPU's matrix products ([`KernelOptions`]). Defaults were chosen by measurement: BENCHMARKS.md has
//! the figures behind each.

use std::path::PathBuf;

use diskformer_runtime::Routing;
pub use diskformer_runtime::stream::{
    CpuTierOptions, READ_SPLIT_CHECKED, READ_SPLIT_DIRECT, READ_SPLIT_IN_GGUF, READ_SPLIT_PAGE_CACHE,
    ROUTE_AHEAD_DIRECT, ROUTE_AHEAD_PAGE_CACHE, StreamOptions,
};

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
    /// KV-cache positions (default [`default_context`](diskformer_runtime::load::default_context): room
    /// for thinking, up to 32,768, at most the model's and what an eighth of the GPU budget holds, at least
    /// 4,096; where every expert would fit on the GPU at 4,096 positions, the longest context that keeps
    /// them there).
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
