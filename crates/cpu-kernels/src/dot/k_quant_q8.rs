//! Q4_K, Q5_K and Q6_K rows times a Q8_0-quantised input (`Math::Q8`): per 32-value run of the input, integer sums
//! of the weights' quants times its int8 values, scaled once by the run's scale and the weights' sub-block
//! scales. llama.cpp quantises these types' inputs as Q8_K (one f32 scale a 256-value block); here they take
//! the Q8_0 rows the other types use (a scale a 32-value run, f16-rounded), so one quantised token row
//! serves every expert whatever its types. The scalar reference of `x86_k_quant`'s AVX2 and VNNI kernels,
//! and the path of every other CPU.

use diskformer_gguf::{TensorType, q4_k_scale_min};
use half::f16;

use crate::matrix::RowRef;
use crate::{BLOCK, Q8Row};

fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// `row · x` for a Q4_K, Q5_K or Q6_K row.
pub(super) fn dot(ty: TensorType, row: RowRef<'_>, x: &Q8Row) -> f32 {
    let bytes = row.quant_stride;
    let mut sum = 0f32;
    for b in 0..row.blocks {
        let block = &row.quants[b * bytes..][..bytes];
        // Run r (32 values) of this super-block: its int8 input values and scale.
        let run = |r: usize| (&x.quants[(8 * b + r) * BLOCK..][..BLOCK], x.scales[8 * b + r]);
        match ty {
            TensorType::Q4K | TensorType::Q5K => {
                let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
                // Q5_K: the fifth bits in 32 bytes before the nibbles (bit `sub` of byte j).
                let (scales, qh, qs) = match ty {
                    TensorType::Q5K => (&block[4..16], Some(&block[16..48]), &block[48..176]),
                    _ => (&block[4..16], None, &block[16..144]),
                };
                for sub in 0..8 {
                    let (xq, dx) = run(sub);
                    let (mut qx, mut sx) = (0i32, 0i32);
                    for (j, &v) in xq.iter().enumerate() {
                        let q = qs[32 * (sub / 2) + j];
                        let q = if sub % 2 == 0 { q & 0x0F } else { q >> 4 };
                        let q = q | qh.map_or(0, |h| ((h[j] >> sub) & 1) << 4);
                        qx += i32::from(q) * i32::from(v);
                        sx += i32::from(v);
                    }
                    let (sc, m) = q4_k_scale_min(sub, scales);
                    sum += dx * (d * f32::from(sc) * qx as f32 - dmin * f32::from(m) * sx as f32);
                }
            }
            TensorType::Q6K => {
                let d = f16_at(block, 208);
                let (ql, qh, scales) = (&block[..128], &block[128..192], &block[192..208]);
                for half in 0..2 {
                    for k in 0..4 {
                        let (xq, dx) = run(4 * half + k);
                        // Value 128 · half + 32 · k + l: see x86_k_quant::dot_q6_k.
                        let mut qx = [0i32; 2];
                        for (l, &v) in xq.iter().enumerate() {
                            let low = ql[64 * half + 32 * (k & 1) + l];
                            let low = if k < 2 { low & 0x0F } else { low >> 4 };
                            let up = (qh[32 * half + l] >> (2 * k)) & 3;
                            let q = i32::from(low | (up << 4)) - 32;
                            qx[l / 16] += q * i32::from(v);
                        }
                        for (i, qx) in qx.into_iter().enumerate() {
                            let sc = scales[8 * half + 2 * k + i] as i8;
                            sum += dx * (d * f32::from(sc) * qx as f32);
                        }
                    }
                }
            }
            other => unreachable!("{other} takes f32 inputs (checked by the callers)"),
        }
    }
    sum
}
