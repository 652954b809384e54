//! Protects the experts' FFN on the CPU: every path and thread count against a plain reference built from
//! dequantised rows, in f32, Q8 and Q16 math, at random small shapes and at real models' expert shapes; bad
//! assignments refused before anything runs.

use diskformer_cpu_kernels::{
    Assignment, BLOCK, CpuExperts, Error, ExpertWeights, Input, Isa, Math, Q8Row, Q16Row, QuantMatrix,
    dot_reference,
};
use diskformer_gguf::TensorType;
use proptest::prelude::*;

/// Planes of `experts` experts, each gate, up, down in a row.
struct Experts {
    ty: TensorType,
    hidden: usize,
    ffn: usize,
    quants: Vec<Vec<u8>>,
    scales: Vec<Vec<u8>>,
}

impl Experts {
    fn random(ty: TensorType, hidden: usize, ffn: usize, experts: usize, seed: u64) -> Self {
        let mut rng = diskformer_testkit::Rng::new(seed);
        let mut next = move || rng.next_u64();
        let qb = if ty == TensorType::Q8_0 { 32 } else { 16 };
        let blocks = 3 * hidden * ffn / BLOCK;
        let quants = (0..experts).map(|_| (0..blocks * qb).map(|_| next() as u8).collect()).collect();
        // Scales around 2^-7 of either sign: activations stay O(1) through the FFN.
        let scales = (0..experts)
            .map(|_| {
                (0..blocks)
                    .flat_map(|_| {
                        ((next() as u16 & 0x8000)
                            | ((8 + (next() % 2) as u16) << 10)
                            | (next() % 1024) as u16)
                            .to_le_bytes()
                    })
                    .collect()
            })
            .collect();
        Self { ty, hidden, ffn, quants, scales }
    }

    fn matrix(&self, e: usize, part: usize) -> QuantMatrix<'_> {
        let qb = if self.ty == TensorType::Q8_0 { 32 } else { 16 };
        let n = self.hidden * self.ffn / BLOCK;
        let shape = if part == 2 { (self.hidden, self.ffn) } else { (self.ffn, self.hidden) };
        let (q, s) = (&self.quants[e][part * n * qb..][..n * qb], &self.scales[e][part * n * 2..][..n * 2]);
        QuantMatrix::planes("w", self.ty, shape, q, s).unwrap()
    }

    fn weights(&self) -> Vec<ExpertWeights<'_>> {
        (0..self.quants.len())
            .map(|e| ExpertWeights::new(self.matrix(e, 0), self.matrix(e, 1), self.matrix(e, 2)).unwrap())
            .collect()
    }

    /// The FFN as written down: dequantised rows, the math's inputs, f64 sums; and each output's Σ|terms|.
    fn reference(&self, math: Math, x: &[f32], assignments: &[Assignment]) -> (Vec<f64>, Vec<f64>) {
        let h = self.hidden;
        let mut out = vec![0f64; x.len()];
        let mut mag = vec![0f64; x.len()];
        let input = |v: &[f32]| -> Vec<f32> {
            match math {
                Math::F32 => v.to_vec(),
                Math::Q8 => values(&Q8Row::quantize(v)),
                Math::Q16 => {
                    let q = Q16Row::quantize(v);
                    values(&q.hi).iter().zip(values(&q.lo)).map(|(h, l)| h + l).collect()
                }
            }
        };
        let dot = |m: &QuantMatrix<'_>, r: usize, v: &[f32]| -> (f64, f64) {
            m.dequantize_row(r).iter().zip(v).fold((0.0, 0.0), |(s, a), (w, x)| {
                let t = f64::from(*w) * f64::from(*x);
                (s + t, a + t.abs())
            })
        };
        for a in assignments {
            let xt = input(&x[a.token * h..][..h]);
            let act: Vec<f32> = (0..self.ffn)
                .map(|r| {
                    let g = dot(&self.matrix(a.expert, 0), r, &xt).0 as f32;
                    let u = dot(&self.matrix(a.expert, 1), r, &xt).0 as f32;
                    g / (1.0 + (-g).exp()) * u
                })
                .collect();
            let act = input(&act);
            for r in 0..h {
                let (y, m) = dot(&self.matrix(a.expert, 2), r, &act);
                out[a.token * h + r] += f64::from(a.weight) * y;
                mag[a.token * h + r] += f64::from(a.weight.abs()) * m;
            }
        }
        (out, mag)
    }
}

/// A quantised row's values, `q · d`.
fn values(q: &Q8Row) -> Vec<f32> {
    q.quants.iter().enumerate().map(|(i, &v)| f32::from(v) * q.scales[i / BLOCK]).collect()
}

