//! The working buffers of a step and the kernels bound to them: one [`Graph`] per step length T, built once
//! and recorded every step (embedding rows, positions, the RoPE table and slot indices change in buffers).
//!
//! Fused decode (one token, at most 64 picks; Q8_0 or Q4_0 planes, or records of blocks whose gate and up
//! share a type; dense weights of any type, `wo` one matrix): the RMSNorms and the MoE combine ride
//! in the kernels around them, so a layer past the first runs q|k|v of `x_scaled` (the residual stream times
//! the attention norm's weight, not yet scaled), `qkv_rope_store` (which applies that norm's scale from
//! `squares`), attention, wo added onto the residual stream `x`, the router with the FFN norm folded in (it
//! writes the normed row `xn` for the experts), the top-k, gate‖up with SwiGLU, and down with the combine,
//! added onto `x` (it writes the next layer's `x_scaled` and `squares`): two dependent dispatches a layer
//! fewer than a chunk's layer (on the H200 68.8 against 76.9 µs a layer, in the kernels bench's copy of it,
//! since removed: `bench --kernel-times` times this graph). With every Q8_0 expert resident the top-k rides
//! in gate‖up too (`expert_q8_gemv_gate_up_swiglu_routed`: each workgroup ranks its token's logits and looks
//! its pick up in the slot table), one dispatch fewer again (67.1 against 68.2 µs); streaming and route-ahead steps keep the top-k's own dispatch, whose picks the host
//! reads. On records of blocks gate‖up is `expert_kquant_gemv_swiglu` and down `expert_kquant_gemv_combine`,
//! and with every expert resident gate‖up routes too (`expert_kquant_gemv_swiglu_routed`). Chunks run the
//! unfused layer, and so do one-token steps whose gate and up differ in type (`block_experts`).

use diskformer_expert_stream::{GpuPool, Plane, PoolPart};
use diskformer_kernels::{
    AttentionShape, BlockQuant, CombineOut, Dispatch, EXPERT_BLOCK_GEMM_GROUP, EXPERT_GEMM_TILED_GROUP,
    EXPERT_GROUPS_MAX_EXPERTS, ExpertBlocks, ExpertGroupsParams, ExpertOut, ExpertPlanes, InputNorm, JoinOut,
    Kernels, KvCacheViews, MoeCombineNormParams, PENALTY_MAX_N, Q8Matrix, QkvRopeStoreParams, Route,
    SAMPLE_MAX_N, SampleStep, View, argmax_partial_len, combine_squares, expert_gemm_group_bound,
    q8_row_bytes, sample_partial_len,
};
use diskformer_store::{ExpertLayout, ExpertPart};

use crate::weights::{DenseWeight, Weights, storage, storage_size};
use crate::{Config, Result};
use diskformer_runtime::layer_stride;

/// The KV cache: per layer an f16 `[ctx, kv_heads, head_dim]` buffer for keys and one for values.
#[derive(Debug)]
pub(crate) struct KvCache {
    pub k: Vec<wgpu::Buffer>,
    pub v: Vec<wgpu::Buffer>,
    pub ctx: u32,
}

impl KvCache {
    /// Bytes of the cache for `ctx` positions.
    pub fn bytes(config: &Config, ctx: u32) -> u64 {
        2 * u64::from(config.block_count)
            * u64::from(ctx)
            * u64::from(config.head_count_kv * config.key_length)
            * 2
    }

    pub fn new(device: &wgpu::Device, config: &Config, ctx: u32) -> Self {
        let per = u64::from(ctx) * u64::from(config.head_count_kv * config.key_length) * 2;
        let make = |what: &str| {
            (0..config.block_count).map(|_| storage(device, what, per, wgpu::BufferUsages::empty())).collect()
        };
        KvCache { k: make("k cache"), v: make("v cache"), ctx }
    }
}

/// What a scratch buffer is for, which decides its usages.
#[derive(Clone, Copy, Debug)]
enum Use {
    /// Read and written by kernels, written by the host.
    Storage,
    /// A storage buffer that is also copied out (to the readback buffer or to another buffer).
    CopiedOut,
    /// The mapped buffer readbacks land in.
    Readback,
}

/// Activations for steps of up to `max_t` tokens, allocated once: [`Scratch`]. Generic over the buffer so
/// that the same layout gives both the buffers and, without allocating, their sizes
/// ([`Scratch::estimate`]).
#[derive(Debug)]
pub(crate) struct ScratchOf<B> {
    pub positions: B,
    pub rope: B,
    /// A one-token step's token id, when the GPU embeds it (written by the host, or copied from the
    /// previous step's pick, argmax or draw, on the GPU).
    pub token_ids: B,
    /// The residual stream; a step starts with the tokens' embedding rows, written here by the host or by
    /// the step's `embed_q8`.
    pub x: B,
    /// The normed residual stream: the input of the attention block and of the experts; after the last
    /// layer, the output norm's result the head reads. (Fused decode: the router writes the FFN norm's row.)
    xn: B,
    /// Fused decode: the residual stream times the next attention norm's weight (not yet scaled), and the
    /// sums of its squares that give the scale (see the module docs).
    x_scaled: B,
    squares: B,
    /// `[T, heads + 2·kv_heads, d]` Q, K and V from the stacked projection.
    qkv: B,
    /// `[T, heads, d]` Q after QK-norm and RoPE.
    qr: B,
    att: B,
    partial: B,
    o: B,
    h: B,
    router_logits: B,
    /// `[T, k]` picked expert ids (read back every layer, unless every expert is resident: one-token steps
    /// turn them into slots on the GPU, chunks group them there).
    pub pick_ids: B,
    pub pick_weights: B,
    /// Per layer `[T·k]` pool slots of the picks, written by the engine after `ensure` (or by the router
    /// through a slot table: every expert resident, or route-ahead).
    pub slot_idx: Vec<B>,
    /// Per layer, for chunks: `[T·k] [slot, first, count, 0]` groups of pairs sharing a slot, and the pair
    /// order they index (see `expert_gemm_groups`), written by the engine after the readback, or with every
    /// expert resident by `expert_groups` on the GPU.
    pub gemm_groups: Vec<B>,
    pub gemm_order: Vec<B>,
    gate_up: B,
    act: B,
    /// The picks' down rows (`[T, k, H]`); for the CPU tier's unfused join, the host's sum in one of them.
    pub down: B,
    /// Chunks: the input of the int8 GEMM about to run, Q8_0-quantised (`quantize_q8` rows of the normed
    /// state, the attention output or the SwiGLU activations); int8 one-token steps: the FFN norm's output
    /// quantised by the router kernel, gate‖up's input.
    xq: B,
    /// Router logits and picks of the next layers' routers applied to this layer's state (prefetch guesses).
    guess_logits: Vec<B>,
    pub guess_ids: Vec<B>,
    guess_weights: Vec<B>,
    /// The last token's normed hidden state, copied out of `xn` for the head.
    pub last_n: B,
    /// `[vocab]` logits of the last token.
    pub logits: B,
    /// The argmax's best (value, index) of each slice of the logits.
    argmax_partial: B,
    /// The sampler's best (key, index) pairs of each tile of the logits, and of those (its levels alternate).
    sample_partial: [B; 2],
    /// What the GPU sampler draws with ([`SampleStep`]), written before each sampled step.
    pub sample_step: B,
    /// The tokens of the last [`PENALTY_MAX_N`] positions, at position % that (the penalties' window).
    pub recent: B,
    /// The step's pick: the greedy or the sampled token.
    pub argmax: B,
    /// Where picks or logits are copied to be mapped.
    pub readback: B,
    /// Where the prefetch guesses are copied to be mapped (`[lookahead, k]`): a buffer of their own, so
    /// that the host can map the picks while the GPU still runs the guesses.
    pub guess_readback: B,
    /// Route-ahead ([`crate::StreamOptions::route_ahead`]): per layer `[layers, H]`, the residual stream its
    /// router read, so that the layer can run again from its router once its experts are loaded.
    pub routed_x: B,
    /// Route-ahead: per layer, its picks and then the slots the GPU found for them (`[2·k]`), to be mapped
    /// while the layers after it run (one buffer each: a mapped buffer cannot be written).
    pub route_readback: Vec<B>,
    /// Two buffers the argmax is copied to, so that one step's pick can be mapped while the next step,
    /// already queued, copies its own pick to the other.
    pub argmax_readback: [B; 2],
    /// The CPU tier ([`crate::CpuTierOptions::enabled`]): a one-token layer's picks, their weights and
    /// its normed state (`[k] u32, [k] f32, [H] f32`), copied out for the host's experts.
    pub cpu_readback: B,
    /// The CPU tier in fused decode: the host's weighted sum of its experts (`[H]`, written by the host and
    /// added onto `x` after the GPU's picks).
    pub cpu_sum: B,
    /// Forced routing ([`crate::EngineOptions::routing`]): per layer the step's `[T, E]` mask added to the
    /// router logits (0 on a forced pick, −1e30 elsewhere; layers [`layer_stride`] floats apart, written by
    /// the host), and the logits with it, which the top-k reads.
    pub route_mask: B,
    forced_logits: B,
}

