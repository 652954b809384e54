//! Protects the GPU sampler (`sample_top_k`: top-k, temperature, top-p, min-p and the draw; `apply_penalties`
//! before it) against its CPU reference on a real device: every filter, ties within and across slices, NaN, infinities, signed
//! zeros, rows shorter than k and one longer than a slice. Each case draws at the middle of several
//! candidates' intervals (so f32 rounding of the weights cannot move a pick) and at both ends.

mod common;

use common::{Gpu, Rng, poisoned, read_n, run, upload};
use diskformer_kernels::{
    Kernels, PENALTY_MAX_N, SAMPLE_MAX_K, SAMPLE_MAX_N, SampleStep, cpu, sample_levels, sample_partial_len,
};

fn step(k: u32, temperature: f32, top_p: f32, min_p: f32) -> SampleStep {
    SampleStep {
        k,
        temperature,
        top_p,
        min_p,
        u: 0.0,
        repetition_penalty: 1.0,
        presence_penalty: 0.0,
        last_n: 0,
        frequency_penalty: 0.0,
    }
}

/// The GPU's pick for `logits` at each of `us`.
fn gpu_picks(g: &Gpu, logits: &[f32], s: SampleStep, us: &[f32]) -> Vec<u32> {
    let n = logits.len() as u32;
    let lb = upload(g, logits);
    let sb = upload(g, &[s]);
    let partial = [(); 2].map(|()| poisoned(g, 4 * sample_partial_len(n) as usize));
    let out = poisoned(g, 4);
    let picks = |k: &Kernels| -> Vec<u32> {
        let views = partial.each_ref().map(|b| b.into());
        let d = k.sample_top_k((&lb).into(), (&sb).into(), views, (&out).into(), n).unwrap();
        assert_eq!(d.parts(), sample_levels(n).len());
        us.iter()
            .map(|&u| {
                g.ctx.queue.write_buffer(&sb, 0, bytemuck::bytes_of(&SampleStep { u, ..s }));
                run(g, &[&d]);
                read_n::<u32>(g, &out, 1)[0]
            })
            .collect()
    };
    picks(&g.kernels)
}

/// Draws at the middle of up to 9 candidates' intervals (first, last and spread between) and at u = 0 and
/// just under 1; each must give what the CPU reference gives, and the middles their own candidate.
fn check(g: &Gpu, what: &str, logits: &[f32], s: SampleStep) {
    let c = cpu::sample_candidates(logits, &s);
    let total: f32 = c.iter().map(|c| c.1).sum();
    let mut picked: Vec<usize> = (0..c.len()).step_by(c.len().div_ceil(8).max(1)).collect();
    if c.len() > 1 {
        picked.push(c.len() - 1);
    }
    let mut us = vec![0.0, 1.0 - f32::EPSILON];
    let mut want = vec![cpu::sample_top_k(logits, &SampleStep { u: us[0], ..s })];
    want.push(cpu::sample_top_k(logits, &SampleStep { u: us[1], ..s }));
    for &r in &picked {
        let before: f32 = c[..r].iter().map(|c| c.1).sum();
        if c[r].1 <= 1e-3 * total {
            continue; // too thin an interval to aim at through f32 rounding
        }
        us.push((before + c[r].1 / 2.0) / total);
        want.push(c[r].0);
    }
    assert_eq!(gpu_picks(g, logits, s, &us), want, "{what}: candidates {c:?}, draws at {us:?}");
}

