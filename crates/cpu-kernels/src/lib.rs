//! The routed experts' FFN computed on the host CPU, from weights where they lie.
//!
//! - [`QuantMatrix`] borrows a Q8_0 or Q4_0 matrix as a store record's planes or a GGUF tensor's
//!   interleaved blocks (a memory map of either: nothing is copied or re-quantised), or one of any other
//!   type diskformer-gguf dequantises as its blocks (K-quants, IQ4, Q4_1, Q5_0/1, F16, BF16, F32:
//!   multiplied in f32, the K-quants and IQ4s with AVX2, the others on a portable path dequantising each
//!   block as ggml does).
//! - [`gemv`] and [`CpuExperts::moe`] multiply it ([`Math`]) in f32, or (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) on
//!   inputs quantised to Q8_0 as llama.cpp does, or to 16 bits as two int8 halves ([`Q16Row`]: integer
//!   kernels at nearly Q8_0's speed, within 2^-16 of f32's inputs), with the fastest SIMD path the CPU runs
//!   ([`Isa::detect`]: AVX-512 VNNI, AVX2, else scalar), on a persistent [`WorkerPool`].
//!
//! It does not choose which experts run here (the expert-stream crate's tier policy does), and does not
//! yet multiply Q2_K, Q3_K or the IQ4s on quantised inputs, nor use NEON or AMX: on aarch64 it runs the
//! scalar path.
//!
//! ```
//! use diskformer_cpu_kernels::{Assignment, CpuExperts, ExpertWeights, Isa, Math, QuantMatrix};
//! use diskformer_gguf::TensorType;
//!
//! // One Q8_0 expert, hidden 64, ffn 32: every block scale 1.0 (f16 0x3c00), every weight 1.
//! let block = |n: usize| [0x00, 0x3c].into_iter().chain([1u8; 32]).cycle().take(34 * n).collect::<Vec<u8>>();
//! let (gate, up, down) = (block(64), block(64), block(64));
//! let expert = ExpertWeights::new(
//!     QuantMatrix::blocks("gate", TensorType::Q8_0, (32, 64), &gate)?,
//!     QuantMatrix::blocks("up", TensorType::Q8_0, (32, 64), &up)?,
//!     QuantMatrix::blocks("down", TensorType::Q8_0, (64, 32), &down)?,
//! )?;
//! let cpu = CpuExperts::new(2, Isa::detect())?;
//! let x = vec![0.01f32; 64];
//! let mut out = vec![0f32; 64];
//! cpu.moe(Math::F32, &[expert], &x, &[Assignment { token: 0, expert: 0, weight: 0.5 }], &mut out)?;
//! // gate = up = 0.64; down sums 32 activations of silu(0.64) · 0.64.
//! let act = 0.64 / (1.0 + (-0.64f32).exp()) * 0.64;
//! assert!((out[0] - 0.5 * 32.0 * act).abs() < 1e-4);
//! # Ok::<(), diskformer_cpu_kernels::Error>(())
//! ```

mod activation;
mod dot;
mod error;
mod ffn;
mod gemv;
mod isa;
mod matrix;
mod pool;

use diskformer_gguf::TensorType;

pub use activation::{Input, Q8Row, Q16Row};
pub use error::{Error, Result};
pub use ffn::{Assignment, CpuExperts, ExpertWeights, Math};
pub use gemv::gemv;
pub use isa::Isa;
pub use matrix::{BLOCK, K_BLOCK, QuantMatrix};
pub use pool::{PoolTimes, WorkerPool};

/// Whether the SIMD paths multiply `ty` with a kernel of its own (Q8_0, Q4_0, Q2_K to Q6_K, IQ4_NL and
/// IQ4_XS) rather than dequantising each block first (the portable path: several times slower).
pub fn has_simd_kernel(ty: TensorType) -> bool {
    use TensorType as T;
    matches!(ty, T::Q8_0 | T::Q4_0 | T::Q2K | T::Q3K | T::Q4K | T::Q5K | T::Q6K | T::IQ4NL | T::IQ4XS)
}

/// Whether rows of `ty` multiply Q8_0-quantised inputs ([`Math::Q8`], [`Input::Q8`]): Q8_0 and Q4_0, and of
/// the others Q4_K, Q5_K and Q6_K.
pub fn takes_quantised_input(ty: TensorType) -> bool {
    use TensorType as T;
    matches!(ty, T::Q8_0 | T::Q4_0 | T::Q4K | T::Q5K | T::Q6K)
}

/// The scalar path's `row · x` for row `r` of `m`: the reference the SIMD paths are tested against.
pub fn dot_reference(m: &QuantMatrix<'_>, r: usize, x: Input<'_>) -> f32 {
    dot::dot_scalar(m.weight_type(), m.row(r), x)
}
