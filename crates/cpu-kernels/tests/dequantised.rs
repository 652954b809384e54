//! Weights of every type but Q8_0 and Q4_0 (K-quants, IQ4, Q4_1, Q5_0/1, F16, BF16, F32, as a GGUF holds
//! them) on the CPU: every path's GEMV and the experts' FFN against an f64 reference on values dequantised
//! by diskformer-gguf (itself bit-exact against PyPI gguf), on random blocks; and what they refuse.

use diskformer_cpu_kernels::{
    Assignment, CpuExperts, Error, ExpertWeights, Input, Isa, K_BLOCK, Math, Q8Row, Q16Row, QuantMatrix, gemv,
};
use diskformer_gguf::{TensorType, dequantize};
use proptest::prelude::*;
use proptest::strategy::ValueTree;

/// Bytes of a block and where its f16 scales lie in it (for F16 and BF16 the value itself).
fn layout(ty: TensorType) -> (usize, &'static [usize]) {
    match ty {
        TensorType::F16 | TensorType::BF16 => (2, &[0]),
        TensorType::Q4_1 => (20, &[0, 2]),
        TensorType::Q5_0 => (22, &[0]),
        TensorType::Q5_1 => (24, &[0, 2]),
        TensorType::Q2K => (84, &[80, 82]),
        TensorType::Q3K => (110, &[108]),
        TensorType::Q4K => (144, &[0, 2]),
        TensorType::Q5K => (176, &[0, 2]),
        TensorType::Q6K => (210, &[208]),
        TensorType::IQ4NL => (18, &[0]),
        TensorType::IQ4XS => (136, &[0]),
        other => panic!("no layout for {other} here"),
    }
}

/// `blocks` random blocks of `ty`: any bytes, the f16 scales finite, 2^-10 .. 2^-2, of either sign.
fn arbitrary_blocks(ty: TensorType, blocks: usize) -> impl Strategy<Value = Vec<u8>> {
    let (bytes, scales) = layout(ty);
    let scale =
        (any::<bool>(), 5u16..13, 0u16..1024).prop_map(|(neg, e, m)| (u16::from(neg) << 15) | (e << 10) | m);
    (
        proptest::collection::vec(any::<u8>(), blocks * bytes),
        proptest::collection::vec(scale, blocks * scales.len()),
    )
        .prop_map(move |(mut data, s)| {
            for (b, block) in data.chunks_exact_mut(bytes).enumerate() {
                for (i, &at) in scales.iter().enumerate() {
                    block[at..at + 2].copy_from_slice(&s[b * scales.len() + i].to_le_bytes());
                }
            }
            data
        })
}

/// Every type taken here but F32 (random bytes would be NaN; `f32_rows_multiply_exactly` covers it).
const TYPES: [TensorType; 12] = [
    TensorType::F16,
    TensorType::BF16,
    TensorType::Q4_1,
    TensorType::Q5_0,
    TensorType::Q5_1,
    TensorType::Q2K,
    TensorType::Q3K,
    TensorType::Q4K,
    TensorType::Q5K,
    TensorType::Q6K,
    TensorType::IQ4NL,
    TensorType::IQ4XS,
];

fn any_type() -> impl Strategy<Value = TensorType> {
    proptest::sample::select(TYPES.to_vec())
}

