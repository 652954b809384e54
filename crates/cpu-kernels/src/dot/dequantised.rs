//! Rows of every type but Q8_0 and Q4_0 (K-quants, IQ4, Q4_1, Q5_0/1, F16, BF16, F32) times f32 inputs:
//! 256 values at a time dequantised as ggml does (diskformer-gguf, bit-exact against PyPI gguf) onto the
//! stack, then multiplied in eight running sums the compiler vectorises: the scalar path of these types,
//! and every path's for those without a SIMD kernel (all but the K-quants and IQ4s); Q8_0-quantised inputs
//! take `k_quant_q8` (Q4_K, Q5_K and Q6_K) or are refused by the callers.

// Performance note (2026-12-04, the 2-core development machine, `moe-blocks/…` of the bench): one token's 8
// experts at Q4_K 3.0 GiB/s and Q6_K 2.5 on this path, against 17.8 for Q8_0 on its AVX-512 one: the
// per-value dequantisation bounds it. The K-quants therefore have AVX2 kernels (`x86_k_quant`: 8.0 and
// 10.0 GiB/s there for Q4_K and Q6_K).
use crate::Input;
use crate::matrix::{K_BLOCK, RowRef, WeightType};

/// `row · x` for a row of whole blocks.
pub(super) fn dot(ty: WeightType, row: RowRef<'_>, x: Input<'_>) -> f32 {
    let Input::F32(x) = x else { unreachable!("these weights take f32 inputs (checked by the callers)") };
    let (bytes, values) = (row.quant_stride, ty.block_values());
    // Every block size (1, 32, 256) divides K_BLOCK, so a chunk is whole blocks.
    let per_chunk = K_BLOCK / values;
    let mut w = [0f32; K_BLOCK];
    let mut sum = 0f32;
    for b in (0..row.blocks).step_by(per_chunk) {
        let blocks = per_chunk.min(row.blocks - b);
        let n = blocks * values;
        diskformer_gguf::dequantize(
            ty.tensor_type(),
            &row.quants[b * bytes..][..blocks * bytes],
            &mut w[..n],
        )
        .expect("whole blocks (checked at construction)");
        let mut acc = [0f32; 8];
        let (w, x) = (&w[..n], &x[b * values..][..n]);
        for (w, x) in w.chunks_exact(8).zip(x.chunks_exact(8)) {
            for i in 0..8 {
                acc[i] += w[i] * x[i];
            }
        }
        let tail: f32 =
            w.chunks_exact(8).remainder().iter().zip(x.chunks_exact(8).remainder()).map(|(w, x)| w * x).sum();
        sum += acc.iter().sum::<f32>() + tail;
    }
    sum
}
