//! Protects the attention half of a layer (QK-norm + NeoX RoPE, the f16 KV store, both fused in
//! `qkv_rope_store`, causal GQA attention)
//! against the CPU references on a real device, at the real head shapes, long and odd lengths.

mod common;

use common::{Rng, assert_close, check_f16_cache, poisoned, read, read_n, run, upload};
use diskformer_kernels::{AttentionShape, KvCacheViews, QkNormRopeParams, QkvRopeStoreParams, cpu};
use half::f16;

#[test]
fn qk_norm_rope_heads() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(21);
    // (heads, head_dim, positions): q and k of the real model at decode and over a chunk, an odd one.
    let cases: [(usize, usize, Vec<u32>); 4] = [
        (32, 128, vec![0]),
        (4, 128, vec![40_000]),
        (32, 128, vec![7, 8, 9, 4_095]),
        (3, 64, vec![1, 123_456]),
    ];
    for (heads, d, positions) in cases {
        let t = positions.len();
        let x = rng.vec_f32(t * heads * d, -3.0, 3.0);
        let w = rng.vec_f32(d, 0.5, 1.5);
        let rope = cpu::rope_cos_sin(&positions, d, 1_000_000.0);
        let (xb, wb, rb) = (upload(g, &x), upload(g, &w), upload(g, &rope));
        let out = poisoned(g, 4 * x.len());
        let p = QkNormRopeParams { heads: heads as u32, head_dim: d as u32, tokens: t as u32, eps: 1e-6 };
        let disp =
            g.kernels.qk_norm_rope((&xb).into(), (&wb).into(), (&rb).into(), (&out).into(), p).unwrap();
        run(g, &[&disp]);
        let got = read_n::<f32>(g, &out, x.len());
        let want = cpu::qk_norm_rope(&x, &w, &rope, heads, d, 1e-6);
        // Tolerance: the per-head norm's f32 tree sum (~log2(d)·eps relative), then the rotation
        // a·c - b·s, whose rounding scales with |a| + |b|: 4e-6 of the head's largest output.
        let scale: Vec<f32> = want
            .chunks(d)
            .flat_map(|h| {
                let m = h.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                std::iter::repeat_n(m, d)
            })
            .collect();
        assert_close(&format!("qk_norm_rope heads={heads} d={d} T={t}"), &got, &want, &scale, 1e-7, 4e-6);
    }
}

#[test]
fn rope_table_is_ggml_order() {
    // θ_i = pos · base^(-2i/d), built by repeated multiplication in f32 as ggml does.
    let t = cpu::rope_cos_sin(&[3], 4, 10_000.0);
    assert_eq!(t[0], [3.0f32.cos(), 3.0f32.sin()]);
    let th = 3.0f32 * 10_000.0f32.powf(-0.5);
    assert_eq!(t[1], [th.cos(), th.sin()]);
}

#[test]
fn kv_store_positions() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(22);
    let (n, ctx) = (512usize, 64usize);
    // A chunk of 3 tokens, one decode token, and a position past the cache (skipped).
    let positions: Vec<u32> = vec![5, 6, 63, 0, 70];
    let t = positions.len();
    // Values around f16 rounding boundaries as well as ordinary ones.
    let mut src = rng.vec_f32(t * n, -4.0, 4.0);
    src[0] = 1.0 + 1.0 / 2048.0; // exactly halfway between two f16: ties to even
    src[1] = 1.0 + 3.0 / 2048.0;
    src[2] = 70_000.0; // past f16 max: infinity
    let (sb, pb) = (upload(g, &src), upload(g, &positions));
    let dst = poisoned(g, 2 * ctx * n);
    let d = g
        .kernels
        .kv_store((&sb).into(), (&pb).into(), (&dst).into(), n as u32, t as u32, ctx as u32)
        .unwrap();
    run(g, &[&d]);
    let got: Vec<u16> = read_n(g, &dst, ctx * n);
    let mut want = vec![f16::from_bits(0xffff); ctx * n];
    cpu::kv_store(&src, &positions, n, &mut want);
    // Exact: f32 → f16 rounds to nearest even on both sides; untouched positions keep the poison.
    for (i, (&a, b)) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            a,
            b.to_bits(),
            "kv_store index {i} (position {}, value {}): got {a:#06x} want {:#06x}",
            i / n,
            i % n,
            b.to_bits()
        );
    }
}

