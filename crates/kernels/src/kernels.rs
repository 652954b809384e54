//! The pipeline cache ([`Kernels`]), buffer views, and the bound dispatches launchers return.

use std::borrow::Cow;
use std::num::NonZeroU64;
use std::sync::OnceLock;

use wgpu::util::DeviceExt;

use crate::BlockQuant;
use crate::context::Context;
use crate::error::{Error, Result};

/// Every kernel of the crate. File name = entry point = [`Kernel::name`], but for the int8 GEMMs and the Q4_0
/// expert kernels, which share the Q8_0 kernels' files (their entry point renamed, see [`Kernel::source`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kernel {
    /// Embedding lookup in a Q8_0 table.
    EmbedQ8,
    /// RMSNorm per row.
    RmsNorm,
    /// Q8_0 GEMV over T inputs.
    Q8Gemv,
    /// Q8_0 GEMV over T inputs, two rows per lane (the variant under comparison in the bench).
    Q8GemvRows2,
    /// Q8_0 GEMM over T tokens through workgroup-memory tiles of 128 rows x 32 tokens (prefill).
    Q8GemmTiled,
    /// Q8_0 GEMM over T tokens of Q8_0-quantised inputs by int8 dot products, tiled (prefill).
    Q8GemmI8,
    /// Q8_0 GEMM over T tokens on tensor cores: f16 weights and inputs, f32 sums (prefill; needs
    /// cooperative matrices, see [`Kernel::needs_cooperative_matrix`]).
    Q8GemmCoop,
    /// Q8_0 quantisation of f32 rows (the int8 GEMMs' inputs).
    QuantizeQ8,
    /// F32 GEMV over T inputs (the router).
    F32Gemv,
    /// F32 GEMM over T tokens through workgroup-memory tiles (a chunk's router).
    F32Gemm,
    /// Per-head QK RMSNorm then NeoX RoPE.
    QkNormRope,
    /// KV-cache store (f32 → f16).
    KvStore,
    /// QK norm + RoPE of Q and K and the K/V cache stores, from stacked projections, in one dispatch.
    QkvRopeStore,
    /// Causal GQA attention over the f16 KV cache, a workgroup per (query head, token).
    Attention,
    /// Causal GQA attention for chunks: a workgroup per token and up to 8 query heads of a kv head, keys
    /// and values in tiles through workgroup memory.
    AttentionTiled,
    /// Causal GQA attention for chunks, a block of 4 tokens and up to 8 query heads of a kv head a workgroup,
    /// keys and values in tiles of 32 through workgroup memory (needs 32 KiB of it).
    AttentionFlash,
    /// Split-K attention for decode, part 1: per-block partial softmax sums.
    AttentionSplit,
    /// Split-K attention for decode, part 2: merges the blocks.
    AttentionCombine,
    /// Residual add.
    Add,
    /// Residual add then RMSNorm, one dispatch.
    AddRmsNorm,
    /// Router softmax, top-k and renormalisation.
    RouterTopk,
    /// [`Kernel::RouterTopk`] and [`Kernel::ExpertSlots`] in one dispatch (resident decode).
    RouterTopkSlots,
    /// Expert Q8_0 GEMV indexed by pool slot.
    ExpertQ8Gemv,
    /// Expert Q8_0 down GEMV with the MoE combine, added onto the residual stream (decode).
    ExpertQ8GemvCombine,
    /// Q8_0 GEMV, 4 rows a lane group (the expert GEMVs' row walk).
    Q8GemvRows4,
    /// Q8_0 GEMV, its input Q8_0-quantised as it is read (int8 dot products).
    Q8GemvI8,
    /// Expert Q8_0 GEMV indexed by pool slot, its input Q8_0-quantised as it is read (int8 dot products).
    ExpertQ8GemvI8,
    /// Expert Q8_0 GEMV indexed by pool slot on an input Q8_0-quantised before it (`quantize_q8` rows).
    ExpertQ8GemvXq,
    /// [`Kernel::ExpertQ8Gemv`] routing its pairs itself: the router's top-k and the slot table (resident
    /// decode; no [`Kernel::RouterTopkSlots`] dispatch before it).
    ExpertQ8GemvRouted,
    /// [`Kernel::ExpertQ8GemvXq`] routing its pairs itself, as [`Kernel::ExpertQ8GemvRouted`].
    ExpertQ8GemvXqRouted,
    /// [`Kernel::ExpertQ8GemvCombine`] with its input Q8_0-quantised as it is read (int8 dot products).
    ExpertQ8GemvCombineI8,
    /// Expert Q4_0 GEMV indexed by pool slot.
    ExpertQ4Gemv,
    /// Expert Q4_0 down GEMV with the MoE combine, added onto the residual stream (decode).
    ExpertQ4GemvCombine,
    /// Expert Q8_0 GEMM over pairs grouped by slot, through workgroup-memory tiles (prefill).
    ExpertQ8GemmTiled,
    /// Expert Q8_0 GEMM over pairs grouped by slot, of Q8_0-quantised inputs by int8 dot products (prefill).
    ExpertQ8GemmI8,
    /// Expert Q4_0 GEMM over pairs grouped by slot, through the tiled GEMMs' workgroup-memory tiles (prefill).
    ExpertQ4Gemm,
    /// Expert Q8_0 GEMM over pairs grouped by slot on tensor cores, as [`Kernel::Q8GemmCoop`] (prefill).
    ExpertQ8GemmCoop,
    /// GEMV over T inputs on a matrix of GGUF blocks of the type (`kquant_gemv.wgsl` with the type's block
    /// helper).
    BlockGemv(BlockQuant),
    /// [`Kernel::BlockGemv`] with 4 rows a lane group.
    BlockGemvRows4(BlockQuant),
    /// GEMM over T inputs through workgroup-memory tiles (prefill), on GGUF blocks of the type.
    BlockGemm(BlockQuant),
    /// Expert GEMV on a pool of records of GGUF blocks of the type, per pair or per group of pairs sharing
    /// a slot.
    ExpertBlockGemv(BlockQuant),
    /// Expert down GEMV on a pool of records of GGUF blocks of the type with the MoE combine, added onto
    /// the residual stream (decode).
    ExpertBlockGemvCombine(BlockQuant),
    /// Expert GEMM over pairs grouped by slot through workgroup-memory tiles (prefill), on GGUF blocks.
    ExpertBlockGemm(BlockQuant),
    /// Expert gate‖up GEMV with SwiGLU on its output that routes its pairs itself (the router's top-k and
    /// the slot table inside it), on a pool of records of GGUF blocks of the type (resident decode).
    ExpertBlockGemvRouted(BlockQuant),
    /// Pool slots of the picks from a resident table (routing on the GPU).
    ExpertSlots,
    /// A chunk's pairs grouped by expert for the tiled expert GEMMs (resident experts, no read-back).
    ExpertGroups,
    /// SiLU(gate)·up.
    SiluMul,
    /// DeltaNet's causal conv and SiLU over a chunk, with its saved inputs.
    DeltaNetConv,
    /// DeltaNet's gated delta rule over a chunk, one workgroup a v head.
    DeltaNetRule,
    /// DeltaNet's output norm: RMSNorm per head times SiLU of the gate.
    GatedRmsNorm,
    /// Per-head RMSNorm then NeoX RoPE of the first dims of the query heads (read at a stride) and the key
    /// heads, the keys stored into the f16 cache (qwen35moe's attention).
    QkNormRopePartialStore,
    /// The attention output times the sigmoid of the query's gate rows (qwen35moe).
    AttentionGate,
    /// The shared expert's output, scaled by the sigmoid of its gate, added to the routed ones (qwen35moe).
    SharedExpertGate,
    /// Weighted sum of the k expert outputs plus the residual.
    MoeCombine,
    /// A row (the CPU tier's sum) added onto the residual stream in place after the fused combine, with the
    /// next norm's inputs.
    ResidualJoin,
    /// Weighted sum plus residual, then the next RMSNorm, in one dispatch.
    MoeCombineNorm,
    /// [`Kernel::SharedExpertGate`] then [`Kernel::MoeCombineNorm`] in one dispatch (qwen35moe).
    MoeCombineSharedNorm,
    /// Argmax per row.
    Argmax,
    /// A sampled token: top-k, temperature, top-p, min-p and a draw with a host-supplied uniform.
    SampleTopK,
    /// Repetition and presence penalties on a step's logits, from a ring of recent tokens.
    ApplyPenalties,
}