/// The scratch buffers on the device.
pub(crate) type Scratch = ScratchOf<wgpu::Buffer>;

impl<B> ScratchOf<B> {
    /// The layout: every buffer with its byte size and use, made by `alloc`.
    fn layout(c: &Config, sizes: ScratchSizes, alloc: impl Fn(&'static str, u64, Use) -> B) -> Self {
        let ScratchSizes { vocab, ctx, max_t, lookahead, route_ahead, forced } = sizes;
        let t = u64::from(max_t);
        let (h, q, kv) = (
            u64::from(c.embedding_length),
            u64::from(c.head_count * c.key_length),
            u64::from(c.head_count_kv * c.key_length),
        );
        let (e, k, f) = (
            u64::from(c.expert_count),
            u64::from(c.expert_used_count),
            u64::from(c.expert_feed_forward_length),
        );
        let b = |what: &'static str, floats: u64| alloc(what, 4 * floats, Use::Storage);
        let out = |what: &'static str, floats: u64| alloc(what, 4 * floats, Use::CopiedOut);
        let per_layer =
            |what: &'static str, floats: u64| (0..c.block_count).map(|_| b(what, floats)).collect();
        let per_guess = |what: &'static str, floats: u64, u: Use| {
            (0..lookahead).map(|_| alloc(what, 4 * floats, u)).collect()
        };
        let readback_words = (t * k).max(u64::from(vocab)).max(1);
        ScratchOf {
            positions: b("positions", t),
            rope: b("rope", t * u64::from(c.key_length)),
            token_ids: b("token ids", 1),
            x: out("x", t * h),
            xn: out("xn", t * h),
            x_scaled: b("x scaled", h),
            squares: b("squares", u64::from(combine_squares(c.embedding_length))),
            qkv: b("qkv", t * (q + 2 * kv)),
            qr: b("qr", t * q),
            att: b("att", t * q),
            partial: b("attention partial", attention_shape(c, 1, ctx).partial_len()),
            o: b("o", t * h),
            h: b("h", t * h),
            router_logits: b("router logits", t * e),
            pick_ids: out("pick ids", t * k),
            pick_weights: out("pick weights", t * k),
            slot_idx: (0..c.block_count).map(|_| out("slot idx", t * k)).collect(),
            // Copied out: split residency counts a chunk's pairs by slot from them.
            gemm_groups: (0..c.block_count)
                .map(|_| out("gemm groups", 4 * u64::from(gemm_groups_len(c, max_t))))
                .collect(),
            gemm_order: per_layer("gemm order", t * k),
            gate_up: b("gate_up", t * k * 2 * f),
            act: b("act", t * k * f),
            down: b("down", t * k * h),
            xq: alloc(
                "xq",
                (t * q8_row_bytes(c.embedding_length.max(c.head_count * c.key_length)))
                    .max(t * k * q8_row_bytes(c.expert_feed_forward_length))
                    // expert_q8_gemv_xq reads its one-token input in 16-byte vectors.
                    .next_multiple_of(16),
                Use::Storage,
            ),
            guess_logits: per_guess("guess logits", e, Use::Storage),
            guess_ids: per_guess("guess ids", k, Use::CopiedOut),
            guess_weights: per_guess("guess weights", k, Use::Storage),
            last_n: b("last normed", h),
            logits: out("logits", u64::from(vocab)),
            argmax_partial: b("argmax partial", argmax_partial_len(vocab.max(1), 1)),
            sample_partial: [(); 2].map(|()| b("sample partial", sample_partial_len(vocab.max(1)))),
            sample_step: alloc("sample step", size_of::<SampleStep>() as u64, Use::Storage),
            recent: b("recent tokens", u64::from(PENALTY_MAX_N)),
            argmax: out("argmax", 1),
            readback: alloc("readback", 4 * readback_words, Use::Readback),
            guess_readback: alloc("guess readback", 4 * (u64::from(lookahead) * k).max(1), Use::Readback),
            routed_x: out("routed x", if route_ahead { u64::from(c.block_count) * h } else { 1 }),
            route_readback: (0..if route_ahead { c.block_count } else { 0 })
                .map(|_| alloc("route readback", 8 * k, Use::Readback))
                .collect(),
            argmax_readback: [(); 2].map(|()| alloc("argmax readback", 4, Use::Readback)),
            cpu_readback: alloc("cpu readback", 4 * (2 * k + h), Use::Readback),
            cpu_sum: b("cpu sum", h),
            route_mask: b(
                "route mask",
                if forced { u64::from(c.block_count) * layer_stride(max_t, c.expert_count) } else { 1 },
            ),
            forced_logits: b("forced logits", if forced { t * e } else { 1 }),
        }
    }

    /// Every buffer.
    fn all(&self) -> impl Iterator<Item = &B> {
        [
            &self.positions,
            &self.rope,
            &self.token_ids,
            &self.x,
            &self.xn,
            &self.x_scaled,
            &self.squares,
            &self.qkv,
            &self.qr,
            &self.att,
            &self.partial,
            &self.o,
            &self.h,
            &self.router_logits,
            &self.pick_ids,
            &self.pick_weights,
            &self.gate_up,
            &self.act,
            &self.down,
            &self.xq,
            &self.last_n,
            &self.logits,
            &self.argmax_partial,
            &self.sample_step,
            &self.recent,
            &self.argmax,
            &self.readback,
            &self.guess_readback,
            &self.routed_x,
            &self.cpu_readback,
            &self.cpu_sum,
            &self.route_mask,
            &self.forced_logits,
        ]
        .into_iter()
        .chain(&self.argmax_readback)
        .chain(&self.sample_partial)
        .chain(&self.route_readback)
        .chain(&self.slot_idx)
        .chain(&self.gemm_groups)
        .chain(&self.gemm_order)
        .chain(&self.guess_logits)
        .chain(&self.guess_ids)
        .chain(&self.guess_weights)
    }
}

/// What the scratch is sized for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScratchSizes {
    /// Rows of the lm head.
    pub vocab: u32,
    /// KV-cache positions.
    pub ctx: u32,
    /// Most tokens a step.
    pub max_t: u32,
    /// Prefetch guesses per layer.
    pub lookahead: u32,
    /// Whether one-token steps route ahead ([`crate::StreamOptions::route_ahead`]).
    pub route_ahead: bool,
    /// Whether picks are forced ([`crate::EngineOptions::routing`]).
    pub forced: bool,
}

impl Scratch {
    pub fn new(device: &wgpu::Device, c: &Config, sizes: ScratchSizes) -> Self {
        Self::layout(c, sizes, |label, bytes, u| match u {
            Use::Storage => storage(device, label, bytes, wgpu::BufferUsages::empty()),
            Use::CopiedOut => storage(device, label, bytes, wgpu::BufferUsages::COPY_SRC),
            Use::Readback => device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
        })
    }

    /// Bytes [`Scratch::new`] allocates for these sizes, without allocating.
    pub fn estimate(c: &Config, sizes: ScratchSizes) -> u64 {
        let bytes = ScratchOf::layout(c, sizes, |_, bytes, u| match u {
            Use::Readback => bytes,
            _ => storage_size(bytes),
        });
        bytes.all().sum()
    }

    /// The normed residual stream (after the last layer: the output norm's result).
    pub fn xn(&self) -> &wgpu::Buffer {
        &self.xn
    }

