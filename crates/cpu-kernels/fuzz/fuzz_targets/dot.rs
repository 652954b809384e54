//! Any bytes as rows of any block type the CPU kernels take, times an input made from more of the bytes:
//! every SIMD path this CPU has must agree with the scalar reference, on f32 inputs and (for the types that
//! take them) Q8_0- and Q16-quantised ones, to the rounding of the sum's terms (`Σ |w · x|` of the dequantised
//! values, in f64); a matrix of the wrong size is refused, never a panic.
#![no_main]

use diskformer_cpu_kernels::{Input, Isa, Q8Row, Q16Row, QuantMatrix, gemv, takes_quantised_input};
use diskformer_gguf::{TensorType, dequantize};
use libfuzzer_sys::fuzz_target;

/// `|A| + |B|` of each value `A + B` of `n` values of `ty` in `w`: with the block's second factor (the
/// minimum's scale, or the minimum) zeroed, then its first; `|value|` for types of one factor. `None` where
/// the dequantiser refuses the bytes.
fn terms(ty: TensorType, w: &[u8], n: usize) -> Option<Vec<f64>> {
    let values = |zero: Option<usize>| -> Option<Vec<f32>> {
        let mut w = w.to_vec();
        if let Some(at) = zero {
            for block in w.chunks_exact_mut(ty.block_bytes() as usize) {
                block[at..at + 2].fill(0);
            }
        }
        let mut out = vec![0f32; n];
        dequantize(ty, &w, &mut out).ok().map(|()| out)
    };
    let factors = match ty {
        TensorType::Q2K => Some((80, 82)),
        TensorType::Q4K | TensorType::Q5K | TensorType::Q4_1 | TensorType::Q5_1 => Some((0, 2)),
        _ => None,
    };
    Some(match factors {
        Some((first, second)) => {
            let (a, b) = (values(Some(second))?, values(Some(first))?);
            a.iter().zip(&b).map(|(a, b)| f64::from(a.abs()) + f64::from(b.abs())).collect()
        }
        None => values(None)?.iter().map(|v| f64::from(v.abs())).collect(),
    })
}

/// The block types the CPU kernels multiply as GGUF blocks.
const TYPES: [TensorType; 13] = [
    TensorType::Q2K,
    TensorType::Q3K,
    TensorType::Q4K,
    TensorType::Q5K,
    TensorType::Q6K,
    TensorType::Q4_0,
    TensorType::Q4_1,
    TensorType::Q5_0,
    TensorType::Q5_1,
    TensorType::Q8_0,
    TensorType::IQ4NL,
    TensorType::IQ4XS,
    TensorType::F16,
];

fuzz_target!(|data: &[u8]| {
    let [ty, rows, runs, rest @ ..] = data else { return };
    let ty = TYPES[*ty as usize % TYPES.len()];
    let (rows, runs) = (1 + *rows as usize % 3, 1 + *runs as usize % 2);
    let cols = runs * 256;
    let bytes = ty.bytes_for((rows * cols) as u64).expect("whole blocks") as usize;
    if rest.len() < bytes + cols {
        // Too few bytes for the matrix: a short one is refused.
        if let Some(short) = rest.get(..rest.len().min(bytes.saturating_sub(1))) {
            assert!(QuantMatrix::blocks("w", ty, (rows, cols), short).is_err());
        }
        return;
    }
    let (w, x) = rest.split_at(bytes);
    let Ok(m) = QuantMatrix::blocks("w", ty, (rows, cols), w) else { return };
    // Inputs in -2..2, as a normed hidden state lies.
    let x: Vec<f32> = x[..cols].iter().map(|&b| (f32::from(b) - 127.5) / 64.0).collect();
    // The sum's terms: where a value is a difference of two (`d·sc·q − dmin·m`, or `d·q + m`), the kernels
    // sum each apart, so rounding scales with both, even where they cancel to a zero weight.
    let Some(terms) = terms(ty, w, rows * cols) else { return };
    let check = |input: Input<'_>, xv: &[f64]| {
        // The scalar path is the reference; an input it refuses (Q8_0 inputs for blocks that take f32) every
        // path refuses.
        let mut want = vec![0f32; rows];
        if gemv(Isa::Scalar, &m, input, &mut want).is_err() {
            for isa in Isa::ALL.into_iter().filter(|i| i.available()) {
                assert!(
                    gemv(isa, &m, input, &mut want).is_err(),
                    "{ty} {isa} took what the scalar path refused"
                );
            }
            return;
        }
        for isa in Isa::ALL.into_iter().filter(|i| i.available() && *i != Isa::Scalar) {
            let mut got = vec![0f32; rows];
            gemv(isa, &m, input, &mut got).unwrap();
            for r in 0..rows {
                let size: f64 = terms[r * cols..][..cols].iter().zip(xv).map(|(w, x)| w * x.abs()).sum();
                if !size.is_finite() || size > 1e30 {
                    continue;
                }
                let d = (f64::from(got[r]) - f64::from(want[r])).abs();
                assert!(
                    d <= 1e-5 * size + 1e-30,
                    "{ty} {isa} row {r}: {} against {} (Σ|w·x| {size:e})",
                    got[r],
                    want[r]
                );
            }
        }
    };
    let xf: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    check(Input::F32(&x), &xf);
    if takes_quantised_input(ty) {
        let q = Q8Row::quantize(&x);
        let xq: Vec<f64> =
            q.quants.iter().enumerate().map(|(i, &v)| f64::from(v) * f64::from(q.scales[i / 32])).collect();
        check(Input::Q8(&q), &xq);
        // Q16: its halves' values lie within a 256th of a block's scale of `x`'s.
        check(Input::Q16(&Q16Row::quantize(&x)), &xf);
    }
});