const ROW_SUM_PLAIN: &str = include_str!("wgsl/row_sum_plain.wgsl");
const ROW_SUM_SUBGROUP: &str = include_str!("wgsl/row_sum_subgroup.wgsl");
const Q8_HELPERS: &str = include_str!("wgsl/q8_helpers.wgsl");
const Q8_TILE: &str = include_str!("wgsl/q8_tile.wgsl");
const Q8_TILE_I8: &str = include_str!("wgsl/q8_tile_i8.wgsl");
const Q8_TILE_WEIGHTS: &str = include_str!("wgsl/q8_tile_weights.wgsl");
const Q4_TILE_WEIGHTS: &str = include_str!("wgsl/q4_tile_weights.wgsl");
const EXPERT_Q8_ROWS: &str = include_str!("wgsl/expert_q8_rows.wgsl");
const EXPERT_Q4_ROWS: &str = include_str!("wgsl/expert_q4_rows.wgsl");
const EXPERT_Q8I8_ROWS: &str = include_str!("wgsl/expert_q8i8_rows.wgsl");
const EXPERT_Q8XQ_ROWS: &str = include_str!("wgsl/expert_q8xq_rows.wgsl");
const Q8I8_INPUT: &str = include_str!("wgsl/q8i8_input.wgsl");
const PAIR_MAX_PLAIN: &str = include_str!("wgsl/pair_max_plain.wgsl");
const PAIR_MAX_SUBGROUP: &str = include_str!("wgsl/pair_max_subgroup.wgsl");
const QUAD_SUM_PLAIN: &str = include_str!("wgsl/quad_sum_plain.wgsl");
const QUAD_SUM_SUBGROUP: &str = include_str!("wgsl/quad_sum_subgroup.wgsl");
const ATTENTION_ROWS_PLAIN: &str = include_str!("wgsl/attention_rows_plain.wgsl");
const ATTENTION_ROWS_SUBGROUP: &str = include_str!("wgsl/attention_rows_subgroup.wgsl");
const ATTENTION_TILE_LOAD: &str = include_str!("wgsl/attention_tile_load.wgsl");
const RMS_SCALE: &str = include_str!("wgsl/rms_scale.wgsl");
const MOE_COMBINE_PLAIN: &str = include_str!("wgsl/moe_combine_plain.wgsl");
const MOE_COMBINE_SHARED: &str = include_str!("wgsl/moe_combine_shared.wgsl");
const ROUTER_TOPK_CORE: &str = include_str!("wgsl/router_topk_core.wgsl");
const EXPERT_ROUTE_PAIR: &str = include_str!("wgsl/expert_route_pair.wgsl");
const EXPERT_Q8_PAIR_ROWS: &str = include_str!("wgsl/expert_q8_pair_rows.wgsl");
const SAMPLE_STEP: &str = include_str!("wgsl/sample_step.wgsl");
const KQUANT_Q4_K: &str = include_str!("wgsl/kquant_q4_k.wgsl");
const KQUANT_Q6_K: &str = include_str!("wgsl/kquant_q6_k.wgsl");
const KQUANT_Q5_K: &str = include_str!("wgsl/kquant_q5_k.wgsl");
const KQUANT_Q3_K: &str = include_str!("wgsl/kquant_q3_k.wgsl");
const KQUANT_Q2_K: &str = include_str!("wgsl/kquant_q2_k.wgsl");
const KQUANT_HALVES: &str = include_str!("wgsl/kquant_halves.wgsl");
const KQUANT_BYTE_WORD: &str = include_str!("wgsl/kquant_byte_word.wgsl");
const KQUANT_RUNS32: &str = include_str!("wgsl/kquant_runs32.wgsl");
const KQUANT_IQ4: &str = include_str!("wgsl/kquant_iq4.wgsl");
const KQUANT_FLOATS: &str = include_str!("wgsl/kquant_floats.wgsl");
const KQUANT_K_SCALES: &str = include_str!("wgsl/kquant_k_scales.wgsl");
const KQUANT_TILE: &str = include_str!("wgsl/kquant_tile.wgsl");
const KQUANT_DOT4: &str = include_str!("wgsl/kquant_dot4.wgsl");
const EXPERT_COMBINE_PICKS: &str = include_str!("wgsl/expert_combine_picks.wgsl");
const Q8_TILE_COOP: &str = include_str!("wgsl/q8_tile_coop.wgsl");

impl BlockQuant {
    /// The helper files that read the type's blocks (`BLOCK_BYTES`, `block_x`, `block_dot`, `tile_load`),
    /// appended to the block kernels.
    fn block_helpers(self) -> &'static [&'static str] {
        const RUNS: &str = KQUANT_RUNS32;
        const WORD: &str = KQUANT_BYTE_WORD;
        match self {
            BlockQuant::Q2K => &[KQUANT_Q2_K, KQUANT_HALVES, WORD],
            BlockQuant::Q3K => &[KQUANT_Q3_K, KQUANT_HALVES, WORD],
            BlockQuant::Q4K => &[KQUANT_Q4_K, KQUANT_K_SCALES],
            BlockQuant::Q5K => &[KQUANT_Q5_K, KQUANT_K_SCALES],
            BlockQuant::Q6K => &[KQUANT_Q6_K, KQUANT_HALVES, WORD],
            BlockQuant::Q4_0 => &[include_str!("wgsl/kquant_q4_0.wgsl"), RUNS, WORD],
            BlockQuant::Q4_1 => &[include_str!("wgsl/kquant_q4_1.wgsl"), RUNS, WORD],
            BlockQuant::Q5_0 => &[include_str!("wgsl/kquant_q5_0.wgsl"), RUNS, WORD],
            BlockQuant::Q5_1 => &[include_str!("wgsl/kquant_q5_1.wgsl"), RUNS, WORD],
            BlockQuant::Q8_0 => &[include_str!("wgsl/kquant_q8_0.wgsl"), RUNS, WORD],
            BlockQuant::IQ4NL => &[include_str!("wgsl/kquant_iq4_nl.wgsl"), KQUANT_IQ4, RUNS, WORD],
            BlockQuant::IQ4XS => &[include_str!("wgsl/kquant_iq4_xs.wgsl"), KQUANT_IQ4, RUNS, WORD],
            BlockQuant::F16 => &[include_str!("wgsl/kquant_f16.wgsl"), KQUANT_FLOATS, RUNS, WORD],
            BlockQuant::BF16 => &[include_str!("wgsl/kquant_bf16.wgsl"), KQUANT_FLOATS, RUNS, WORD],
            BlockQuant::F32 => &[include_str!("wgsl/kquant_f32.wgsl"), KQUANT_FLOATS, RUNS, WORD],
        }
    }

    /// The names of the type's [`Kernel::BlockGemv`], `BlockGemvRows4`, `BlockGemm`, `ExpertBlockGemv`,
    /// `ExpertBlockGemm`, `ExpertBlockGemvCombine` and `ExpertBlockGemvRouted` (the Q4_K ones are the entry
    /// points as written; the others are renamed to these).
    fn kernel_names(self) -> [&'static str; 7] {
        match self {
            BlockQuant::Q2K => [
                "q2_k_gemv",
                "q2_k_gemv_rows4",
                "q2_k_gemm",
                "expert_q2_k_gemv",
                "expert_q2_k_gemm",
                "expert_q2_k_gemv_combine",
                "expert_q2_k_gemv_routed",
            ],
            BlockQuant::Q3K => [
                "q3_k_gemv",
                "q3_k_gemv_rows4",
                "q3_k_gemm",
                "expert_q3_k_gemv",
                "expert_q3_k_gemm",
                "expert_q3_k_gemv_combine",
                "expert_q3_k_gemv_routed",
            ],
            BlockQuant::Q4K => [
                "q4_k_gemv",
                "q4_k_gemv_rows4",
                "q4_k_gemm",
                "expert_q4_k_gemv",
                "expert_q4_k_gemm",
                "expert_q4_k_gemv_combine",
                "expert_q4_k_gemv_routed",
            ],
            BlockQuant::Q5K => [
                "q5_k_gemv",
                "q5_k_gemv_rows4",
                "q5_k_gemm",
                "expert_q5_k_gemv",
                "expert_q5_k_gemm",
                "expert_q5_k_gemv_combine",
                "expert_q5_k_gemv_routed",
            ],
            BlockQuant::Q6K => [
                "q6_k_gemv",
                "q6_k_gemv_rows4",
                "q6_k_gemm",
                "expert_q6_k_gemv",
                "expert_q6_k_gemm",
                "expert_q6_k_gemv_combine",
                "expert_q6_k_gemv_routed",
            ],
            BlockQuant::Q4_0 => [
                "q4_0_gemv",
                "q4_0_gemv_rows4",
                "q4_0_gemm",
                "expert_q4_0_gemv",
                "expert_q4_0_gemm",
                "expert_q4_0_gemv_combine",
                "expert_q4_0_gemv_routed",
            ],
            BlockQuant::Q4_1 => [
                "q4_1_gemv",
                "q4_1_gemv_rows4",
                "q4_1_gemm",
                "expert_q4_1_gemv",
                "expert_q4_1_gemm",
                "expert_q4_1_gemv_combine",
                "expert_q4_1_gemv_routed",
            ],
            BlockQuant::Q5_0 => [
                "q5_0_gemv",
                "q5_0_gemv_rows4",
                "q5_0_gemm",
                "expert_q5_0_gemv",
                "expert_q5_0_gemm",
                "expert_q5_0_gemv_combine",
                "expert_q5_0_gemv_routed",
            ],
            BlockQuant::Q5_1 => [
                "q5_1_gemv",
                "q5_1_gemv_rows4",
                "q5_1_gemm",
                "expert_q5_1_gemv",
                "expert_q5_1_gemm",
                "expert_q5_1_gemv_combine",
                "expert_q5_1_gemv_routed",
            ],
            BlockQuant::Q8_0 => [
                "q8_0_block_gemv",
                "q8_0_block_gemv_rows4",
                "q8_0_block_gemm",
                "expert_q8_0_block_gemv",
                "expert_q8_0_block_gemm",
                "expert_q8_0_block_gemv_combine",
                "expert_q8_0_block_gemv_routed",
            ],
            BlockQuant::IQ4NL => [
                "iq4_nl_gemv",
                "iq4_nl_gemv_rows4",
                "iq4_nl_gemm",
                "expert_iq4_nl_gemv",
                "expert_iq4_nl_gemm",
                "expert_iq4_nl_gemv_combine",
                "expert_iq4_nl_gemv_routed",
            ],
            BlockQuant::IQ4XS => [
                "iq4_xs_gemv",
                "iq4_xs_gemv_rows4",
                "iq4_xs_gemm",
                "expert_iq4_xs_gemv",
                "expert_iq4_xs_gemm",
                "expert_iq4_xs_gemv_combine",
                "expert_iq4_xs_gemv_routed",
            ],
            BlockQuant::F16 => [
                "f16_block_gemv",
                "f16_block_gemv_rows4",
                "f16_block_gemm",
                "expert_f16_block_gemv",
                "expert_f16_block_gemm",
                "expert_f16_block_gemv_combine",
                "expert_f16_block_gemv_routed",
            ],
            BlockQuant::BF16 => [
                "bf16_gemv",
                "bf16_gemv_rows4",
                "bf16_gemm",
                "expert_bf16_gemv",
                "expert_bf16_gemm",
                "expert_bf16_gemv_combine",
                "expert_bf16_gemv_routed",
            ],
            BlockQuant::F32 => [
                "f32_block_gemv",
                "f32_block_gemv_rows4",
                "f32_block_gemm",
                "expert_f32_block_gemv",
                "expert_f32_block_gemm",
                "expert_f32_block_gemv_combine",
                "expert_f32_block_gemv_routed",
            ],
        }
    }
}

