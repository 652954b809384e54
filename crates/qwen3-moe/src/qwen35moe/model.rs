//! qwen35moe on the GPU: the GGUF's tensors uploaded as they lie in the file (any type the block GEMVs read;
//! pairs that multiply the same input, such as the experts' gate and up, joined into one matrix where they
//! share a type), the recurrent state (each DeltaNet layer's conv inputs and delta-rule state) and the KV
//! cache of each attention layer beside them, and one graph of dispatches a chunk size that runs the
//! reference's forward pass ([`super::Reference`]) for T tokens at once: the same kernels whose CPU
//! references the reference runs, so llama.cpp's goldens hold both. One token runs GEMVs and the split
//! attention; a chunk of [`GEMM_FROM`] tokens or more the tiled GEMMs, its pairs grouped by expert on the GPU.
//!
//! With every weight resident a step records its whole graph at once (the resident step driver, here);
//! where the routed experts do not fit the GPU budget (or a pool size is asked for), they stream through the
//! runtime's tiers instead ([`super::streamed`]: the per-layer step driver).

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use diskformer_bpe::Tokenizer;
use diskformer_expert_stream::{GpuBudget, Plane, RouteShape};
use diskformer_gguf::{GgufFile, TensorInfo};
use diskformer_kernels::{
    AttentionShape, BlockMatrix, BlockQuant, Context, DeltaNetShape, Dispatch, EXPERT_BLOCK_GEMM_GROUP,
    EXPERT_GROUPS_MAX_EXPERTS, ExpertBlocks, ExpertGroupsParams, ExpertOut, Kernels, MoeCombineNormParams,
    Q8Matrix, QkHeads, QkNormRopePartialStoreParams, Route, SharedExpert, View, argmax_partial_len,
    expert_gemm_group_bound,
};
use diskformer_runtime::load::{auto_gpu_budget, default_context, default_store_dir};
use diskformer_runtime::{
    CpuTierOptions, Decoder, EngineStats, ForcedRoutes, GpuBytes, LoadProgress, Next, RouteRecorder, Routing,
    Sampler, Stats, arena_wanted, layer_stride,
};
use wgpu::util::DeviceExt;

use super::config::Config;
use super::streamed::{ArenaPlan, LayerDispatches, StepBuffers, StreamedExperts, chunk_limit};
use crate::engine::readback;
use crate::graph::{gate_up_halves, layer_blocks, record};
use crate::kernel_times::{KernelTime, time_graph};
use crate::weights::Q8Weight;
use crate::{Error, Result};

/// Tokens a prefill chunk runs at most (the scratch is sized for it): llama.cpp's batch. A chunk's pairs touch
/// nearly every expert of a 256-expert layer, whose weights the grouped GEMMs then read once for the chunk.
pub const MAX_CHUNK: u32 = 512;

/// Graphs of chunk sizes other than 1 and [`MAX_CHUNK`] a [`Model`] keeps.
const GRAPHS_KEPT: usize = 4;

/// Chunks of this many tokens or more multiply dense matrices by the tiled GEMM instead of the GEMV.
const GEMM_FROM: u32 = 8;

/// How [`Model::open_with`] opens a qwen35moe file.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// Positions the KV cache holds (default: as the budget allows, see
    /// [`default_context`](diskformer_runtime::load::default_context)).
    pub max_context: Option<u32>,
    /// GPU memory the model may take (default: [`auto_gpu_budget`]). Where every weight does not fit, the
    /// routed experts stream through a pool of slots sized from what the rest leaves.
    pub gpu_budget: Option<u64>,
    /// Stream the routed experts through a pool of this many slots (at least 2 × top-k) whatever the budget.
    pub pool_slots: Option<usize>,
    /// The store of the file's expert records, ingested at the first open that streams (the experts stay in
    /// the GGUF, read in place): default `<file>.diskformer/` beside it.
    pub store_dir: Option<PathBuf>,
    /// Where the expert picks come from: the routers' own (default), or forced (benchmark workloads: each
    /// layer's top-k taken over the router's logits plus a mask of the forced picks, so the weights are the
    /// router's softmax over them).
    pub routing: Routing,
    /// Record every step's picks to this new file as a routing trace (ROUTING.md's format), which
    /// `routing: Routing::Trace` plays back.
    pub record_routing: Option<PathBuf>,
    /// The CPU tier while the experts stream: on by default where its kernels multiply the file's expert
    /// types with SIMD (`enabled`); a one-token step's misses are then computed on the host while the GPU
    /// runs the pool's hits, from records mapped from the page cache or held by the host tier
    /// (`ram_budget`); with the arena, the tier shares them with the GPU taking them from there
    /// (`arena_share`; `arena_over_bus` is refused: the expert kernels read device slots only).
    pub cpu: CpuTierOptions,
    /// While the experts stream, keep every record in host memory too, the pool's **arena** (filled at open,
    /// pinned, counted apart from the GPU budget): the pool's loads copy from there instead of reading the
    /// GGUF, and the CPU tier shares each layer's misses with the GPU (copied into stage slots). `None`, the
    /// default: as [`StreamOptions::host_arena`](diskformer_runtime::StreamOptions::host_arena)'s default
    /// (where the device binds host memory, is no software renderer, reads go through the page cache with no
    /// host tier, and the records take at most half the host's available memory).
    pub host_arena: Option<bool>,
    /// Checks every expert record against the store's checksum where it is read while the experts stream
    /// (default on), as [`StreamOptions::check_reads`](diskformer_runtime::StreamOptions::check_reads).
    pub check_reads: bool,
    /// Chunks run their dense Q8_0 GEMMs on tensor cores where the device has cooperative matrices (as
    /// [`KernelOptions::tensor_prefill`](crate::KernelOptions::tensor_prefill); elsewhere this does
    /// nothing; default off): each weight `q · d` and each input rounded to f16, the products summed in f32.
    pub tensor_prefill: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            max_context: None,
            gpu_budget: None,
            pool_slots: None,
            store_dir: None,
            routing: Routing::default(),
            record_routing: None,
            cpu: CpuTierOptions::default(),
            host_arena: None,
            check_reads: true,
            tensor_prefill: false,
        }
    }
}

/// A qwen35moe model on the GPU, its dense weights resident and its routed experts too or streamed through a
/// pool, and its state.
pub struct Model {
    ctx: Context,
    kernels: Kernels,
    config: Config,
    tokenizer: Arc<Tokenizer>,
    gguf: GgufFile,
    vocab: u32,
    /// Positions the KV cache holds.
    max_context: u32,
    weights: Weights,
    /// Device bytes of the dense weights.
    dense_bytes: u64,
    /// The budget it was sized for.
    gpu_budget: u64,
    /// The routed experts' pool where they stream (`weights.experts` is then empty).
    streamed: Option<StreamedExperts>,
    /// Forced picks, whose masks each step writes into [`Scratch::route_mask`].
    forced: Option<ForcedRoutes>,
    /// Where every step's picks are written, and the buffer each layer's are copied into for it
    /// (`[layers, chunk · k]` u32, read back after the step).
    recorder: Option<(RouteRecorder, wgpu::Buffer)>,
    state: Vec<LayerState>,
    scratch: Scratch,
    /// The logits' argmax, for greedy steps.
    argmax: Dispatch,
    /// The graphs of the chunk sizes run lately (one token's and [`MAX_CHUNK`]'s always; see
    /// [`Model::ensure_graph`]), and the order the others were built in.
    graphs: HashMap<u32, StepGraph>,
    built: VecDeque<u32>,
    /// The tokens the state and the cache hold, in order.
    cached: Vec<u32>,
    /// A copy of the recurrent state (each DeltaNet layer's conv inputs and delta state, in
    /// [`Model::recurrent_buffers`]' order) after the first `checkpoint_at` tokens of `cached`: the end
    /// of the last prompt, so that the next turn of a chat, whose prompt departs from the cache where the
    /// reply was, runs from there instead of from its start (the KV cache needs no copy: positions past the
    /// checkpoint are written again before they are read).
    checkpoint: Vec<wgpu::Buffer>,
    checkpoint_at: Option<usize>,
    /// Tokens run through the model since it opened.
    tokens_run: u64,
    /// Chunks' dense Q8_0 GEMMs on tensor cores ([`OpenOptions::tensor_prefill`] on a device that has them).
    tensor_prefill: bool,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").field("config", &self.config).field("cached", &self.cached.len()).finish()
    }
}

/// The dispatches of a chunk of `t` tokens.
struct StepGraph {
    layers: Vec<LayerDispatches>,
    /// The output norm and the lm head on the last token.
    head: Vec<Dispatch>,
}

impl StepGraph {
    fn all(&self) -> impl Iterator<Item = &Dispatch> {
        let layers = self.layers.iter().flat_map(|l| l.mixer.iter().chain(&l.routed).chain(&l.rest));
        layers.chain(&self.head)
    }
}

/// A matrix on the GPU as the GGUF holds it.
struct Matrix {
    buffer: wgpu::Buffer,
    quant: BlockQuant,
    rows: u32,
    cols: u32,
}

impl Matrix {
    fn blocks(&self) -> BlockMatrix<'_> {
        BlockMatrix { data: (&self.buffer).into(), quant: self.quant, rows: self.rows, cols: self.cols }
    }

    /// The buffer as `count` expert records of this matrix each, as the expert GEMVs take them.
    fn records(&self, count: u32) -> ExpertBlocks<'_> {
        ExpertBlocks {
            data: (&self.buffer).into(),
            quant: self.quant,
            slot_bytes: u64::from(self.rows) * self.blocks().row_bytes(),
            offset: 0,
            slots: count,
            first_slot: 0,
            rows: self.rows,
            cols: self.cols,
            host: false,
        }
    }
}

/// One layer's routed experts as the GGUF holds them, expert `e` in slot `e`: gate‖up as one matrix of 2F
/// rows a slot where gate and up share a type (expert `e`'s gate rows, then its up rows: one GEMV for both),
/// else gate and up each their own; then down.
struct Experts {
    gate_up: Vec<Matrix>,
    down: Matrix,
    count: u32,
}

impl Experts {
    /// `m` (one of this layer's) as the expert GEMVs take it.
    fn blocks<'a>(&self, m: &'a Matrix) -> ExpertBlocks<'a> {
        m.records(self.count)
    }
}