    /// Bytes of every buffer.
    pub fn bytes(&self) -> u64 {
        self.all().map(wgpu::Buffer::size).sum()
    }
}

pub(crate) fn attention_shape(c: &Config, tokens: u32, ctx: u32) -> AttentionShape {
    AttentionShape { heads: c.head_count, kv_heads: c.head_count_kv, head_dim: c.key_length, tokens, ctx }
}

/// One layer's kernels: attention block through the router (and prefetch guesses), then the experts.
#[derive(Debug)]
pub(crate) struct LayerGraph {
    pub attention: Vec<Dispatch>,
    /// Prefetch: the next layers' routers on this layer's normed state and their top-k, after
    /// `attention` (nothing in `experts` reads them; the per-layer path submits them on their own).
    pub guesses: Vec<Dispatch>,
    pub experts: Vec<Dispatch>,
    /// One-token steps: where the CPU tier's sum joins the layer (see [`CpuJoin`]).
    pub cpu_join: Option<CpuJoin>,
    /// Fused decode: where in `attention` the router starts (the FFN norm with the router, then the top-k).
    /// Those read only the residual stream `x`, which nothing after them changes before the experts, so a
    /// layer runs again from here on a saved `x` (route-ahead).
    pub router_from: Option<usize>,
}

/// Where the CPU tier's sum joins a one-token layer: `experts[..at]` (the GPU's picks up to their down
/// projection, or in fused decode through their combine) run while the host computes its picks, then `via`
/// brings the host's sum in, then `experts[at..]` (the unfused combine, or the output norm after the last
/// fused layer).
#[derive(Debug)]
pub(crate) struct CpuJoin {
    pub at: usize,
    pub via: JoinVia,
}

/// How the CPU tier's sum enters a layer's residual stream.
#[derive(Debug)]
pub(crate) enum JoinVia {
    /// Fused decode (the combine adds each GPU pick onto `x` in place): the dispatch (`residual_join`) adds
    /// the host's sum (`cpu_sum`) onto `x` after it and rewrites the next norm's inputs.
    Add(Dispatch),
    /// The unfused layer (`moe_combine_norm` adds every pick's down row to `h`): the engine writes the host's
    /// sum as the down row of its first pick, with weight 1 and its other picks' 0 (rows the GPU's kernels
    /// skip, their slots absent), so the combine adds it with the GPU's picks: no dispatch or copy between
    /// the host's sum and the next layer.
    AsPick,
}

/// Every kernel of a step of `t` tokens, bound.
#[derive(Debug)]
pub(crate) struct Graph {
    pub layers: Vec<LayerGraph>,
    /// A chunk with every expert resident: each layer groups its pairs for the expert GEMMs on the GPU
    /// (`expert_groups`), so the whole step records and runs with no read-back between layers.
    pub groups_on_gpu: bool,
    /// The lm head (on [`Scratch::last_n`]; the last layer's `moe_combine_norm`, or in fused decode its
    /// `rms_norm`, applied the output norm).
    pub head: Dispatch,
    /// The greedy pick of the head's logits into [`Scratch::argmax`].
    pub argmax: Dispatch,
    /// The sampled pick into [`Scratch::argmax`] (drawing as [`Scratch::sample_step`] says); `None` for a
    /// vocabulary longer than the GPU sampler ranks.
    pub sample: Option<Dispatch>,
    /// The penalties on the head's logits before a penalised draw (window in [`Scratch::recent`]).
    pub penalties: Dispatch,
}

/// What a graph binds.
pub(crate) struct Bindings<'a> {
    pub kernels: &'a Kernels,
    pub config: &'a Config,
    pub weights: &'a Weights,
    pub kv: &'a KvCache,
    pub scratch: &'a Scratch,
    pub pool: &'a GpuPool,
    /// The expert kernels bind the pool's arena too (chunks while experts stream, where the pool has one:
    /// a chunk's picks that the device slots lack are read from it).
    pub arena: bool,
    /// Guesses computed per layer (0 for steps of several tokens).
    pub lookahead: u32,
    /// The `[layers · experts]` slot table a token's picks become slots through on the GPU: with every
    /// expert resident (one-token steps; chunks then group their pairs by it on the GPU), or for one-token
    /// steps with route-ahead, what the pool holds (`u32::MAX` for an expert it does not).
    pub resident_table: Option<&'a wgpu::Buffer>,
    /// Which slots each layer's expert kernels may read, when every expert is resident (on the device, or
    /// split between it and the arena) or a one-token step reads misses from the arena (the CPU tier's
    /// share): they then run only over the pool parts holding them.
    pub reach: Option<Reach<'a>>,
    /// Which expert kernels the pool's records take.
    pub experts: &'a ExpertKernels,
    /// Chunks run their Q8_0 GEMMs on quantised inputs by int8 dot products (`KernelOptions::int8_prefill`).
    pub int8_prefill: bool,
    /// Chunks run their Q8_0 GEMMs on tensor cores, f16 weights and inputs (`KernelOptions::tensor_prefill`
    /// on a device with cooperative matrices; `int8_prefill` and Q4_0 experts go first).
    pub tensor_prefill: bool,
    /// The fused decode layer and the head of one-token steps run their Q8_0 GEMVs on quantised inputs:
    /// gate‖up the router kernel's quantisation of the FFN norm, the others quantised as they are read
    /// (`KernelOptions::int8_decode`).
    pub int8_decode: bool,
    /// The token embedding on the GPU: one-token steps then embed `token_ids` themselves.
    pub embedding: Option<Q8Matrix<'a>>,
    /// Forced routing: each layer's top-k reads the router logits plus the step's mask.
    pub forced: bool,
}

impl<'a> Bindings<'a> {
    /// The pool parts the expert kernels run over: the device's, and the arena's where `arena` says.
    fn expert_parts(&self) -> &'a [PoolPart] {
        if self.arena { self.pool.parts_with_arena() } else { self.pool.parts() }
    }
}