impl Kernel {
    /// The kernels that are not of a block type.
    const FIXED: [Kernel; 53] = [
        Kernel::EmbedQ8,
        Kernel::RmsNorm,
        Kernel::Q8Gemv,
        Kernel::Q8GemvRows2,
        Kernel::Q8GemmTiled,
        Kernel::Q8GemmI8,
        Kernel::Q8GemmCoop,
        Kernel::QuantizeQ8,
        Kernel::F32Gemv,
        Kernel::F32Gemm,
        Kernel::QkNormRope,
        Kernel::KvStore,
        Kernel::QkvRopeStore,
        Kernel::Attention,
        Kernel::AttentionTiled,
        Kernel::AttentionFlash,
        Kernel::AttentionSplit,
        Kernel::AttentionCombine,
        Kernel::Add,
        Kernel::AddRmsNorm,
        Kernel::RouterTopk,
        Kernel::RouterTopkSlots,
        Kernel::ExpertQ8Gemv,
        Kernel::ExpertQ8GemvCombine,
        Kernel::Q8GemvRows4,
        Kernel::Q8GemvI8,
        Kernel::ExpertQ8GemvI8,
        Kernel::ExpertQ8GemvXq,
        Kernel::ExpertQ8GemvRouted,
        Kernel::ExpertQ8GemvXqRouted,
        Kernel::ExpertQ8GemvCombineI8,
        Kernel::ExpertQ4Gemv,
        Kernel::ExpertQ4GemvCombine,
        Kernel::ExpertQ8GemmTiled,
        Kernel::ExpertQ8GemmI8,
        Kernel::ExpertQ4Gemm,
        Kernel::ExpertQ8GemmCoop,
        Kernel::ExpertSlots,
        Kernel::ExpertGroups,
        Kernel::SiluMul,
        Kernel::DeltaNetConv,
        Kernel::DeltaNetRule,
        Kernel::GatedRmsNorm,
        Kernel::QkNormRopePartialStore,
        Kernel::AttentionGate,
        Kernel::SharedExpertGate,
        Kernel::MoeCombine,
        Kernel::ResidualJoin,
        Kernel::MoeCombineNorm,
        Kernel::MoeCombineSharedNorm,
        Kernel::Argmax,
        Kernel::SampleTopK,
        Kernel::ApplyPenalties,
    ];

    /// All kernels: those that are not of a block type (`Kernel::FIXED`), then the six block kernels of each
    /// of [`BlockQuant::ALL`].
    pub const ALL: [Kernel; Kernel::FIXED.len() + 7 * BlockQuant::ALL.len()] = {
        let mut all = [Kernel::EmbedQ8; Kernel::FIXED.len() + 7 * BlockQuant::ALL.len()];
        let mut i = 0;
        while i < Kernel::FIXED.len() {
            all[i] = Kernel::FIXED[i];
            i += 1;
        }
        let mut q = 0;
        while q < BlockQuant::ALL.len() {
            let b = BlockQuant::ALL[q];
            all[i] = Kernel::BlockGemv(b);
            all[i + 1] = Kernel::BlockGemvRows4(b);
            all[i + 2] = Kernel::BlockGemm(b);
            all[i + 3] = Kernel::ExpertBlockGemv(b);
            all[i + 4] = Kernel::ExpertBlockGemm(b);
            all[i + 5] = Kernel::ExpertBlockGemvCombine(b);
            all[i + 6] = Kernel::ExpertBlockGemvRouted(b);
            i += 7;
            q += 1;
        }
        all
    };

