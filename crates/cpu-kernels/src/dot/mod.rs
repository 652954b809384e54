//! One weight row times one input row: the inner loop of every CPU matmul, a path per instruction set.
//!
//! Every path sums the same terms: per block `d_w · Σ q·x` (f32 input) or `Σ_int q·xq · (d_w · d_x)` (Q8
//! input; a Q16 input is its two halves' sum); they differ only in the order of the f32 sums across blocks,
//! so they agree to rounding.

mod dequantised;
mod k_quant_q8;
mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(target_arch = "x86_64")]
mod x86_iq4;
#[cfg(target_arch = "x86_64")]
mod x86_k_quant;

use crate::matrix::{RowRef, WeightType};
use diskformer_gguf::TensorType;

use crate::{Input, Isa};

/// `row · x`. `isa` must be available (the public callers check).
#[inline]
pub(crate) fn dot(isa: Isa, ty: WeightType, row: RowRef<'_>, x: Input<'_>) -> f32 {
    debug_assert!(isa.available());
    if let Input::Q16(x16) = x {
        #[cfg(target_arch = "x86_64")]
        // Safety: as for Q8 inputs below; `x16`'s halves are as long as `x`.
        match (ty.is_dequantised().then(|| ty.tensor_type()), isa) {
            (Some(TensorType::Q4K), Isa::Avx512Vnni) => {
                return unsafe { x86_k_quant::dot_q4_k_q16_vnni(row, x16) };
            }
            (Some(TensorType::Q5K), Isa::Avx512Vnni) => {
                return unsafe { x86_k_quant::dot_q5_k_q16_vnni(row, x16) };
            }
            (Some(TensorType::Q6K), Isa::Avx512Vnni) => {
                return unsafe { x86_k_quant::dot_q6_k_q16_vnni(row, x16) };
            }
            (Some(TensorType::Q4K), Isa::Avx2) => return unsafe { x86_k_quant::dot_q4_k_q16_avx2(row, x16) },
            (Some(TensorType::Q5K), Isa::Avx2) => return unsafe { x86_k_quant::dot_q5_k_q16_avx2(row, x16) },
            (Some(TensorType::Q6K), Isa::Avx2) => return unsafe { x86_k_quant::dot_q6_k_q16_avx2(row, x16) },
            _ => {}
        }
        // The halves apart: each a Q8_0 row (the row is read twice, the second time from L1).
        return dot(isa, ty, row, Input::Q8(&x16.hi)) + dot(isa, ty, row, Input::Q8(&x16.lo));
    }
    if let (true, Input::Q8(xq)) = (ty.is_dequantised(), x) {
        #[cfg(target_arch = "x86_64")]
        // Safety: the AVX-512 path's `available()` includes AVX-512F, BW, VNNI, AVX2, FMA and F16C, the AVX2
        // one's AVX2, FMA and F16C; the row is whole super-blocks and `xq` its length (checked by the
        // callers).
        match (ty.tensor_type(), isa) {
            (TensorType::Q4K, Isa::Avx512Vnni) => return unsafe { x86_k_quant::dot_q4_k_q8_vnni(row, xq) },
            (TensorType::Q6K, Isa::Avx512Vnni) => return unsafe { x86_k_quant::dot_q6_k_q8_vnni(row, xq) },
            (TensorType::Q5K, Isa::Avx512Vnni) => return unsafe { x86_k_quant::dot_q5_k_q8_vnni(row, xq) },
            (TensorType::Q4K, Isa::Avx2) => return unsafe { x86_k_quant::dot_q4_k_q8_avx2(row, xq) },
            (TensorType::Q5K, Isa::Avx2) => return unsafe { x86_k_quant::dot_q5_k_q8_avx2(row, xq) },
            (TensorType::Q6K, Isa::Avx2) => return unsafe { x86_k_quant::dot_q6_k_q8_avx2(row, xq) },
            _ => {}
        }
        return k_quant_q8::dot(ty.tensor_type(), row, xq);
    }
    if ty.is_dequantised() {
        #[cfg(target_arch = "x86_64")]
        if let (Isa::Avx2 | Isa::Avx512Vnni, Input::F32(x)) = (isa, x) {
            // Safety: both paths' `available()` include AVX2, FMA and F16C, the AVX-512 one AVX-512F and BW;
            // the row is whole super-blocks and `x` its length (checked by the callers).
            match (ty.tensor_type(), isa) {
                (TensorType::Q4K, Isa::Avx512Vnni) => return unsafe { x86_k_quant::dot_q4_k_512(row, x) },
                (TensorType::Q4K, _) => return unsafe { x86_k_quant::dot_q4_k(row, x) },
                (TensorType::IQ4NL, _) => return unsafe { x86_iq4::dot_iq4_nl(row, x) },
                (TensorType::IQ4XS, _) => return unsafe { x86_iq4::dot_iq4_xs(row, x) },
                (TensorType::Q2K, _) => return unsafe { x86_k_quant::dot_q2_k(row, x) },
                (TensorType::Q3K, _) => return unsafe { x86_k_quant::dot_q3_k(row, x) },
                (TensorType::Q5K, _) => return unsafe { x86_k_quant::dot_q5_k(row, x) },
                (TensorType::Q6K, _) => return unsafe { x86_k_quant::dot_q6_k(row, x) },
                _ => {}
            }
        }
        return dequantised::dot(ty, row, x);
    }
    match isa {
        Isa::Scalar => scalar::dot(ty, row, x),
        #[cfg(target_arch = "x86_64")]
        // Safety: the callers only pass an `isa` whose `available()` is true, so its target features are
        // present; the row's strides and block count lie within its slices (`QuantMatrix::row`).
        Isa::Avx2 => unsafe { x86::dot_avx2(ty, row, x) },
        #[cfg(target_arch = "x86_64")]
        // Safety: as above.
        Isa::Avx512Vnni => unsafe { x86::dot_avx512(ty, row, x) },
        #[cfg(not(target_arch = "x86_64"))]
        _ => scalar::dot(ty, row, x),
    }
}

/// The reference of `row · x`: the scalar path (the dequantised types have only their portable one).
pub(crate) fn dot_scalar(ty: WeightType, row: RowRef<'_>, x: Input<'_>) -> f32 {
    match (ty.is_dequantised(), x) {
        (_, Input::Q16(x)) => dot_scalar(ty, row, Input::Q8(&x.hi)) + dot_scalar(ty, row, Input::Q8(&x.lo)),
        (true, Input::Q8(xq)) => k_quant_q8::dot(ty.tensor_type(), row, xq),
        (true, _) => dequantised::dot(ty, row, x),
        _ => scalar::dot(ty, row, x),
    }
}
