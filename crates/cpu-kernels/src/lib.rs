#![doc = include_str!("../README.md")]

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