    /// The kernel's name: its WGSL file stem and entry point.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::BlockGemv(q) => q.kernel_names()[0],
            Kernel::BlockGemvRows4(q) => q.kernel_names()[1],
            Kernel::BlockGemm(q) => q.kernel_names()[2],
            Kernel::ExpertBlockGemv(q) => q.kernel_names()[3],
            Kernel::ExpertBlockGemm(q) => q.kernel_names()[4],
            Kernel::ExpertBlockGemvCombine(q) => q.kernel_names()[5],
            Kernel::ExpertBlockGemvRouted(q) => q.kernel_names()[6],
            Kernel::EmbedQ8 => "embed_q8",
            Kernel::RmsNorm => "rms_norm",
            Kernel::Q8Gemv => "q8_gemv",
            Kernel::Q8GemvRows2 => "q8_gemv_rows2",
            Kernel::Q8GemmTiled => "q8_gemm_tiled",
            Kernel::Q8GemmI8 => "q8_gemm_i8",
            Kernel::Q8GemmCoop => "q8_gemm_coop",
            Kernel::QuantizeQ8 => "quantize_q8",
            Kernel::F32Gemv => "f32_gemv",
            Kernel::F32Gemm => "f32_gemm",
            Kernel::QkNormRope => "qk_norm_rope",
            Kernel::KvStore => "kv_store",
            Kernel::QkvRopeStore => "qkv_rope_store",
            Kernel::Attention => "attention",
            Kernel::AttentionTiled => "attention_tiled",
            Kernel::AttentionFlash => "attention_flash",
            Kernel::AttentionSplit => "attention_split",
            Kernel::AttentionCombine => "attention_combine",
            Kernel::Add => "add",
            Kernel::AddRmsNorm => "add_rms_norm",
            Kernel::RouterTopk => "router_topk",
            Kernel::RouterTopkSlots => "router_topk_slots",
            Kernel::ExpertQ8Gemv => "expert_q8_gemv",
            Kernel::ExpertQ8GemvCombine => "expert_q8_gemv_combine",
            Kernel::Q8GemvRows4 => "q8_gemv_rows4",
            Kernel::Q8GemvI8 => "q8_gemv_i8",
            Kernel::ExpertQ8GemvI8 => "expert_q8_gemv_i8",
            Kernel::ExpertQ8GemvXq => "expert_q8_gemv_xq",
            Kernel::ExpertQ8GemvRouted => "expert_q8_gemv_routed",
            Kernel::ExpertQ8GemvXqRouted => "expert_q8_gemv_xq_routed",
            Kernel::ExpertQ8GemvCombineI8 => "expert_q8_gemv_combine_i8",
            Kernel::ExpertQ4Gemv => "expert_q4_gemv",
            Kernel::ExpertQ4GemvCombine => "expert_q4_gemv_combine",
            Kernel::ExpertQ8GemmTiled => "expert_q8_gemm_tiled",
            Kernel::ExpertQ8GemmI8 => "expert_q8_gemm_i8",
            Kernel::ExpertQ4Gemm => "expert_q4_gemm",
            Kernel::ExpertQ8GemmCoop => "expert_q8_gemm_coop",
            Kernel::ExpertSlots => "expert_slots",
            Kernel::ExpertGroups => "expert_groups",
            Kernel::SiluMul => "silu_mul",
            Kernel::DeltaNetConv => "delta_net_conv",
            Kernel::DeltaNetRule => "delta_net_rule",
            Kernel::GatedRmsNorm => "gated_rms_norm",
            Kernel::QkNormRopePartialStore => "qk_norm_rope_partial_store",
            Kernel::AttentionGate => "attention_gate",
            Kernel::SharedExpertGate => "shared_expert_gate",
            Kernel::MoeCombine => "moe_combine",
            Kernel::ResidualJoin => "residual_join",
            Kernel::MoeCombineNorm => "moe_combine_norm",
            Kernel::MoeCombineSharedNorm => "moe_combine_shared_norm",
            Kernel::Argmax => "argmax",
            Kernel::SampleTopK => "sample_top_k",
            Kernel::ApplyPenalties => "apply_penalties",
        }
    }

    /// Values of the shader's `override` declarations without a default, set when its pipeline is built.
    pub fn constants(self) -> &'static [(&'static str, f64)] {
        match self {
            Kernel::Argmax => &[("SLICE", crate::ops::ARGMAX_SLICE as f64)],
            Kernel::AttentionSplit => &[("PASSES", crate::ops::LONG_SPLIT_PASSES as f64)],
            Kernel::ExpertQ8GemvXq | Kernel::ExpertQ8GemvXqRouted => {
                &[("GROUPS", crate::ops::EXPERT_GEMV_XQ_GROUPS as f64)]
            }
            _ => &[],
        }
    }

    /// Workgroup memory the kernel needs, bytes: 16 KiB (what every device offers) but for `attention_flash`
    /// and the dense cooperative-matrix GEMM,
    /// whose pipeline is built only where the device's limit allows.
    pub fn workgroup_storage(self) -> u32 {
        match self {
            Kernel::AttentionFlash | Kernel::Q8GemmCoop => 32 << 10,
            _ => 16 << 10,
        }
    }

    /// Whether the kernel runs on cooperative matrices (tensor cores): 16 × 16 × 16 products of f16
    /// into f32 in 32-lane subgroups, which wgpu offers as an experimental feature. Its pipeline is built
    /// only on devices with them ([`Context::cooperative_matrix`](crate::Context::cooperative_matrix)).
    pub fn needs_cooperative_matrix(self) -> bool {
        matches!(self, Kernel::Q8GemmCoop | Kernel::ExpertQ8GemmCoop)
    }

    /// Whether the kernel has a subgroup variant.
    pub fn has_subgroup_variant(self) -> bool {
        matches!(
            self,
            Kernel::Q8Gemv
                | Kernel::BlockGemv(_)
                | Kernel::BlockGemvRows4(_)
                | Kernel::ExpertBlockGemv(_)
                | Kernel::ExpertBlockGemvCombine(_)
                | Kernel::ExpertBlockGemvRouted(_)
                | Kernel::AttentionSplit
                | Kernel::Q8GemvRows2
                | Kernel::ExpertQ8Gemv
                | Kernel::ExpertQ8GemvCombine
                | Kernel::Q8GemvRows4
                | Kernel::Q8GemvI8
                | Kernel::ExpertQ8GemvI8
                | Kernel::ExpertQ8GemvXq
                | Kernel::ExpertQ8GemvRouted
                | Kernel::ExpertQ8GemvXqRouted
                | Kernel::ExpertQ8GemvCombineI8
                | Kernel::ExpertQ4Gemv
                | Kernel::ExpertQ4GemvCombine
                | Kernel::DeltaNetRule
        )
    }

    /// The size in bytes of the kernel's params struct (mirrored in its WGSL `Params`).
    pub fn params_size(self) -> usize {
        use crate::ops::*;
        match self {
            Kernel::EmbedQ8 => size_of::<EmbedQ8Params>(),
            Kernel::RmsNorm => size_of::<RmsNormParams>(),
            Kernel::Q8Gemv | Kernel::Q8GemvRows2 | Kernel::Q8GemvRows4 | Kernel::Q8GemvI8 => {
                size_of::<Q8GemvParams>()
            }
            Kernel::BlockGemv(_) | Kernel::BlockGemvRows4(_) => size_of::<KQuantGemvParams>(),
            Kernel::Q8GemmTiled | Kernel::Q8GemmI8 | Kernel::Q8GemmCoop => size_of::<Q8GemmParams>(),
            Kernel::QuantizeQ8 => size_of::<QuantizeQ8Params>(),
            Kernel::F32Gemv => size_of::<F32GemvParams>(),
            Kernel::F32Gemm => size_of::<F32GemmParams>(),
            Kernel::QkNormRope => size_of::<QkNormRopeParams>(),
            Kernel::KvStore => size_of::<KvStoreParams>(),
            Kernel::QkvRopeStore => size_of::<QkvRopeStoreParams>(),
            Kernel::Attention | Kernel::AttentionTiled | Kernel::AttentionFlash => {
                size_of::<AttentionParams>()
            }
            Kernel::AttentionSplit => size_of::<AttentionSplitParams>(),
            Kernel::AttentionCombine => size_of::<AttentionCombineParams>(),
            Kernel::Add => size_of::<AddParams>(),
            Kernel::AddRmsNorm => size_of::<RmsNormParams>(),
            Kernel::RouterTopk | Kernel::RouterTopkSlots => size_of::<RouterTopkParams>(),
            Kernel::ExpertQ8Gemv
            | Kernel::ExpertQ8GemvI8
            | Kernel::ExpertQ8GemvXq
            | Kernel::ExpertQ8GemvRouted
            | Kernel::ExpertQ8GemvXqRouted => size_of::<ExpertQ8GemvParams>(),
            Kernel::ExpertQ8GemvCombine | Kernel::ExpertQ8GemvCombineI8 | Kernel::ExpertQ4GemvCombine => {
                size_of::<ExpertQ8GemvCombineParams>()
            }
            Kernel::ExpertQ4Gemv => size_of::<ExpertQ4GemvParams>(),
            Kernel::ExpertQ4Gemm
            | Kernel::ExpertQ8GemmTiled
            | Kernel::ExpertQ8GemmI8
            | Kernel::ExpertQ8GemmCoop => size_of::<ExpertQ8GemmParams>(),
            Kernel::ExpertBlockGemv(_) | Kernel::ExpertBlockGemm(_) => size_of::<ExpertKQuantGemvParams>(),
            Kernel::ExpertBlockGemvCombine(_) => size_of::<ExpertKQuantCombineParams>(),
            Kernel::ExpertBlockGemvRouted(_) => size_of::<ExpertKQuantRoutedParams>(),
            Kernel::BlockGemm(_) => size_of::<Q8GemmParams>(),
            Kernel::ExpertSlots => size_of::<ExpertSlotsParams>(),
            Kernel::ExpertGroups => size_of::<ExpertGroupsParams>(),
            Kernel::SiluMul => size_of::<SiluMulParams>(),
            Kernel::DeltaNetConv => size_of::<DeltaNetConvParams>(),
            Kernel::DeltaNetRule => size_of::<DeltaNetRuleParams>(),
            Kernel::GatedRmsNorm => size_of::<GatedRmsNormParams>(),
            Kernel::QkNormRopePartialStore => size_of::<QkNormRopePartialStoreParams>(),
            Kernel::AttentionGate => size_of::<AttentionGateParams>(),
            Kernel::SharedExpertGate => size_of::<SharedExpertGateParams>(),
            Kernel::MoeCombine => size_of::<MoeCombineParams>(),
            Kernel::ResidualJoin => size_of::<ResidualJoinParams>(),
            Kernel::MoeCombineNorm | Kernel::MoeCombineSharedNorm => size_of::<MoeCombineNormParams>(),
            Kernel::Argmax => size_of::<ArgmaxParams>(),
            Kernel::SampleTopK => size_of::<SampleTopKParams>(),
            Kernel::ApplyPenalties => size_of::<ApplyPenaltiesParams>(),
        }
    }

    /// The WGSL file as written.
    fn file(self) -> &'static str {
        match self {
            Kernel::EmbedQ8 => include_str!("wgsl/embed_q8.wgsl"),
            Kernel::RmsNorm => include_str!("wgsl/rms_norm.wgsl"),
            Kernel::Q8Gemv => include_str!("wgsl/q8_gemv.wgsl"),
            Kernel::BlockGemv(_) | Kernel::BlockGemvRows4(_) => include_str!("wgsl/kquant_gemv.wgsl"),
            Kernel::Q8GemvRows2 => include_str!("wgsl/q8_gemv_rows2.wgsl"),
            Kernel::Q8GemvRows4 => include_str!("wgsl/q8_gemv_rows4.wgsl"),
            Kernel::Q8GemvI8 => Kernel::Q8GemvRows4.file(),
            Kernel::Q8GemmTiled => include_str!("wgsl/q8_gemm_tiled.wgsl"),
            Kernel::Q8GemmI8 => Kernel::Q8GemmTiled.file(),
            Kernel::Q8GemmCoop => include_str!("wgsl/q8_gemm_coop.wgsl"),
            Kernel::QuantizeQ8 => include_str!("wgsl/quantize_q8.wgsl"),
            Kernel::F32Gemv => include_str!("wgsl/f32_gemv.wgsl"),
            Kernel::F32Gemm => include_str!("wgsl/f32_gemm.wgsl"),
            Kernel::QkNormRope => include_str!("wgsl/qk_norm_rope.wgsl"),
            Kernel::KvStore => include_str!("wgsl/kv_store.wgsl"),
            Kernel::QkvRopeStore => include_str!("wgsl/qkv_rope_store.wgsl"),
            Kernel::Attention => include_str!("wgsl/attention.wgsl"),
            Kernel::AttentionTiled => include_str!("wgsl/attention_tiled.wgsl"),
            Kernel::AttentionFlash => include_str!("wgsl/attention_flash.wgsl"),
            Kernel::AttentionSplit => include_str!("wgsl/attention_split.wgsl"),
            Kernel::AttentionCombine => include_str!("wgsl/attention_combine.wgsl"),
            Kernel::Add => include_str!("wgsl/add.wgsl"),
            Kernel::AddRmsNorm => include_str!("wgsl/add_rms_norm.wgsl"),
            Kernel::RouterTopk => include_str!("wgsl/router_topk.wgsl"),
            Kernel::RouterTopkSlots => include_str!("wgsl/router_topk_slots.wgsl"),
            Kernel::ExpertQ8Gemv => include_str!("wgsl/expert_q8_gemv.wgsl"),
            Kernel::ExpertQ8GemvCombine => include_str!("wgsl/expert_q8_gemv_combine.wgsl"),
            Kernel::ExpertQ4Gemv | Kernel::ExpertQ8GemvI8 | Kernel::ExpertQ8GemvXq => {
                Kernel::ExpertQ8Gemv.file()
            }
            Kernel::ExpertQ8GemvRouted => include_str!("wgsl/expert_q8_gemv_routed.wgsl"),
            Kernel::ExpertQ8GemvXqRouted => Kernel::ExpertQ8GemvRouted.file(),
            Kernel::ExpertQ4GemvCombine | Kernel::ExpertQ8GemvCombineI8 => Kernel::ExpertQ8GemvCombine.file(),
            Kernel::ExpertQ8GemmTiled => include_str!("wgsl/expert_q8_gemm_tiled.wgsl"),
            Kernel::ExpertQ8GemmI8 | Kernel::ExpertQ8GemmCoop => Kernel::ExpertQ8GemmTiled.file(),
            Kernel::ExpertBlockGemv(_) => include_str!("wgsl/expert_kquant_gemv.wgsl"),
            Kernel::ExpertBlockGemm(_) => include_str!("wgsl/expert_kquant_gemm.wgsl"),
            Kernel::ExpertBlockGemvCombine(_) => include_str!("wgsl/expert_kquant_gemv_combine.wgsl"),
            Kernel::ExpertBlockGemvRouted(_) => include_str!("wgsl/expert_kquant_gemv_routed.wgsl"),
            Kernel::BlockGemm(_) => include_str!("wgsl/kquant_gemm.wgsl"),
            Kernel::ExpertQ4Gemm => Kernel::ExpertQ8GemmTiled.file(),
            Kernel::ExpertSlots => include_str!("wgsl/expert_slots.wgsl"),
            Kernel::ExpertGroups => include_str!("wgsl/expert_groups.wgsl"),
            Kernel::SiluMul => include_str!("wgsl/silu_mul.wgsl"),
            Kernel::DeltaNetConv => include_str!("wgsl/delta_net_conv.wgsl"),
            Kernel::DeltaNetRule => include_str!("wgsl/delta_net_rule.wgsl"),
            Kernel::GatedRmsNorm => include_str!("wgsl/gated_rms_norm.wgsl"),
            Kernel::QkNormRopePartialStore => include_str!("wgsl/qk_norm_rope_partial_store.wgsl"),
            Kernel::AttentionGate => include_str!("wgsl/attention_gate.wgsl"),
            Kernel::SharedExpertGate => include_str!("wgsl/shared_expert_gate.wgsl"),
            Kernel::MoeCombine => include_str!("wgsl/moe_combine.wgsl"),
            Kernel::ResidualJoin => include_str!("wgsl/residual_join.wgsl"),
            Kernel::MoeCombineNorm => include_str!("wgsl/moe_combine_norm.wgsl"),
            Kernel::MoeCombineSharedNorm => Kernel::MoeCombineNorm.file(),
            Kernel::Argmax => include_str!("wgsl/argmax.wgsl"),
            Kernel::SampleTopK => include_str!("wgsl/sample_top_k.wgsl"),
            Kernel::ApplyPenalties => include_str!("wgsl/apply_penalties.wgsl"),
        }
    }

    /// The WGSL source compiled for this kernel: the file (for the int8 GEMMs and GEMVs and the Q4_0 expert
    /// kernels, the Q8_0 kernel's file with its entry point renamed) followed by the helper files it calls
    /// (for kernels with a subgroup variant, the whole with its `/*SG_ARGS*/`, `/*SG_PARAMS*/` and
    /// `/*SG_CALL*/` filled in): the row sums (plain or subgroup) and `q8_helpers.wgsl` for the quantised
    /// GEMVs and GEMMs (a row walk before them: for the slot-indexed expert GEMVs
    /// `expert_q8_pair_rows.wgsl`, for the routed ones `router_topk_core.wgsl` too, then
    /// `expert_q8_rows.wgsl`, `expert_q4_rows.wgsl`, `expert_q8i8_rows.wgsl` or `expert_q8xq_rows.wgsl`;
    /// for `q8_gemv_rows4` / `q8_gemv_i8` the same walks, the int8 walk with `q8i8_input.wgsl` and its
    /// `pair_max` helper, plain or subgroup; `q8_tile.wgsl` and its weights' helper, Q8_0 or Q4_0, for the
    /// tiled GEMMs, `q8_tile_i8.wgsl` for the int8 ones), `q8_helpers.wgsl` alone for `quantize_q8` and
    /// `f32_gemv` (whose norm may quantise), the row helpers (plain or subgroup) for the split attention,
    /// `attention_tile_load.wgsl` for the chunk attention kernels, the 4-row walk (`kquant_dot4.wgsl`), the
    /// K-quant block helper (`kquant_q4_k.wgsl`, `kquant_q6_k.wgsl`, …) and the row sums for the K-quant GEMVs,
    /// `expert_combine_picks.wgsl` for the GEMV-combines, `rms_scale.wgsl`
    /// for the norm kernels (with `moe_combine_plain.wgsl` or `moe_combine_shared.wgsl`, what the combines
    /// add onto), `router_topk_core.wgsl` for the routers, `sample_step.wgsl` (the per-step
    /// struct) for the sampler's two kernels. `subgroups` is ignored by kernels without a variant.
    pub fn source(self, subgroups: bool) -> Cow<'static, str> {
        let mut body = Cow::Borrowed(self.file());
        if let Some(shared) = self.entry_renamed_from() {
            let entry = |k: Kernel| format!("fn {}(", k.name());
            body = Cow::Owned(body.replace(&entry(shared), &entry(self)));
        }
        if self.needs_cooperative_matrix() {
            body =
                Cow::Owned(body.replacen("enable f16;", "enable f16;\nenable wgpu_cooperative_matrix;", 1));
        }
        let helpers = self.helpers(subgroups);
        if !helpers.is_empty() {
            body = Cow::Owned(
                std::iter::once(&*body).chain(helpers.iter().copied()).collect::<Vec<_>>().join("\n"),
            );
        }
        if self.has_subgroup_variant() {
            // Entry points take the subgroup builtins (`/*SG_ARGS*/`), functions that pass them on take
            // them as parameters (`/*SG_PARAMS*/`), and calls pass them (`/*SG_CALL*/`).
            let [args, params, call] = if subgroups {
                [
                    ", @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(subgroup_size) sg_size: u32",
                    ", sg_lane: u32, sg_size: u32",
                    ", sg_lane, sg_size",
                ]
            } else {
                ["", "", ""]
            };
            body = Cow::Owned(
                body.replace("/*SG_ARGS*/", args)
                    .replace("/*SG_PARAMS*/", params)
                    .replace("/*SG_CALL*/", call),
            );
        }
        body
    }

    /// The kernel whose file this one shares, with its entry point renamed to this one's name: the int8
    /// GEMMs and GEMVs and the Q4_0 expert kernels run the Q8_0 kernels' files with other helpers appended
    /// (tiles, or a row walk), the Q6_K GEMVs the Q4_K ones' with its block helper.
    fn entry_renamed_from(self) -> Option<Kernel> {
        match self {
            Kernel::Q8GemmI8 => Some(Kernel::Q8GemmTiled),
            Kernel::Q8GemvI8 => Some(Kernel::Q8GemvRows4),
            Kernel::BlockGemv(q) if q != BlockQuant::Q4K => Some(Kernel::BlockGemv(BlockQuant::Q4K)),
            Kernel::BlockGemvRows4(q) if q != BlockQuant::Q4K => {
                Some(Kernel::BlockGemvRows4(BlockQuant::Q4K))
            }
            Kernel::BlockGemm(q) if q != BlockQuant::Q4K => Some(Kernel::BlockGemm(BlockQuant::Q4K)),
            Kernel::ExpertBlockGemv(q) if q != BlockQuant::Q4K => {
                Some(Kernel::ExpertBlockGemv(BlockQuant::Q4K))
            }
            Kernel::ExpertBlockGemm(q) if q != BlockQuant::Q4K => {
                Some(Kernel::ExpertBlockGemm(BlockQuant::Q4K))
            }
            Kernel::ExpertBlockGemvCombine(q) if q != BlockQuant::Q4K => {
                Some(Kernel::ExpertBlockGemvCombine(BlockQuant::Q4K))
            }
            Kernel::ExpertBlockGemvRouted(q) if q != BlockQuant::Q4K => {
                Some(Kernel::ExpertBlockGemvRouted(BlockQuant::Q4K))
            }
            Kernel::ExpertQ8GemmI8 | Kernel::ExpertQ4Gemm | Kernel::ExpertQ8GemmCoop => {
                Some(Kernel::ExpertQ8GemmTiled)
            }
            Kernel::ExpertQ4Gemv | Kernel::ExpertQ8GemvI8 | Kernel::ExpertQ8GemvXq => {
                Some(Kernel::ExpertQ8Gemv)
            }
            Kernel::ExpertQ8GemvXqRouted => Some(Kernel::ExpertQ8GemvRouted),
            Kernel::MoeCombineSharedNorm => Some(Kernel::MoeCombineNorm),
            Kernel::ExpertQ4GemvCombine | Kernel::ExpertQ8GemvCombineI8 => Some(Kernel::ExpertQ8GemvCombine),
            _ => None,
        }
    }

    /// The helper files appended to the kernel's own (see [`Kernel::source`]).
    fn helpers(self, subgroups: bool) -> Vec<&'static str> {
        let rows = if subgroups { ROW_SUM_SUBGROUP } else { ROW_SUM_PLAIN };
        match self {
            Kernel::BlockGemm(q) | Kernel::ExpertBlockGemm(q) => {
                [KQUANT_TILE].into_iter().chain(q.block_helpers().iter().copied()).collect()
            }
            // kquant_gemv.wgsl holds both GEMVs, so both take the 4-row walk.
            Kernel::BlockGemv(q) | Kernel::BlockGemvRows4(q) | Kernel::ExpertBlockGemv(q) => {
                [KQUANT_DOT4].into_iter().chain(q.block_helpers().iter().copied()).chain([rows]).collect()
            }
            Kernel::ExpertBlockGemvRouted(q) => [KQUANT_DOT4, ROUTER_TOPK_CORE, EXPERT_ROUTE_PAIR]
                .into_iter()
                .chain(q.block_helpers().iter().copied())
                .chain([rows])
                .collect(),
            Kernel::ExpertBlockGemvCombine(q) => [KQUANT_DOT4, EXPERT_COMBINE_PICKS]
                .into_iter()
                .chain(q.block_helpers().iter().copied())
                .chain([rows])
                .collect(),
            _ => self.fixed_helpers(subgroups).to_vec(),
        }
    }

    /// [`Kernel::helpers`] of the kernels that are not of a block type.
    fn fixed_helpers(self, subgroups: bool) -> &'static [&'static str] {
        match self {
            Kernel::MoeCombineNorm => &[RMS_SCALE, MOE_COMBINE_PLAIN],
            Kernel::MoeCombineSharedNorm => &[RMS_SCALE, MOE_COMBINE_SHARED],
            Kernel::RmsNorm
            | Kernel::AddRmsNorm
            | Kernel::QkNormRope
            | Kernel::QkvRopeStore
            | Kernel::GatedRmsNorm
            | Kernel::QkNormRopePartialStore => &[RMS_SCALE],
            Kernel::RouterTopk | Kernel::RouterTopkSlots => &[ROUTER_TOPK_CORE],
            Kernel::SampleTopK | Kernel::ApplyPenalties => &[SAMPLE_STEP],
            Kernel::Q8GemmTiled | Kernel::ExpertQ8GemmTiled => &[Q8_TILE, Q8_TILE_WEIGHTS, Q8_HELPERS],
            Kernel::ExpertQ4Gemm => &[Q8_TILE, Q4_TILE_WEIGHTS, Q8_HELPERS],
            Kernel::Q8GemmI8 | Kernel::ExpertQ8GemmI8 => &[Q8_TILE_I8, Q8_HELPERS],
            Kernel::ExpertQ8GemmCoop => &[Q8_TILE_COOP, Q8_HELPERS],
            Kernel::Q8GemmCoop => &[Q8_HELPERS],
            Kernel::QuantizeQ8 | Kernel::F32Gemv => &[Q8_HELPERS],
            Kernel::AttentionTiled | Kernel::AttentionFlash => &[ATTENTION_TILE_LOAD],
            Kernel::AttentionSplit if subgroups => &[ATTENTION_ROWS_SUBGROUP],
            Kernel::AttentionSplit => &[ATTENTION_ROWS_PLAIN],
            Kernel::ExpertQ8Gemv if subgroups => {
                &[EXPERT_Q8_PAIR_ROWS, EXPERT_Q8_ROWS, ROW_SUM_SUBGROUP, Q8_HELPERS]
            }
            Kernel::ExpertQ8Gemv => &[EXPERT_Q8_PAIR_ROWS, EXPERT_Q8_ROWS, ROW_SUM_PLAIN, Q8_HELPERS],
            Kernel::ExpertQ8GemvRouted if subgroups => &[
                EXPERT_Q8_PAIR_ROWS,
                ROUTER_TOPK_CORE,
                EXPERT_ROUTE_PAIR,
                EXPERT_Q8_ROWS,
                ROW_SUM_SUBGROUP,
                Q8_HELPERS,
            ],
            Kernel::ExpertQ8GemvRouted => &[
                EXPERT_Q8_PAIR_ROWS,
                ROUTER_TOPK_CORE,
                EXPERT_ROUTE_PAIR,
                EXPERT_Q8_ROWS,
                ROW_SUM_PLAIN,
                Q8_HELPERS,
            ],
            Kernel::Q8GemvRows4 if subgroups => &[EXPERT_Q8_ROWS, ROW_SUM_SUBGROUP, Q8_HELPERS],
            Kernel::Q8GemvRows4 => &[EXPERT_Q8_ROWS, ROW_SUM_PLAIN, Q8_HELPERS],
            Kernel::ExpertQ8GemvCombine if subgroups => {
                &[EXPERT_Q8_ROWS, EXPERT_COMBINE_PICKS, ROW_SUM_SUBGROUP, Q8_HELPERS]
            }
            Kernel::ExpertQ8GemvCombine => &[EXPERT_Q8_ROWS, EXPERT_COMBINE_PICKS, ROW_SUM_PLAIN, Q8_HELPERS],
            Kernel::ExpertQ8GemvI8 if subgroups => &[
                EXPERT_Q8_PAIR_ROWS,
                EXPERT_Q8I8_ROWS,
                Q8I8_INPUT,
                PAIR_MAX_SUBGROUP,
                ROW_SUM_SUBGROUP,
                Q8_HELPERS,
            ],
            Kernel::ExpertQ8GemvI8 => &[
                EXPERT_Q8_PAIR_ROWS,
                EXPERT_Q8I8_ROWS,
                Q8I8_INPUT,
                PAIR_MAX_PLAIN,
                ROW_SUM_PLAIN,
                Q8_HELPERS,
            ],
            Kernel::Q8GemvI8 if subgroups => {
                &[EXPERT_Q8I8_ROWS, Q8I8_INPUT, PAIR_MAX_SUBGROUP, ROW_SUM_SUBGROUP, Q8_HELPERS]
            }
            Kernel::Q8GemvI8 => &[EXPERT_Q8I8_ROWS, Q8I8_INPUT, PAIR_MAX_PLAIN, ROW_SUM_PLAIN, Q8_HELPERS],
            Kernel::ExpertQ8GemvCombineI8 if subgroups => &[
                EXPERT_Q8I8_ROWS,
                EXPERT_COMBINE_PICKS,
                Q8I8_INPUT,
                PAIR_MAX_SUBGROUP,
                ROW_SUM_SUBGROUP,
                Q8_HELPERS,
            ],
            Kernel::ExpertQ8GemvCombineI8 => &[
                EXPERT_Q8I8_ROWS,
                EXPERT_COMBINE_PICKS,
                Q8I8_INPUT,
                PAIR_MAX_PLAIN,
                ROW_SUM_PLAIN,
                Q8_HELPERS,
            ],
            Kernel::ExpertQ8GemvXq if subgroups => {
                &[EXPERT_Q8_PAIR_ROWS, EXPERT_Q8XQ_ROWS, ROW_SUM_SUBGROUP, Q8_HELPERS]
            }
            Kernel::ExpertQ8GemvXq => &[EXPERT_Q8_PAIR_ROWS, EXPERT_Q8XQ_ROWS, ROW_SUM_PLAIN, Q8_HELPERS],
            Kernel::ExpertQ8GemvXqRouted if subgroups => &[
                EXPERT_Q8_PAIR_ROWS,
                ROUTER_TOPK_CORE,
                EXPERT_ROUTE_PAIR,
                EXPERT_Q8XQ_ROWS,
                ROW_SUM_SUBGROUP,
                Q8_HELPERS,
            ],
            Kernel::ExpertQ8GemvXqRouted => &[
                EXPERT_Q8_PAIR_ROWS,
                ROUTER_TOPK_CORE,
                EXPERT_ROUTE_PAIR,
                EXPERT_Q8XQ_ROWS,
                ROW_SUM_PLAIN,
                Q8_HELPERS,
            ],
            Kernel::ExpertQ4Gemv if subgroups => {
                &[EXPERT_Q8_PAIR_ROWS, EXPERT_Q4_ROWS, ROW_SUM_SUBGROUP, Q8_HELPERS]
            }
            Kernel::ExpertQ4Gemv => &[EXPERT_Q8_PAIR_ROWS, EXPERT_Q4_ROWS, ROW_SUM_PLAIN, Q8_HELPERS],
            Kernel::ExpertQ4GemvCombine if subgroups => {
                &[EXPERT_Q4_ROWS, EXPERT_COMBINE_PICKS, ROW_SUM_SUBGROUP, Q8_HELPERS]
            }
            Kernel::ExpertQ4GemvCombine => &[EXPERT_Q4_ROWS, EXPERT_COMBINE_PICKS, ROW_SUM_PLAIN, Q8_HELPERS],
            Kernel::DeltaNetRule if subgroups => &[QUAD_SUM_SUBGROUP],
            Kernel::DeltaNetRule => &[QUAD_SUM_PLAIN],
            k if k.has_subgroup_variant() && subgroups => &[ROW_SUM_SUBGROUP, Q8_HELPERS],
            k if k.has_subgroup_variant() => &[ROW_SUM_PLAIN, Q8_HELPERS],
            _ => &[],
        }
    }
}

