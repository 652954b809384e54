//! One module per kernel: its params struct (mirrored in the WGSL `Params`) and its launcher, a
//! [`Kernels`](crate::Kernels) method that validates shapes and binds the buffers into a
//! [`Dispatch`](crate::Dispatch).

mod add;
mod add_rms_norm;
mod apply_penalties;
mod argmax;
mod attention;
mod attention_combine;
mod attention_split;
mod delta_net;
mod embed_q8;
mod expert_groups;
mod expert_kquant_gemv;
mod expert_q4_gemv;
mod expert_q8_gemm;
mod expert_q8_gemv;
mod expert_q8_gemv_i8;
mod expert_slots;
mod f32_gemm;
mod f32_gemv;
mod gated_attention;
mod kquant_gemv;
mod kv_store;
mod moe_combine;
mod moe_combine_norm;
mod q8_gemm;
mod q8_gemv;
mod qk_norm_rope;
mod qkv_rope_store;
mod quantize_q8;
mod residual_join;
mod rms_norm;
mod router_topk;
mod sample_top_k;
mod shared_expert_gate;
mod silu_mul;

pub use add::AddParams;
pub use apply_penalties::{ApplyPenaltiesParams, PENALTY_MAX_N};
pub(crate) use argmax::ARGMAX_SLICE;
pub use argmax::{ArgmaxParams, argmax_partial_len, argmax_slices};
pub use attention::{AttentionParams, AttentionShape};
pub use attention_combine::AttentionCombineParams;
pub use attention_split::AttentionSplitParams;
pub(crate) use attention_split::{LONG_SPLIT_PASSES, SHORT_SPLIT_PASSES};
pub use delta_net::{
    DELTA_NET_MAX_STATE, DeltaNetConvParams, DeltaNetRuleParams, DeltaNetShape, GatedRmsNormParams,
};
pub use embed_q8::EmbedQ8Params;
pub use expert_groups::{EXPERT_GROUPS_MAX_EXPERTS, ExpertGroupsParams};
pub use expert_kquant_gemv::{
    EXPERT_BLOCK_GEMM_GROUP, ExpertBlocks, ExpertKQuantCombineParams, ExpertKQuantGemvParams,
    ExpertKQuantRoutedParams, ExpertOut,
};
pub use expert_q4_gemv::ExpertQ4GemvParams;
pub use expert_q8_gemm::{
    EXPERT_GEMM_TILED_GROUP, ExpertQ8GemmParams, expert_gemm_group_bound, expert_gemm_groups,
};
pub(crate) use expert_q8_gemv::EXPERT_GEMV_XQ_GROUPS;
pub use expert_q8_gemv::{
    CombineOut, ExpertPlanes, ExpertQ8GemvCombineParams, ExpertQ8GemvParams, Route, combine_squares,
};
pub use expert_slots::ExpertSlotsParams;
pub use f32_gemm::F32GemmParams;
pub use f32_gemv::{F32GemvParams, InputNorm};
pub use gated_attention::{AttentionGateParams, QkHeads, QkNormRopePartialStoreParams};
pub use kquant_gemv::{BlockMatrix, BlockQuant, KQuantGemvParams};
pub use kv_store::KvStoreParams;
pub use moe_combine::MoeCombineParams;
pub use moe_combine_norm::{MoeCombineNormParams, SharedExpert};
pub use q8_gemm::Q8GemmParams;
pub use q8_gemv::Q8GemvParams;
pub use qk_norm_rope::QkNormRopeParams;
pub use qkv_rope_store::{KvCacheViews, QkvRopeStoreParams};
pub use quantize_q8::{QuantizeQ8Params, q8_row_bytes};
pub use residual_join::{JoinOut, ResidualJoinParams};
pub use rms_norm::RmsNormParams;
pub use router_topk::RouterTopkParams;
pub use sample_top_k::{
    SAMPLE_MAX_K, SAMPLE_MAX_N, SampleStep, SampleTopKParams, sample_levels, sample_partial_len,
};
pub use shared_expert_gate::SharedExpertGateParams;
pub use silu_mul::SiluMulParams;

/// Bytes of `n` f32 (or u32).
pub(crate) fn f32s(n: u64) -> u64 {
    n * 4
}

/// Bytes of `n` f16.
pub(crate) fn f16s(n: u64) -> u64 {
    n * 2
}