/// A dense matrix on the GPU: Q8_0 as its int8 and scale planes (the plane kernels read whole words, where
/// every other 34-byte Q8_0 block starts mid-word), any other type as the GGUF holds it.
enum Dense {
    Blocks(Matrix),
    Q8(Q8Weight),
}

impl Dense {
    fn rows(&self) -> u32 {
        match self {
            Dense::Blocks(m) => m.rows,
            Dense::Q8(m) => m.rows,
        }
    }

    /// The whole matrix as the GEMVs bind it.
    fn whole(&self) -> DenseRows<'_> {
        self.part(0, self.rows())
    }

    /// Rows `first..first + rows` as the GEMVs bind them (a token-joined matrix's members).
    fn part(&self, first: u32, rows: u32) -> DenseRows<'_> {
        match self {
            Dense::Blocks(m) => {
                let at = u64::from(first) * m.blocks().row_bytes();
                let data = View::at(&m.buffer, at);
                DenseRows::Blocks(BlockMatrix { data, quant: m.quant, rows, cols: m.cols })
            }
            Dense::Q8(m) => DenseRows::Q8(m.m_rows(first, rows)),
        }
    }
}

/// Rows of a [`Dense`] matrix as the GEMVs bind them.
#[derive(Clone, Copy)]
enum DenseRows<'a> {
    Blocks(BlockMatrix<'a>),
    Q8(Q8Matrix<'a>),
}

impl DenseRows<'_> {
    fn rows(&self) -> u32 {
        match self {
            DenseRows::Blocks(m) => m.rows,
            DenseRows::Q8(m) => m.rows,
        }
    }
}

/// Every tensor the forward pass reads, by its GGUF name: dense matrices ([`Dense`]), the routed experts as
/// blocks, vectors as f32.
struct Weights {
    matrices: HashMap<String, Dense>,
    vectors: HashMap<String, wgpu::Buffer>,
    experts: Vec<Experts>,
    /// Each member of a token-joined matrix ([`TOKEN_JOINED`]): the first member's name, under which the
    /// joined matrix is, and the member's first row and rows in it.
    members: HashMap<String, (String, u32, u32)>,
}

impl Weights {
    fn m(&self, name: &str) -> &Dense {
        &self.matrices[name]
    }

    /// The matrix `name`, a member's rows where it is token-joined.
    fn rows(&self, name: &str) -> DenseRows<'_> {
        match self.members.get(name) {
            Some((first, at, rows)) => self.matrices[first].part(*at, *rows),
            None => self.matrices[name].whole(),
        }
    }

    /// Matrix `a`'s rows and then `b`'s, as one, where `b` follows `a` in a token-joined matrix (β‖α);
    /// else `a` alone.
    fn adjacent_rows(&self, a: &str, b: &str) -> DenseRows<'_> {
        match (self.members.get(a), self.members.get(b)) {
            (Some((first, at, rows)), Some((then, next, more))) if first == then && at + rows == *next => {
                self.matrices[first].part(*at, rows + more)
            }
            _ => self.rows(a),
        }
    }

    /// The token-joined matrix whose first member is `first`, for a one-token step: one GEMV for every
    /// member, their outputs one after another in one row.
    fn token_joined(&self, first: &str, t: u32) -> Option<&Dense> {
        (t == 1 && self.members.contains_key(first)).then(|| &self.matrices[first])
    }

    fn v(&self, name: &str) -> View<'_> {
        (&self.vectors[name]).into()
    }
}

/// A layer's state on the GPU between steps.
enum LayerState {
    /// Keys and values, `[max_context, kv_heads · head_dim]` f16 each.
    Attention { keys: wgpu::Buffer, values: wgpu::Buffer },
    /// The last `conv_kernel − 1` conv inputs and each v head's `S × S` delta-rule state, f32.
    DeltaNet { conv: wgpu::Buffer, delta: wgpu::Buffer },
}

impl LayerState {
    fn bytes(&self) -> u64 {
        match self {
            LayerState::Attention { keys, values } => keys.size() + values.size(),
            LayerState::DeltaNet { conv, delta } => conv.size() + delta.size(),
        }
    }
}

/// Activations of a chunk of up to the tokens they were made for ([`MAX_CHUNK`], or fewer where a pool bounds
/// the chunks).
struct Scratch {
    /// Device bytes of all of them.
    bytes: u64,
    /// The residual stream: layer `l` reads `residual[l % 2]` and writes `residual[(l + 1) % 2]`.
    residual: [wgpu::Buffer; 2],
    /// The mixer's normed input, then the FFN's.
    normed: wgpu::Buffer,
    /// Projections: attention's query‖gate rows, or DeltaNet's q‖k‖v (a token's with k and v, or z and β‖α,
    /// after them where the projections are token-joined).
    projected: wgpu::Buffer,
    keys: wgpu::Buffer,
    values: wgpu::Buffer,
    /// Attention's normed and turned queries, or DeltaNet's conv output.
    queries: wgpu::Buffer,
    /// Attention's output, or DeltaNet's rule output.
    mixed: wgpu::Buffer,
    /// One token's split attention: each block's max, sum and weighted values.
    attention_partial: wgpu::Buffer,
    /// Its projection, and that added onto the residual stream (the routed experts' residual).
    mixer_out: wgpu::Buffer,
    mixed_sum: wgpu::Buffer,
    /// DeltaNet's z, and its gated-norm output.
    z: wgpu::Buffer,
    gated: wgpu::Buffer,
    beta_alpha: wgpu::Buffer,
    router: wgpu::Buffer,
    /// Forced routing: the step's mask (0 on a forced pick, far below any logit elsewhere; layers
    /// [`layer_stride`] floats apart), and the router's logits plus it.
    route_mask: wgpu::Buffer,
    forced_logits: wgpu::Buffer,
    pick_ids: wgpu::Buffer,
    pick_weights: wgpu::Buffer,
    /// The picks' slots where gate‖up routes a resident token itself (its ids: expert `e` is in slot `e`).
    pick_slots: wgpu::Buffer,
    /// The shared expert's gate‖up as a one-record pool: its one pair's slot, 0.
    shared_slot: wgpu::Buffer,
    /// Expert `e`'s slot, `e` (what [`Kernels::expert_groups`] maps picks through).
    expert_slots: wgpu::Buffer,
    /// A chunk's pairs grouped by expert for the grouped expert GEMMs: the groups, and the pairs in order.
    expert_groups: wgpu::Buffer,
    expert_order: wgpu::Buffer,
    gate_up: wgpu::Buffer,
    swiglu: wgpu::Buffer,
    expert_out: wgpu::Buffer,
    shared_gate_up: wgpu::Buffer,
    shared_swiglu: wgpu::Buffer,
    shared_out: wgpu::Buffer,
    positions: wgpu::Buffer,
    rope: wgpu::Buffer,
    logits: wgpu::Buffer,
    /// The argmax's per-slice pairs, and its pick.
    argmax_partial: wgpu::Buffer,
    picked: wgpu::Buffer,
    readback: wgpu::Buffer,
}

impl Model {
    /// Opens the qwen35moe GGUF at `path` on the first GPU, with a KV cache of `max_context` positions (at
    /// most the model's context length; default
    /// [`default_context`](diskformer_runtime::load::default_context) for the adapter's budget).
    ///
    /// # Errors
    /// As [`Model::open_on`], and [`Error::Kernels`] without a usable GPU.
    pub fn open(path: &Path, max_context: Option<u32>) -> Result<Model> {
        Self::open_on(Context::new()?, path, max_context)
    }

    /// [`Model::open`] on a given GPU context.
    ///
    /// # Errors
    /// The GGUF's read errors; [`Config::from_metadata`]'s; [`Error::BadTensor`] for a tensor missing, of the
    /// wrong shape, of a type the kernels do not read, or a matrix whose input is not a multiple of 256
    /// values (checked before anything is uploaded); [`Error::BadOption`] for a context of 0 or past the
    /// model's; the tokenizer's errors; [`Error::Gpu`] when a tensor is larger than a GPU buffer can be.
    pub fn open_on(ctx: Context, path: &Path, max_context: Option<u32>) -> Result<Model> {
        Self::open_in(ctx, path, &OpenOptions { max_context, ..OpenOptions::default() }, &mut |_| {})
    }

    /// Opens the qwen35moe GGUF at `path` on the first GPU as `opts` say: every weight on the GPU where all
    /// fit the budget (and no pool size is asked for), else the routed experts streamed through a pool of
    /// slots from the GGUF, through a store of their layout ingested first (`progress` reports it).
    ///
    /// # Errors
    /// As [`Model::open_on`]; [`Error::BadOption`] for a pool of fewer than 2 × top-k slots;
    /// [`Error::Pool`] for a budget that cannot hold the dense weights, the state, the scratch and 2 × top-k
    /// records (with the numbers); the store's errors.
    pub fn open_with(
        path: &Path,
        opts: &OpenOptions,
        progress: &mut dyn FnMut(LoadProgress),
    ) -> Result<Model> {
        Self::open_in(Context::new()?, path, opts, progress)
    }