/// A buffer region a kernel binds: the buffer and a byte offset (a multiple of the device's storage
/// offset alignment, 256 on the devices we know). The binding's length comes from the shapes.
#[derive(Clone, Copy, Debug)]
pub struct View<'a> {
    /// The buffer.
    pub buffer: &'a wgpu::Buffer,
    /// Byte offset of the region.
    pub offset: u64,
}

impl<'a> View<'a> {
    /// A region starting `offset` bytes into `buffer`.
    pub fn at(buffer: &'a wgpu::Buffer, offset: u64) -> Self {
        Self { buffer, offset }
    }
}

impl<'a> From<&'a wgpu::Buffer> for View<'a> {
    fn from(buffer: &'a wgpu::Buffer) -> Self {
        Self { buffer, offset: 0 }
    }
}

/// A Q8_0 matrix `[rows, cols]` as two planes: int8 values (row-major, `cols` bytes a row) and f16 scales
/// (`cols / 32` a row). Dequantised value = `f32(q) * f32(scale)`.
#[derive(Clone, Copy, Debug)]
pub struct Q8Matrix<'a> {
    /// The int8 plane, `rows * cols` bytes.
    pub q: View<'a>,
    /// The scale plane, `rows * cols / 32` f16.
    pub scales: View<'a>,
    /// Rows (output length of a GEMV).
    pub rows: u32,
    /// Columns (input length), a multiple of 32.
    pub cols: u32,
}

