//! Protects qwen35moe's kernels against their CPU references on a real device: Gated DeltaNet's causal conv
//! with its saved inputs, the gated delta rule (v heads sharing q/k heads, the state carried across a
//! chunk's tokens and across dispatches) and the gated output norm, a chunk in one dispatch giving what its
//! tokens give one dispatch at a time; the gated attention's per-head norm with partial RoPE, of the queries
//! read from the interleaved query and gate rows and of the keys stored into the cache, and its output gate;
//! the shared expert's gate, alone and inside the routed experts' combine. Bad shapes are refused.

mod common;

use common::{Gpu, Rng, abs_of, assert_close, check_f16_cache, poisoned, read_n, run, upload};
use diskformer_kernels::{
    DeltaNetShape, Kernels, MoeCombineNormParams, QkHeads, QkNormRopePartialStoreParams, SharedExpert, cpu,
};
use half::f16;

/// The conv over `tokens` tokens: (output, state after) on the GPU.
fn gpu_conv(
    g: &Gpu,
    x: &[f32],
    w: &[f32],
    state: &[f32],
    channels: usize,
    taps: usize,
) -> (Vec<f32>, Vec<f32>) {
    let tokens = x.len() / channels;
    let (xb, wb, sb) = (upload(g, x), upload(g, w), upload(g, state));
    let out = poisoned(g, 4 * x.len());
    let d = g
        .kernels
        .delta_net_conv(
            (&xb).into(),
            (&wb).into(),
            (&sb).into(),
            (&out).into(),
            channels as u32,
            taps as u32,
            tokens as u32,
        )
        .unwrap();
    run(g, &[&d]);
    (read_n(g, &out, x.len()), read_n(g, &sb, state.len()))
}

#[test]
fn delta_net_conv_keeps_its_saved_inputs() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(81);
    for (channels, taps, tokens) in [(128usize, 4usize, 1usize), (128, 4, 5), (100, 2, 3), (8192, 4, 2)] {
        let x = rng.vec_f32(tokens * channels, -3.0, 3.0);
        let w = rng.vec_f32(channels * taps, -1.0, 1.0);
        let state = rng.vec_f32((taps - 1) * channels, -3.0, 3.0);
        let (got, got_state) = gpu_conv(g, &x, &w, &state, channels, taps);
        let mut want_state = state.clone();
        let want = cpu::delta_net_conv(&x, &w, &mut want_state, channels, taps);
        let what = format!("delta_net_conv C={channels} K={taps} T={tokens}");
        // K products summed in f32 (the reference in f64), then SiLU's exp: 1e-6 of the terms' size.
        assert_close(&what, &got, &want, &vec![3.0 * taps as f32; want.len()], 1e-7, 1e-6);
        assert_eq!(got_state, want_state, "{what}: the saved inputs are copies");
        if tokens >= taps - 1 {
            assert_eq!(
                &want_state[..],
                &x[(tokens - (taps - 1)) * channels..],
                "{what}: the last K-1 inputs"
            );
        }
    }
}

/// Random inputs of the rule for `tokens` tokens: (u, ba, dt_bias, a, state).
fn rule_inputs(rng: &mut Rng, shape: DeltaNetShape, tokens: usize) -> [Vec<f32>; 5] {
    let (s, hv) = (shape.state as usize, shape.v_heads as usize);
    [
        rng.vec_f32(tokens * shape.channels() as usize, -1.0, 1.0),
        rng.vec_f32(tokens * 2 * hv, -3.0, 3.0),
        rng.vec_f32(hv, -1.0, 1.0),
        rng.vec_f32(hv, -2.0, -0.1),
        rng.vec_f32(hv * s * s, -0.5, 0.5),
    ]
}

/// The rule on the GPU (`k`'s variant) over `u` and `ba` (a chunk), starting from `state`: (output, state
/// after).
fn gpu_rule(
    g: &Gpu,
    k: &Kernels,
    [u, ba, dt, a, state]: [&[f32]; 5],
    shape: DeltaNetShape,
) -> (Vec<f32>, Vec<f32>) {
    let tokens = u.len() / shape.channels() as usize;
    let n = tokens * (shape.v_heads * shape.state) as usize;
    let (ub, bab, db, ab, sb) = (upload(g, u), upload(g, ba), upload(g, dt), upload(g, a), upload(g, state));
    let out = poisoned(g, 4 * n);
    let views = ((&ub).into(), (&bab).into(), (&db).into(), (&ab).into(), (&sb).into(), (&out).into());
    let d = k
        .delta_net_rule(views.0, views.1, views.2, views.3, views.4, views.5, shape, tokens as u32, 1e-6)
        .unwrap();
    run(g, &[&d]);
    (read_n(g, &out, n), read_n(g, &sb, state.len()))
}