    fn open_in(
        ctx: Context,
        path: &Path,
        opts: &OpenOptions,
        progress: &mut dyn FnMut(LoadProgress),
    ) -> Result<Model> {
        let gguf = GgufFile::open(path)?;
        let config = Config::from_metadata(gguf.metadata())?;
        let budget = opts.gpu_budget.unwrap_or_else(|| auto_gpu_budget(&ctx));
        // Keys and values of the attention layers (the DeltaNet layers' state does not grow).
        let attention = config.recurrent.iter().filter(|&&r| !r).count() as u64;
        let kv_per_position = attention * 2 * kv_row_bytes(&config);
        let max_context = opts
            .max_context
            .unwrap_or_else(|| default_context(config.context_length, kv_per_position, budget));
        if max_context == 0 || max_context > config.context_length {
            return Err(Error::BadOption {
                option: "max_context",
                what: format!("{max_context} positions; allowed 1..={}", config.context_length),
            });
        }
        let top_k = config.top_k as usize;
        if let Some(slots) = opts.pool_slots.filter(|&s| s < 2 * top_k) {
            return Err(Error::BadOption {
                option: "pool_slots",
                what: format!("{slots}; the pool needs at least 2 × top-k = {} slots", 2 * top_k),
            });
        }
        let shape = RouteShape { layers: config.layers, experts: config.experts, top_k: config.top_k };
        let forced = ForcedRoutes::open(&opts.routing, shape)?;
        let recorder =
            opts.record_routing.as_deref().map(|p| RouteRecorder::create(p, config.top_k)).transpose()?;
        let tokenizer = Arc::new(Tokenizer::from_gguf(&gguf)?);
        let wanted = wanted_tensors(&config, &gguf)?;
        let vocab = gguf.header().tensor("token_embd.weight").map_or(0, |t| t.dims[1] as u32);
        let state = layer_state(&ctx.device, &config, max_context);
        let state_bytes: u64 = state.iter().map(LayerState::bytes).sum();
        let scratch_for =
            |chunk| Scratch::new(&ctx.device, &config, vocab, max_context, forced.is_some(), chunk);
        let mut scratch = scratch_for(MAX_CHUNK);
        let (dense, experts) = device_bytes(&gguf, &wanted);
        let streamed = if opts.pool_slots.is_some() || dense + experts + state_bytes + scratch.bytes > budget
        {
            let dir = opts.store_dir.clone().unwrap_or_else(|| default_store_dir(path));
            let (store, layout) = StreamedExperts::store(path, &dir, progress)?;
            let reads = (opts.check_reads, opts.host_arena);
            let (setup, reader, staging, stream) =
                StreamedExperts::setup(&store, &layout, &opts.cpu, &config, reads)?;
            let wanted = arena_wanted(stream.host_arena, &ctx, &layout, &setup)?;
            let arena = |slots| ArenaPlan::new(wanted, (setup.cpu_experts, &opts.cpu), &config, slots);
            let all = (config.layers * config.experts) as usize;
            let slots_beside = |scratch: &Scratch| match opts.pool_slots {
                Some(slots) => Ok::<_, Error>(slots.min(all)),
                None => {
                    let scratch = scratch.bytes + staging;
                    let left = GpuBudget { budget, dense, kv_cache: state_bytes, scratch };
                    Ok(left.expert_slots(layout.record_bytes, config.top_k)?.min(all))
                }
            };
            // The chunks' bound is the pool's cache's (its stage slots take the CPU tier's arena picks).
            let bound = |slots: usize| chunk_limit(slots - arena(slots).stage_slots, &config);
            let mut chunk = MAX_CHUNK;
            let mut slots = slots_beside(&scratch);
            if slots.is_err() {
                // No pool beside the longest chunk's scratch: two-token chunks' (a pool of 2 × top-k holds
                // their picks).
                chunk = 2;
                scratch = scratch_for(chunk);
                slots = slots_beside(&scratch);
            }
            let mut slots = slots?;
            // A pool too small for a layer's picks of the longest chunk bounds the chunks: the scratch made
            // for those, and the pool again from what it leaves (no smaller, so the bound holds).
            if bound(slots) < chunk {
                chunk = bound(slots);
                scratch = scratch_for(chunk);
                slots = slots_beside(&scratch)?;
            }
            let arena = arena(slots);
            let setup = (setup, reader, staging, stream);
            let (tier, pool) = ((&opts.cpu, &config), (slots, arena, chunk));
            Some(StreamedExperts::open(&ctx, (&store, &layout), setup, tier, pool, progress)?)
        } else {
            None
        };
        let weights = upload_weights(&ctx, &gguf, &config, &wanted, streamed.is_none())?;
        let kernels = Kernels::new(&ctx);
        let kernels_coop = kernels.cooperative_matrix();
        let s = &scratch;
        let argmax =
            kernels.argmax((&s.logits).into(), (&s.argmax_partial).into(), (&s.picked).into(), vocab, 1)?;
        let checkpoint = (state.iter())
            .flat_map(|s| match s {
                LayerState::DeltaNet { conv, delta } => vec![conv.size(), delta.size()],
                LayerState::Attention { .. } => Vec::new(),
            })
            .map(|size| {
                ctx.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("recurrent state checkpoint"),
                    size,
                    usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            })
            .collect();
        let mut r = Model {
            ctx,
            kernels,
            config,
            tokenizer,
            gguf,
            vocab,
            max_context,
            weights,
            dense_bytes: dense,
            gpu_budget: budget,
            streamed,
            forced,
            recorder: None,
            state,
            scratch,
            argmax,
            graphs: HashMap::new(),
            built: VecDeque::new(),
            cached: Vec::new(),
            checkpoint,
            checkpoint_at: None,
            tokens_run: 0,
            tensor_prefill: opts.tensor_prefill && kernels_coop,
        };
        r.reset();
        r.recorder = recorder.map(|recorder| {
            let bytes = 4 * u64::from(r.config.layers * r.max_chunk() * r.config.top_k);
            let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
            let desc = wgpu::BufferDescriptor {
                label: Some("recorded picks"),
                size: bytes,
                usage,
                mapped_at_creation: false,
            };
            (recorder, r.ctx.device.create_buffer(&desc))
        });
        // Built now, so that a shape the kernels refuse is an error at open.
        let graph = r.graph(1)?;
        r.graphs.insert(1, graph);
        Ok(r)
    }

    /// The model's hyper-parameters.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The model's tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Logits a step returns.
    pub fn vocab(&self) -> u32 {
        self.vocab
    }

    /// Positions the cache holds.
    pub fn max_context(&self) -> u32 {
        self.max_context
    }

    /// The GPU's description.
    pub fn adapter(&self) -> String {
        self.ctx.describe()
    }

    /// Whether the GPU is a software renderer on the CPU.
    pub fn software_adapter(&self) -> bool {
        self.ctx.is_software()
    }

    /// The tokens the cache and the recurrent state hold.
    pub fn cached_tokens(&self) -> &[u32] {
        &self.cached
    }

    /// Tokens run through the model since it opened (a prompt's reused prefix is not run again).
    pub fn tokens_run(&self) -> u64 {
        self.tokens_run
    }

    /// Whether chunks run their dense Q8_0 GEMMs on tensor cores ([`OpenOptions::tensor_prefill`] asked
    /// for, and the device has cooperative matrices).
    pub fn tensor_prefill(&self) -> bool {
        self.tensor_prefill
    }

    /// Forgets every token: an empty cache, zero recurrent state, no checkpoint.
    pub fn reset(&mut self) {
        let mut enc = self.ctx.device.create_command_encoder(&Default::default());
        for b in self.recurrent_buffers() {
            enc.clear_buffer(b, 0, None);
        }
        self.ctx.queue.submit([enc.finish()]);
        self.cached.clear();
        self.checkpoint_at = None;
    }

    /// Builds the graph of a chunk of `t` tokens unless it is kept. Besides one token's and [`MAX_CHUNK`]'s,
    /// the [`GRAPHS_KEPT`] sizes built last are kept (a prompt's last chunk is of any size, and each graph
    /// holds its bind groups), the oldest dropped first.
    fn ensure_graph(&mut self, t: u32) -> Result<()> {
        if self.graphs.contains_key(&t) {
            return Ok(());
        }
        let graph = self.graph(t)?;
        self.graphs.insert(t, graph);
        if t != 1 && t != MAX_CHUNK {
            self.built.push_back(t);
            if self.built.len() > GRAPHS_KEPT
                && let Some(oldest) = self.built.pop_front()
            {
                self.graphs.remove(&oldest);
            }
        }
        Ok(())
    }

    /// Where a chunk of `t` tokens spends its GPU time: the whole chunk's graph, then each kernel's
    /// dispatches of it alone (in graph order, one pass), each submitted `repeats` times and timed from the
    /// host to the end of the work (so each row carries one submission's latency). The dispatches run on
    /// whatever the scratch holds and write the cache and the recurrent state: [`Model::reset`] after.
    ///
    /// # Errors
    /// [`Error::BadOption`] for `t` of 0 or past [`MAX_CHUNK`], or while the experts stream; GPU errors.
    pub fn kernel_times(&mut self, t: u32, repeats: u32) -> Result<Vec<KernelTime>> {
        if t == 0 || t > MAX_CHUNK {
            return Err(Error::BadOption { option: "tokens", what: format!("{t}: must be 1..={MAX_CHUNK}") });
        }
        if self.streamed.is_some() {
            return Err(Error::BadOption {
                option: "kernel_times",
                what: "times a whole graph, which needs every expert resident; the experts stream here"
                    .into(),
            });
        }
        self.ensure_graph(t)?;
        let graph: Vec<&Dispatch> = self.graphs[&t].all().collect();
        time_graph(&self.ctx, &graph, "chunk", repeats)
    }

    /// Each DeltaNet layer's conv inputs, then its delta state, layer by layer.
    fn recurrent_buffers(&self) -> impl Iterator<Item = &wgpu::Buffer> {
        self.state.iter().flat_map(|s| match s {
            LayerState::DeltaNet { conv, delta } => vec![conv, delta],
            LayerState::Attention { .. } => Vec::new(),
        })
    }

    /// Copies the recurrent state into the checkpoint (`to_checkpoint`) or back from it.
    fn copy_checkpoint(&self, to_checkpoint: bool) {
        let mut enc = self.ctx.device.create_command_encoder(&Default::default());
        for (live, saved) in self.recurrent_buffers().zip(&self.checkpoint) {
            let (from, to) = if to_checkpoint { (live, saved) } else { (saved, live) };
            enc.copy_buffer_to_buffer(from, 0, to, 0, live.size());
        }
        self.ctx.queue.submit([enc.finish()]);
    }

    /// Runs `ids` and returns the last one's logits. What the cache holds of them is not run again: all of
    /// it where it is a prefix of `ids`, else up to the checkpoint at the end of the last prompt where `ids`
    /// begin with that prompt (a chat's next turn); otherwise it starts over (the recurrent state cannot be
    /// cut back to an arbitrary position). The state at the end of `ids` becomes the checkpoint.
    ///
    /// # Errors
    /// [`Error::BadOption`] for no ids; [`Error::BadToken`]; [`Error::ContextFull`] when they do not fit;
    /// GPU errors.
    pub fn prefill(&mut self, ids: &[u32]) -> Result<Vec<f32>> {
        if ids.is_empty() {
            return Err(Error::BadOption { option: "ids", what: "no tokens to run".into() });
        }
        if ids.len() > self.max_context as usize {
            return Err(Error::ContextFull { needed: ids.len(), ctx: self.max_context });
        }
        let at_checkpoint = |n: usize| n < ids.len() && ids[..n] == self.cached[..n];
        if self.cached.len() < ids.len() && ids.starts_with(&self.cached) {
            // The cache goes on.
        } else if let Some(n) = self.checkpoint_at.filter(|&n| at_checkpoint(n)) {
            self.copy_checkpoint(false);
            self.cached.truncate(n);
        } else {
            self.reset();
        }
        let mut logits = Vec::new();
        for chunk in ids[self.cached.len()..].chunks(self.max_chunk() as usize) {
            logits = self.run(chunk)?;
        }
        self.copy_checkpoint(true);
        self.checkpoint_at = Some(self.cached.len());
        Ok(logits)
    }