impl Graph {
    pub fn build<'a>(b: &Bindings<'a>, t: u32) -> Result<Graph> {
        let (k, c, w, s) = (b.kernels, b.config, b.weights, b.scratch);
        let (h, eps) = (c.embedding_length, c.layer_norm_rms_epsilon);
        let (experts, top_k, ffn) = (c.expert_count, c.expert_used_count, c.expert_feed_forward_length);
        let qkv_params = QkvRopeStoreParams {
            heads: c.head_count,
            kv_heads: c.head_count_kv,
            head_dim: c.key_length,
            tokens: t,
            eps,
            ctx: b.kv.ctx,
            in_squares: 0,
            hidden: 0,
        };
        let scaled_params = QkvRopeStoreParams { in_squares: combine_squares(h), hidden: h, ..qkv_params };
        let shape = attention_shape(c, t, b.kv.ctx);
        // One dispatch per pool part (several when the pool exceeds the device's largest buffer).
        let planes = |big: Plane, small: Plane, rows: u32, cols: u32| -> Vec<ExpertPlanes<'_>> {
            b.expert_parts()
                .iter()
                .map(|part| ExpertPlanes {
                    q: part.buffer(big).into(),
                    scales: part.buffer(small).into(),
                    slots: part.slots(),
                    first_slot: part.first_slot(),
                    rows,
                    cols,
                })
                .collect()
        };
        let gate_up = planes(Plane::GateUpQ, Plane::GateUpScales, 2 * ffn, h);
        let down = planes(Plane::DownQ, Plane::DownScales, h, ffn);
        let pairs = t * top_k;
        let sizes = PairSizes { t, pairs, groups: gemm_groups_len(c, t) };
        let v = View::from;
        // One token: gate‖up applies SwiGLU to its own output (a workgroup pairs gate and up rows), so down
        // reads the activation (Q8_0 and Q4_0 planes).
        let planar = !matches!(b.experts, ExpertKernels::Blocks(_));
        let q4_experts = matches!(b.experts, ExpertKernels::Q4);
        let swiglu_out = t == 1 && ffn.is_multiple_of(16) && planar;
        // And the norms and the combine ride in other kernels (fused decode, see the module docs): on planes,
        // or on records of blocks whose gate and up share a type; beside dense weights of any type.
        let fused = t == 1
            && fused_decode(c)
            && w.wo_whole()
            && match b.experts {
                ExpertKernels::Blocks(layers) => layers.iter().all(|[gate, up, _]| gate.0 == up.0),
                _ => swiglu_out,
            };
        let groups_on_gpu = t > 1 && b.resident_table.is_some() && experts <= EXPERT_GROUPS_MAX_EXPERTS;
        // Every Q8_0 matmul on int8 inputs: chunks' (`int8_prefill`; where they quantise them) or the fused
        // decode layer's (`int8_decode`; its GEMVs quantise as they read, but gate‖up, whose input the
        // router kernel quantises).
        let int8 = if t > 1 { b.int8_prefill } else { fused && b.int8_decode && planar };
        // Fused decode with every expert resident: gate‖up computes the router's top-k itself and looks
        // the picks up in the slot table (no `router_topk_slots` dispatch before it). (A reach without the
        // table is the CPU tier's share of the arena: the host writes the slots.)
        let routed = fused
            && b.reach.is_some()
            && b.resident_table.is_some()
            && (matches!(b.experts, ExpertKernels::Blocks(_)) || (!q4_experts && planar));
        let dense_math = match int8.then(|| v(&s.xq)) {
            Some(xq) => DenseMath::Int8 { xq },
            None if t > 1 && b.tensor_prefill => DenseMath::Tensor,
            None => DenseMath::F32,
        };
        let expert_math = match (q4_experts, t > 1 && b.tensor_prefill && !int8) {
            (true, _) => ExpertMath::Q4,
            (false, true) => ExpertMath::Q8Tensor,
            (false, false) => ExpertMath::Q8,
        };
        let mut layers = Vec::with_capacity(w.layers.len());
        for (l, lw) in w.layers.iter().enumerate() {
            let mut attention = Vec::with_capacity(12);
            if l == 0 {
                if let Some(table) = b.embedding.filter(|_| t == 1) {
                    attention.push(k.embed_q8(v(&s.token_ids), table, v(&s.x), 1)?);
                }
                // Later layers get their attention norm from the previous layer's `moe_combine_norm` (fused:
                // from its `expert_q8_gemv_combine` and this layer's `qkv_rope_store`).
                attention.push(k.rms_norm(v(&s.x), v(&lw.attn_norm), v(&s.xn), h, t, eps)?);
            }
            let cache = KvCacheViews { k: v(&b.kv.k[l]), v: v(&b.kv.v[l]) };
            let (rope, pos) = (v(&s.rope), v(&s.positions));
            let (qn, kn, qr) = (v(&lw.q_norm), v(&lw.k_norm), v(&s.qr));
            // Fused decode past layer 0: q|k|v of the unscaled `x_scaled`, the norm's scale from `squares`.
            let (input, squares, params) = if fused && l > 0 {
                (v(&s.x_scaled), Some(v(&s.squares)), scaled_params)
            } else {
                (v(&s.xn), None, qkv_params)
            };
            attention.extend(k.dense_projection(&lw.wqkv, input, v(&s.qkv), t, dense_math)?);
            attention.push(k.qkv_rope_store(v(&s.qkv), qn, kn, rope, pos, qr, cache, squares, params)?);
            if t == 1 && shape.split_fits() {
                // Split-K: many workgroups for one query token.
                let (q, kc, vc) = (v(&s.qr), v(&b.kv.k[l]), v(&b.kv.v[l]));
                attention.push(k.attention_split(q, kc, vc, pos, v(&s.partial), shape)?);
                attention.push(k.attention_combine(v(&s.partial), pos, v(&s.att), shape)?);
            } else {
                attention.push(k.attention(v(&s.qr), v(&b.kv.k[l]), v(&b.kv.v[l]), pos, v(&s.att), shape)?);
            }
            let mut router_from = None;
            // A forced routing's mask, added to the router's logits (by the fused router itself).
            let mask = b.forced.then(|| {
                let stride = layer_stride(t, experts);
                View::at(&s.route_mask, 4 * l as u64 * stride)
            });
            if fused {
                // int8 decode: the router also writes the normed row Q8_0-quantised, gate‖up's input.
                let quantised = (int8 && !q4_experts).then(|| v(&s.xq));
                let norm = InputNorm { weight: v(&lw.ffn_norm), eps, normed: v(&s.xn), quantised };
                let (att, x) = (v(&s.att), v(&s.x));
                attention.push(match &lw.wo {
                    DenseWeight::Q8(wo) if int8 => k.q8_gemv_add_i8(wo.m(), att, x, 1)?,
                    DenseWeight::Q8(wo) => k.q8_gemv_add(wo.m(), att, x, 1)?,
                    DenseWeight::Blocks(pieces) => match &pieces[..] {
                        [wo] => k.kquant_gemv_add(wo.m(), att, x, 1)?,
                        _ => unreachable!("fused decode takes wo in one piece (Weights::wo_whole)"),
                    },
                });
                router_from = Some(attention.len());
                let logits = if mask.is_some() { v(&s.forced_logits) } else { v(&s.router_logits) };
                attention.push(k.f32_gemv_norm(
                    v(&lw.router),
                    (experts, h),
                    v(&s.x),
                    logits,
                    1,
                    norm,
                    mask,
                )?);
            } else {
                attention.extend(k.dense_projection(&lw.wo, v(&s.att), v(&s.o), t, dense_math)?);
                attention.extend([
                    k.add_rms_norm(v(&s.x), v(&s.o), v(&lw.ffn_norm), v(&s.h), v(&s.xn), h, t, eps)?,
                    // A chunk's router reads its weights once per 32 tokens (the GEMM), a token's once.
                    if t > 1 {
                        k.f32_gemm(v(&lw.router), (experts, h), v(&s.xn), v(&s.router_logits), t)?
                    } else {
                        k.f32_gemv(v(&lw.router), experts, h, v(&s.xn), v(&s.router_logits), 1)?
                    },
                ]);
            }
            let logits = match mask {
                Some(mask) => {
                    if !fused {
                        attention.push(k.add(v(&s.router_logits), mask, v(&s.forced_logits), t * experts)?);
                    }
                    v(&s.forced_logits)
                }
                None => v(&s.router_logits),
            };
            let (ids, weights) = (v(&s.pick_ids), v(&s.pick_weights));
            // The layer's row of the `[layers · experts]` slot table.
            let table_range = (l as u32 * experts, w.layers.len() as u32 * experts);
            let route = b.resident_table.filter(|_| routed).map(|table| Route {
                logits,
                table: v(table),
                table_range,
                experts,
                ids,
                weights,
                slots: v(&s.slot_idx[l]),
            });
            match b.resident_table.filter(|_| t == 1 && !routed) {
                // Through the slot table (every expert resident, or route-ahead): the picks become pool slots
                // in the same dispatch.
                Some(table) => attention.push({
                    let slots = v(&s.slot_idx[l]);
                    k.router_topk_slots(
                        logits,
                        v(table),
                        ids,
                        weights,
                        slots,
                        experts,
                        top_k,
                        t,
                        table_range,
                    )?
                }),
                None if routed => {}
                None => attention.push(k.router_topk(logits, ids, weights, experts, top_k, t)?),
            }
            if let Some(table) = b.resident_table.filter(|_| groups_on_gpu) {
                let p = ExpertGroupsParams {
                    pairs,
                    experts,
                    size: b.experts.group_size() as u32,
                    len: sizes.groups,
                    base: table_range.0,
                    entries: table_range.1,
                    _pad: [0; 2],
                };
                let (groups, order) = (v(&s.gemm_groups[l]), v(&s.gemm_order[l]));
                attention.push(k.expert_groups(v(&s.pick_ids), v(table), groups, order, p)?);
            }
            // Prefetch guesses: the next layers' routers applied to this layer's normed state.
            let next = w.layers.iter().skip(l + 1).take(b.lookahead as usize);
            let mut guesses = Vec::with_capacity(2 * b.lookahead as usize);
            for (j, nw) in next.enumerate() {
                guesses.push(k.f32_gemv(v(&nw.router), experts, h, v(&s.xn), v(&s.guess_logits[j]), 1)?);
                let (gl, gi, gw) = (v(&s.guess_logits[j]), v(&s.guess_ids[j]), v(&s.guess_weights[j]));
                guesses.push(k.router_topk(gl, gi, gw, experts, top_k, 1)?);
            }
            let mut experts_dispatches = Vec::with_capacity(5);
            // The pool this layer's experts can be in: all of it while experts stream.
            let reach = b.reach.map(|reach| reach.layer(l as u32, experts));
            let in_layer = |parts: &[ExpertPlanes<'a>], plane: (Plane, Plane)| -> Vec<ExpertPlanes<'a>> {
                let bytes = (b.pool.slot_bytes(plane.0), b.pool.slot_bytes(plane.1));
                parts.iter().filter_map(|&part| narrow_to_layer(part, bytes, reach.as_ref())).collect()
            };
            // A chunk's Q8_0 expert GEMMs read their inputs quantised (once for every pool part).
            let experts_int8 = t > 1 && int8 && matches!(b.experts, ExpertKernels::Q8);
            if experts_int8 {
                experts_dispatches.push(k.quantize_q8(v(&s.xn), v(&s.xq), t, h)?);
            }
            if let ExpertKernels::Blocks(parts) = b.experts {
                experts_dispatches.extend(if fused {
                    block_gate_up_swiglu(b, l, parts[l], reach.as_ref(), route)?
                } else {
                    block_experts(b, l, parts[l], sizes, reach.as_ref())?
                });
            }
            let planar_gate_up =
                if planar { in_layer(&gate_up, (Plane::GateUpQ, Plane::GateUpScales)) } else { vec![] };
            for part in planar_gate_up {
                experts_dispatches.push(if swiglu_out {
                    let (slots, xn, act) = (v(&s.slot_idx[l]), v(&s.xn), v(&s.act));
                    if let Some(route) = route {
                        if int8 {
                            k.expert_q8_gemv_gate_up_swiglu_xq_routed(part, v(&s.xq), route, act, (1, top_k))?
                        } else {
                            k.expert_q8_gemv_gate_up_swiglu_routed(part, xn, route, act, (1, top_k))?
                        }
                    } else if q4_experts {
                        k.expert_q4_gemv_gate_up_swiglu(part, xn, slots, act, pairs, top_k)?
                    } else if int8 {
                        k.expert_q8_gemv_gate_up_swiglu_xq(part, v(&s.xq), slots, act, pairs, top_k)?
                    } else {
                        k.expert_q8_gemv_gate_up_swiglu(part, xn, slots, act, pairs, top_k)?
                    }
                } else {
                    let input = if experts_int8 {
                        ExpertInput::SharedQ8(v(&s.xq))
                    } else {
                        ExpertInput::Shared(v(&s.xn))
                    };
                    k.expert_matmul(part, input, s, l, v(&s.gate_up), sizes, expert_math)?
                });
            }
            // The next layer's attention norm, or after the last layer the output norm.
            let next_norm = w.layers.get(l + 1).map_or(&w.out_norm, |next| &next.attn_norm);
            let mut cpu_join = None;
            if fused {
                let last_layer = l + 1 == w.layers.len();
                // The next layer's qkv_rope_store finishes its norm (from the last pool part's combine);
                // after the last layer, rms_norm does.
                let combine_out = |finish| CombineOut {
                    weights: v(&s.pick_weights),
                    residual: v(&s.x),
                    next_norm: v(next_norm),
                    scaled: v(&s.x_scaled),
                    squares: v(&s.squares),
                    finish: finish && !last_layer,
                };
                if let ExpertKernels::Blocks(layers) = b.experts {
                    let out = combine_out(true);
                    experts_dispatches.extend(block_down_combine(b, l, layers[l][2], reach.as_ref(), out)?);
                }
                let parts = if planar { in_layer(&down, (Plane::DownQ, Plane::DownScales)) } else { vec![] };
                for (i, &part) in parts.iter().enumerate() {
                    let out = combine_out(i + 1 == parts.len());
                    let (act, slots) = (v(&s.act), v(&s.slot_idx[l]));
                    experts_dispatches.push(if q4_experts {
                        k.expert_q4_gemv_combine(part, act, slots, out, (1, top_k))?
                    } else if int8 {
                        k.expert_q8_gemv_combine_i8(part, act, slots, out, (1, top_k))?
                    } else {
                        k.expert_q8_gemv_combine(part, act, slots, out, (1, top_k))?
                    });
                }
                // The host's sum joins after the GPU's picks are combined, so they run while it computes.
                let out = JoinOut {
                    residual: v(&s.x),
                    next_norm: v(next_norm),
                    scaled: v(&s.x_scaled),
                    squares: v(&s.squares),
                    finish: !last_layer,
                };
                let join = k.residual_join(v(&s.cpu_sum), out, h, 1)?;
                cpu_join = Some(CpuJoin { at: experts_dispatches.len(), via: JoinVia::Add(join) });
                if last_layer {
                    experts_dispatches.push(k.rms_norm(v(&s.x), v(&w.out_norm), v(&s.xn), h, 1, eps)?);
                }
            } else {
                // Other one-token steps: down reads the activation (more than 64 picks), or with F not a
                // multiple of 16 applies SwiGLU as it reads gate‖up; chunks run silu_mul first. (Records of
                // blocks ran their down in `block_experts`.)
                if planar {
                    let down_input = if swiglu_out {
                        ExpertInput::PerPair(v(&s.act))
                    } else if t == 1 {
                        ExpertInput::SwiGlu(v(&s.gate_up))
                    } else {
                        experts_dispatches.push(k.silu_mul(v(&s.gate_up), v(&s.act), ffn, pairs)?);
                        if experts_int8 {
                            experts_dispatches.push(k.quantize_q8(v(&s.act), v(&s.xq), pairs, ffn)?);
                            ExpertInput::PerPairQ8(v(&s.xq))
                        } else {
                            ExpertInput::PerPair(v(&s.act))
                        }
                    };
                    for part in in_layer(&down, (Plane::DownQ, Plane::DownScales)) {
                        let out = v(&s.down);
                        experts_dispatches.push(k.expert_matmul(
                            part,
                            down_input,
                            s,
                            l,
                            out,
                            sizes,
                            expert_math,
                        )?);
                    }
                }
                if t == 1 {
                    cpu_join = Some(CpuJoin { at: experts_dispatches.len(), via: JoinVia::AsPick });
                }
                let cp = MoeCombineNormParams { hidden: h, k: top_k, tokens: t, eps };
                let (down_out, weights, residual) = (v(&s.down), v(&s.pick_weights), v(&s.h));
                experts_dispatches.push(k.moe_combine_norm(
                    down_out,
                    weights,
                    residual,
                    v(next_norm),
                    v(&s.x),
                    v(&s.xn),
                    None,
                    cp,
                )?);
            }
            layers.push(LayerGraph {
                attention,
                guesses,
                experts: experts_dispatches,
                cpu_join,
                router_from,
            });
        }
        let (last_n, logits) = (v(&s.last_n), v(&s.logits));
        // The head's rows (151,936) make enough workgroups for four rows a lane group (BENCHMARKS.md).
        let head = match &w.head {
            DenseWeight::Q8(head) if int8 => k.q8_gemv_i8(head.m(), last_n, logits, 1)?,
            DenseWeight::Q8(head) => k.q8_gemv_rows4(head.m(), last_n, logits, 1)?,
            DenseWeight::Blocks(pieces) => match &pieces[..] {
                [head] => k.kquant_gemv_rows4(head.m(), last_n, logits, 1)?,
                _ => unreachable!("the head is one matrix"),
            },
        };
        let head_rows = w.head.rows();
        let argmax = k.argmax(v(&s.logits), v(&s.argmax_partial), v(&s.argmax), head_rows, 1)?;
        let sample = (head_rows <= SAMPLE_MAX_N)
            .then(|| {
                let (step, partial) = (v(&s.sample_step), s.sample_partial.each_ref().map(v));
                k.sample_top_k(v(&s.logits), step, partial, v(&s.argmax), head_rows)
            })
            .transpose()?;
        let ids = (v(&s.positions), v(&s.token_ids));
        let penalties = k.apply_penalties(v(&s.sample_step), ids, v(&s.recent), v(&s.logits), head_rows)?;
        Ok(Graph { layers, head, argmax, sample, penalties, groups_on_gpu })
    }

    /// Every layer's dispatches in the order a step with every expert resident records them: attention
    /// through the router, the guesses, the experts.
    pub fn layer_dispatches(&self) -> impl Iterator<Item = &Dispatch> {
        self.layers.iter().flat_map(|lg| lg.attention.iter().chain(&lg.guesses).chain(&lg.experts))
    }
}