#[test]
fn sample_top_k_matches_the_cpu_reference() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(31);
    let vocab = 151_936usize;
    assert_eq!(sample_levels(vocab as u32), [149, 10, 1]);
    let full = rng.vec_f32(vocab, -8.0, 8.0);
    // The chat defaults, every candidate of top-k alone, a nucleus and min-p.
    check(g, "chat defaults", &full, step(20, 0.6, 0.95, 0.0));
    check(g, "top-k 64", &full, step(SAMPLE_MAX_K, 1.0, 1.0, 0.0));
    check(g, "top-p 0.5, hot", &full, step(40, 2.0, 0.5, 0.0));
    check(g, "min-p", &full, step(40, 1.0, 1.0, 0.3));
    check(g, "top-k 1", &full, step(1, 0.7, 1.0, 0.0));
    // Outside what the host sends, both sides agree too: k clamped to 1..=64, the best kept at any min-p.
    check(g, "k 0", &full[..5000], step(0, 1.0, 1.0, 0.0));
    check(g, "k 65", &full[..5000], step(SAMPLE_MAX_K + 1, 1.0, 1.0, 0.0));
    check(g, "min-p over 1", &full[..5000], step(10, 1.0, 1.0, 1.5));

    // Ties within a tile (1,024 logits) and across tiles, best first with the lower index.
    let mut ties = rng.vec_f32(3 * 8192 + 5, -1.0, 1.0);
    for &i in &[20_000, 7, 8191, 8192, 3 * 8192 + 4, 100] {
        ties[i] = 3.0;
    }
    ties[9000] = 2.5;
    let c = cpu::sample_candidates(&ties, &step(8, 1.0, 1.0, 0.0));
    let ids: Vec<u32> = c.iter().map(|c| c.0).collect();
    assert_eq!(ids[..7], [7, 100, 8191, 8192, 20_000, 24_580, 9000], "the reference's ranking");
    check(g, "ties", &ties, step(8, 1.0, 1.0, 0.0));

    // NaN never a candidate, -inf weighs nothing, -0.0 ranks under +0.0.
    let mut odd = rng.vec_f32(5000, -30.0, -20.0);
    odd[10] = f32::NAN;
    odd[11] = 0.0;
    odd[12] = -0.0;
    odd[13] = f32::NEG_INFINITY;
    odd[14] = -0.5;
    check(g, "nan, zeros", &odd, step(3, 1.0, 1.0, 0.0));
    let few = [f32::NAN, f32::NEG_INFINITY, 1.0, f32::NAN, -1.0];
    check(g, "a row shorter than k", &few, step(20, 0.5, 1.0, 0.0));
    assert_eq!(gpu_picks(g, &[f32::NAN; 9], step(4, 1.0, 1.0, 0.0), &[0.5]), [0], "no candidate");
    assert_eq!(
        gpu_picks(g, &[1.0, f32::INFINITY, 2.0, f32::INFINITY], step(4, 1.0, 1.0, 0.0), &[0.9]),
        [1],
        "an infinite best"
    );
    assert_eq!(gpu_picks(g, &[f32::NAN, 4.0, f32::NAN], step(4, 1.0, 1.0, 0.0), &[0.9]), [1], "one");

    // One more logit than a tile holds, the best at the end; a row of 1.
    let mut past = rng.vec_f32(1025, -2.0, 2.0);
    past[1024] = 5.0;
    check(g, "a tile and one", &past, step(10, 1.0, 0.9, 0.0));
    // Four levels, the first two partial buffers each used twice.
    let long = rng.vec_f32(1024 * 1024 + 3, -5.0, 5.0);
    assert_eq!(sample_levels(long.len() as u32), [1025, 65, 5, 1]);
    let s = step(SAMPLE_MAX_K, 0.9, 0.99, 0.0);
    let us = [0.0, 0.37, 1.0 - f32::EPSILON];
    let want: Vec<u32> = us.iter().map(|&u| cpu::sample_top_k(&long, &SampleStep { u, ..s })).collect();
    assert_eq!(gpu_picks(g, &long, s, &us), want, "four levels");
    assert_eq!(gpu_picks(g, &[-3.0], step(5, 1.0, 1.0, 0.0), &[0.99]), [0]);
}

#[test]
fn sample_top_k_refuses_rows_it_cannot_rank() {
    let g = gpu_or_skip!();
    let buf = poisoned(g, 4096);
    for n in [0, SAMPLE_MAX_N + 1] {
        let r = g.kernels.sample_top_k((&buf).into(), (&buf).into(), [(&buf).into(); 2], (&buf).into(), n);
        let e = r.expect_err("a bad row length").to_string();
        assert!(e.contains("sample_top_k") && e.contains(&n.to_string()), "{e}");
    }
}

#[test]
fn apply_penalties_matches_the_cpu_reference() {
    // A window through the ring's wrap, with repeats (repetition and presence applied once, frequency once
    // an occurrence) and an id past the vocabulary
    // (ignored); a window longer than the sequence so far; the ring's slot for the step's own position
    // written from token_ids. Only the window's logits move.
    let g = gpu_or_skip!();
    let mut rng = Rng::new(41);
    let n = 3000usize;
    let logits = rng.vec_f32(n, -6.0, 6.0);
    let ring = PENALTY_MAX_N as usize;
    for (pos, last_n, rp, presence) in
        [(300u32, 40u32, 1.3f32, 0.5f32), (5, 64, 0.8, 0.0), (1000, 256, 1.1, 1.5)]
    {
        let mut recent: Vec<u32> = (0..ring).map(|_| rng.below(n as u64) as u32).collect();
        let p = pos as usize;
        recent[(p - 1) % ring] = recent[(p - 3) % ring]; // a repeat
        recent[(p - 2) % ring] = n as u32 + 7; // past the vocabulary
        let token = rng.below(n as u64) as u32;
        let s = SampleStep {
            repetition_penalty: rp,
            presence_penalty: presence,
            frequency_penalty: presence / 3.0,
            last_n,
            ..step(20, 1.0, 1.0, 0.0)
        };
        let (lb, rb) = (upload(g, &logits), upload(g, &recent));
        let (sb, pb, tb) = (upload(g, &[s]), upload(g, &[pos]), upload(g, &[token]));
        let d = g.kernels.apply_penalties(
            (&sb).into(),
            ((&pb).into(), (&tb).into()),
            (&rb).into(),
            (&lb).into(),
            n as u32,
        );
        run(g, &[&d.unwrap()]);
        let mut with_token = recent.clone();
        with_token[p % ring] = token;
        let len = (last_n as usize).min(p + 1);
        let window: Vec<u32> = (0..len).map(|j| with_token[(p - j) % ring]).collect();
        let mut want = logits.clone();
        cpu::apply_penalties(&mut want, &window, rp, presence, presence / 3.0);
        let got = read_n::<f32>(g, &lb, n);
        let moved = (0..n).filter(|&i| want[i] != logits[i]).count();
        assert!(moved > len / 2, "the window moved {moved} logits");
        for i in 0..n {
            let tol = 1e-6 * want[i].abs().max(1.0);
            assert!((got[i] - want[i]).abs() <= tol, "pos {pos}: logit {i}: {} vs {}", got[i], want[i]);
        }
        assert_eq!(read_n::<u32>(g, &rb, ring), with_token, "the ring after the step");
    }
}