    /// Runs `id` at the next position and returns its logits.
    ///
    /// # Errors
    /// As [`Model::prefill`].
    pub fn step(&mut self, id: u32) -> Result<Vec<f32>> {
        self.run(&[id])
    }

    /// Runs `id` at the next position and returns the most likely next token (ties to the lower id), picked
    /// on the GPU: 4 bytes read back instead of the logits.
    ///
    /// # Errors
    /// As [`Model::prefill`].
    pub fn step_greedy(&mut self, id: u32) -> Result<u32> {
        let out = self.submit(&[id], true)?;
        Ok(out[0])
    }

    /// [`Model::submit`] reading the logits back.
    fn run(&mut self, ids: &[u32]) -> Result<Vec<f32>> {
        Ok(self.submit(ids, false)?.into_iter().map(f32::from_bits).collect())
    }

    /// The GPU memory budget it was sized for, in bytes ([`OpenOptions::gpu_budget`], or
    /// [`auto_gpu_budget`]'s when that was `None`).
    pub fn gpu_budget(&self) -> u64 {
        self.gpu_budget
    }

    /// Tokens a chunk runs at most: [`MAX_CHUNK`], or while the experts stream as many as the pool holds a
    /// layer's picks of.
    pub fn max_chunk(&self) -> u32 {
        self.streamed.as_ref().map_or(MAX_CHUNK, |s| s.max_chunk)
    }

    /// Whether the routed experts stream through a pool of slots.
    pub fn streams_experts(&self) -> bool {
        self.streamed.is_some()
    }

    /// The streaming pool's slots, while the experts stream.
    pub fn pool_slots(&self) -> Option<usize> {
        self.streamed.as_ref().map(|s| s.tiers.slots())
    }

    /// The streaming tiers' counters (the pool's hits, misses and loads, the CPU tier's experts and time),
    /// and the GPU memory taken, while the experts stream.
    pub fn stream_stats(&self) -> Option<Stats> {
        let dense = self.dense_bytes;
        let kv = self.state.iter().map(LayerState::bytes).sum();
        let gpu = GpuBytes { dense, pool: 0, kv, scratch: self.scratch.bytes, staging: 0 };
        self.streamed.as_ref().map(|s| s.stats(gpu))
    }

    /// Zeroes the streaming tiers' counters and the driver's (what [`Model::stream_stats`] reports).
    pub fn reset_stream_stats(&mut self) {
        if let Some(streamed) = &mut self.streamed {
            streamed.stats = EngineStats::default();
            streamed.tiers.reset_stats();
        }
    }

    /// One chunk after the cache: the embedding rows, positions and RoPE table written, the chunk's graph
    /// recorded and submitted (while the experts stream, a layer at a time: [`StreamedExperts::run_layers`]),
    /// then the last token's logits read back, or with `pick` their argmax. A chunk longer than
    /// [`Model::max_chunk`] is refused; a streamed chunk that fails part way forgets every token (its first
    /// layers' state has moved on).
    fn submit(&mut self, ids: &[u32], pick: bool) -> Result<Vec<u32>> {
        if ids.len() > self.max_chunk() as usize {
            return Err(Error::BadOption {
                option: "ids",
                what: format!("{} tokens in one chunk; at most {}", ids.len(), self.max_chunk()),
            });
        }
        let needed = self.cached.len() + ids.len();
        if needed > self.max_context as usize {
            return Err(Error::ContextFull { needed, ctx: self.max_context });
        }
        if let Some(&bad) = ids.iter().find(|&&id| id >= self.vocab) {
            return Err(Error::BadToken { id: bad, vocab: self.vocab });
        }
        let out = self.submit_chunk(ids, pick);
        if out.is_err() && self.streamed.is_some() {
            self.reset();
        }
        if let Some(streamed) = &mut self.streamed {
            streamed.release_held();
        }
        out
    }

    /// [`Model::submit`]'s work, on ids it checked.
    fn submit_chunk(&mut self, ids: &[u32], pick: bool) -> Result<Vec<u32>> {
        let t = ids.len() as u32;
        let start = self.cached.len() as u32;
        let positions: Vec<u32> = (start..start + t).collect();
        let queue = &self.ctx.queue;
        let s = &self.scratch;
        queue.write_buffer(&s.residual[0], 0, bytemuck::cast_slice(&self.embedding_rows(ids)?));
        queue.write_buffer(&s.positions, 0, bytemuck::cast_slice(&positions));
        queue.write_buffer(&s.rope, 0, bytemuck::cast_slice(&self.config.rope_table(&positions)));
        if let Some(forced) = &mut self.forced {
            queue.write_buffer(&s.route_mask, 0, bytemuck::cast_slice(&forced.next_mask(t)?));
        }
        self.ensure_graph(t)?;
        let (device, queue) = (&self.ctx.device, &self.ctx.queue);
        let mut enc = device.create_command_encoder(&Default::default());
        let graph = &self.graphs[&t];
        let mut waited = Duration::ZERO;
        let pairs = t * self.config.top_k;
        let recorded = self.recorder.as_ref().map(|(_, buffer)| buffer);
        match &mut self.streamed {
            Some(streamed) => {
                let s = &self.scratch;
                let b = StepBuffers {
                    pick_ids: &s.pick_ids,
                    pick_weights: &s.pick_weights,
                    normed: &s.normed,
                    expert_out: &s.expert_out,
                    recorded,
                };
                let pairs = (pairs, groups_pairs(&self.config, t));
                streamed.run_layers((device, queue), &mut enc, &graph.layers, &b, pairs, &mut waited)?;
            }
            None => {
                let last = graph.layers.len() - 1;
                for (l, layer) in graph.layers.iter().enumerate() {
                    // The picks are the layer's from its top-k (or its routed gate‖up) to the next layer's.
                    record(&mut enc, &layer.mixer);
                    record(&mut enc, &layer.routed);
                    if let Some(recorded) = recorded {
                        let at = 4 * (l as u64) * u64::from(pairs);
                        enc.copy_buffer_to_buffer(
                            &self.scratch.pick_ids,
                            0,
                            recorded,
                            at,
                            4 * u64::from(pairs),
                        );
                    }
                    record(&mut enc, &layer.rest);
                    // The GPU runs these layers while the host records the next ones (a step's hundreds of
                    // dispatches take the host milliseconds to record).
                    if l % RESIDENT_SUBMIT_LAYERS == RESIDENT_SUBMIT_LAYERS - 1 && l < last {
                        let recorded =
                            std::mem::replace(&mut enc, device.create_command_encoder(&Default::default()));
                        queue.submit([recorded.finish()]);
                    }
                }
            }
        }
        record(&mut enc, &graph.head);
        let (from, bytes) = match pick {
            true => {
                record(&mut enc, std::slice::from_ref(&self.argmax));
                (&self.scratch.picked, 4)
            }
            false => (&self.scratch.logits, 4 * u64::from(self.vocab)),
        };
        enc.copy_buffer_to_buffer(from, 0, &self.scratch.readback, 0, bytes);
        let submitted = self.ctx.queue.submit([enc.finish()]);
        let out =
            readback(device, &self.scratch.readback, bytes, Some(submitted), Duration::ZERO, &mut waited)?;
        if let Some(streamed) = &mut self.streamed {
            streamed.stats.gpu_wait += waited;
        }
        if let Some((recorder, buffer)) = &mut self.recorder {
            let bytes = 4 * u64::from(self.config.layers * pairs);
            let picks = readback(device, buffer, bytes, None, Duration::ZERO, &mut waited)?;
            let by_layer: Vec<Vec<u32>> = picks.chunks(pairs as usize).map(<[u32]>::to_vec).collect();
            recorder.write_step(&by_layer)?;
        }
        self.cached.extend_from_slice(ids);
        self.tokens_run += u64::from(t);
        Ok(out)
    }

    /// The embedding rows of `ids`, dequantised from the mapped GGUF.
    fn embedding_rows(&self, ids: &[u32]) -> Result<Vec<f32>> {
        let info = self.gguf.header().tensor("token_embd.weight").expect("checked at open");
        let data = self.gguf.tensor_data("token_embd.weight").expect("checked at open");
        let hidden = self.config.hidden as usize;
        let row_bytes = data.len() / self.vocab as usize;
        let mut rows = vec![0f32; ids.len() * hidden];
        for (&id, out) in ids.iter().zip(rows.chunks_mut(hidden)) {
            diskformer_gguf::dequantize(info.ty, &data[id as usize * row_bytes..][..row_bytes], out)?;
        }
        Ok(rows)
    }

