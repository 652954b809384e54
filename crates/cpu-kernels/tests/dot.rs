//! Protects the SIMD dot products: every available path against the scalar reference on random blocks, in
//! both layouts and both input kinds, and the layouts and the activation quantisation against ggml's
//! definitions.

use diskformer_cpu_kernels::{BLOCK, Input, Isa, Q8Row, Q16Row, QuantMatrix, dot_reference, gemv};
use diskformer_gguf::{TensorType, dequantize, join_planes};
use proptest::prelude::*;

/// A random matrix in planes: quants any bytes, scales finite f16 of either sign, 2^-10 .. 2^2.
fn arbitrary_planes(ty: TensorType, rows: usize, cols: usize) -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    let qb = if ty == TensorType::Q8_0 { 32 } else { 16 };
    let blocks = rows * cols / BLOCK;
    let scale =
        (any::<bool>(), 5u16..18, 0u16..1024).prop_map(|(neg, e, m)| (u16::from(neg) << 15) | (e << 10) | m);
    (
        proptest::collection::vec(any::<u8>(), blocks * qb),
        proptest::collection::vec(scale, blocks)
            .prop_map(|s| s.iter().flat_map(|v| v.to_le_bytes()).collect()),
    )
}

fn arbitrary_case() -> impl Strategy<Value = (TensorType, usize, usize, Vec<u8>, Vec<u8>, Vec<f32>)> {
    (prop_oneof![Just(TensorType::Q8_0), Just(TensorType::Q4_0)], 1usize..5, 1usize..12).prop_flat_map(
        |(ty, rows, blocks)| {
            let cols = blocks * BLOCK;
            (arbitrary_planes(ty, rows, cols), proptest::collection::vec(-4f32..4f32, cols))
                .prop_map(move |((q, s), x)| (ty, rows, cols, q, s, x))
        },
    )
}

/// Σ |w·x| over the row, in f64: the scale of the rounding error any summation order makes.
fn magnitude(m: &QuantMatrix<'_>, r: usize, x: &[f32]) -> f64 {
    m.dequantize_row(r).iter().zip(x).map(|(w, x)| f64::from(*w * *x).abs()).sum()
}