/// Records `dispatches` into one compute pass.
pub(crate) fn record(enc: &mut wgpu::CommandEncoder, dispatches: &[Dispatch]) {
    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
    for d in dispatches {
        d.record(&mut pass);
    }
}

/// Finishes what `enc` recorded (most of wgpu's encoding cost is spent here) and leaves a fresh encoder on
/// `device` in its place.
pub(crate) fn finish_recorded(device: &wgpu::Device, enc: &mut wgpu::CommandEncoder) -> wgpu::CommandBuffer {
    std::mem::replace(enc, device.create_command_encoder(&Default::default())).finish()
}

/// Whether one-token steps run the fused decode layer (see the module docs): at most [`FUSED_MAX_PICKS`]
/// picks, and an expert FFN whose gate and up rows gate‖up pairs 16 at a time.
pub(crate) fn fused_decode(c: &Config) -> bool {
    c.expert_used_count <= FUSED_MAX_PICKS && c.expert_feed_forward_length.is_multiple_of(16)
}

/// The most picks a token the fused decode layer takes (the limit of `expert_q8_gemv_combine` and
/// `expert_q4_gemv_combine`; see the module docs).
const FUSED_MAX_PICKS: u32 = 64;

/// WebGPU's largest allowed `min_storage_buffer_offset_alignment`: an offset that is a multiple of it binds on
/// every device, whatever its own (power-of-two) alignment.
const STORAGE_OFFSET_ALIGN: u64 = 256;