    /// The dispatches of a chunk of `t` tokens: every layer's mixer and MoE, then the last token's head. Each
    /// layer's MoE ends with the next layer's attention norm (the last one's with the output norm) in the
    /// dispatch that combines its experts.
    fn graph(&self, t: u32) -> Result<StepGraph> {
        let (c, k, w, s) = (&self.config, &self.kernels, &self.weights, &self.scratch);
        let mut layers = Vec::with_capacity(c.layers as usize);
        for l in 0..c.layers as usize {
            let mut out = Vec::new();
            let (x, next) = (&s.residual[l % 2], &s.residual[(l + 1) % 2]);
            let name = |n: &str| format!("blk.{l}.{n}.weight");
            if l == 0 {
                let (norm, normed) = (w.v(&name("attn_norm")), (&s.normed).into());
                out.push(k.rms_norm(x.into(), norm, normed, c.hidden, t, c.eps)?);
            }
            match &self.state[l] {
                LayerState::Attention { keys, values } => {
                    self.attention(&mut out, l, t, (keys, values))?;
                }
                LayerState::DeltaNet { conv, delta } => self.delta_net(&mut out, l, t, (conv, delta))?,
            }
            // The mixer's output joins the residual stream as the FFN's norm reads it.
            let (post, sum) = (w.v(&name("post_attention_norm")), &s.mixed_sum);
            let (mixer_out, normed) = ((&s.mixer_out).into(), (&s.normed).into());
            out.push(k.add_rms_norm(x.into(), mixer_out, post, sum.into(), normed, c.hidden, t, c.eps)?);
            let next_norm = match l + 1 < c.layers as usize {
                true => w.v(&format!("blk.{}.attn_norm.weight", l + 1)),
                false => w.v("output_norm.weight"),
            };
            let (routed, rest) = self.moe(&mut out, l, t, sum, (next, next_norm))?;
            layers.push(LayerDispatches { mixer: out, routed, rest });
        }
        // The head on the last token's row, normed by the last layer's combine.
        let last = View::at(&s.normed, u64::from(t - 1) * 4 * u64::from(c.hidden));
        let head = w.matrices.get("output.weight").unwrap_or_else(|| w.m("token_embd.weight"));
        let head = vec![match head {
            Dense::Blocks(m) => k.kquant_gemv(m.blocks(), last, (&s.logits).into(), 1)?,
            // Four rows a lane group: more loads in flight over the vocabulary's many rows.
            Dense::Q8(m) => k.q8_gemv_rows4(m.m(), last, (&s.logits).into(), 1)?,
        }];
        Ok(StepGraph { layers, head })
    }

    /// `y[t] = W x[t]` into columns `offset..offset + rows` of rows of `stride`: a GEMV for a few tokens, the
    /// tiled GEMM (each weight read once per 32 tokens) for a chunk of [`GEMM_FROM`] or more, on tensor
    /// cores for Q8_0 planes where [`Model::tensor_prefill`].
    fn project(&self, w: DenseRows<'_>, x: View<'_>, y: (View<'_>, u32, u32), t: u32) -> Result<Dispatch> {
        let k = &self.kernels;
        Ok(match (w, t >= GEMM_FROM) {
            (DenseRows::Blocks(m), true) => k.kquant_gemm_into(m, x, y, t)?,
            (DenseRows::Blocks(m), false) => k.kquant_gemv_into(m, x, y, t)?,
            (DenseRows::Q8(m), true) if self.tensor_prefill => k.q8_gemm_coop_into(m, x, y, t)?,
            (DenseRows::Q8(m), true) => k.q8_gemm_tiled_into(m, x, y, t)?,
            (DenseRows::Q8(m), false) => k.q8_gemv_into(m, x, y, t)?,
        })
    }

    /// [`Model::project`] into whole rows of `y`.
    fn project_all(&self, w: DenseRows<'_>, x: View<'_>, y: View<'_>, t: u32) -> Result<Dispatch> {
        self.project(w, x, (y, w.rows(), 0), t)
    }

    /// Gated full attention (§3.1): the query‖gate rows, q and k normed per head and turned by partial
    /// RoPE, both stored in the cache, causal attention, the output times σ(gate), its projection into
    /// `mixer_out`.
    fn attention(
        &self,
        out: &mut Vec<Dispatch>,
        l: usize,
        t: u32,
        (keys, values): (&wgpu::Buffer, &wgpu::Buffer),
    ) -> Result<()> {
        let (c, k, w, s) = (&self.config, &self.kernels, &self.weights, &self.scratch);
        let name = |n: &str| format!("blk.{l}.{n}.weight");
        let (d, kv) = (c.head_dim, c.kv_heads * c.head_dim);
        let (normed, projected) = ((&s.normed).into(), (&s.projected).into());
        let (keys_in, values_in): (View<'_>, View<'_>) = match w.token_joined(&name("attn_q"), t) {
            // One token: q‖gate, k and v in one GEMV, one after another in `projected`.
            Some(joined) => {
                out.push(self.project_all(joined.whole(), normed, projected, t)?);
                let at = |rows: u32| View::at(&s.projected, 4 * u64::from(rows));
                (at(2 * c.heads * d), at(2 * c.heads * d + kv))
            }
            None => {
                out.push(self.project_all(w.rows(&name("attn_q")), normed, projected, t)?);
                out.push(self.project_all(w.rows(&name("attn_k")), normed, (&s.keys).into(), t)?);
                out.push(self.project_all(w.rows(&name("attn_v")), normed, (&s.values).into(), t)?);
                ((&s.keys).into(), (&s.values).into())
            }
        };
        // The queries normed and turned, the keys too and stored into the cache, in one dispatch.
        let ctx = self.max_context;
        let heads = QkHeads {
            queries_in: (&s.projected).into(),
            keys_in,
            q_norm: w.v(&name("attn_q_norm")),
            k_norm: w.v(&name("attn_k_norm")),
            queries: (&s.queries).into(),
            key_cache: keys.into(),
        };
        let p = QkNormRopePartialStoreParams {
            heads: c.heads,
            kv_heads: c.kv_heads,
            head_dim: d,
            tokens: t,
            eps: c.eps,
            rope_dims: c.rope_dims,
            q_stride: 2 * d,
            ctx,
        };
        out.push(k.qk_norm_rope_partial_store(heads, (&s.rope).into(), (&s.positions).into(), p)?);
        out.push(k.kv_store(values_in, (&s.positions).into(), values.into(), kv, t, ctx)?);
        let shape = AttentionShape { heads: c.heads, kv_heads: c.kv_heads, head_dim: d, tokens: t, ctx };
        let (q, o, positions) = ((&s.queries).into(), (&s.mixed).into(), (&s.positions).into());
        if t == 1 && shape.split_fits() {
            // One token: the cache in blocks over many workgroups, then their merge.
            let partial = (&s.attention_partial).into();
            out.push(k.attention_split(q, keys.into(), values.into(), positions, partial, shape)?);
            out.push(k.attention_combine(partial, positions, o, shape)?);
        } else {
            out.push(k.attention(q, keys.into(), values.into(), positions, o, shape)?);
        }
        out.push(k.attention_gate((&s.projected).into(), (&s.mixed).into(), c.heads, d, t)?);
        let output = w.rows(&name("attn_output"));
        out.push(self.project_all(output, (&s.mixed).into(), (&s.mixer_out).into(), t)?);
        Ok(())
    }

    /// Gated DeltaNet (§3.2): the projections (q‖k‖v, z, β and α), the causal conv over the saved inputs
    /// with SiLU, the delta rule per v head, the gated RMSNorm with z, the output projection into
    /// `mixer_out`.
    fn delta_net(
        &self,
        out: &mut Vec<Dispatch>,
        l: usize,
        t: u32,
        (conv, delta): (&wgpu::Buffer, &wgpu::Buffer),
    ) -> Result<()> {
        let (c, k, w, s) = (&self.config, &self.kernels, &self.weights, &self.scratch);
        let name = |n: &str| format!("blk.{l}.{n}.weight");
        let (channels, h_v) = (c.conv_channels() as u32, c.v_heads);
        let normed = || (&s.normed).into();
        let qkv = name("attn_qkv");
        let (z, joined_ba): (View<'_>, Option<View<'_>>) = match w.token_joined(&qkv, t) {
            // One token: q‖k‖v, z (and β‖α where they share its type) in one GEMV, one after another in
            // `projected`.
            Some(joined) => {
                out.push(self.project_all(joined.whole(), normed(), (&s.projected).into(), t)?);
                let at = |floats: u32| View::at(&s.projected, 4 * u64::from(floats));
                let ba_joined = w.members.get(&name("ssm_beta")).is_some_and(|(first, ..)| *first == qkv);
                (at(channels), ba_joined.then(|| at(channels + c.value_dim() as u32)))
            }
            None => {
                out.push(self.project_all(w.rows(&qkv), normed(), (&s.projected).into(), t)?);
                out.push(self.project_all(w.rows(&name("attn_gate")), normed(), (&s.z).into(), t)?);
                ((&s.z).into(), None)
            }
        };
        let ba = match joined_ba {
            Some(ba) => ba,
            None => {
                let ba = (&s.beta_alpha).into();
                let beta = w.adjacent_rows(&name("ssm_beta"), &name("ssm_alpha"));
                out.push(self.project(beta, normed(), (ba, 2 * h_v, 0), t)?);
                if beta.rows() == h_v {
                    out.push(self.project(w.rows(&name("ssm_alpha")), normed(), (ba, 2 * h_v, h_v), t)?);
                }
                ba
            }
        };
        let kernel = w.v(&name("ssm_conv1d"));
        let (projected, u) = ((&s.projected).into(), (&s.queries).into());
        out.push(k.delta_net_conv(projected, kernel, conv.into(), u, channels, c.conv_kernel, t)?);
        let shape = DeltaNetShape { state: c.state_size, k_heads: c.k_heads, v_heads: h_v };
        let (dt_bias, decay) = (w.v(&format!("blk.{l}.ssm_dt.bias")), w.v(&format!("blk.{l}.ssm_a")));
        let rule =
            k.delta_net_rule(u, ba, dt_bias, decay, delta.into(), (&s.mixed).into(), shape, t, c.eps)?;
        out.push(rule);
        let norm = w.v(&name("ssm_norm"));
        let (o, gated) = ((&s.mixed).into(), (&s.gated).into());
        out.push(k.gated_rms_norm(o, z, norm, gated, c.state_size, t * h_v, c.eps)?);
        out.push(self.project_all(w.rows(&name("ssm_out")), gated, (&s.mixer_out).into(), t)?);
        Ok(())
    }

    /// The router's logits of the normed state into `out`'s dispatches, a forced routing's `mask` added; returns
    /// where they are. An F32 router (as llama.cpp's quantizer leaves it) takes the f32 kernels, a token's
    /// GEMV adding the mask in its own dispatch; any other type is a dense projection.
    fn router_logits(
        &self,
        out: &mut Vec<Dispatch>,
        router: &Dense,
        mask: Option<View<'_>>,
        t: u32,
    ) -> Result<View<'_>> {
        let (k, s) = (&self.kernels, &self.scratch);
        let (x, raw, forced) = ((&s.normed).into(), (&s.router).into(), (&s.forced_logits).into());
        let f32_router = match router {
            Dense::Blocks(m) if matches!(m.quant, BlockQuant::F32) && m.cols.is_multiple_of(32) => Some(m),
            _ => None,
        };
        match (f32_router, mask) {
            (Some(m), Some(mask)) if t < GEMM_FROM => {
                out.push(k.f32_gemv_bias((&m.buffer).into(), (m.rows, m.cols), x, mask, forced, t)?);
                return Ok(forced);
            }
            (Some(m), _) if t < GEMM_FROM => {
                out.push(k.f32_gemv((&m.buffer).into(), m.rows, m.cols, x, raw, t)?)
            }
            (Some(m), _) => out.push(k.f32_gemm((&m.buffer).into(), (m.rows, m.cols), x, raw, t)?),
            (None, _) => out.push(self.project_all(router.whole(), x, raw, t)?),
        }
        Ok(match mask {
            Some(mask) => {
                out.push(k.add(raw, mask, forced, t * self.config.experts)?);
                forced
            }
            None => raw,
        })
    }