/// A cache `[ctx, kv_heads, d]` of random f16 values.
fn cache(rng: &mut Rng, n: usize) -> Vec<f16> {
    rng.vec_f32(n, -1.0, 1.0).into_iter().map(f16::from_f32).collect()
}

fn check_attention(seed: u64, heads: usize, kv_heads: usize, d: usize, ctx: usize, positions: Vec<u32>) {
    let g = match common::gpu() {
        Some(g) => g,
        None => return,
    };
    let mut rng = Rng::new(seed);
    let t = positions.len();
    let q = rng.vec_f32(t * heads * d, -1.5, 1.5);
    let k = cache(&mut rng, ctx * kv_heads * d);
    let v = cache(&mut rng, ctx * kv_heads * d);
    let (qb, kb, vb, pb) = (upload(g, &q), upload(g, &k), upload(g, &v), upload(g, &positions));
    let s = AttentionShape {
        heads: heads as u32,
        kv_heads: kv_heads as u32,
        head_dim: d as u32,
        tokens: t as u32,
        ctx: ctx as u32,
    };
    let want = cpu::attention(&q, &k, &v, &positions, heads, kv_heads, d);
    let what = format!("h={heads}/{kv_heads} d={d} ctx={ctx} pos={positions:?}");
    let ones = vec![1.0; want.len()];
    // The chunk kernels: the block-of-tokens one where d is a multiple of 16 up to 128 (lavapipe offers its
    // 32 KiB of workgroup memory), the tiled one where d is a multiple of 16, the one-query-a-workgroup one
    // always.
    let v = diskformer_kernels::View::from;
    let (qv, kv, vv, pv) = (v(&qb), v(&kb), v(&vb), v(&pb));
    let tiled = d.is_multiple_of(16);
    let kernels = [("attention_flash", tiled && d <= 128), ("attention_tiled", tiled), ("attention", true)];
    for (kernel, _) in kernels.into_iter().filter(|&(_, runs)| runs) {
        let out = poisoned(g, 4 * q.len());
        let disp = match kernel {
            "attention" => g.kernels.attention_per_query(qv, kv, vv, pv, (&out).into(), s),
            "attention_tiled" => g.kernels.attention_tiled(qv, kv, vv, pv, (&out).into(), s),
            _ => g.kernels.attention_flash(qv, kv, vv, pv, (&out).into(), s),
        };
        let disp = disp.unwrap();
        run(g, &[&disp]);
        let got = read::<f32>(g, &out);
        // Tolerance: outputs are convex combinations of |v| ≤ 1. The GPU's f32 scores (d-term sums), f32
        // exp (a few ulp) and f32 running sums over up to `len` keys with rescaling give ~1e-6 relative
        // error per weight (lavapipe: ≤ 3e-7); 4e-6 absolute is a wide margin that a wrong head, position or
        // mask still breaks.
        let name = disp.kernel().name();
        assert_close(&format!("{name} {what}"), &got[..want.len()], &want, &ones, 0.0, 4e-6);
    }

    // The split-K pair, where its limits allow (d a multiple of 8 up to 256; query heads in groups of the
    // largest divisor of a kv head's at most 8 and 1024 / d).
    // Both variants: row sums by subgroup shuffles (where the device's subgroups hold a row) and through
    // workgroup memory.
    if d.is_multiple_of(8) && d <= 256 {
        for (k, variant) in [(&g.kernels, "subgroup"), (&g.plain, "plain")] {
            let partial = poisoned(g, 4 * s.partial_len() as usize);
            let out2 = poisoned(g, 4 * q.len());
            let split = k
                .attention_split((&qb).into(), (&kb).into(), (&vb).into(), (&pb).into(), (&partial).into(), s)
                .unwrap();
            let combine = k.attention_combine((&partial).into(), (&pb).into(), (&out2).into(), s).unwrap();
            run(g, &[&split, &combine]);
            let got = read::<f32>(g, &out2);
            // Tolerance: as above; blocks (of 16 to 64 positions) merged once more add one rescale per
            // block.
            let what = format!("attention_split ({variant}) {what}");
            assert_close(&what, &got[..want.len()], &want, &ones, 0.0, 4e-6);
        }
    } else {
        let partial = poisoned(g, 4 * s.partial_len() as usize);
        let split = g.kernels.attention_split(
            (&qb).into(),
            (&kb).into(),
            (&vb).into(),
            (&pb).into(),
            (&partial).into(),
            s,
        );
        assert!(split.is_err(), "attention_split takes {what}, beyond its limits");
        assert!(!s.split_fits(), "{what}");
    }
}