fn blocks_of(ty: TensorType, q: &[u8], s: &[u8]) -> Vec<u8> {
    let qb = if ty == TensorType::Q8_0 { 34 } else { 18 };
    let mut blocks = vec![0u8; s.len() / 2 * qb];
    join_planes(ty, q, s, &mut blocks).unwrap();
    blocks
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_path_matches_the_scalar_reference((ty, rows, cols, q, s, x) in arbitrary_case()) {
        let planes = QuantMatrix::planes("w", ty, (rows, cols), &q, &s).unwrap();
        let blocks = blocks_of(ty, &q, &s);
        let interleaved = QuantMatrix::blocks("w", ty, (rows, cols), &blocks).unwrap();
        let xq = Q8Row::quantize(&x);
        let xq_f32: Vec<f32> = xq.quants.iter().enumerate().map(|(i, &v)| f32::from(v) * xq.scales[i / BLOCK]).collect();
        // Q8_0 and Q4_0 take a Q16 input as its two halves, each a Q8_0 row.
        let x16 = Q16Row::quantize(&x);
        for (input, values) in [(Input::F32(&x), &x), (Input::Q8(&xq), &xq_f32), (Input::Q16(&x16), &x)] {
            let want: Vec<f32> = (0..rows).map(|r| dot_reference(&planes, r, input)).collect();
            for isa in Isa::ALL.into_iter().filter(|i| i.available()) {
                for m in [&planes, &interleaved] {
                    let mut got = vec![0f32; rows];
                    gemv(isa, m, input, &mut got).unwrap();
                    for r in 0..rows {
                        let tol = 1e-5 * magnitude(m, r, values) + 1e-30;
                        prop_assert!(f64::from((got[r] - want[r]).abs()) <= tol,
                            "{isa} {ty} row {r}: {} against {} (tolerance {tol})", got[r], want[r]);
                    }
                }
            }
        }
    }

    #[test]
    fn planes_and_blocks_dequantise_as_ggml((ty, rows, cols, q, s, _x) in arbitrary_case()) {
        let blocks = blocks_of(ty, &q, &s);
        let mut want = vec![0f32; rows * cols];
        dequantize(ty, &blocks, &mut want).unwrap();
        let planes = QuantMatrix::planes("w", ty, (rows, cols), &q, &s).unwrap();
        let interleaved = QuantMatrix::blocks("w", ty, (rows, cols), &blocks).unwrap();
        for r in 0..rows {
            let row = &want[r * cols..][..cols];
            prop_assert_eq!(planes.dequantize_row(r).iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                row.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
            prop_assert_eq!(interleaved.dequantize_row(r), row.to_vec());
        }
    }

    #[test]
    fn activations_quantise_as_llama_cpp(x in proptest::collection::vec(-100f32..100f32, 32..=256)) {
        let q = Q8Row::quantize(&x);
        prop_assert_eq!(q.len(), x.len() / BLOCK * BLOCK);
        for (b, block) in x.chunks_exact(BLOCK).enumerate() {
            // quantize_row_q8_0_ref: d = amax / 127, q = roundf(x · (1 / d)), d stored as f16.
            let d = block.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
            prop_assert_eq!(q.scales[b], half::f16::from_f32(d).to_f32());
            for (j, v) in block.iter().enumerate() {
                let want = if d == 0.0 { 0.0 } else { (v * (1.0 / d)).round() };
                prop_assert_eq!(f32::from(q.quants[b * BLOCK + j]), want);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn q16_halves_hold_each_value_within_a_256th_of_its_blocks_scale(
        x in proptest::collection::vec(prop_oneof![-100f32..100f32, -1e-3f32..1e-3, Just(0f32)], 32..=256)
    ) {
        let q = Q16Row::quantize(&x);
        prop_assert_eq!(q.len(), x.len() / BLOCK * BLOCK);
        // A row reused from a longer one's memory comes out the same.
        let mut reused = Q16Row::quantize(&[x.as_slice(), &[0.25; 2 * BLOCK]].concat());
        reused.quantize_from(&x);
        prop_assert_eq!(&reused, &q);
        for (b, block) in x.chunks_exact(BLOCK).enumerate() {
            let d = block.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
            prop_assert_eq!(q.hi.scales[b], d);
            prop_assert_eq!(q.lo.scales[b], d / 256.0);
            for (j, &v) in block.iter().enumerate() {
                let (hi, lo) = (q.hi.quants[b * BLOCK + j], q.lo.quants[b * BLOCK + j]);
                let back = f64::from(hi) * f64::from(d) + f64::from(lo) * f64::from(d) / 256.0;
                // d / 512 from the rounding of the low half (d / 256 where it is clamped to ±127), and a few
                // ulps of 127 · d from x / d's.
                let bound = f64::from(d) * (1.0 / 256.0 + 1e-5);
                prop_assert!(hi != i8::MIN && lo != i8::MIN, "the Q8_0 kernels negate inputs: -128 is never written");
                prop_assert!((back - f64::from(v)).abs() <= bound, "{v} came back as {back} (d {d})");
            }
            // The run's total as the halves hold it, to f32 rounding of the two products.
            let held: f64 = (0..BLOCK).map(|j| {
                let i = b * BLOCK + j;
                f64::from(q.hi.quants[i]) * f64::from(d) + f64::from(q.lo.quants[i]) * f64::from(d) / 256.0
            }).sum();
            prop_assert!((f64::from(q.totals[b]) - held).abs() <= 1e-6 * (32.0 * 128.0 * f64::from(d)) + 1e-30,
                "run {} total {} against {}", b, q.totals[b], held);
            let sums = |r: &Q8Row, i: usize| r.quants[16 * i..][..16].iter().map(|&v| i32::from(v)).sum::<i32>();
            for i in 2 * b..2 * b + 2 {
                prop_assert_eq!(q.hi.sums[i], sums(&q.hi, i));
                prop_assert_eq!(q.lo.sums[i], sums(&q.lo, i));
            }
        }
    }
}

#[test]
fn a_q16_row_without_its_totals_is_refused() {
    let x: Vec<f32> = (0..256).map(|i| (i as f32 - 128.0) / 64.0).collect();
    let data = vec![0u8; 144];
    let m = QuantMatrix::blocks("w", TensorType::Q4K, (1, 256), &data).unwrap();
    let mut q = Q16Row::quantize(&x);
    q.totals.pop();
    let err = gemv(Isa::Scalar, &m, Input::Q16(&q), &mut [0f32]).unwrap_err();
    assert!(err.to_string().contains("8") && err.to_string().contains("7"), "{err}");
}

#[test]
fn the_extremes_of_int8_multiply_exactly() {
    // -128 weights (never written by llama.cpp's quantizer, but valid bytes) against ±127 inputs: the
    // unsigned-by-signed paths take |w| = 128.
    let q = vec![0x80u8; 64];
    let s: Vec<u8> = [0x3c00u16; 2].iter().flat_map(|v| v.to_le_bytes()).collect();
    let m = QuantMatrix::planes("w", TensorType::Q8_0, (1, 64), &q, &s).unwrap();
    let xq =
        Q8Row::from_parts((0..64).map(|i| if i % 2 == 0 { 127 } else { -127 }).collect(), vec![1.0, 1.0]);
    let x = Q8Row::from_parts(vec![127; 64], vec![1.0, 1.0]);
    for isa in Isa::ALL.into_iter().filter(|i| i.available()) {
        let mut got = [0f32];
        gemv(isa, &m, Input::Q8(&x), &mut got).unwrap();
        assert_eq!(got[0], -128.0 * 127.0 * 64.0, "{isa}");
        gemv(isa, &m, Input::Q8(&xq), &mut got).unwrap();
        assert_eq!(got[0], 0.0, "{isa}");
    }
}

#[test]
fn bad_shapes_and_types_are_refused() {
    use diskformer_cpu_kernels::Error;
    let q = vec![0u8; 64];
    let s = vec![0u8; 4];
    assert!(matches!(
        QuantMatrix::planes("w", TensorType::Q6K, (1, 64), &q, &s),
        Err(Error::UnsupportedType { ty: TensorType::Q6K, .. })
    ));
    assert!(matches!(
        QuantMatrix::planes("w", TensorType::Q8_0, (1, 48), &q, &s),
        Err(Error::PartialBlock { .. })
    ));
    assert!(matches!(
        QuantMatrix::planes("w", TensorType::Q8_0, (2, 64), &q, &s),
        Err(Error::BadLength { expected: 128, got: 64, .. })
    ));
    assert!(matches!(
        QuantMatrix::blocks("w", TensorType::Q4_0, (1, 64), &q),
        Err(Error::BadLength { expected: 36, got: 64, .. })
    ));
    let m = QuantMatrix::planes("w", TensorType::Q8_0, (1, 64), &q, &s).unwrap();
    let mut out = [0f32; 1];
    assert!(matches!(gemv(Isa::Scalar, &m, Input::F32(&[0.0; 32]), &mut out), Err(Error::BadLength { .. })));
    assert!(matches!(
        gemv(Isa::Scalar, &m, Input::F32(&[0.0; 64]), &mut [0f32; 2]),
        Err(Error::BadLength { .. })
    ));
}