/// Which slots the layers' expert kernels may read while every expert is resident ([`Bindings::reach`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Reach<'a> {
    /// Every expert on the device: the `[layers · experts]` slot table, a layer's row its slots.
    Table(&'a [u32]),
    /// Split residency (or the CPU tier's share of the misses): the device's `device` slots, which hold
    /// any layer's records (the hottest, or the pool's), and each layer's records in the arena from
    /// `arena_first` on (record `l · experts + e` at `arena_first + l · experts + e`).
    Split { device: u32, arena_first: u32 },
}

impl<'a> Reach<'a> {
    /// Layer `l`'s reach, of a model with `experts` experts a layer.
    fn layer(self, l: u32, experts: u32) -> LayerReach<'a> {
        match self {
            Reach::Table(table) => LayerReach::Slots(&table[(l * experts) as usize..][..experts as usize]),
            Reach::Split { device, arena_first } => {
                let arena = arena_first + l * experts;
                LayerReach::Ranges([0..device, arena..arena + experts])
            }
        }
    }
}

/// One layer's [`Reach`]: its slots, or ranges of slots.
#[derive(Clone, Debug)]
pub(crate) enum LayerReach<'a> {
    Slots(&'a [u32]),
    Ranges([std::ops::Range<u32>; 2]),
}

impl LayerReach<'_> {
    /// The lowest and highest slot of the reach in `range`, `None` when none lies there.
    fn span_in(&self, range: std::ops::Range<u32>) -> Option<(u32, u32)> {
        let (lo, hi) = match self {
            LayerReach::Slots(slots) => (slots.iter().filter(|s| range.contains(s)))
                .fold((u32::MAX, 0), |(lo, hi), &s| (lo.min(s), hi.max(s))),
            LayerReach::Ranges(ranges) => (ranges.iter())
                .map(|r| (r.start.max(range.start), r.end.min(range.end)))
                .filter(|(lo, end)| lo < end)
                .fold((u32::MAX, 0), |(lo, hi), (l, end)| (lo.min(l), hi.max(end - 1))),
        };
        (lo <= hi).then_some((lo, hi))
    }
}

/// The slots of `part` that a resident layer's kernels may read (`reach`), as planes bound over them alone,
/// so the expert kernels launch over one binding instead of every binding-sized range of the part (each
/// range a dispatch of its own); `None` when the layer reads nothing there (see [`layer_span`]).
fn narrow_to_layer<'a>(
    part: ExpertPlanes<'a>,
    (q_bytes, s_bytes): (u64, u64),
    reach: Option<&LayerReach<'_>>,
) -> Option<ExpertPlanes<'a>> {
    let (first_slot, slots) = layer_span(part.first_slot, part.slots, &[q_bytes, s_bytes], reach)?;
    let skip = u64::from(first_slot - part.first_slot);
    let at = |v: View<'a>, bytes: u64| View::at(v.buffer, v.offset + skip * bytes);
    Some(ExpertPlanes { q: at(part.q, q_bytes), scales: at(part.scales, s_bytes), slots, first_slot, ..part })
}

/// The slots (first, count) of a pool part (`first..first + slots`) that a layer's kernels bind: with every
/// expert resident (`reach`, the slots the layer may read) the span of those in the part, `None` when none
/// lies there; while experts stream (no `reach`), or where the narrowed offsets in planes of `slot_bytes` a
/// slot would break the 256-byte storage-offset alignment, the whole part.
fn layer_span(
    first: u32,
    slots: u32,
    slot_bytes: &[u64],
    reach: Option<&LayerReach<'_>>,
) -> Option<(u32, u32)> {
    let Some(reach) = reach else { return Some((first, slots)) };
    let (lo, hi) = reach.span_in(first..first + slots)?;
    let skip = u64::from(lo - first);
    if slot_bytes.iter().any(|b| !(skip * b).is_multiple_of(STORAGE_OFFSET_ALIGN)) {
        return Some((first, slots));
    }
    Some((lo, hi - lo + 1))
}