    /// The router and its picks (softmax, top-k, renormalised) into `out` (a resident token's gate‖up ranks
    /// them itself); returned, the shared expert and the routed experts' projections (what a streamed layer
    /// runs once the tiers hold its picks), then the routed experts' combine onto `x` with the shared
    /// expert's σ-gated output (§3.3) into `next`, with `next_norm`'s RMSNorm of it into the normed scratch,
    /// in one dispatch.
    fn moe(
        &self,
        out: &mut Vec<Dispatch>,
        l: usize,
        t: u32,
        x: &wgpu::Buffer,
        (next, next_norm): (&wgpu::Buffer, View<'_>),
    ) -> Result<(Vec<Dispatch>, Vec<Dispatch>)> {
        let (c, k, w, s) = (&self.config, &self.kernels, &self.weights, &self.scratch);
        let name = |n: &str| format!("blk.{l}.{n}.weight");
        let (experts, top_k, f) = (c.experts, c.top_k, c.expert_ffn);
        let pairs = t * top_k;
        let u = || (&s.normed).into();
        let mask =
            self.forced.as_ref().map(|_| View::at(&s.route_mask, 4 * l as u64 * layer_stride(t, experts)));
        let logits = self.router_logits(out, w.m(&name("ffn_gate_inp")), mask, t)?;
        let (ids, weights) = ((&s.pick_ids).into(), (&s.pick_weights).into());
        let source = self.routed_experts(l);
        // One token on gate‖up records of one type: SwiGLU in gate‖up's dispatch; with every expert resident,
        // the router's top-k too (each workgroup ranks the logits itself: two dependent dispatches fewer).
        let swiglu = t == 1 && source.gate_up.iter().all(|(m, _)| m.rows == 2 * f);
        let routes_itself = swiglu && self.streamed.is_none();
        if !routes_itself {
            out.push(k.router_topk(logits, ids, weights, experts, top_k, t)?);
        }
        // The shared expert first among the routed experts' dispatches: where the host computes a step's
        // misses, the GPU runs it with the hits meanwhile, and only the combine waits for the host's sum.
        let mut out = Vec::new();
        let fs = c.shared_ffn;
        let sgu = (&s.shared_gate_up).into();
        let gate = w.m(&name("ffn_gate_shexp"));
        match gate {
            // One token: gate‖up as one expert's record, SwiGLU in its dispatch.
            Dense::Blocks(m) if t == 1 && m.rows == 2 * fs => {
                let record = ExpertBlocks { rows: fs, ..m.records(1) };
                let up_at = u64::from(fs) * m.blocks().row_bytes();
                let act = ExpertOut { y: (&s.shared_swiglu).into(), stride: fs, offset: 0 };
                let slot = (&s.shared_slot).into();
                out.push(k.expert_kquant_gemv_swiglu(record, up_at, u(), slot, act, (1, 1))?);
            }
            _ => {
                out.push(self.project(gate.whole(), u(), (sgu, 2 * fs, 0), t)?);
                if gate.rows() == fs {
                    out.push(self.project(w.rows(&name("ffn_up_shexp")), u(), (sgu, 2 * fs, fs), t)?);
                }
                out.push(k.silu_mul(sgu, (&s.shared_swiglu).into(), fs, t)?);
            }
        }
        let down = w.rows(&name("ffn_down_shexp"));
        out.push(self.project_all(down, (&s.shared_swiglu).into(), (&s.shared_out).into(), t)?);
        let grouped = groups_pairs(c, t);
        let len = expert_group_entries(c, t);
        if grouped {
            let (table, base, entries) = source.table;
            let p = ExpertGroupsParams {
                pairs,
                experts,
                size: EXPERT_BLOCK_GEMM_GROUP as u32,
                len,
                base,
                entries,
                _pad: [0; 2],
            };
            let (groups, order) = ((&s.expert_groups).into(), (&s.expert_order).into());
            out.push(k.expert_groups(ids, table, groups, order, p)?);
        }
        // Where gate‖up routes the token itself, it writes the picks' slots for down.
        let pair_slots = if routes_itself { (&s.pick_slots).into() } else { source.pair_slots };
        let matmul = |w: ExpertBlocks<'_>, x: View<'_>, y: ExpertOut<'_>, x_div: u32| match grouped {
            true => {
                let (groups, order) = ((&s.expert_groups).into(), (&s.expert_order).into());
                k.expert_kquant_gemm(w, x, groups, order, y, (pairs, len), x_div)
            }
            false => k.expert_kquant_gemv(w, x, pair_slots, y, pairs, x_div),
        };
        if swiglu {
            let act = ExpertOut { y: (&s.swiglu).into(), stride: f, offset: 0 };
            for (gate_up, _) in source.gate_up {
                let gate = ExpertBlocks { rows: f, ..gate_up };
                let up_at = gate.offset + u64::from(f) * gate.row_bytes();
                out.push(match routes_itself {
                    true => {
                        let (table, base, entries) = source.table;
                        let table_range = (base, entries);
                        let route =
                            Route { logits, table, table_range, experts, ids, weights, slots: pair_slots };
                        k.expert_kquant_gemv_swiglu_routed(gate, up_at, u(), route, act.y, (1, top_k))?
                    }
                    false => {
                        k.expert_kquant_gemv_swiglu(gate, up_at, u(), pair_slots, act, (top_k, top_k))?
                    }
                });
            }
        } else {
            for (m, column) in source.gate_up {
                let y = ExpertOut { y: (&s.gate_up).into(), stride: 2 * f, offset: column };
                out.push(matmul(m, u(), y, top_k)?);
            }
            out.push(k.silu_mul((&s.gate_up).into(), (&s.swiglu).into(), f, pairs)?);
        }
        for m in source.down {
            let y = ExpertOut { y: (&s.expert_out).into(), stride: c.hidden, offset: 0 };
            out.push(matmul(m, (&s.swiglu).into(), y, 1)?);
        }
        let routed = std::mem::take(&mut out);
        // The routed experts' combine onto the mixer's sum plus the shared expert's σ-gated output.
        let p = MoeCombineNormParams { hidden: c.hidden, k: top_k, tokens: t, eps: c.eps };
        let (experts_out, normed) = ((&s.expert_out).into(), (&s.normed).into());
        let shared = SharedExpert { gate: w.v(&name("ffn_gate_inp_shexp")), out: (&s.shared_out).into() };
        let combine = k.moe_combine_norm(
            experts_out,
            weights,
            x.into(),
            next_norm,
            next.into(),
            normed,
            Some(shared),
            p,
        );
        out.push(combine?);
        Ok((routed, out))
    }

    /// Where layer `l`'s routed experts are read: the uploaded tensors (expert `e` in slot `e`, so a pick's
    /// id is its slot), or the pool's parts (each pick's slot written by the step driver).
    fn routed_experts(&self, l: usize) -> RoutedExperts<'_> {
        let (c, s) = (&self.config, &self.scratch);
        let Some(streamed) = &self.streamed else {
            let layer = &self.weights.experts[l];
            let gate_up = layer.gate_up.iter().enumerate();
            return RoutedExperts {
                gate_up: gate_up.map(|(i, m)| (layer.blocks(m), i as u32 * c.expert_ffn)).collect(),
                down: vec![layer.blocks(&layer.down)],
                pair_slots: (&s.pick_ids).into(),
                table: ((&s.expert_slots).into(), 0, c.experts),
            };
        };
        let (pool, (h, f)) = (streamed.tiers.pool.backend().pool(), (c.hidden, c.expert_ffn));
        let [gate, up, down] = streamed.parts[l];
        let parts = pool.parts();
        let mut gate_up = Vec::new();
        for (quant, at, column, rows) in gate_up_halves([gate, up], (h, f)) {
            let blocks = layer_blocks(pool, parts, Plane::GateUpQ, (quant, at), (rows, h), None);
            gate_up.extend(blocks.map(|b| (b, column)));
        }
        RoutedExperts {
            gate_up,
            down: layer_blocks(pool, parts, Plane::DownQ, down, (h, f), None).collect(),
            pair_slots: (&streamed.pair_slots).into(),
            table: ((&streamed.table).into(), l as u32 * c.experts, c.layers * c.experts),
        }
    }
}

/// Layers a resident step records before it submits them.
const RESIDENT_SUBMIT_LAYERS: usize = 4;

/// What a layer's routed-expert kernels bind.
struct RoutedExperts<'a> {
    /// Gate‖up's matrices (one, or gate and up apart; a pool's once per part), each with its column.
    gate_up: Vec<(ExpertBlocks<'a>, u32)>,
    down: Vec<ExpertBlocks<'a>>,
    /// Each (token, pick) pair's slot.
    pair_slots: View<'a>,
    /// The table a chunk's grouping maps picks to slots through: the buffer, the layer's first entry, and
    /// the entries.
    table: (View<'a>, u32, u32),
}

impl Decoder for Model {
    type Error = Error;

    fn tokenizer(&self) -> Arc<Tokenizer> {
        self.tokenizer.clone()
    }

    fn prefill(&mut self, ids: &[u32], _batched: bool) -> Result<Vec<f32>> {
        Model::prefill(self, ids)
    }

    fn step_next(&mut self, id: u32, sampler: &mut Sampler) -> Result<Next> {
        // Plain greedy: the GPU's argmax (ties to the lower index, as the sampler's); else the logits.
        if sampler.options().is_plain_greedy() {
            self.step_greedy(id).map(Next::Token)
        } else {
            self.step(id).map(Next::Logits)
        }
    }

    fn is_context_full(error: &Error) -> bool {
        matches!(error, Error::ContextFull { .. })
    }

    fn bad_sampling(what: String) -> Error {
        Error::BadOption { option: "sampling", what }
    }
}

/// What a tensor the forward pass reads must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Want {
    /// A vector of this many values (uploaded as f32, whatever its type).
    Vector(u64),
    /// A matrix of `rows` outputs of `cols` inputs (as blocks).
    Matrix { rows: u64, cols: u64 },
    /// A layer's experts: `experts` matrices of `rows × cols`.
    Experts { rows: u64, cols: u64, experts: u64 },
}