/// A bound kernel: pipeline, bind groups and params, built once; [`Dispatch::record`] records it.
/// Values that change per step (token ids, positions, RoPE tables, picks) live in the bound buffers.
#[derive(Debug)]
pub struct Dispatch {
    kernel: Kernel,
    pipeline: wgpu::ComputePipeline,
    groups: Vec<(wgpu::BindGroup, [u32; 3])>,
    _params: wgpu::Buffer,
}

impl Dispatch {
    /// Records the kernel (one dispatch per part) into `pass`. Never submits.
    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>) {
        pass.set_pipeline(&self.pipeline);
        for (group, [x, y, z]) in &self.groups {
            pass.set_bind_group(0, group, &[]);
            pass.dispatch_workgroups(*x, *y, *z);
        }
    }

    /// The kernel bound.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// How many dispatches (binding parts) one record makes.
    pub fn parts(&self) -> usize {
        self.groups.len()
    }
}

/// The pipeline cache: each kernel compiled for a device the first time it is launched (an engine uses a
/// fraction of them: the types of its file, its paths), plus the limits launchers validate against.
#[derive(Debug)]
pub struct Kernels {
    device: wgpu::Device,
    /// One per kernel of [`Kernel::ALL`], filled on first use.
    pipelines: Vec<OnceLock<wgpu::ComputePipeline>>,
    /// `attention_split` compiled with `PASSES = SHORT_SPLIT_PASSES` (half-size blocks, for short caches); the
    /// main pipeline has `LONG_SPLIT_PASSES`.
    attention_split_short: OnceLock<wgpu::ComputePipeline>,
    subgroups: bool,
    /// Compiled without wgpu's loop counters and divisor tests (see [`Kernels::compile`]).
    trusted: bool,
    /// Whether the device has the cooperative matrices some kernels need.
    cooperative: bool,
    max_binding: u64,
    storage_align: u64,
    uniform_align: u64,
    max_groups: u32,
    /// The device's workgroup memory limit, bytes.
    workgroup_storage: u32,
    /// Bound where a kernel's optional output is off (the shader writes nothing there): two disjoint
    /// ranges, one a storage alignment after the other.
    placeholder: wgpu::Buffer,
}