fn arbitrary_assignments(tokens: usize, experts: usize) -> impl Strategy<Value = Vec<Assignment>> {
    proptest::collection::vec((0..tokens, 0..experts, 0.01f32..1.0), 1..=4 * tokens).prop_map(|v| {
        v.into_iter().map(|(token, expert, weight)| Assignment { token, expert, weight }).collect()
    })
}

fn check(
    experts: &Experts,
    math: Math,
    isa: Isa,
    threads: usize,
    x: &[f32],
    assignments: &[Assignment],
) -> Vec<f32> {
    let cpu = CpuExperts::new(threads, isa).unwrap();
    let mut out = vec![f32::NAN; x.len()];
    cpu.moe(math, &experts.weights(), x, assignments, &mut out).unwrap();
    let (want, mag) = experts.reference(math, x, assignments);
    // f32 sums in any order lie within a few ulps of Σ|terms|; the Q8 path also rounds the activation to
    // Q8_0 from its own f32 SwiGLU, so one step of that rounding (|act|/127 a block) can differ, and the
    // Q16 path one step of its own (|act|/127/256).
    let rel = match math {
        Math::Q8 => 2e-2,
        Math::Q16 => 2e-4,
        Math::F32 => 1e-4,
    };
    for (i, (g, (w, m))) in out.iter().zip(want.iter().zip(&mag)).enumerate() {
        assert!(
            (f64::from(*g) - w).abs() <= rel * m + 1e-6,
            "{isa} {math:?} t{threads} out[{i}] = {g}, want {w} (Σ|terms| {m})"
        );
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn moe_matches_the_reference_on_every_path(
        q4 in any::<bool>(),
        (hidden, ffn) in (1usize..5, 1usize..4).prop_map(|(h, f)| (32 * h, 32 * f)),
        tokens in 1usize..4,
        seed in any::<u64>(),
        assignments in arbitrary_assignments(3, 6),
    ) {
        let ty = if q4 { TensorType::Q4_0 } else { TensorType::Q8_0 };
        let experts = Experts::random(ty, hidden, ffn, 6, seed);
        let assignments: Vec<_> = assignments.into_iter().filter(|a| a.token < tokens).collect();
        let x: Vec<f32> = (0..tokens * hidden).map(|i| ((i * 7919 + seed as usize) % 2001) as f32 / 1000.0 - 1.0).collect();
        for isa in Isa::ALL.into_iter().filter(|i| i.available()) {
            for math in [Math::F32, Math::Q8, Math::Q16] {
                check(&experts, math, isa, 3, &x, &assignments);
            }
        }
    }
}

#[test]
fn the_result_does_not_depend_on_the_thread_count() {
    let experts = Experts::random(TensorType::Q8_0, 256, 128, 8, 7);
    let x: Vec<f32> = (0..2 * 256).map(|i| (i as f32 * 0.37).sin()).collect();
    let assignments: Vec<Assignment> = (0..8)
        .map(|k| Assignment { token: k % 2, expert: (3 * k) % 8, weight: 0.1 + k as f32 / 20.0 })
        .collect();
    let isa = Isa::detect();
    for math in [Math::F32, Math::Q8, Math::Q16] {
        let one = check(&experts, math, isa, 1, &x, &assignments);
        for threads in [2, 5] {
            let many = check(&experts, math, isa, threads, &x, &assignments);
            assert_eq!(
                one.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                many.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }
    }
}

#[test]
fn real_expert_shapes_match_the_reference() {
    // Qwen3-30B-A3B (hidden 2,048, ffn 768) and Qwen3.5-35B-A3B's (2,048, 512), one token, top-8, f32 and Q8
    // math; and the Q8 math's distance from f32's, what the activation quantisation costs.
    for (hidden, ffn) in [(2048, 768), (2048, 512)] {
        for ty in [TensorType::Q8_0, TensorType::Q4_0] {
            let experts = Experts::random(ty, hidden, ffn, 8, hidden as u64 + ffn as u64);
            let x: Vec<f32> = (0..hidden).map(|i| (i as f32 * 0.013).cos()).collect();
            let assignments: Vec<Assignment> =
                (0..8).map(|e| Assignment { token: 0, expert: e, weight: 1.0 / 8.0 }).collect();
            let f32_out = check(&experts, Math::F32, Isa::detect(), 4, &x, &assignments);
            let q8_out = check(&experts, Math::Q8, Isa::detect(), 4, &x, &assignments);
            let q16_out = check(&experts, Math::Q16, Isa::detect(), 4, &x, &assignments);
            let norm = f32_out.iter().map(|v| v * v).sum::<f32>().sqrt();
            let from_f32 =
                |out: &[f32]| f32_out.iter().zip(out).map(|(a, b)| (a - b) * (a - b)).sum::<f32>().sqrt();
            let (q8, q16) = (from_f32(&q8_out), from_f32(&q16_out));
            assert!(q8 / norm < 0.05, "{ty} [{hidden}, {ffn}]: Q8 math {q8} from f32's (norm {norm})");
            // Q16's rounding is 256 times finer: it lies far nearer f32 than Q8 does.
            assert!(q16 < q8 / 32.0, "{ty} [{hidden}, {ffn}]: Q16 math {q16} from f32's, Q8 {q8}");
        }
    }
}

#[test]
fn gemv_and_moe_agree_on_one_expert() {
    // The FFN's gate row is the GEMV's: a check that moe reads the rows it is given, in order.
    let experts = Experts::random(TensorType::Q8_0, 64, 32, 1, 3);
    let gate = experts.matrix(0, 0);
    let x: Vec<f32> = (0..64).map(|i| i as f32 / 64.0).collect();
    let mut rows = vec![0f32; 32];
    diskformer_cpu_kernels::gemv(Isa::Scalar, &gate, Input::F32(&x), &mut rows).unwrap();
    assert_eq!(rows[5], dot_reference(&gate, 5, Input::F32(&x)));
}

#[test]
fn bad_assignments_are_refused_before_anything_runs() {
    let experts = Experts::random(TensorType::Q8_0, 64, 32, 2, 5);
    let w = experts.weights();
    let cpu = CpuExperts::new(2, Isa::Scalar).unwrap();
    let x = vec![0.5f32; 128];
    let mut out = vec![7.0f32; 128];
    let bad_token = [Assignment { token: 2, expert: 0, weight: 1.0 }];
    assert!(matches!(
        cpu.moe(Math::F32, &w, &x, &bad_token, &mut out),
        Err(Error::OutOfRange { what: "token", value: 2, len: 2, .. })
    ));
    let bad_expert =
        [Assignment { token: 0, expert: 0, weight: 1.0 }, Assignment { token: 1, expert: 9, weight: 1.0 }];
    assert!(matches!(
        cpu.moe(Math::Q8, &w, &x, &bad_expert, &mut out),
        Err(Error::OutOfRange { index: 1, what: "expert", value: 9, .. })
    ));
    assert!(out.iter().all(|&v| v == 7.0), "nothing written on refusal");
    assert!(matches!(
        cpu.moe(Math::F32, &w, &x[..100], &[], &mut out[..100]),
        Err(Error::ShapeMismatch { .. })
    ));
    let other = Experts::random(TensorType::Q8_0, 64, 64, 1, 5);
    let mixed = [w[0], other.weights()[0]];
    assert!(matches!(cpu.moe(Math::F32, &mixed, &x, &[], &mut out), Err(Error::ShapeMismatch { .. })));
    assert!(matches!(
        ExpertWeights::new(experts.matrix(0, 0), experts.matrix(0, 2), experts.matrix(0, 2)),
        Err(Error::ShapeMismatch { .. })
    ));
}

#[test]
fn a_token_without_assignments_gets_zeros() {
    let experts = Experts::random(TensorType::Q4_0, 64, 32, 2, 9);
    let cpu = CpuExperts::new(2, Isa::detect()).unwrap();
    let x = vec![0.25f32; 128];
    let mut out = vec![7.0f32; 128];
    cpu.moe(Math::F32, &experts.weights(), &x, &[Assignment { token: 1, expert: 1, weight: 1.0 }], &mut out)
        .unwrap();
    assert!(out[..64].iter().all(|&v| v == 0.0));
    assert!(out[64..].iter().any(|&v| v != 0.0));
}

#[test]
fn moe_while_runs_the_callers_work_and_computes_what_moe_does() {
    let experts = Experts::random(TensorType::Q4_0, 256, 128, 8, 11);
    let x: Vec<f32> = (0..256).map(|i| (i as f32 * 0.21).cos()).collect();
    let assignments: Vec<Assignment> =
        (0..5).map(|k| Assignment { token: 0, expert: 7 - k, weight: 0.3 - k as f32 / 30.0 }).collect();
    let cpu = CpuExperts::new(4, Isa::detect()).unwrap();
    let (mut plain, mut overlapped) = (vec![0f32; 256], vec![0f32; 256]);
    cpu.moe(Math::F32, &experts.weights(), &x, &assignments, &mut plain).unwrap();
    let got = cpu
        .moe_while(Math::F32, &experts.weights(), &x, &assignments, &mut overlapped, || "recorded")
        .unwrap();
    assert_eq!(got, "recorded");
    assert_eq!(plain, overlapped);
    // Refused arguments still run the caller's work, and compute nothing.
    let mut ran = false;
    let refused =
        cpu.moe_while(Math::F32, &experts.weights(), &x[..100], &[], &mut overlapped[..100], || {
            ran = true;
        });
    assert!(matches!(refused, Err(Error::ShapeMismatch { .. })) && ran);
}