#[test]
fn delta_net_rule_matches_the_reference_and_carries_its_state() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(82);
    let shapes = [
        DeltaNetShape { state: 16, k_heads: 2, v_heads: 4 },
        DeltaNetShape { state: 128, k_heads: 2, v_heads: 4 },
        DeltaNetShape { state: 40, k_heads: 3, v_heads: 3 },
    ];
    // With and without subgroups (the row sums by shuffles or through workgroup memory); 70 tokens cross
    // two of the kernel's 32-token blocks of norms and gates.
    let variants = [&g.kernels, &g.plain];
    let cases =
        shapes.iter().flat_map(|&s| variants.iter().flat_map(move |&k| [1usize, 7, 70].map(|t| (s, k, t))));
    for (shape, k, tokens) in cases {
        let [u, ba, dt, a, state] = rule_inputs(&mut rng, shape, tokens);
        let (got, got_state) = gpu_rule(g, k, [&u, &ba, &dt, &a, &state], shape);
        let mut want_state = state.clone();
        let want = cpu::delta_net_rule(&u, &ba, &dt, &a, &mut want_state, shape, 1e-6);
        let what = format!("delta_net_rule {shape:?} T={tokens} subgroups {}", k.subgroups());
        // Dot products of S terms in f32 against f64, compounded over the chunk's tokens through the
        // state; exp and log within a few ulp: 2e-5 of the values' size, with a floor for the small ones.
        assert_close(&what, &got, &want, &abs_of(&want), 2e-6, 2e-5);
        assert_close(&format!("{what}: state"), &got_state, &want_state, &abs_of(&want_state), 2e-6, 2e-5);
        // Token by token, one dispatch each, the state handed on: the same outputs and state.
        let (c, hv) = (shape.channels() as usize, 2 * shape.v_heads as usize);
        let (mut carried, mut outs) = (state.clone(), Vec::new());
        for t in 0..tokens {
            let step = [&u[t * c..(t + 1) * c], &ba[t * hv..(t + 1) * hv], &dt[..], &a[..], &carried[..]];
            let (o, s) = gpu_rule(g, k, step, shape);
            outs.extend(o);
            carried = s;
        }
        assert_close(&format!("{what}: token by token"), &outs, &got, &abs_of(&got), 1e-7, 1e-6);
        assert_close(
            &format!("{what}: state token by token"),
            &carried,
            &got_state,
            &abs_of(&got_state),
            1e-7,
            1e-6,
        );
    }
}

#[test]
fn gated_rms_norm_rows() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(83);
    for (n, rows) in [(16usize, 8usize), (128, 33), (300, 2)] {
        let (o, z, w) =
            (rng.vec_f32(n * rows, -2.0, 2.0), rng.vec_f32(n * rows, -6.0, 6.0), rng.vec_f32(n, 0.5, 1.5));
        let (ob, zb, wb) = (upload(g, &o), upload(g, &z), upload(g, &w));
        let out = poisoned(g, 4 * n * rows);
        let d = g
            .kernels
            .gated_rms_norm(
                (&ob).into(),
                (&zb).into(),
                (&wb).into(),
                (&out).into(),
                n as u32,
                rows as u32,
                1e-6,
            )
            .unwrap();
        run(g, &[&d]);
        let got = read_n::<f32>(g, &out, n * rows);
        let want = cpu::gated_rms_norm(&o, &z, &w, n, 1e-6);
        assert_close(&format!("gated_rms_norm n={n} rows={rows}"), &got, &want, &abs_of(&want), 1e-9, 4e-6);
    }
}

#[test]
fn delta_net_shapes_are_refused_clearly() {
    let g = gpu_or_skip!();
    let b = upload(g, &vec![0f32; 1 << 16]);
    let v = || (&b).into();
    let err = |r: diskformer_kernels::Result<diskformer_kernels::Dispatch>| r.unwrap_err().to_string();
    let too_big = DeltaNetShape { state: 129, k_heads: 1, v_heads: 1 };
    assert!(
        err(g.kernels.delta_net_rule(v(), v(), v(), v(), v(), v(), too_big, 1, 1e-6))
            .contains("head size 129")
    );
    let odd = DeltaNetShape { state: 16, k_heads: 3, v_heads: 4 };
    assert!(
        err(g.kernels.delta_net_rule(v(), v(), v(), v(), v(), v(), odd, 1, 1e-6))
            .contains("3 q/k heads must divide 4")
    );
    assert!(err(g.kernels.delta_net_conv(v(), v(), v(), v(), 128, 1, 1)).contains("1 taps"));
    let small = upload(g, &[0f32; 8]);
    assert!(g.kernels.delta_net_conv((&small).into(), v(), v(), v(), 128, 4, 1).is_err(), "x too small");
}

