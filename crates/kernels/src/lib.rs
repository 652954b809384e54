//! The GPU half of diskformer: a wgpu [`Context`] (shader-f16 required, subgroups used when offered, and
//! cooperative matrices, wgpu's experimental tensor-core feature, where 16 × 16 × 16 f16 products into f32
//! in 32-lane subgroups are offered),
//! every WGSL kernel of the Qwen3-MoE forward pass compiled once in a [`Kernels`] cache, typed params,
//! launchers that validate shapes and bind buffers into a [`Dispatch`] (recorded into the caller's
//! compute pass, never submitted here), and a CPU reference for every kernel in [`cpu`].
//!
//! Data layout: Q8_0 matrices are two planes, int8 `[rows, cols]` and f16 scales `[rows, cols/32]`
//! (dequantised value = `f32(q) * f32(scale)`, as ggml); activations are f32; the KV cache is f16.
//! Matrices larger than the device's max storage binding are split over several dispatches.
//!
//! Kernels (`src/wgsl/<name>.wgsl`, launcher `Kernels::<name>`), T = tokens in the step:
//!
//! | step | decode (what the engine records) | prefill chunk |
//! |---|---|---|
//! | embedding | `embed_q8` with every expert resident (the token id from the previous step's argmax or the host); else the engine writes the rows from its mapped file | the engine writes the rows |
//! | norms | `rms_norm` (first layer); later ones ride in other kernels: `q8_gemv_add` (the attention output onto the residual), `f32_gemv_norm` (the router computes the FFN norm; with int8 decode it also writes it Q8_0-quantised), `qkv_rope_store` (the attention norm's scale); apart: `add_rms_norm` | `rms_norm`, `add_rms_norm`, T rows |
//! | Q, K, V | `q8_gemv` (with int8 decode `q8_gemv_i8`: the input Q8_0-quantised as it is read, int8 dot products) of the stacked Q‖K‖V, then `qkv_rope_store` (QK-norm, NeoX RoPE with the table of [`cpu::rope_cos_sin`], both f16 cache stores); apart: `qk_norm_rope`, `kv_store` | `q8_gemm_tiled` (128 rows × 32 tokens a workgroup, through workgroup memory), or with int8 prefill `quantize_q8` then `q8_gemm_i8` (int8 dot products); same |
//! | attention | `attention_split` (2 or 4 passes a block by cache length) + `attention_combine` (split-K), or `attention` | `attention` |
//! | output projection, lm head | `q8_gemv` (lm head: `q8_gemv_rows4`, 4 rows a lane group, 1.8× there on the H200); with int8 decode `q8_gemv_i8` (`q8_gemv_add_i8` for the output projection) | `q8_gemm_tiled`, or `quantize_q8` then `q8_gemm_i8`, or on tensor cores `q8_gemm_coop` |
//! | router | `f32_gemv`, `router_topk`; `router_topk_slots` (also the picks' pool slots, when every expert is resident); apart: `expert_slots` | `f32_gemm` (16 rows × 32 tokens a workgroup), `router_topk`, T rows; with every expert resident `expert_groups` (the pairs grouped by expert on the GPU) |
//! | experts | `expert_q8_gemv_gate_up_swiglu` (all k picks, slot-indexed, SiLU(gate)·up on its output), then `expert_q8_gemv_combine` (down, the weighted picks added onto the residual, the next norm's inputs); with int8 decode `expert_q8_gemv_gate_up_swiglu_xq` (its input quantised by `f32_gemv_norm`, one scale load a row and block) and `expert_q8_gemv_combine_i8` (the int8 row walk); Q4_0 pools: `expert_q4_gemv_gate_up_swiglu`, `expert_q4_gemv_combine` (the same files, the Q4_0 row walk); apart: `expert_q8_gemv` / `expert_q4_gemv`, `expert_q8_gemv_swiglu` / `expert_q4_gemv_swiglu` (SiLU(gate)·up as it reads), `expert_q8_gemv_xq` (the input `quantize_q8`'d before) | `expert_q8_gemm_tiled` (pairs grouped by slot, 32 a group, [`expert_gemm_groups`] or `expert_groups`), or `quantize_q8` then `expert_q8_gemm_i8`, or on tensor cores `expert_q8_gemm_coop`; Q4_0 `expert_q4_gemm`; `silu_mul` |
//! | combine | in the down GEMV (`expert_q8_gemv_combine`; `qkv_rope_store` finishes the next norm, `rms_norm` the output norm); apart: `moe_combine_norm` (weighted sum + residual, then the next norm), `moe_combine`, `add` | `moe_combine_norm` |
//! | sampling | `argmax` (two stages: slices, then their best), or `apply_penalties` (repetition and presence penalties from a ring of recent tokens) then `sample_top_k` (top-k, temperature, top-p, min-p and a draw with a host-supplied uniform: tiles sorted in workgroup memory, level by level) | — |
//!
//! Matrices of GGUF blocks ([`BlockMatrix`] of a [`BlockQuant`]: the K-quants, the legacy quants, IQ4_NL,
//! IQ4_XS, F16, BF16, F32) stay as they lie in the file, read 256 values at a time: `q4_k_gemv`,
//! `iq4_xs_gemv`, … (`kquant_gemv.wgsl` with the type's block helper `kquant_<type>.wgsl`; launcher
//! `Kernels::kquant_gemv`) run one over T inputs, `_rows4` (`Kernels::kquant_gemv_rows4`) with four rows a
//! lane group; the tiled `<type>_gemm` and the expert kernels take the same helpers.
//!
//! Values that change every step (token ids, positions, the RoPE table, slot indices) are read from
//! buffers, so a [`Dispatch`] is bound once and recorded every step.
//!
//! It does not own buffers, the KV cache, the expert pool or the forward pass: the engine does.
//!
//! ```no_run
//! use diskformer_kernels::{Context, Kernels};
//! let ctx = Context::new()?;
//! let kernels = Kernels::new(&ctx);
//! println!("{}; subgroup kernels: {}", ctx.describe(), kernels.subgroups());
//! # Ok::<(), diskformer_kernels::Error>(())
//! ```

mod context;
pub mod cpu;
mod error;
mod kernels;
mod ops;

pub use context::{ADAPTER_ENV, Context, NO_COOP_ENV, NO_SUBGROUPS_ENV};
pub use error::{Error, Result};
pub use kernels::{Dispatch, Kernel, Kernels, Q8Matrix, View, plan_row_split, row_split_step};
pub use ops::*;