fn values(ty: TensorType, data: &[u8], n: usize) -> Vec<f32> {
    let mut out = vec![0f32; n];
    dequantize(ty, data, &mut out).unwrap();
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn gemv_matches_the_dequantised_reference(
        (ty, rows, per_row, data, x) in (any_type(), 1usize..4, 1usize..3).prop_flat_map(|(ty, rows, per_row)| {
            let blocks = rows * per_row * K_BLOCK / ty.block_size() as usize;
            (Just(ty), Just(rows), Just(per_row), arbitrary_blocks(ty, blocks),
             proptest::collection::vec(-4f32..4f32, per_row * K_BLOCK))
        })
    ) {
        let cols = per_row * K_BLOCK;
        let m = QuantMatrix::blocks("w", ty, (rows, cols), &data).unwrap();
        let w = values(ty, &data, rows * cols);
        for isa in Isa::ALL.into_iter().filter(|i| i.available()) {
            let mut got = vec![0f32; rows];
            gemv(isa, &m, Input::F32(&x), &mut got).unwrap();
            for r in 0..rows {
                let row = &w[r * cols..][..cols];
                prop_assert_eq!(&m.dequantize_row(r), &row.to_vec());
                let want: f64 = row.iter().zip(&x).map(|(w, x)| f64::from(*w) * f64::from(*x)).sum();
                let size: f64 = row.iter().zip(&x).map(|(w, x)| (f64::from(*w) * f64::from(*x)).abs()).sum();
                prop_assert!(
                    (f64::from(got[r]) - want).abs() <= 1e-5 * size + 1e-30,
                    "{} {} row {}: {} vs {}", ty, isa, r, got[r], want
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Q4_K, Q5_K and Q6_K rows times Q8_0- and Q16-quantised inputs: every path against the f64 product of
    /// the dequantised weights and the input's quantised values (`q · d`; Q16: both halves'), which the
    /// integer sums compute exactly up to the f32 scaling.
    #[test]
    fn q4_k_q5_k_and_q6_k_gemv_with_quantised_inputs_match_the_reference(
        (ty, rows, per_row, data, x) in (prop_oneof![Just(TensorType::Q4K), Just(TensorType::Q5K), Just(TensorType::Q6K)], 1usize..4, 1usize..3)
            .prop_flat_map(|(ty, rows, per_row)| {
                (Just(ty), Just(rows), Just(per_row), arbitrary_blocks(ty, rows * per_row),
                 proptest::collection::vec(-4f32..4f32, per_row * K_BLOCK))
            })
    ) {
        let cols = per_row * K_BLOCK;
        let m = QuantMatrix::blocks("w", ty, (rows, cols), &data).unwrap();
        let w = values(ty, &data, rows * cols);
        let (xq, x16) = (Q8Row::quantize(&x), Q16Row::quantize(&x));
        let values = |q: &Q8Row| -> Vec<f64> {
            q.quants.iter().enumerate().map(|(i, &v)| f64::from(v) * f64::from(q.scales[i / 32])).collect()
        };
        let x16v: Vec<f64> = values(&x16.hi).iter().zip(values(&x16.lo)).map(|(h, l)| h + l).collect();
        for (input, xv) in [(Input::Q8(&xq), values(&xq)), (Input::Q16(&x16), x16v)] {
            for isa in Isa::ALL.into_iter().filter(|i| i.available()) {
                let mut got = vec![0f32; rows];
                gemv(isa, &m, input, &mut got).unwrap();
                for r in 0..rows {
                    let row = &w[r * cols..][..cols];
                    let want: f64 = row.iter().zip(&xv).map(|(w, x)| f64::from(*w) * x).sum();
                    let size: f64 = row.iter().zip(&xv).map(|(w, x)| (f64::from(*w) * x).abs()).sum();
                    prop_assert!(
                        (f64::from(got[r]) - want).abs() <= 1e-5 * size + 1e-30,
                        "{} {} {:?} row {}: {} vs {}", ty, isa, input, r, got[r], want
                    );
                }
            }
        }
    }
}

/// Σ_a w_a · down(silu(gate · x) ⊙ (up · x)) in f64 over dequantised experts `(gate, up, down)`.
fn moe_reference(
    experts: &[(Vec<f32>, Vec<f32>, Vec<f32>)],
    hidden: usize,
    ffn: usize,
    x: &[f32],
    picks: &[(usize, f32)],
) -> Vec<f64> {
    let mut out = vec![0f64; hidden];
    for &(e, weight) in picks {
        let (gate, up, down) = &experts[e];
        let dot = |m: &[f32], r: usize, v: &[f64]| -> f64 {
            m[r * v.len()..][..v.len()].iter().zip(v).map(|(w, v)| f64::from(*w) * v).sum()
        };
        let xs: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
        let act: Vec<f64> = (0..ffn)
            .map(|r| {
                let g = dot(gate, r, &xs);
                g / (1.0 + (-g).exp()) * dot(up, r, &xs)
            })
            .collect();
        for (r, o) in out.iter_mut().enumerate() {
            *o += f64::from(weight) * dot(down, r, &act);
        }
    }
    out
}

#[test]
fn the_experts_ffn_matches_the_reference_on_every_type() {
    let (hidden, ffn) = (512, 256);
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    for ty in TYPES {
        let n = |rows: usize, cols: usize| rows * cols / ty.block_size() as usize;
        let draw = |blocks: usize, runner: &mut proptest::test_runner::TestRunner| {
            arbitrary_blocks(ty, blocks).new_tree(runner).unwrap().current()
        };
        let raw: Vec<[Vec<u8>; 3]> = (0..4)
            .map(|_| {
                [
                    draw(n(ffn, hidden), &mut runner),
                    draw(n(ffn, hidden), &mut runner),
                    draw(n(hidden, ffn), &mut runner),
                ]
            })
            .collect();
        let experts: Vec<ExpertWeights<'_>> = raw
            .iter()
            .map(|[g, u, d]| {
                ExpertWeights::new(
                    QuantMatrix::blocks("gate", ty, (ffn, hidden), g).unwrap(),
                    QuantMatrix::blocks("up", ty, (ffn, hidden), u).unwrap(),
                    QuantMatrix::blocks("down", ty, (hidden, ffn), d).unwrap(),
                )
                .unwrap()
            })
            .collect();
        let dequantised: Vec<_> = raw
            .iter()
            .map(|[g, u, d]| {
                (values(ty, g, ffn * hidden), values(ty, u, ffn * hidden), values(ty, d, hidden * ffn))
            })
            .collect();
        let x: Vec<f32> = (0..hidden).map(|i| ((i as f32) * 0.37).sin() * 0.5).collect();
        let picks = [(2usize, 0.5f32), (0, 0.3), (3, 0.2)];
        let assignments: Vec<Assignment> =
            picks.iter().map(|&(expert, weight)| Assignment { token: 0, expert, weight }).collect();
        let want = moe_reference(&dequantised, hidden, ffn, &x, &picks);
        let size = want.iter().map(|v| v.abs()).fold(0f64, f64::max).max(1e-12);
        for threads in [1, 3] {
            let cpu = CpuExperts::new(threads, Isa::detect()).unwrap();
            let mut out = vec![0f32; hidden];
            cpu.moe(Math::F32, &experts, &x, &assignments, &mut out).unwrap();
            let worst = out.iter().zip(&want).map(|(g, w)| (f64::from(*g) - w).abs()).fold(0f64, f64::max);
            assert!(worst <= 1e-4 * size, "{ty}, {threads} threads: worst {worst:e} against {size:e}");
            if matches!(ty, TensorType::Q4K | TensorType::Q5K | TensorType::Q6K) {
                // Quantised inputs (the token row, then the activation): within their rounding, as the
                // Q8_0 weights' (tests/ffn.rs).
                cpu.moe(Math::Q8, &experts, &x, &assignments, &mut out).unwrap();
                let worst =
                    out.iter().zip(&want).map(|(g, w)| (f64::from(*g) - w).abs()).fold(0f64, f64::max);
                assert!(worst <= 2e-2 * size, "{ty} Q8, {threads} threads: worst {worst:e} against {size:e}");
                // Q16 inputs: within f32's tolerance.
                cpu.moe(Math::Q16, &experts, &x, &assignments, &mut out).unwrap();
                let worst =
                    out.iter().zip(&want).map(|(g, w)| (f64::from(*g) - w).abs()).fold(0f64, f64::max);
                assert!(
                    worst <= 1e-4 * size,
                    "{ty} Q16, {threads} threads: worst {worst:e} against {size:e}"
                );
            }
        }
    }
}

#[test]
fn these_types_are_refused_as_planes_or_partial_blocks_and_only_q4_k_to_q6_k_take_quantised_inputs() {
    let block = vec![0u8; 144];
    assert!(matches!(
        QuantMatrix::planes("w", TensorType::Q4K, (1, 256), &block, &[]),
        Err(Error::UnsupportedType { .. })
    ));
    assert!(matches!(
        QuantMatrix::blocks("w", TensorType::Q4K, (1, 128), &block[..72]),
        Err(Error::PartialBlock { block: 256, .. })
    ));
    assert!(matches!(
        QuantMatrix::blocks("w", TensorType::Q8K, (1, 256), &[0; 292]),
        Err(Error::UnsupportedType { .. })
    ));
    // Quantised inputs: Q4_K, Q5_K and Q6_K take them, the other types (Q3_K here) do not.
    let xq = Q8Row::quantize(&[0.5; 256]);
    let m = QuantMatrix::blocks("w", TensorType::Q4K, (1, 256), &block).unwrap();
    gemv(Isa::Scalar, &m, Input::Q8(&xq), &mut [0.0]).unwrap();
    let q3k = vec![0u8; 110];
    let m = QuantMatrix::blocks("w", TensorType::Q3K, (1, 256), &q3k).unwrap();
    assert!(matches!(gemv(Isa::Scalar, &m, Input::Q8(&xq), &mut [0.0]), Err(Error::QuantisedInput { .. })));
    let (gate_up, down) = (vec![0u8; 144 * 256], vec![0u8; 110 * 256]);
    let e = ExpertWeights::new(
        QuantMatrix::blocks("gate", TensorType::Q4K, (256, 256), &gate_up).unwrap(),
        QuantMatrix::blocks("up", TensorType::Q4K, (256, 256), &gate_up).unwrap(),
        QuantMatrix::blocks("down", TensorType::Q3K, (256, 256), &down).unwrap(),
    )
    .unwrap();
    let cpu = CpuExperts::new(2, Isa::detect()).unwrap();
    let mut out = vec![0f32; 256];
    let one = [Assignment { token: 0, expert: 0, weight: 1.0 }];
    assert!(matches!(
        cpu.moe(Math::Q8, &[e], &[0.1; 256], &one, &mut out),
        Err(Error::QuantisedInput { .. })
    ));
    cpu.moe(Math::F32, &[e], &[0.1; 256], &one, &mut out).unwrap();
}

#[test]
fn f32_rows_multiply_exactly() {
    let w: Vec<f32> = (0..512).map(|i| (i % 7) as f32 - 3.0).collect();
    let data: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
    let m = QuantMatrix::blocks("w", TensorType::F32, (2, 256), &data).unwrap();
    let x: Vec<f32> = (0..256).map(|i| (i % 5) as f32).collect();
    let want: Vec<f32> =
        (0..2).map(|r| w[r * 256..][..256].iter().zip(&x).map(|(a, b)| a * b).sum()).collect();
    for isa in Isa::ALL.into_iter().filter(|i| i.available()) {
        let mut got = [0f32; 2];
        gemv(isa, &m, Input::F32(&x), &mut got).unwrap();
        assert_eq!(got.to_vec(), want, "{isa}: small integers sum exactly in any order");
    }
}