/// The queries read between their gate rows and the keys stored into the f16 cache at their positions, in
/// one dispatch: as `qk_norm_rope_partial` of each and `kv_store` of the keys.
#[test]
fn qk_norm_rope_partial_store_turns_the_queries_and_caches_the_keys() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(84);
    // (heads, kv_heads, d, r, query stride, positions, ctx): qwen35moe's query [q | gate] rows (stride 2d)
    // over a chunk with a position past the cache (not stored), packed queries, a head of 256 (two dims a
    // lane) at decode, and one of every dim rotated.
    type Case = (usize, usize, usize, usize, usize, &'static [u32], usize);
    let cases: [Case; 4] = [
        (4, 2, 64, 16, 128, &[5, 12, 19, 40], 32),
        (2, 1, 64, 16, 64, &[3, 4, 5], 8),
        (16, 2, 256, 64, 512, &[7], 16),
        (3, 3, 32, 32, 32, &[0], 4),
    ];
    for (heads, kv, d, r, stride, positions, ctx) in cases {
        let t = positions.len();
        let (xq, xk) = (rng.vec_f32(t * heads * stride, -3.0, 3.0), rng.vec_f32(t * kv * d, -3.0, 3.0));
        let (wq, wk) = (rng.vec_f32(d, 0.5, 1.5), rng.vec_f32(d, 0.5, 1.5));
        let mut rope = cpu::rope_cos_sin(positions, r, 1e7);
        rope[1] = [1.0, 0.0]; // a pair IMROPE's sections leave still
        let (xqb, xkb, wqb, wkb) = (upload(g, &xq), upload(g, &xk), upload(g, &wq), upload(g, &wk));
        let rb = upload(g, &rope.iter().flatten().copied().collect::<Vec<f32>>());
        let pb = upload(g, positions);
        let (queries, cache) = (poisoned(g, 4 * t * heads * d), poisoned(g, 2 * ctx * kv * d));
        let v = diskformer_kernels::View::from;
        let qk = QkHeads {
            queries_in: v(&xqb),
            keys_in: v(&xkb),
            q_norm: v(&wqb),
            k_norm: v(&wkb),
            queries: v(&queries),
            key_cache: v(&cache),
        };
        let p = QkNormRopePartialStoreParams {
            heads: heads as u32,
            kv_heads: kv as u32,
            head_dim: d as u32,
            tokens: t as u32,
            eps: 1e-6,
            rope_dims: r as u32,
            q_stride: stride as u32,
            ctx: ctx as u32,
        };
        let dispatch = g.kernels.qk_norm_rope_partial_store(qk, v(&rb), v(&pb), p).unwrap();
        run(g, &[&dispatch]);
        let mut want_k = vec![f16::from_bits(0xffff); ctx * kv * d];
        let shape = (heads, kv, d, r, stride);
        let want_q = cpu::qk_norm_rope_partial_store(
            (&xq, &xk),
            (&wq, &wk),
            &rope,
            positions,
            shape,
            1e-6,
            &mut want_k,
        );
        let what = format!("qk_norm_rope_partial_store h={heads}/{kv} d={d} r={r} stride={stride} T={t}");
        let got = read_n::<f32>(g, &queries, t * heads * d);
        assert_close(&what, &got, &want_q, &vec![3.0; want_q.len()], 1e-7, 2e-6);
        // The keys rounded to f16 on both sides (the rotation's last bits may move it one f16 ulp); positions
        // not stored keep the poison.
        check_f16_cache(&what, "K", &read_n::<u16>(g, &cache, ctx * kv * d), &want_k, d, 2e-6);
    }
    let b = upload(g, &vec![0f32; 4096]);
    let v = || diskformer_kernels::View::from(&b);
    let qk =
        QkHeads { queries_in: v(), keys_in: v(), q_norm: v(), k_norm: v(), queries: v(), key_cache: v() };
    let p = QkNormRopePartialStoreParams {
        heads: 1,
        kv_heads: 1,
        head_dim: 64,
        tokens: 1,
        eps: 1e-6,
        rope_dims: 15,
        q_stride: 64,
        ctx: 4,
    };
    let err = g.kernels.qk_norm_rope_partial_store(qk, v(), v(), p).unwrap_err();
    assert!(err.to_string().contains("rope_dims must be even"), "{err}");
    let err = g.kernels.qk_norm_rope_partial_store(
        qk,
        v(),
        v(),
        QkNormRopePartialStoreParams { rope_dims: 16, ctx: 0, ..p },
    );
    assert!(err.unwrap_err().to_string().contains("a cache"), "ctx 0 refused");
}

