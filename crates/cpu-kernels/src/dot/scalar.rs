//! The scalar path: the reference every SIMD path is tested against, and what a CPU without one runs.

use crate::matrix::{RowRef, WeightType};
use crate::{BLOCK, Input};

/// Block `b`'s 32 weights as integers (Q4_0 offset removed).
fn block_ints(ty: WeightType, row: &RowRef<'_>, b: usize) -> [i32; BLOCK] {
    let mut w = [0i32; BLOCK];
    match ty {
        WeightType::Q8_0 => {
            for (w, &q) in w.iter_mut().zip(row.block_quants(b, 32)) {
                *w = i32::from(q as i8);
            }
        }
        WeightType::Q4_0 => {
            for (j, &q) in row.block_quants(b, 16).iter().enumerate() {
                w[j] = i32::from(q & 0x0f) - 8;
                w[j + 16] = i32::from(q >> 4) - 8;
            }
        }
        WeightType::Dequantised(_) => unreachable!("dequantised types take dot::dequantised"),
    }
    w
}

/// `row · x`, blocks summed in order.
pub(crate) fn dot(ty: WeightType, row: RowRef<'_>, x: Input<'_>) -> f32 {
    let mut sum = 0f32;
    for b in 0..row.blocks {
        let w = block_ints(ty, &row, b);
        let d = row.scale(b);
        match x {
            Input::F32(x) => {
                let xb = &x[b * BLOCK..][..BLOCK];
                let inner = w.iter().zip(xb).fold(0f32, |s, (&w, &x)| (w as f32).mul_add(x, s));
                sum = d.mul_add(inner, sum);
            }
            Input::Q16(_) => unreachable!("dot::dot takes a Q16 input's halves apart"),
            Input::Q8(x) => {
                let xb = &x.quants[b * BLOCK..][..BLOCK];
                let sumi: i32 = w.iter().zip(xb).map(|(&w, &x)| w * i32::from(x)).sum();
                sum = (sumi as f32).mul_add(d * x.scales[b], sum);
            }
        }
    }
    sum
}