/// Every tensor the forward pass reads and its shape, each checked against the file: present, of the
/// config's shape, of a type the kernels read (matrices: inputs a multiple of 256).
fn wanted_tensors(c: &Config, gguf: &GgufFile) -> Result<Vec<(String, Want)>> {
    let (e, v) = (u64::from(c.hidden), gguf.header().tensor("token_embd.weight").map_or(0, |t| t.dims[1]));
    let (q, kv, d) =
        (u64::from(c.heads * c.head_dim), u64::from(c.kv_heads * c.head_dim), u64::from(c.head_dim));
    let (n_e, f_e, f_s) = (u64::from(c.experts), u64::from(c.expert_ffn), u64::from(c.shared_ffn));
    let (ch, vd, h_v) = (c.conv_channels() as u64, c.value_dim() as u64, u64::from(c.v_heads));
    let m = |rows, cols| Want::Matrix { rows, cols };
    let mut want = vec![
        ("token_embd.weight".to_string(), m(v.max(1), e)),
        ("output_norm.weight".to_string(), Want::Vector(e)),
    ];
    if gguf.header().tensor("output.weight").is_some() {
        want.push(("output.weight".into(), m(v, e)));
    }
    for (l, &recurrent) in c.recurrent.iter().enumerate() {
        let t = |n: &str| format!("blk.{l}.{n}.weight");
        want.extend([(t("attn_norm"), Want::Vector(e)), (t("post_attention_norm"), Want::Vector(e))]);
        if recurrent {
            want.extend([
                (t("attn_qkv"), m(ch, e)),
                (t("attn_gate"), m(vd, e)),
                (t("ssm_conv1d"), Want::Vector(u64::from(c.conv_kernel) * ch)),
                (format!("blk.{l}.ssm_dt.bias"), Want::Vector(h_v)),
                (format!("blk.{l}.ssm_a"), Want::Vector(h_v)),
                (t("ssm_beta"), m(h_v, e)),
                (t("ssm_alpha"), m(h_v, e)),
                (t("ssm_norm"), Want::Vector(u64::from(c.state_size))),
                (t("ssm_out"), m(e, vd)),
            ]);
        } else {
            want.extend([
                (t("attn_q"), m(2 * q, e)),
                (t("attn_k"), m(kv, e)),
                (t("attn_v"), m(kv, e)),
                (t("attn_output"), m(e, q)),
                (t("attn_q_norm"), Want::Vector(d)),
                (t("attn_k_norm"), Want::Vector(d)),
            ]);
        }
        want.extend([
            (t("ffn_gate_inp"), m(n_e, e)),
            (t("ffn_gate_exps"), Want::Experts { rows: f_e, cols: e, experts: n_e }),
            (t("ffn_up_exps"), Want::Experts { rows: f_e, cols: e, experts: n_e }),
            (t("ffn_down_exps"), Want::Experts { rows: e, cols: f_e, experts: n_e }),
            (t("ffn_gate_inp_shexp"), Want::Vector(e)),
            (t("ffn_gate_shexp"), m(f_s, e)),
            (t("ffn_up_shexp"), m(f_s, e)),
            (t("ffn_down_shexp"), m(e, f_s)),
        ]);
    }
    for (name, w) in &want {
        let bad = |what: String| Error::BadTensor { name: name.clone(), what };
        let info = gguf.header().tensor(name).ok_or_else(|| bad("missing".into()))?;
        check_tensor(info, *w).map_err(bad)?;
    }
    Ok(want)
}

/// Whether `info` is what `want` asks for; else what is wrong.
fn check_tensor(info: &TensorInfo, want: Want) -> std::result::Result<(), String> {
    let dims: Vec<u64> = match want {
        Want::Vector(n) => {
            return if info.n_elements == n {
                Ok(())
            } else {
                Err(format!("{} values, the config gives {n}", info.n_elements))
            };
        }
        Want::Matrix { rows, cols } => vec![cols, rows],
        Want::Experts { rows, cols, experts } => vec![cols, rows, experts],
    };
    if info.dims != dims {
        return Err(format!("shape {:?}, the config gives {dims:?}", info.dims));
    }
    if BlockQuant::from_name(info.ty.name()).is_none() {
        return Err(format!("type {}; the GPU's matrices are {}", info.ty.name(), type_names()));
    }
    if !dims[0].is_multiple_of(256) {
        return Err(format!("rows of {} values; the GPU's block GEMVs take multiples of 256", dims[0]));
    }
    Ok(())
}

fn type_names() -> String {
    BlockQuant::ALL.iter().map(|q| q.name()).collect::<Vec<_>>().join(", ")
}

/// Matrices of one layer uploaded as one (the second's rows after the first's, under the first's name) where
/// they have the same type: they multiply the same input into adjacent outputs.
const JOINED_ROWS: [(&str, &str); 2] = [SHARED_GATE_UP, ("ssm_beta.weight", "ssm_alpha.weight")];

/// The shared expert's gate and up, joined where they share a type.
const SHARED_GATE_UP: (&str, &str) = ("ffn_gate_shexp.weight", "ffn_up_shexp.weight");

/// Matrices of one layer uploaded as one (the others' rows after the first's, under the first's name) where
/// they have the same type and each member's rows start where a view may bind them: a token multiplies the
/// same input by all of them in one GEMV, their outputs one after another in one row; a chunk multiplies
/// each member's rows apart, into its own rows.
/// A first member's groups are tried in order; a member marked `true` has its output read from where it
/// starts in the row (α's is read with β's).
const TOKEN_JOINED: [(&str, &[(&str, bool)]); 3] = [
    ("attn_q.weight", &[("attn_k.weight", true), ("attn_v.weight", true)]),
    (
        "attn_qkv.weight",
        &[("attn_gate.weight", true), ("ssm_beta.weight", true), ("ssm_alpha.weight", false)],
    ),
    ("attn_qkv.weight", &[("attn_gate.weight", true)]),
];

/// The matrices [`upload_weights`] uploads after `name`'s rows, as one matrix ([`JOINED_ROWS`], or with
/// `true` [`TOKEN_JOINED`]): none unless each has `name`'s type, and for a token-joined group each member's
/// rows starting at a multiple of `align` bytes in every plane and in the output.
fn joined_with(gguf: &GgufFile, name: &str, align: u64) -> (Vec<String>, bool) {
    let header = gguf.header();
    let Some(info) = header.tensor(name) else { return (Vec::new(), false) };
    let same_type =
        |members: &[String]| members.iter().all(|m| header.tensor(m).is_some_and(|t| t.ty == info.ty));
    let prefixed = |first: &str, other: &str| format!("{}{other}", &name[..name.len() - first.len()]);
    if let Some((first, second)) = JOINED_ROWS.iter().find(|(first, _)| name.ends_with(first)) {
        let group = vec![prefixed(first, second)];
        return (if same_type(&group) { group } else { Vec::new() }, false);
    }
    let Some(quant) = BlockQuant::from_name(info.ty.name()) else { return (Vec::new(), false) };
    let cols = info.dims[0];
    // Where a member's rows start: its planes' bytes (Q8_0: int8 and f16 scales) or blocks, and its output
    // where that is read from there.
    let starts = |row: u64, viewed: bool| {
        let weights = match quant {
            BlockQuant::Q8_0 => vec![row * cols, row * cols / 16],
            _ => vec![row * cols / 256 * quant.block_bytes()],
        };
        weights.into_iter().chain(viewed.then_some(4 * row)).collect::<Vec<u64>>()
    };
    let mut groups = TOKEN_JOINED.iter().filter(|(first, _)| name.ends_with(first));
    groups
        .find_map(|(first, others)| {
            let group: Vec<String> = others.iter().map(|(other, _)| prefixed(first, other)).collect();
            let mut row = info.dims[1];
            let aligned = group.iter().zip(others.iter()).all(|(m, (_, viewed))| {
                let at = row;
                row += header.tensor(m).map_or(0, |t| t.dims[1]);
                starts(at, *viewed).iter().all(|b| b.is_multiple_of(align))
            });
            (same_type(&group) && aligned).then_some(group)
        })
        .map_or((Vec::new(), false), |group| (group, true))
}