/// Bytes of each range of [`Kernels::placeholder`].
pub(crate) const PLACEHOLDER_BYTES: u64 = 16;

impl Kernels {
    /// The kernels of `ctx`, with the subgroup variants when `ctx.subgroups` (each compiled on first use).
    pub fn new(ctx: &Context) -> Self {
        Self::with_subgroups(ctx, ctx.subgroups)
    }

    /// The kernels, choosing the subgroup variants or not (`true` needs `ctx.subgroups`;
    /// otherwise the plain variants are used).
    pub fn with_subgroups(ctx: &Context, subgroups: bool) -> Self {
        Self::build(ctx, subgroups, true)
    }

    /// Like [`Kernels::with_subgroups`] but with wgpu's full runtime checks in the shaders, as
    /// `create_shader_module` compiles them (a counter in every loop, a zero test before every integer
    /// division); the benches compare the two.
    pub fn with_checked_shaders(ctx: &Context, subgroups: bool) -> Self {
        Self::build(ctx, subgroups, false)
    }

    fn build(ctx: &Context, subgroups: bool, trusted: bool) -> Self {
        let device = ctx.device.clone();
        let placeholder = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("unused binding"),
            size: u64::from(ctx.limits.min_storage_buffer_offset_alignment) + PLACEHOLDER_BYTES,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        });
        Self {
            device,
            pipelines: Kernel::ALL.iter().map(|_| OnceLock::new()).collect(),
            attention_split_short: OnceLock::new(),
            subgroups: subgroups && ctx.subgroups,
            trusted,
            cooperative: ctx.cooperative_matrix,
            max_binding: ctx.limits.max_storage_buffer_binding_size,
            storage_align: u64::from(ctx.limits.min_storage_buffer_offset_alignment),
            uniform_align: u64::from(ctx.limits.min_uniform_buffer_offset_alignment),
            max_groups: ctx.limits.max_compute_workgroups_per_dimension,
            workgroup_storage: ctx.limits.max_compute_workgroup_storage_size,
            placeholder,
        }
    }

    /// Compiles `k` with `constants` for its `override` declarations.
    fn compile(&self, k: Kernel, constants: &[(&str, f64)]) -> wgpu::ComputePipeline {
        // Bounds checks stay. The loop counter wgpu adds to every loop (against infinite loops) kept
        // the H200's compiler from unrolling and pipelining our loops, and the divisor tests cost a
        // select per division; see BENCHMARKS.md.
        let mut checks = wgpu::ShaderRuntimeChecks::checked();
        if self.trusted {
            checks.force_loop_bounding = false;
            checks.int_div_checks = false;
        }
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some(k.name()),
            source: wgpu::ShaderSource::Wgsl(k.source(self.subgroups)),
        };
        // SAFETY: every loop of these shaders is bounded by its parameters, and every divisor is a
        // constant or a parameter the launchers check to be non-zero, so the two checks left out
        // guard against nothing that can happen; buffer and array bounds checks stay.
        let module = unsafe { self.device.create_shader_module_trusted(desc, checks) };
        self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(k.name()),
            layout: None,
            module: &module,
            entry_point: Some(k.name()),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants,
                // Every kernel writes its workgroup memory before reading it.
                zero_initialize_workgroup_memory: false,
            },
            cache: None,
        })
    }

    /// Lowers the binding size the splitting launchers aim for (tests use it to exercise the split on
    /// small matrices); values above the device limit are clamped to it.
    pub fn with_max_binding(mut self, bytes: u64) -> Self {
        self.max_binding = self.max_binding.min(bytes);
        self
    }

    /// Whether the subgroup variants were compiled.
    pub fn subgroups(&self) -> bool {
        self.subgroups
    }

    /// The largest binding the launchers make, in bytes.
    pub fn max_binding(&self) -> u64 {
        self.max_binding
    }

    /// The storage offset alignment views and split points must keep.
    pub fn storage_align(&self) -> u64 {
        self.storage_align
    }

    /// `attention_split` with two passes a block (see [`AttentionShape::split_passes`](crate::AttentionShape::split_passes)).
    pub(crate) fn attention_split_short(&self) -> &wgpu::ComputePipeline {
        self.attention_split_short.get_or_init(|| {
            self.compile(Kernel::AttentionSplit, &[("PASSES", f64::from(crate::ops::SHORT_SPLIT_PASSES))])
        })
    }

    /// The device's workgroup memory limit, bytes.
    pub fn workgroup_storage(&self) -> u32 {
        self.workgroup_storage
    }

    /// Whether `k` runs on this device: it fits the workgroup memory ([`Kernel::workgroup_storage`]) and
    /// the device has the cooperative matrices it may need.
    pub fn has(&self, k: Kernel) -> bool {
        k.workgroup_storage() <= self.workgroup_storage && (self.cooperative || !k.needs_cooperative_matrix())
    }

    /// Whether the device runs the cooperative-matrix GEMMs ([`Kernel::needs_cooperative_matrix`]).
    pub fn cooperative_matrix(&self) -> bool {
        self.has(Kernel::Q8GemmCoop)
    }

    /// [`Error::NoCooperativeMatrix`] unless `k`, a cooperative-matrix kernel, runs here.
    pub(crate) fn ensure_cooperative_matrix(&self, k: Kernel) -> Result<()> {
        if self.has(k) { Ok(()) } else { Err(Error::NoCooperativeMatrix { kernel: k.name() }) }
    }

    /// The pipeline of `k`, compiled on first use; launchers of kernels that may be missing check
    /// [`Kernels::has`] first.
    pub(crate) fn pipeline(&self, k: Kernel) -> &wgpu::ComputePipeline {
        assert!(self.has(k), "launchers check that {} runs on the device", k.name());
        let i = Kernel::ALL.iter().position(|&x| x == k).expect("every kernel is in ALL");
        self.pipelines[i].get_or_init(|| self.compile(k, k.constants()))
    }

    /// A small storage range to bind where a kernel's optional output is off: range `i` of two (0 or 1),
    /// so that a kernel with two such outputs binds no writable range twice (aliasing, which WebGPU
    /// forbids).
    pub(crate) fn placeholder(&self, i: u64) -> View<'_> {
        View::at(&self.placeholder, i * self.storage_align)
    }

    /// Starts binding `kernel`.
    pub(crate) fn binder(&self, kernel: Kernel) -> Binder<'_> {
        Binder { k: self, kernel }
    }
}