/// The input of an expert projection.
#[derive(Clone, Copy)]
enum ExpertInput<'a> {
    /// `[T, cols]`: a token's picks share its row (gate‖up).
    Shared(View<'a>),
    /// `[T·k, cols]`: one row per (token, pick) pair (down, after silu_mul).
    PerPair(View<'a>),
    /// As `Shared` and `PerPair`, the rows Q8_0-quantised (`quantize_q8`) for a chunk's int8 GEMM.
    SharedQ8(View<'a>),
    PerPairQ8(View<'a>),
    /// `[T·k, 2·cols]` gate‖up, SwiGLU applied as it is read (down, one token).
    SwiGlu(View<'a>),
}

/// The (token, pick) pairs of a step: `t` tokens, `pairs` = t·k, and for chunks the GEMM's group entries
/// ([`gemm_groups_len`]).
#[derive(Clone, Copy)]
struct PairSizes {
    t: u32,
    pairs: u32,
    groups: u32,
}

/// Entries of a chunk's expert GEMM groups, the GEMM dispatch's workgroup rows: the most that t·k pairs over
/// a layer's experts make ([`expert_gemm_group_bound`]) in groups of the smallest size a kernel takes, so
/// enough for any ([`ExpertKernels::group_size`]).
pub(crate) fn gemm_groups_len(c: &Config, t: u32) -> u32 {
    let pairs = (t * c.expert_used_count) as usize;
    expert_gemm_group_bound(pairs, c.expert_count as usize, EXPERT_GEMM_TILED_GROUP) as u32
}

/// Which expert kernels a layer runs: by the store's quantisation, and for a chunk's Q8_0 GEMMs whether on
/// tensor cores.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ExpertMath {
    Q8,
    Q4,
    /// Q8_0 chunks' GEMMs on tensor cores (one-token steps run the Q8_0 GEMVs).
    Q8Tensor,
}

/// Expert projections: for one token the slot-indexed GEMV, for a chunk the GEMM over pairs grouped by slot
/// (each expert's weights read once per group of 32 pairs, Q4_0 8, instead of once per pair; Q8_0 by int8
/// dot products of quantised inputs, or on tensor cores); Q8_0 or Q4_0 kernels by the store.
trait ExpertProjection {
    #[allow(clippy::too_many_arguments)]
    fn expert_matmul(
        &self,
        pool: ExpertPlanes<'_>,
        x: ExpertInput<'_>,
        s: &Scratch,
        layer: usize,
        y: View<'_>,
        sizes: PairSizes,
        math: ExpertMath,
    ) -> diskformer_kernels::Result<Dispatch>;
}

impl ExpertProjection for Kernels {
    fn expert_matmul(
        &self,
        pool: ExpertPlanes<'_>,
        x: ExpertInput<'_>,
        s: &Scratch,
        layer: usize,
        y: View<'_>,
        PairSizes { t, pairs, groups }: PairSizes,
        math: ExpertMath,
    ) -> diskformer_kernels::Result<Dispatch> {
        let q4 = math == ExpertMath::Q4;
        let slot_idx = View::from(&s.slot_idx[layer]);
        let (group_buf, order) = (View::from(&s.gemm_groups[layer]), View::from(&s.gemm_order[layer]));
        let k = pairs / t;
        let sizes = (pairs, groups);
        let (x, x_div) = match x {
            ExpertInput::Shared(x) => (x, k),
            ExpertInput::PerPair(x) => (x, 1),
            ExpertInput::SharedQ8(x) => {
                return self.expert_q8_gemm_i8(pool, x, group_buf, order, y, sizes, k);
            }
            ExpertInput::PerPairQ8(x) => {
                return self.expert_q8_gemm_i8(pool, x, group_buf, order, y, sizes, 1);
            }
            ExpertInput::SwiGlu(gate_up) => {
                debug_assert_eq!(t, 1, "chunks run silu_mul before the down GEMM");
                return if q4 {
                    self.expert_q4_gemv_swiglu(pool, gate_up, slot_idx, y, pairs)
                } else {
                    self.expert_q8_gemv_swiglu(pool, gate_up, slot_idx, y, pairs)
                };
            }
        };
        match (t == 1, q4) {
            (true, false) => self.expert_q8_gemv(pool, x, slot_idx, y, pairs, x_div),
            (true, true) => self.expert_q4_gemv(pool, x, slot_idx, y, pairs, x_div),
            (false, false) if math == ExpertMath::Q8Tensor => {
                self.expert_q8_gemm_coop(pool, x, group_buf, order, y, sizes, x_div)
            }
            (false, false) => self.expert_q8_gemm_tiled(pool, x, group_buf, order, y, sizes, x_div),
            (false, true) => self.expert_q4_gemm(pool, x, group_buf, order, y, sizes, x_div),
        }
    }
}

/// How the dense projections multiply.
#[derive(Clone, Copy)]
enum DenseMath<'a> {
    F32,
    /// On int8 inputs, as llama.cpp multiplies Q8_0 weights; a chunk quantises its input into `xq`.
    Int8 {
        xq: View<'a>,
    },
    /// A chunk's GEMMs on tensor cores (one-token steps run the f32 GEMV).
    Tensor,
}

/// Dense projections: for one token the GEMV, for a chunk the tiled GEMM; on int8 inputs: for one token the
/// GEMV that quantises as it reads, for a chunk the int8 tiled GEMM after the input's Q8_0 quantisation;
/// or a chunk's on tensor cores. K-quant blocks: for each stacked piece into its columns, for one token the
/// K-quant GEMV, for a chunk the tiled K-quant GEMM.
trait DenseProjection {
    fn dense_projection(
        &self,
        w: &DenseWeight,
        x: View<'_>,
        y: View<'_>,
        t: u32,
        math: DenseMath<'_>,
    ) -> diskformer_kernels::Result<Vec<Dispatch>>;
}

impl DenseProjection for Kernels {
    fn dense_projection(
        &self,
        w: &DenseWeight,
        x: View<'_>,
        y: View<'_>,
        t: u32,
        math: DenseMath<'_>,
    ) -> diskformer_kernels::Result<Vec<Dispatch>> {
        let w = match w {
            DenseWeight::Q8(w) => w.m(),
            DenseWeight::Blocks(pieces) => {
                let stride = w.rows();
                let mut offset = 0;
                return pieces
                    .iter()
                    .map(|piece| {
                        let d = if t == 1 {
                            self.kquant_gemv_into(piece.m(), x, (y, stride, offset), 1)
                        } else {
                            self.kquant_gemm_into(piece.m(), x, (y, stride, offset), t)
                        };
                        offset += piece.rows;
                        d
                    })
                    .collect();
            }
        };
        Ok(match math {
            DenseMath::F32 | DenseMath::Tensor if t == 1 => vec![self.q8_gemv(w, x, y, 1)?],
            DenseMath::Int8 { .. } if t == 1 => vec![self.q8_gemv_i8(w, x, y, 1)?],
            DenseMath::F32 => vec![self.q8_gemm_tiled(w, x, y, t)?],
            DenseMath::Tensor => vec![self.q8_gemm_coop(w, x, y, t)?],
            DenseMath::Int8 { xq } => {
                vec![self.quantize_q8(x, xq, t, w.cols)?, self.q8_gemm_i8(w, xq, y, t)?]
            }
        })
    }
}

/// Which expert kernels a pool's records take.
#[derive(Debug)]
pub(crate) enum ExpertKernels {
    /// Q8_0 planes.
    Q8,
    /// Q4_0 planes.
    Q4,
    /// Records of GGUF blocks: per layer gate, up and down, each its type and where it starts in its
    /// plane's slot (gate and up in `gate_up_q`, down in `down_q`).
    Blocks(Vec<[(BlockQuant, u64); 3]>),
}

impl ExpertKernels {
    /// The kernels for records of `layout`; a part of a type no kernel reads is refused, named.
    pub fn of(layout: &ExpertLayout) -> Result<ExpertKernels> {
        if layout.blocks.is_none() {
            return Ok(if layout.quant_type == "q4_0" { ExpertKernels::Q4 } else { ExpertKernels::Q8 });
        }
        let mut layers = Vec::with_capacity(layout.n_layers as usize);
        for l in 0..layout.n_layers {
            let part = |p: ExpertPart, plane: diskformer_store::Region| {
                let bad = |ty: &str| crate::Error::BadTensor {
                    name: format!("blk.{l}.ffn_{}_exps.weight", p.name()),
                    what: format!(
                        "is {ty}; the GPU expert kernels multiply {} (or Q8_0 or Q4_0 experts throughout)",
                        crate::weights::BLOCK_TYPES
                    ),
                };
                let (ty, r) = layout.part(l, p).ok_or_else(|| bad("missing"))?;
                let quant = BlockQuant::from_name(ty.name()).ok_or_else(|| bad(ty.name()))?;
                let row = if p == ExpertPart::Down { layout.ffn } else { layout.hidden };
                if !row.is_multiple_of(256) {
                    return Err(crate::Error::BadTensor {
                        name: format!("blk.{l}.ffn_{}_exps.weight", p.name()),
                        what: format!(
                            "is {} in rows of {row} values; the GPU block kernels read rows of whole 256-value runs",
                            ty.name()
                        ),
                    });
                }
                Ok::<_, crate::Error>((quant, r.offset - plane.offset))
            };
            layers.push([
                part(ExpertPart::Gate, layout.gate_up_quants)?,
                part(ExpertPart::Up, layout.gate_up_quants)?,
                part(ExpertPart::Down, layout.down_quants)?,
            ]);
        }
        Ok(ExpertKernels::Blocks(layers))
    }

    /// Pairs a group of a chunk's expert GEMMs holds at most (what the kernels take).
    pub fn group_size(&self) -> usize {
        match self {
            ExpertKernels::Blocks(_) => EXPERT_BLOCK_GEMM_GROUP,
            ExpertKernels::Q8 | ExpertKernels::Q4 => EXPERT_GEMM_TILED_GROUP,
        }
    }
}

/// A layer's experts on records of blocks: gate and up into the halves of gate‖up, SwiGLU, down (each
/// projection once per pool part holding the layer's experts: for one token per pair, for a chunk per group
/// of pairs sharing a slot).
fn block_experts(
    b: &Bindings<'_>,
    l: usize,
    [(gate_q, gate_at), (up_q, up_at), (down_q, down_at)]: [(BlockQuant, u64); 3],
    PairSizes { t, pairs, groups }: PairSizes,
    reach: Option<&LayerReach<'_>>,
) -> Result<Vec<Dispatch>> {
    let (k, c, s) = (b.kernels, b.config, b.scratch);
    let (h, f, top_k) = (c.embedding_length, c.expert_feed_forward_length, c.expert_used_count);
    let v = View::from;
    let mut out = Vec::new();
    let matmul = |w: ExpertBlocks<'_>, x: View<'_>, y: ExpertOut<'_>, x_div: u32| {
        if t == 1 {
            k.expert_kquant_gemv(w, x, v(&s.slot_idx[l]), y, pairs, x_div)
        } else {
            let (g, o) = (v(&s.gemm_groups[l]), v(&s.gemm_order[l]));
            k.expert_kquant_gemm(w, x, g, o, y, (pairs, groups), x_div)
        }
    };
    for (quant, at, column, rows) in gate_up_halves([(gate_q, gate_at), (up_q, up_at)], (h, f)) {
        for w in layer_blocks(b.pool, b.expert_parts(), Plane::GateUpQ, (quant, at), (rows, h), reach) {
            let y = ExpertOut { y: v(&s.gate_up), stride: 2 * f, offset: column };
            out.push(matmul(w, v(&s.xn), y, top_k)?);
        }
    }
    out.push(k.silu_mul(v(&s.gate_up), v(&s.act), f, pairs)?);
    for w in layer_blocks(b.pool, b.expert_parts(), Plane::DownQ, (down_q, down_at), (h, f), reach) {
        out.push(matmul(w, v(&s.act), ExpertOut { y: v(&s.down), stride: h, offset: 0 }, 1)?);
    }
    Ok(out)
}

/// The matrices gate and up (type, where each starts in a record's `gate_up_q` plane) make in a layer of
/// width `h` and expert FFN `f`, each `(type, start, column of gate‖up, rows)`: one of 2F rows where up
/// lies right after gate and is of its type, else gate and up apart.
pub(crate) fn gate_up_halves(
    [(gate_q, gate_at), (up_q, up_at)]: [(BlockQuant, u64); 2],
    (h, f): (u32, u32),
) -> Vec<(BlockQuant, u64, u32, u32)> {
    let gate_bytes = u64::from(f) * u64::from(h) / 256 * gate_q.block_bytes();
    if gate_q == up_q && up_at == gate_at + gate_bytes {
        vec![(gate_q, gate_at, 0, 2 * f)]
    } else {
        vec![(gate_q, gate_at, 0, f), (up_q, up_at, f, f)]
    }
}

/// Fused decode on records of blocks, gate and up of one type: gate‖up with SwiGLU on its output into the
/// activation (no SwiGLU dispatch), once per pool part holding the layer's experts; with `route` (every
/// expert resident) routing its pairs itself, in place of `router_topk_slots`.
fn block_gate_up_swiglu(
    b: &Bindings<'_>,
    l: usize,
    [(gate_q, gate_at), (_, up_at), _]: [(BlockQuant, u64); 3],
    reach: Option<&LayerReach<'_>>,
    route: Option<Route<'_>>,
) -> Result<Vec<Dispatch>> {
    let (k, c, s) = (b.kernels, b.config, b.scratch);
    let (h, f, top_k) = (c.embedding_length, c.expert_feed_forward_length, c.expert_used_count);
    let (x, slots) = (View::from(&s.xn), View::from(&s.slot_idx[l]));
    let act = ExpertOut { y: View::from(&s.act), stride: f, offset: 0 };
    layer_blocks(b.pool, b.expert_parts(), Plane::GateUpQ, (gate_q, gate_at), (f, h), reach)
        .map(|gate| {
            Ok(match route {
                Some(route) => {
                    k.expert_kquant_gemv_swiglu_routed(gate, up_at, x, route, act.y, (1, top_k))?
                }
                None => k.expert_kquant_gemv_swiglu(gate, up_at, x, slots, act, (top_k, top_k))?,
            })
        })
        .collect()
}

/// Fused decode on records of blocks: down with the MoE combine onto the residual stream (and, unless
/// `out.finish` is off, the next norm's inputs from the last pool part), once per pool part holding the
/// layer's experts.
fn block_down_combine(
    b: &Bindings<'_>,
    l: usize,
    (down_q, down_at): (BlockQuant, u64),
    reach: Option<&LayerReach<'_>>,
    out: CombineOut<'_>,
) -> Result<Vec<Dispatch>> {
    let (k, c, s) = (b.kernels, b.config, b.scratch);
    let (h, f, top_k) = (c.embedding_length, c.expert_feed_forward_length, c.expert_used_count);
    let parts: Vec<_> =
        layer_blocks(b.pool, b.expert_parts(), Plane::DownQ, (down_q, down_at), (h, f), reach).collect();
    let (act, slots) = (View::from(&s.act), View::from(&s.slot_idx[l]));
    let last = parts.len().saturating_sub(1);
    parts
        .into_iter()
        .enumerate()
        .map(|(i, w)| {
            let out = CombineOut { finish: out.finish && i == last, ..out };
            Ok(k.expert_kquant_gemv_combine(w, act, slots, out, (1, top_k))?)
        })
        .collect()
}

/// One matrix of every record in `plane` (its type and where it starts in a slot), as the block kernels
/// bind it: a pool part at a time, narrowed to the slots a resident layer may read where `reach` gives them
/// (see [`layer_span`]), parts without the layer's experts left out.
pub(crate) fn layer_blocks<'p>(
    pool: &'p GpuPool,
    parts: &'p [PoolPart],
    plane: Plane,
    (quant, offset): (BlockQuant, u64),
    (rows, cols): (u32, u32),
    reach: Option<&'p LayerReach<'p>>,
) -> impl Iterator<Item = ExpertBlocks<'p>> {
    let slot_bytes = pool.slot_bytes(plane);
    parts.iter().filter_map(move |part| {
        let (first_slot, slots) = layer_span(part.first_slot(), part.slots(), &[slot_bytes], reach)?;
        let skip = u64::from(first_slot - part.first_slot());
        let data: View<'p> = part.buffer(plane).into();
        Some(ExpertBlocks {
            data: View::at(data.buffer, data.offset + skip * slot_bytes),
            quant,
            slot_bytes,
            offset,
            slots,
            first_slot,
            rows,
            cols,
            host: first_slot >= pool.slots() as u32,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A layer's split reach within a pool part is the lowest and highest of its slots there, found by
    /// looking at every slot: the device's whole, the layer's own arena range, nothing elsewhere.
    #[test]
    fn a_split_reach_spans_the_device_and_the_layers_arena_records() {
        let (device, experts) = (10u32, 4u32);
        let reach = Reach::Split { device, arena_first: device };
        for layer in 0..3 {
            let lr = reach.layer(layer, experts);
            let own = device + layer * experts..device + (layer + 1) * experts;
            for first in 0..30 {
                for len in 1..12 {
                    let range = first..first + len;
                    let slots: Vec<u32> = range.clone().filter(|s| *s < device || own.contains(s)).collect();
                    let want = slots.first().zip(slots.last()).map(|(&lo, &hi)| (lo, hi));
                    assert_eq!(lr.span_in(range.clone()), want, "layer {layer}, part {range:?}");
                }
            }
        }
        // A table's row: its slots in the part.
        let table = [7, 2, 40, 9];
        assert_eq!(Reach::Table(&table).layer(0, 4).span_in(0..10), Some((2, 9)));
        assert_eq!(Reach::Table(&table).layer(0, 4).span_in(10..40), None);
    }

    #[test]
    fn the_estimate_is_what_the_scratch_allocates() {
        let ctx = diskformer_kernels::Context::new().expect("a GPU (lavapipe in CI)");
        let spec = crate::synthetic::SynthSpec {
            shape: crate::synthetic::SynthShape::tiny(),
            vocab: crate::synthetic::SynthVocab::Bytes,
            seed: 1,
        };
        let mut bytes = Vec::new();
        crate::synthetic::synthetic_writer(&spec).unwrap().write_to(&mut bytes).unwrap();
        let gguf = diskformer_gguf::Gguf::from_bytes(bytes).unwrap();
        let c = Config::from_metadata(gguf.metadata()).unwrap();
        for (max_t, lookahead, route_ahead) in
            [(1, 0, false), (1, 1, false), (1, 0, true), (7, 0, false), (256, 0, true)]
        {
            let sizes =
                ScratchSizes { vocab: 261, ctx: 512, max_t, lookahead, route_ahead, forced: route_ahead };
            let scratch = Scratch::new(&ctx.device, &c, sizes);
            assert_eq!(Scratch::estimate(&c, sizes), scratch.bytes(), "{sizes:?}");
        }
    }
}