#[test]
fn attention_decode_model_shape() {
    // Block edges of the split kernel (16 positions at d = 128 in a cache this short) and of the full one
    // (128).
    for (i, pos) in [0u32, 1, 15, 16, 17, 31, 32, 63, 64, 127, 128, 129, 299].into_iter().enumerate() {
        check_attention(30 + i as u64, 32, 4, 128, 300, vec![pos]);
    }
}

#[test]
fn attention_max_context() {
    // Qwen3-30B-A3B's full context (40,960 positions: four passes a block), one GQA group to keep lavapipe
    // quick.
    check_attention(47, 8, 1, 128, 40_960, vec![40_959]);
}

#[test]
fn attention_chunk_is_causal() {
    // A prefill chunk: each token sees the cache up to its own position only.
    check_attention(40, 32, 4, 128, 300, vec![100, 101, 102, 103, 260]);
}

#[test]
fn attention_chunk_from_the_start() {
    // A prompt's first chunk, 41 tokens at positions 0..=40: blocks of 4 tokens whose rows see different
    // numbers of keys of one 32-key tile, a second tile only some rows reach, and a last block of one token.
    check_attention(50, 32, 4, 128, 64, (0..41).collect());
}

#[test]
fn attention_long_and_odd() {
    check_attention(41, 8, 4, 128, 2_100, vec![2_099]);
    check_attention(42, 6, 2, 64, 50, vec![0, 49, 17]);
    check_attention(43, 5, 5, 256, 40, vec![39]);
    check_attention(44, 4, 1, 48, 20, vec![25]); // position past the cache: attends all 20
    check_attention(48, 16, 2, 32, 200, vec![199, 5]); // split: d / 8 = 4 of 8 lanes a row busy
    check_attention(49, 8, 2, 256, 70, vec![69, 31, 32]); // split: G · d = 1024, blocks of 32
    check_attention(51, 64, 4, 128, 300, vec![0, 17, 299]); // Qwen3-235B-A22B: 16 a kv head, split in 2
    check_attention(52, 24, 1, 64, 90, vec![89, 40]); // split: 24 query heads of one kv head, 3 groups
    check_attention(45, 20, 2, 64, 30, vec![29]); // split: 10 query heads per kv head, 2 groups of 5
    check_attention(53, 16, 2, 256, 600, vec![599, 300]); // split: Qwen3.6's 8 a kv head at d = 256, 2 groups of 4
    check_attention(46, 2, 2, 30, 30, vec![12]); // d not a multiple of 4: beyond the split kernel
}