/// Validation and bind-group building shared by the launchers.
pub(crate) struct Binder<'k> {
    k: &'k Kernels,
    kernel: Kernel,
}

impl Binder<'_> {
    /// The kernel being bound.
    pub(crate) fn kernel(&self) -> Kernel {
        self.kernel
    }
}

/// One storage binding: a validated buffer range.
pub(crate) struct Bound<'a> {
    buffer: &'a wgpu::Buffer,
    offset: u64,
    size: u64,
}

impl<'k> Binder<'k> {
    /// A shape error.
    pub(crate) fn shape(&self, what: impl Into<String>) -> Error {
        Error::Shape { kernel: self.kernel.name(), what: what.into() }
    }

    /// Fails with a shape error unless `ok`.
    pub(crate) fn ensure(&self, ok: bool, what: impl FnOnce() -> String) -> Result<()> {
        if ok { Ok(()) } else { Err(self.shape(what())) }
    }

    /// Checks a workgroup count against the device limit.
    pub(crate) fn groups(&self, what: &str, n: u64) -> Result<u32> {
        let max = u64::from(self.k.max_groups);
        if n == 0 || n > max {
            return Err(self.shape(format!("{what} needs {n} workgroups along one axis; allowed 1..={max}")));
        }
        Ok(n as u32)
    }

    /// Validates `bytes` bytes of `view` (plus `extra` offset, from a split) as one storage binding.
    pub(crate) fn storage<'a>(
        &self,
        name: &'static str,
        view: View<'a>,
        extra: u64,
        bytes: u64,
    ) -> Result<Bound<'a>> {
        let kernel = self.kernel.name();
        let offset = view.offset + extra;
        if !offset.is_multiple_of(self.k.storage_align) {
            return Err(Error::Misaligned { kernel, name, offset, alignment: self.k.storage_align });
        }
        let size = view.buffer.size();
        if bytes == 0 || offset.checked_add(bytes).is_none_or(|end| end > size) {
            return Err(Error::BufferTooSmall { kernel, name, needed: bytes, offset, size });
        }
        if bytes > self.k.max_binding {
            return Err(Error::BindingTooLarge { kernel, name, bytes, max: self.k.max_binding });
        }
        // Bind whole 4-byte words: f16 planes with an odd count end mid-word.
        let bytes = bytes.next_multiple_of(4).min(size - offset);
        Ok(Bound { buffer: view.buffer, offset, size: bytes })
    }

    /// Builds the dispatch: one params block and one bind group per part.
    pub(crate) fn finish<P: bytemuck::Pod>(self, parts: Vec<(P, Vec<Bound<'_>>, [u32; 3])>) -> Dispatch {
        let pipeline = self.k.pipeline(self.kernel).clone();
        self.finish_on(pipeline, parts)
    }

    /// [`Binder::finish`] on another compilation of the kernel (other `override` values).
    pub(crate) fn finish_on<P: bytemuck::Pod>(
        self,
        pipeline: wgpu::ComputePipeline,
        parts: Vec<(P, Vec<Bound<'_>>, [u32; 3])>,
    ) -> Dispatch {
        let device = &self.k.device;
        let psize = size_of::<P>() as u64;
        let stride = psize.next_multiple_of(self.k.uniform_align);
        let mut bytes = vec![0u8; (stride * parts.len() as u64) as usize];
        for (i, (p, _, _)) in parts.iter().enumerate() {
            let at = i * stride as usize;
            bytes[at..at + psize as usize].copy_from_slice(bytemuck::bytes_of(p));
        }
        let params = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(self.kernel.name()),
            contents: &bytes,
            usage: wgpu::BufferUsages::UNIFORM,
        });
        let layout = pipeline.get_bind_group_layout(0);
        let groups = parts
            .iter()
            .enumerate()
            .map(|(i, (_, bound, dims))| {
                let mut entries = vec![wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: &params,
                        offset: i as u64 * stride,
                        size: NonZeroU64::new(psize),
                    }),
                }];
                entries.extend(bound.iter().enumerate().map(|(j, b)| wgpu::BindGroupEntry {
                    binding: j as u32 + 1,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: b.buffer,
                        offset: b.offset,
                        size: NonZeroU64::new(b.size),
                    }),
                }));
                let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some(self.kernel.name()),
                    layout: &layout,
                    entries: &entries,
                });
                (group, *dims)
            })
            .collect();
        Dispatch { kernel: self.kernel, pipeline, groups, _params: params }
    }

    /// Splits `rows` rows into parts whose bindings (each row `row_bytes` long in the largest plane,
    /// `align_bytes` in the plane with the smallest rows) fit the binding limit, with split points
    /// aligned for storage offsets and to `multiple` rows. Returns `(begin, end)` per part.
    pub(crate) fn split_rows(
        &self,
        name: &'static str,
        rows: u64,
        row_bytes: u64,
        small_row_bytes: u64,
        multiple: u64,
    ) -> Result<Vec<(u64, u64)>> {
        plan_row_split(rows, row_bytes, small_row_bytes, multiple, self.k.max_binding, self.k.storage_align)
            .ok_or(Error::BindingTooLarge {
                kernel: self.kernel.name(),
                name,
                bytes: row_bytes * multiple,
                max: self.k.max_binding,
            })
    }
}

/// Splits `rows` rows (`row_bytes` each in the larger plane, `small_row_bytes` in the smaller) into
/// `(begin, end)` parts whose larger plane fits `max_binding` bytes, every split point a multiple of
/// `multiple` rows and of `align` bytes in both planes. `None` when not even one step of rows fits.
///
/// This is how every launcher splits a matrix or slot pool over bindings; callers that size buffers for
/// the kernels (the expert pool) use it to refuse, up front, what the launchers could not bind.
pub fn plan_row_split(
    rows: u64,
    row_bytes: u64,
    small_row_bytes: u64,
    multiple: u64,
    max_binding: u64,
    align: u64,
) -> Option<Vec<(u64, u64)>> {
    if rows * row_bytes <= max_binding {
        return Some(vec![(0, rows)]);
    }
    let step = row_split_step(row_bytes, small_row_bytes, multiple, align);
    let per = (max_binding / row_bytes) / step * step;
    if per == 0 {
        return None;
    }
    Some((0..rows.div_ceil(per)).map(|i| (i * per, ((i + 1) * per).min(rows))).collect())
}

/// The fewest rows a split part can hold in [`plan_row_split`]: split points must be `align`-byte aligned in
/// both planes and a multiple of `multiple` rows.
pub fn row_split_step(row_bytes: u64, small_row_bytes: u64, multiple: u64, align: u64) -> u64 {
    let step_small = align / gcd(align, small_row_bytes);
    let step_big = align / gcd(align, row_bytes);
    lcm(lcm(step_small, step_big), multiple)
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn lcm(a: u64, b: u64) -> u64 {
    a / gcd(a, b) * b
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{plan_row_split, row_split_step};

    #[test]
    fn split_steps_align_both_planes() {
        // Rows of 96 and 6 bytes split at multiples of lcm(256/32, 256/2) = 128 rows.
        assert_eq!(row_split_step(96, 6, 1, 256), 128);
        assert_eq!(plan_row_split(1000, 96, 6, 1, 96 * 127, 256), None);
        assert_eq!(plan_row_split(1000, 96, 6, 1, 96 * 128, 256).unwrap().len(), 8);
        // Qwen3-30B-A3B's gate‖up slots (3 MiB) under a 128 MiB binding: one-slot steps, 42 slots a part.
        let (big, small) = (2 * 768 * 2048, 2 * 768 * 2048 / 16);
        assert_eq!(row_split_step(big, small, 1, 256), 1);
        assert_eq!(plan_row_split(800, big, small, 1, 128 << 20, 256).unwrap()[0], (0, 42));
        assert_eq!(plan_row_split(2, big, small, 1, big - 1, 256), None);
    }

    fn arbitrary_split() -> impl Strategy<Value = (u64, u64, u64, u64, u64)> {
        // rows, cols (a multiple of 32), row multiple, max binding, alignment
        (
            1u64..200_000,
            1u64..160,
            prop::sample::select(vec![1u64, 8]),
            1u64 << 12..1u64 << 31,
            prop::sample::select(vec![4u64, 32, 256]),
        )
            .prop_map(|(rows, c, m, max, align)| (rows, c * 32, m, max, align))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn row_split_covers_fits_and_aligns((rows, cols, multiple, max, align) in arbitrary_split()) {
            let small = cols / 16; // the f16 scale plane: cols / 32 scales of 2 bytes
            match plan_row_split(rows, cols, small, multiple, max, align) {
                None => prop_assert!(rows * cols > max),
                Some(parts) => {
                    prop_assert_eq!(parts[0].0, 0);
                    prop_assert_eq!(parts.last().unwrap().1, rows);
                    for w in parts.windows(2) {
                        prop_assert_eq!(w[0].1, w[1].0);
                    }
                    for &(b, e) in &parts {
                        prop_assert!(b < e);
                        prop_assert!((e - b) * cols <= max);
                        prop_assert!((b * cols).is_multiple_of(align) && (b * small).is_multiple_of(align));
                        prop_assert!(b.is_multiple_of(multiple));
                    }
                }
            }
        }
    }

    #[test]
    fn lm_head_on_lavapipe_splits_in_three() {
        // 151,936 x 2,048 int8 = 311 MB against 128 MiB.
        let parts = plan_row_split(151_936, 2048, 128, 8, 128 << 20, 256).unwrap();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0], (0, 65_536));
    }
}