#[test]
fn attention_gate_and_shared_expert_gate() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(85);
    for (heads, d, tokens) in [(4usize, 64usize, 1usize), (16, 256, 3)] {
        let qg = rng.vec_f32(tokens * heads * 2 * d, -6.0, 6.0);
        let o = rng.vec_f32(tokens * heads * d, -2.0, 2.0);
        let (qb, ob) = (upload(g, &qg), upload(g, &o));
        let dispatch = g
            .kernels
            .attention_gate((&qb).into(), (&ob).into(), heads as u32, d as u32, tokens as u32)
            .unwrap();
        run(g, &[&dispatch]);
        let got = read_n::<f32>(g, &ob, o.len());
        let want = cpu::attention_gate(&qg, &o, d);
        assert_close(
            &format!("attention_gate heads={heads} d={d} T={tokens}"),
            &got,
            &want,
            &abs_of(&want),
            1e-9,
            2e-6,
        );
    }
    for (hidden, tokens) in [(64usize, 1usize), (2048, 3)] {
        let (u, w) = (rng.vec_f32(tokens * hidden, -2.0, 2.0), rng.vec_f32(hidden, -0.1, 0.1));
        let (s, out) = (rng.vec_f32(tokens * hidden, -1.0, 1.0), rng.vec_f32(tokens * hidden, -1.0, 1.0));
        let (ub, wb, sb, outb) = (upload(g, &u), upload(g, &w), upload(g, &s), upload(g, &out));
        let dispatch = g
            .kernels
            .shared_expert_gate(
                (&ub).into(),
                (&wb).into(),
                (&sb).into(),
                (&outb).into(),
                hidden as u32,
                tokens as u32,
            )
            .unwrap();
        run(g, &[&dispatch]);
        let got = read_n::<f32>(g, &outb, out.len());
        let want = cpu::shared_expert_gate(&u, &w, &s, &out, hidden);
        // The gate's dot product of `hidden` terms in f32 (the reference in f64) through a sigmoid.
        assert_close(
            &format!("shared_expert_gate hidden={hidden} T={tokens}"),
            &got,
            &want,
            &vec![1.0; want.len()],
            1e-6,
            2e-6,
        );
    }
}

/// The shared expert's gated add folded into the routed experts' combine and the next norm: what
/// `shared_expert_gate` then `moe_combine_norm` give, `normed` read as the gate's input before it is
/// overwritten.
#[test]
fn moe_combine_shared_norm_rows() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(86);
    for (hidden, k, t) in [(2048usize, 8usize, 1usize), (2048, 8, 3), (100, 3, 2), (12, 1, 1)] {
        let experts = rng.vec_f32(t * k * hidden, -2.0, 2.0);
        let weights = rng.vec_f32(t * k, 0.01, 0.3);
        let residual = rng.vec_f32(t * hidden, -5.0, 5.0);
        let norm = rng.vec_f32(hidden, 0.5, 1.5);
        let (u, gate) = (rng.vec_f32(t * hidden, -2.0, 2.0), rng.vec_f32(hidden, -0.1, 0.1));
        let shared_out = rng.vec_f32(t * hidden, -1.0, 1.0);
        let v = diskformer_kernels::View::from;
        let (eb, wb, rb, nb) =
            (upload(g, &experts), upload(g, &weights), upload(g, &residual), upload(g, &norm));
        let (normed, gb, sb) = (upload(g, &u), upload(g, &gate), upload(g, &shared_out));
        let out = poisoned(g, 4 * t * hidden);
        let p = MoeCombineNormParams { hidden: hidden as u32, k: k as u32, tokens: t as u32, eps: 1e-6 };
        let shared = SharedExpert { gate: v(&gb), out: v(&sb) };
        let d = g
            .kernels
            .moe_combine_norm(v(&eb), v(&wb), v(&rb), v(&nb), v(&out), v(&normed), Some(shared), p)
            .unwrap();
        run(g, &[&d]);
        let (want, want_n) = cpu::moe_combine_shared_norm(
            (&experts, &weights),
            &residual,
            &norm,
            (&u, (&gate, &shared_out)),
            (hidden, k),
            1e-6,
        );
        // The gate's dot product in f32 (the reference's in f64) through a sigmoid, then the combine's sums.
        let scale: Vec<f32> = (0..t * hidden)
            .map(|i| {
                let (tt, h) = (i / hidden, i % hidden);
                residual[i].abs()
                    + shared_out[i].abs()
                    + (0..k)
                        .map(|j| (experts[(tt * k + j) * hidden + h] * weights[tt * k + j]).abs())
                        .sum::<f32>()
            })
            .collect();
        let what = format!("moe_combine_shared_norm H={hidden} k={k} T={t}");
        assert_close(&what, &read_n::<f32>(g, &out, t * hidden), &want, &scale, 1e-6, 2e-6);
        assert_close(&what, &read_n::<f32>(g, &normed, t * hidden), &want_n, &abs_of(&want_n), 1e-6, 8e-6);
    }
}