/// Uploads every tensor of `wanted` (the routed experts only with `experts`): vectors dequantised to f32,
/// dense matrices as [`Dense`], experts as their blocks.
fn upload_weights(
    ctx: &Context,
    gguf: &GgufFile,
    c: &Config,
    wanted: &[(String, Want)],
    experts: bool,
) -> Result<Weights> {
    let device = &ctx.device;
    let max = ctx.limits.max_buffer_size;
    let upload = |name: &str, bytes: &[u8]| -> Result<wgpu::Buffer> {
        if bytes.len() as u64 > max {
            return Err(Error::Gpu(format!(
                "tensor {name:?} is {} bytes; this device binds at most {max} (resident qwen35moe runs each tensor in one buffer)",
                bytes.len()
            )));
        }
        // Whole 4-byte words: the block kernels read words.
        let mut padded = bytes.to_vec();
        padded.resize(bytes.len().next_multiple_of(4), 0);
        Ok(device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(name),
            contents: &padded,
            usage: wgpu::BufferUsages::STORAGE,
        }))
    };
    let mut w = Weights {
        matrices: HashMap::new(),
        vectors: HashMap::new(),
        experts: Vec::new(),
        members: HashMap::new(),
    };
    let align = u64::from(ctx.limits.min_storage_buffer_offset_alignment);
    let mut parts: Vec<(&str, &[u8], BlockQuant, u32, u32)> = Vec::new();
    let mut joined_into: Vec<String> = Vec::new();
    let tied = gguf.header().tensor("output.weight").is_none();
    for (name, want) in wanted {
        if name == "token_embd.weight" && !tied {
            continue; // the embedding rows are read from the file; the lm head is output.weight
        }
        let info = gguf.header().tensor(name).expect("checked");
        let data = gguf.tensor_data(name).expect("checked");
        let quant = || BlockQuant::from_name(info.ty.name()).expect("checked");
        match *want {
            Want::Vector(n) => {
                let mut values = vec![0f32; n as usize];
                diskformer_gguf::dequantize(info.ty, data, &mut values)
                    .map_err(|e| Error::BadTensor { name: name.clone(), what: e.to_string() })?;
                w.vectors.insert(name.clone(), upload(name, bytemuck::cast_slice(&values))?);
            }
            Want::Matrix { rows, cols } => {
                if joined_into.contains(name) {
                    continue;
                }
                // Projections of the same input and type, one after another's rows: one GEMV.
                let (group, token_joined) = joined_with(gguf, name, align);
                let (mut bytes, mut all_rows) = (data.to_vec(), rows as u32);
                if token_joined {
                    w.members.insert(name.clone(), (name.clone(), 0, rows as u32));
                }
                for member in &group {
                    let rows = gguf.header().tensor(member).expect("checked").dims[1] as u32;
                    if token_joined {
                        w.members.insert(member.clone(), (name.clone(), all_rows, rows));
                    }
                    bytes.extend_from_slice(gguf.tensor_data(member).expect("checked"));
                    all_rows += rows;
                }
                // The shared expert's gate‖up stays in blocks: a token runs it as one expert's record
                // through the routed experts' SwiGLU GEMV.
                let shared_gate_up = !group.is_empty() && name.ends_with(SHARED_GATE_UP.0);
                joined_into.extend(group);
                let (rows, cols) = (all_rows, cols as u32);
                let dense = match quant() {
                    BlockQuant::Q8_0 if !shared_gate_up => {
                        // Blocks of 34 bytes: an f16 scale, then 32 int8 quants.
                        let blocks = bytes.len() / 34;
                        let (mut q, mut scales) = (vec![0u8; blocks * 32], vec![0u8; blocks * 2]);
                        diskformer_gguf::split_planes(info.ty, &bytes, &mut q, &mut scales)
                            .map_err(|e| Error::BadTensor { name: name.clone(), what: e.to_string() })?;
                        Dense::Q8(Q8Weight::new(upload(name, &q)?, upload(name, &scales)?, rows, cols))
                    }
                    quant => Dense::Blocks(Matrix { buffer: upload(name, &bytes)?, quant, rows, cols }),
                };
                w.matrices.insert(name.clone(), dense);
            }
            Want::Experts { .. } if !experts => {}
            Want::Experts { rows, cols, .. } => {
                // Gate, up and down are listed one after another.
                parts.push((name.as_str(), data, quant(), rows as u32, cols as u32));
                if let [
                    (gate, gate_data, q, f, h),
                    (_, up_data, up_q, ..),
                    (down, down_data, down_q, rows, cols),
                ] = parts[..]
                {
                    let joined_bytes = gate_data.len() + up_data.len();
                    let gate_up = if q == up_q && joined_bytes as u64 <= max.min(ctx.max_binding()) {
                        // Expert e's gate rows, then its up rows: gate‖up of 2F rows a slot.
                        let n = c.experts as usize;
                        let (g, u) = (gate_data.len() / n, up_data.len() / n);
                        let mut joined = Vec::with_capacity(joined_bytes);
                        for e in 0..n {
                            joined.extend_from_slice(&gate_data[e * g..][..g]);
                            joined.extend_from_slice(&up_data[e * u..][..u]);
                        }
                        vec![Matrix { buffer: upload(gate, &joined)?, quant: q, rows: 2 * f, cols: h }]
                    } else {
                        let (up, up_data) = (parts[1].0, parts[1].1);
                        vec![
                            Matrix { buffer: upload(gate, gate_data)?, quant: q, rows: f, cols: h },
                            Matrix { buffer: upload(up, up_data)?, quant: up_q, rows: f, cols: h },
                        ]
                    };
                    let down = Matrix { buffer: upload(down, down_data)?, quant: down_q, rows, cols };
                    w.experts.push(Experts { gate_up, down, count: c.experts });
                    parts.clear();
                }
            }
        }
    }
    Ok(w)
}

/// Device bytes the wanted tensors take as [`upload_weights`] uploads them: the dense ones, and the routed
/// experts.
fn device_bytes(gguf: &GgufFile, wanted: &[(String, Want)]) -> (u64, u64) {
    let tied = gguf.header().tensor("output.weight").is_none();
    let (mut dense, mut experts) = (0, 0);
    for (name, want) in wanted {
        let bytes = gguf.header().tensor(name).map_or(0, |t| t.n_bytes).next_multiple_of(4);
        match *want {
            Want::Vector(n) => dense += 4 * n,
            Want::Matrix { .. } if name == "token_embd.weight" && !tied => {}
            Want::Matrix { .. } => dense += bytes,
            Want::Experts { .. } => experts += bytes,
        }
    }
    (dense, experts)
}

/// Bytes of one position's keys (or values) in an attention layer's cache: f16, every KV head.
fn kv_row_bytes(c: &Config) -> u64 {
    u64::from(c.kv_heads * c.head_dim) * 2
}

/// Zeroed state buffers of every layer.
fn layer_state(device: &wgpu::Device, c: &Config, max_context: u32) -> Vec<LayerState> {
    let buffer = |label, bytes: u64| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.next_multiple_of(4).max(4),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        })
    };
    let kv = u64::from(max_context) * kv_row_bytes(c);
    let conv = 4 * u64::from(c.conv_kernel - 1) * c.conv_channels() as u64;
    let delta = 4 * u64::from(c.v_heads) * u64::from(c.state_size * c.state_size);
    (c.recurrent.iter())
        .map(|&r| match r {
            true => {
                LayerState::DeltaNet { conv: buffer("conv state", conv), delta: buffer("delta state", delta) }
            }
            false => LayerState::Attention { keys: buffer("keys", kv), values: buffer("values", kv) },
        })
        .collect()
}

/// One token's attention over a cache of `ctx` positions.
fn attention_shape(c: &Config, ctx: u32) -> AttentionShape {
    AttentionShape { heads: c.heads, kv_heads: c.kv_heads, head_dim: c.head_dim, tokens: 1, ctx }
}

/// Whether a chunk of `t` tokens groups its pairs by expert for the grouped expert GEMMs (each expert's rows
/// read once for all of its pairs).
fn groups_pairs(c: &Config, t: u32) -> bool {
    t >= GEMM_FROM && c.experts <= EXPERT_GROUPS_MAX_EXPERTS
}

/// Group entries a chunk of `t` tokens can make of its pairs (the grouped expert GEMMs' dispatch rows).
fn expert_group_entries(c: &Config, t: u32) -> u32 {
    let pairs = (t * c.top_k) as usize;
    expert_gemm_group_bound(pairs, c.experts as usize, EXPERT_BLOCK_GEMM_GROUP) as u32
}

impl Scratch {
    fn new(
        device: &wgpu::Device,
        c: &Config,
        vocab: u32,
        max_context: u32,
        forced: bool,
        chunk: u32,
    ) -> Scratch {
        let t = u64::from(chunk);
        let bytes = std::cell::Cell::new(0);
        let f32s = |label, n: u64| {
            bytes.set(bytes.get() + 4 * n.max(1));
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: 4 * n.max(1),
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_DST
                    | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            })
        };
        let (e, q, kv) =
            (u64::from(c.hidden), u64::from(c.heads * c.head_dim), u64::from(c.kv_heads * c.head_dim));
        let (ch, vd, h_v) = (c.conv_channels() as u64, c.value_dim() as u64, u64::from(c.v_heads));
        let (pairs, f, fs) = (t * u64::from(c.top_k), u64::from(c.expert_ffn), u64::from(c.shared_ffn));
        let mut scratch = Scratch {
            bytes: 0,
            residual: [f32s("residual a", t * e), f32s("residual b", t * e)],
            normed: f32s("normed", t * e),
            // A token's token-joined projections write past its row: attention's k and v, DeltaNet's z
            // and β‖α.
            projected: f32s("projected", t * (2 * q).max(ch) + (2 * kv).max(vd + 2 * h_v)),
            keys: f32s("keys", t * kv),
            values: f32s("values", t * kv),
            queries: f32s("queries", t * q.max(ch)),
            mixed: f32s("mixed", t * q.max(vd).max(kv)),
            attention_partial: f32s("attention partial", attention_shape(c, max_context).partial_len()),
            mixer_out: f32s("mixer out", t * e),
            mixed_sum: f32s("mixed sum", t * e),
            z: f32s("z", t * vd),
            gated: f32s("gated", t * vd),
            beta_alpha: f32s("beta alpha", t * 2 * h_v),
            router: f32s("router", t * u64::from(c.experts)),
            route_mask: f32s(
                "route mask",
                if forced { u64::from(c.layers) * layer_stride(chunk, c.experts) } else { 1 },
            ),
            forced_logits: f32s("forced logits", if forced { t * u64::from(c.experts) } else { 1 }),
            pick_ids: f32s("pick ids", pairs),
            pick_weights: f32s("pick weights", pairs),
            pick_slots: f32s("pick slots", pairs),
            shared_slot: f32s("shared slot", 1),
            expert_slots: device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("expert slots"),
                contents: bytemuck::cast_slice(&(0..c.experts).collect::<Vec<u32>>()),
                usage: wgpu::BufferUsages::STORAGE,
            }),
            expert_groups: f32s("expert groups", 4 * expert_group_entries(c, chunk) as u64),
            expert_order: f32s("expert order", pairs),
            gate_up: f32s("gate up", pairs * 2 * f),
            swiglu: f32s("swiglu", pairs * f),
            expert_out: f32s("expert out", pairs * e),
            shared_gate_up: f32s("shared gate up", t * 2 * fs),
            shared_swiglu: f32s("shared swiglu", t * fs),
            shared_out: f32s("shared out", t * e),
            positions: f32s("positions", t),
            rope: f32s("rope", t * u64::from(c.rope_dims)),
            logits: f32s("logits", u64::from(vocab)),
            argmax_partial: f32s("argmax partial", argmax_partial_len(vocab.max(1), 1)),
            picked: f32s("picked", 1),
            readback: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("logits readback"),
                size: 4 * u64::from(vocab.max(1)),
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
        };
        // The slot table and the readback (host memory, but counted: it may be device memory).
        scratch.bytes = bytes.get() + 4 * u64::from(c.experts + vocab.max(1));
        scratch
    }
}
