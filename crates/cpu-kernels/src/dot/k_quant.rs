//! K-quant rows (Q4_K, Q5_K, Q6_K) times f32 inputs: each super-block dequantised as ggml does into 256
//! values on the stack, then multiplied in eight running sums the compiler vectorises. One portable path
//! for every instruction set (no hand-written SIMD for these types yet); the callers refuse Q8_0-quantised
//! inputs for them.

use crate::Input;
use crate::matrix::{K_BLOCK, RowRef, WeightType};

/// `row · x` for a K-quant row.
pub(super) fn dot(ty: WeightType, row: RowRef<'_>, x: Input<'_>) -> f32 {
    let Input::F32(x) = x else { unreachable!("K-quant weights take f32 inputs (checked by the callers)") };
    let bytes = row.quant_stride;
    let mut w = [0f32; K_BLOCK];
    let mut sum = 0f32;
    for b in 0..row.blocks {
        diskformer_gguf::dequantize(ty.tensor_type(), &row.quants[b * bytes..][..bytes], &mut w)
            .expect("a whole super-block (checked at construction)");
        let mut acc = [0f32; 8];
        for (w, x) in w.chunks_exact(8).zip(x[b * K_BLOCK..][..K_BLOCK].chunks_exact(8)) {
            for i in 0..8 {
                acc[i] += w[i] * x[i];
            }
        }
        sum += acc.iter().sum::<f32>();
    }
    sum
}