#[test]
fn qkv_rope_store_is_qk_norm_rope_and_kv_store() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(23);
    // (heads, kv_heads, head_dim, positions, ctx): the real model at decode and over a chunk with a
    // position past the cache (not stored), and an odd small one. Each also with unscaled projections
    // and sums of squares (fused decode's attention norm): 512 a token as decode has them (4 a lane), and
    // an odd 37.
    let cases: [(usize, usize, usize, Vec<u32>, usize); 3] =
        [(32, 4, 128, vec![37], 64), (32, 4, 128, vec![5, 6, 63, 70], 64), (3, 1, 64, vec![0, 9], 16)];
    for ((heads, kv, d, positions, ctx), squares) in
        cases.iter().flat_map(|c| [(c, 0usize), (c, 512), (c, 37)])
    {
        let (heads, kv, d, ctx, t) = (*heads, *kv, *d, *ctx, positions.len());
        let qkv = rng.vec_f32(t * (heads + 2 * kv) * d, -3.0, 3.0);
        let (qn, kn) = (rng.vec_f32(d, 0.5, 1.5), rng.vec_f32(d, 0.5, 1.5));
        let sq = rng.vec_f32((t * squares).max(1), 0.0, 20.0);
        let hidden = 2048;
        let rope = cpu::rope_cos_sin(positions, d, 1_000_000.0);
        let (xb, qnb, knb) = (upload(g, &qkv), upload(g, &qn), upload(g, &kn));
        let (rb, pb, sqb) = (upload(g, &rope), upload(g, positions), upload(g, &sq));
        let q_out = poisoned(g, 4 * t * heads * d);
        let (kc, vc) = (poisoned(g, 2 * ctx * kv * d), poisoned(g, 2 * ctx * kv * d));
        let p = QkvRopeStoreParams {
            heads: heads as u32,
            kv_heads: kv as u32,
            head_dim: d as u32,
            tokens: t as u32,
            eps: 1e-6,
            ctx: ctx as u32,
            in_squares: squares as u32,
            hidden: if squares > 0 { hidden } else { 0 },
        };
        let v = diskformer_kernels::View::from;
        let cache = KvCacheViews { k: v(&kc), v: v(&vc) };
        let sqv = (squares > 0).then(|| v(&sqb));
        let disp =
            g.kernels.qkv_rope_store(v(&xb), v(&qnb), v(&knb), v(&rb), v(&pb), v(&q_out), cache, sqv, p);
        run(g, &[&disp.unwrap()]);
        // The reference of the scaled case: the projections times the norm's scale, in f64 then f32.
        let mut input = qkv.clone();
        if squares > 0 {
            for (tt, row) in input.chunks_mut((heads + 2 * kv) * d).enumerate() {
                let ss: f64 = sq[tt * squares..][..squares].iter().map(|&x| f64::from(x)).sum();
                let scale = 1.0 / ((ss / f64::from(hidden)) as f32 + 1e-6).sqrt();
                row.iter_mut().for_each(|x| *x *= scale);
            }
        }
        let poison = f16::from_bits(0xffff);
        let (mut want_k, mut want_v) = (vec![poison; ctx * kv * d], vec![poison; ctx * kv * d]);
        let want_q = cpu::qkv_rope_store(
            &input,
            &qn,
            &kn,
            &rope,
            positions,
            (heads, kv, d),
            1e-6,
            (&mut want_k, &mut want_v),
        );
        let what = format!("qkv_rope_store heads {heads}/{kv} d {d} T {t} squares {squares}");
        // Q: as qk_norm_rope_heads, 4e-6 of the head's largest output.
        let head_max = |v: &[f32]| -> Vec<f32> {
            v.chunks(d)
                .flat_map(|h| std::iter::repeat_n(h.iter().fold(0.0f32, |m, x| m.max(x.abs())), d))
                .collect()
        };
        assert_close(&what, &read_n::<f32>(g, &q_out, want_q.len()), &want_q, &head_max(&want_q), 0.0, 4e-6);
        // V: a copy rounded to f16 on both sides, exact; positions not stored keep the poison. Scaled, the
        // scale's last bits (another summation order) can move the f16 rounding by one f16 ulp.
        let got_v: Vec<u16> = read_n(g, &vc, ctx * kv * d);
        if squares == 0 {
            assert!(got_v.iter().zip(&want_v).all(|(a, b)| *a == b.to_bits()), "{what}: V cache");
        } else {
            check_f16_cache(&what, "V", &got_v, &want_v, d, 1e-6);
        }
        // K: the rotation's f32 result may differ in its last bits, which can move the f16 rounding by one
        // f16 ulp (2^-10 relative); untouched positions keep the poison exactly.
        let got_k: Vec<u16> = read_n(g, &kc, ctx * kv * d);
        check_f16_cache(&what, "K", &got_k, &want_k, d, 4e-6);
    }
}
