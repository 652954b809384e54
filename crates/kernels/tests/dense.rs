//! Protects the dense decode kernels (embed, RMSNorm, Q8_0 and F32 GEMV, residual add, argmax) and the
//! dense prefill GEMMs (with the int8 one's input quantisation) against their CPU references on a real
//! device, including the lm-head binding split and both GEMV variants.

mod common;

use common::{
    Gpu, Rng, Scales, abs_of, assert_close, assert_some_apart, poisoned, quant_allowance, read_n, run, upload,
};
use diskformer_kernels::{InputNorm, Kernels, Q8Matrix, View, argmax_partial_len, cpu, q8_row_bytes};

/// Σ|w·x| per output: the scale of f32 rounding in a dot product.
fn magnitudes(q: &[i8], s: &[half::f16], rows: usize, cols: usize, x: &[f32]) -> Vec<f32> {
    let qa: Vec<i8> = q.iter().map(|&v| v.saturating_abs()).collect();
    let sa: Vec<half::f16> = s.iter().map(|v| half::f16::from_f32(v.to_f32().abs())).collect();
    let xa: Vec<f32> = x.iter().map(|v| v.abs()).collect();
    // saturating_abs maps -128 to 127: close enough for a tolerance scale.
    cpu::q8_gemv(&qa, &sa, rows, cols, &xa)
}

/// Checks `q8_gemv`, its variants of two and four rows a lane group (`q8_gemv_rows2`, `q8_gemv_rows4`) and
/// the int8 one (`q8_gemv_i8`) on the same shapes.
fn check_q8_gemv(g: &Gpu, k: &Kernels, rows: usize, cols: usize, tokens: usize, seed: u64, min_parts: usize) {
    check_q8(g, k, rows, cols, tokens, seed, min_parts, "q8_gemv");
    check_q8(g, k, rows, cols, tokens, seed, min_parts, "q8_gemv_rows2");
    check_q8(g, k, rows, cols, tokens, seed, min_parts, "q8_gemv_rows4");
    check_q8(g, k, rows, cols, tokens, seed, min_parts, "q8_gemv_i8");
}

fn check_q8_gemm(g: &Gpu, k: &Kernels, rows: usize, cols: usize, tokens: usize, seed: u64, min_parts: usize) {
    check_q8(g, k, rows, cols, tokens, seed, min_parts, "q8_gemm_tiled");
    check_q8(g, k, rows, cols, tokens, seed, min_parts, "q8_gemm_i8");
    check_q8(g, k, rows, cols, tokens, seed, min_parts, "q8_gemm_coop");
}

#[allow(clippy::too_many_arguments)]
fn check_q8(
    g: &Gpu,
    k: &Kernels,
    rows: usize,
    cols: usize,
    tokens: usize,
    seed: u64,
    min_parts: usize,
    name: &str,
) {
    let mut rng = Rng::new(seed);
    let q = rng.vec_i8(rows * cols);
    let s = rng.vec_scales(rows * cols / 32);
    let x = rng.vec_f32(tokens * cols, -1.0, 1.0);
    // The int8 GEMM reads the input Q8_0-quantised (quantize_q8's rows, here made on the CPU).
    let (xq, xs) = cpu::quantize_q8(&x);
    let xb = if name == "q8_gemm_i8" { upload(g, &cpu::pack_q8_rows(&xq, &xs, cols)) } else { upload(g, &x) };
    let (qb, sb) = (upload(g, &q), upload(g, &s));
    let y = poisoned(g, 4 * tokens * rows);
    let w = Q8Matrix { q: (&qb).into(), scales: (&sb).into(), rows: rows as u32, cols: cols as u32 };
    if name == "q8_gemm_coop" && !k.cooperative_matrix() {
        // Devices without cooperative matrices (lavapipe) refuse it with the error that names the fallback.
        let e = k.q8_gemm_coop(w, (&xb).into(), (&y).into(), tokens as u32).unwrap_err();
        assert!(matches!(e, diskformer_kernels::Error::NoCooperativeMatrix { .. }), "{e}");
        assert!(e.to_string().contains("use the f32 or int8 GEMMs"), "{e}");
        return;
    }
    let d = match name {
        "q8_gemm_coop" => k.q8_gemm_coop(w, (&xb).into(), (&y).into(), tokens as u32).unwrap(),
        "q8_gemm_tiled" => k.q8_gemm_tiled(w, (&xb).into(), (&y).into(), tokens as u32).unwrap(),
        "q8_gemm_i8" => k.q8_gemm_i8(w, (&xb).into(), (&y).into(), tokens as u32).unwrap(),
        "q8_gemv_rows2" => k.q8_gemv_rows2(w, (&xb).into(), (&y).into(), tokens as u32).unwrap(),
        "q8_gemv_rows4" => k.q8_gemv_rows4(w, (&xb).into(), (&y).into(), tokens as u32).unwrap(),
        "q8_gemv_i8" => k.q8_gemv_i8(w, (&xb).into(), (&y).into(), tokens as u32).unwrap(),
        _ => k.q8_gemv(w, (&xb).into(), (&y).into(), tokens as u32).unwrap(),
    };
    assert!(d.parts() >= min_parts, "expected a split into >= {min_parts} parts, got {}", d.parts());
    run(g, &[&d]);
    let got = read_n::<f32>(g, &y, tokens * rows);
    let want = match name {
        "q8_gemm_i8" => cpu::q8_gemm_i8(&q, &s, rows, cols, &xq, &xs),
        "q8_gemv_i8" => cpu::q8_gemv_i8(&q, &s, rows, cols, &x),
        "q8_gemm_coop" => cpu::q8_gemv_f16(&q, &s, rows, cols, &x),
        _ => cpu::q8_gemv(&q, &s, rows, cols, &x),
    };
    // Tolerance: the GPU sums in f32 in another order (16-value groups, 32 lanes, a tree) than the f64
    // reference. A random-order f32 sum errs by ~eps·sqrt(cols)·rms(w·x) ≈ eps·Σ|w·x|/sqrt(cols), so
    // 2e-6·Σ|w·x| (≥ 16·eps·Σ|w·x|) covers any order with margin (lavapipe: ≤ 1e-7), while a wrong
    // index or scale moves an output by O(|w·x|), far above it. The int8 GEMM's block sums are exact;
    // only the scaled block sums add in f32, so the same bound holds.
    let mut mag = magnitudes(&q, &s, rows, cols, &x);
    if name == "q8_gemv_i8" {
        // The kernel quantises x itself (`quant_allowance`); the tolerance must still tell its arithmetic
        // from the f32 GEMV's.
        let allow = x.chunks(cols).flat_map(|xt| quant_allowance(&q, &s, rows, cols, xt));
        mag.iter_mut().zip(allow).for_each(|(m, a)| *m += a / 2e-6);
        let f32_want = cpu::q8_gemv(&q, &s, rows, cols, &x);
        let what = format!("{name}: the f32 GEMV lies within the int8 tolerance");
        assert_some_apart(&what, &f32_want, &want, &mag, 2e-6);
    }
    // The tensor-core GEMM's products of f16 values are exact in f32, so only the f32 sums' order differs
    // from its reference and the same bound holds; the f32 reference must lie outside it (the f16
    // rounding is what the kernel computes).
    if name == "q8_gemm_coop" {
        let f32_want = cpu::q8_gemv(&q, &s, rows, cols, &x);
        let what = format!("{name}: the f32 GEMM lies within the f16 GEMM's tolerance");
        assert_some_apart(&what, &f32_want, &want, &mag, 2e-6);
    }
    assert_eq!(d.kernel().name(), name);
    let what = format!("{name} {rows}x{cols} T={tokens} sg={} parts={}", k.subgroups(), d.parts());
    assert_close(&what, &got, &want, &mag, 1e-6, 2e-6);
}

#[test]
fn q8_gemv_model_shapes() {
    let g = gpu_or_skip!();
    for k in [&g.kernels, &g.plain] {
        check_q8_gemv(g, k, 4096, 2048, 1, 1, 1); // attn_q
        check_q8_gemv(g, k, 512, 2048, 1, 2, 1); // attn_k / attn_v
        check_q8_gemv(g, k, 2048, 4096, 1, 3, 1); // attn_output
        check_q8_gemv(g, k, 2048, 768, 1, 4, 1); // an expert's down shape
    }
}

#[test]
fn q8_gemv_odd_shapes_and_tokens() {
    let g = gpu_or_skip!();
    for k in [&g.kernels, &g.plain] {
        check_q8_gemv(g, k, 37, 96, 3, 5, 1);
        check_q8_gemv(g, k, 1, 32, 1, 6, 1);
        check_q8_gemv(g, k, 9, 2048, 5, 7, 1);
    }
}

/// `q8_gemv_i8` where the input's Q8_0 scales fall below f16's normal range (max|x| / 127 < 2^-14, rounded
/// to a multiple of 2^-24 by `f16_round`'s other branch) and where a block is all zeros (scale 0, quants 0).
#[test]
fn q8_gemv_i8_tiny_and_zero_blocks() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(320);
    let (rows, cols, tokens) = (64usize, 256usize, 3usize);
    let q = rng.vec_i8(rows * cols);
    let s = rng.vec_scales(rows * cols / 32);
    // Token 0's values of magnitude 1e-5 and token 1's 1e-7 (scales ~8e-8 and ~8e-10: f16 subnormals, the
    // second mostly rounding to a few steps of 2^-24), each alone in its outputs so that the tolerance
    // scales with them; token 2 ordinary with a block of zeros.
    let mut x: Vec<f32> =
        (0..tokens * cols).map(|i| rng.f32(-1.0, 1.0) * [1e-5, 1e-7, 1.0][i / cols]).collect();
    x[2 * cols + 64..][..32].fill(0.0);
    let (qb, sb, xb, y) = (upload(g, &q), upload(g, &s), upload(g, &x), poisoned(g, 4 * tokens * rows));
    let w = Q8Matrix { q: (&qb).into(), scales: (&sb).into(), rows: rows as u32, cols: cols as u32 };
    for k in [&g.kernels, &g.plain] {
        let d = k.q8_gemv_i8(w, (&xb).into(), (&y).into(), tokens as u32).unwrap();
        run(g, &[&d]);
        let got = read_n::<f32>(g, &y, tokens * rows);
        let want = cpu::q8_gemv_i8(&q, &s, rows, cols, &x);
        let mut mag = magnitudes(&q, &s, rows, cols, &x);
        let allow = x.chunks(cols).flat_map(|xt| quant_allowance(&q, &s, rows, cols, xt));
        mag.iter_mut().zip(allow).for_each(|(m, a)| *m += a / 2e-6);
        let what = format!("q8_gemv_i8 tiny blocks sg={}", k.subgroups());
        assert_close(&what, &got, &want, &mag, 0.0, 2e-6);
    }
}

#[test]
fn q8_gemv_lm_head_split() {
    let g = gpu_or_skip!();
    // The real vocabulary (151,936 rows) with a narrow row, and 2,048-wide rows with fewer rows; the
    // binding limit is lowered so both split into several dispatches as the real lm head does on
    // lavapipe (311 MB int8 plane > 128 MiB).
    let k = Kernels::new(&g.ctx).with_max_binding(8 << 20);
    check_q8_gemv(g, &k, 151_936, 64, 1, 8, 2);
    check_q8_gemv(g, &k, 20_000, 2048, 1, 9, 5);
    let k = Kernels::with_subgroups(&g.ctx, false).with_max_binding(3 << 20);
    check_q8_gemv(g, &k, 5_003, 2048, 2, 10, 4);
}

/// `q8_gemv_add` (or with `i8` `q8_gemv_add_i8`) against `y`'s old values plus `cpu::q8_gemv` (`q8_gemv_i8`).
fn check_q8_gemv_add(
    g: &Gpu,
    k: &Kernels,
    (rows, cols, tokens): (usize, usize, usize),
    (seed, i8): (u64, bool),
    min_parts: usize,
) {
    let mut rng = Rng::new(seed);
    let q = rng.vec_i8(rows * cols);
    let s = rng.vec_scales(rows * cols / 32);
    let x = rng.vec_f32(tokens * cols, -1.0, 1.0);
    let y0 = rng.vec_f32(tokens * rows, -3.0, 3.0);
    let (qb, sb, xb, y) = (upload(g, &q), upload(g, &s), upload(g, &x), upload(g, &y0));
    let w = Q8Matrix { q: (&qb).into(), scales: (&sb).into(), rows: rows as u32, cols: cols as u32 };
    let d = if i8 {
        k.q8_gemv_add_i8(w, (&xb).into(), (&y).into(), tokens as u32).unwrap()
    } else {
        k.q8_gemv_add(w, (&xb).into(), (&y).into(), tokens as u32).unwrap()
    };
    assert!(d.parts() >= min_parts, "expected a split into >= {min_parts} parts, got {}", d.parts());
    run(g, &[&d]);
    let got = read_n::<f32>(g, &y, tokens * rows);
    let mut want =
        if i8 { cpu::q8_gemv_i8(&q, &s, rows, cols, &x) } else { cpu::q8_gemv(&q, &s, rows, cols, &x) };
    let mut mag = magnitudes(&q, &s, rows, cols, &x);
    if i8 {
        let allow = x.chunks(cols).flat_map(|xt| quant_allowance(&q, &s, rows, cols, xt));
        mag.iter_mut().zip(allow).for_each(|(m, a)| *m += a / 2e-6);
    }
    want.iter_mut().zip(&y0).for_each(|(w, y)| *w += y);
    mag.iter_mut().zip(&y0).for_each(|(m, y)| *m += y.abs());
    // Tolerance: as q8_gemv, 2e-6·Σ|w·x|, plus the add's rounding (|y|); a lost or doubled add moves
    // outputs by O(|y|) or O(Σ|w·x|).
    let name = d.kernel().name();
    let what = format!("{name} add {rows}x{cols} T={tokens} sg={} parts={}", k.subgroups(), d.parts());
    assert_close(&what, &got, &want, &mag, 1e-6, 2e-6);
}

#[test]
fn q8_gemv_add_onto_y() {
    let g = gpu_or_skip!();
    for k in [&g.kernels, &g.plain] {
        // Decode's wo (added onto the residual stream), an odd shape over several tokens.
        for i8 in [false, true] {
            check_q8_gemv_add(g, k, (2048, 4096, 1), (302, i8), 1);
            check_q8_gemv_add(g, k, (40, 96, 3), (303, i8), 1);
        }
    }
    // Split over bindings: each part adds its rows.
    let k = Kernels::new(&g.ctx).with_max_binding(1 << 20);
    for i8 in [false, true] {
        check_q8_gemv_add(g, &k, (1000, 2048, 2), (305, i8), 2);
    }
}

/// `q8_gemv_into`, `q8_gemm_tiled_into` and `q8_gemm_coop_into`: the product into columns `offset..offset +
/// rows` of rows of `stride` (one of several stacked matrices' outputs), the columns around untouched, also
/// split over bindings; and the refusal of columns past the row (the tensor-core GEMM's refusal where the
/// device has no cooperative matrices).
fn check_q8_into(
    g: &Gpu,
    k: &Kernels,
    (rows, cols, tokens): (usize, usize, usize),
    seed: u64,
    min_parts: usize,
) {
    let mut rng = Rng::new(seed);
    let q = rng.vec_i8(rows * cols);
    let s = rng.vec_scales(rows * cols / 32);
    let x = rng.vec_f32(tokens * cols, -1.0, 1.0);
    let (qb, sb, xb) = (upload(g, &q), upload(g, &s), upload(g, &x));
    let w = Q8Matrix { q: (&qb).into(), scales: (&sb).into(), rows: rows as u32, cols: cols as u32 };
    let mag = magnitudes(&q, &s, rows, cols, &x);
    let (stride, offset) = (rows + 7, 3);
    let product = |name: &str, y: (View<'_>, u32, u32)| match name {
        "q8_gemm_coop" => k.q8_gemm_coop_into(w, (&xb).into(), y, tokens as u32),
        "q8_gemm_tiled" => k.q8_gemm_tiled_into(w, (&xb).into(), y, tokens as u32),
        _ => k.q8_gemv_into(w, (&xb).into(), y, tokens as u32),
    };
    for name in ["q8_gemv", "q8_gemm_tiled", "q8_gemm_coop"] {
        let y = upload(g, &vec![0f32; tokens * stride]);
        let into = ((&y).into(), stride as u32, offset as u32);
        if name == "q8_gemm_coop" && !k.cooperative_matrix() {
            let e = product(name, into).unwrap_err();
            assert!(matches!(e, diskformer_kernels::Error::NoCooperativeMatrix { .. }), "{e}");
            continue;
        }
        let want = match name {
            "q8_gemm_coop" => cpu::q8_gemv_f16(&q, &s, rows, cols, &x),
            _ => cpu::q8_gemv(&q, &s, rows, cols, &x),
        };
        let d = product(name, into).unwrap();
        assert!(d.parts() >= min_parts, "expected a split into >= {min_parts} parts, got {}", d.parts());
        run(g, &[&d]);
        let got = read_n::<f32>(g, &y, tokens * stride);
        let what = format!("{} into {rows}x{cols} T={tokens} parts={}", d.kernel().name(), d.parts());
        for t in 0..tokens {
            let row = &got[t * stride..][..stride];
            let outside = row[..offset].iter().chain(&row[offset + rows..]);
            assert!(outside.into_iter().all(|&v| v == 0.0), "{what}: the columns outside were written");
            let (want, mag) = (&want[t * rows..][..rows], &mag[t * rows..][..rows]);
            assert_close(&what, &row[offset..offset + rows], want, mag, 1e-6, 2e-6);
        }
        let y = upload(g, &vec![0f32; tokens * stride]);
        let e = product(name, ((&y).into(), stride as u32, 8)).unwrap_err();
        assert!(e.to_string().contains("pass the output's rows"), "{e}");
    }
}

#[test]
fn q8_products_into_columns_of_wider_rows() {
    let g = gpu_or_skip!();
    for k in [&g.kernels, &g.plain] {
        check_q8_into(g, k, (512, 2048, 1), 330, 1);
        check_q8_into(g, k, (37, 96, 5), 331, 1);
        check_q8_into(g, k, (130, 256, 40), 332, 1);
    }
    let k = Kernels::new(&g.ctx).with_max_binding(1 << 20);
    check_q8_into(g, &k, (1000, 2048, 2), 333, 2);
}

#[test]
fn q8_gemm_token_blocks() {
    let g = gpu_or_skip!();
    for k in [&g.kernels, &g.plain] {
        // Token counts around the tiled kernels' 32-token block (1, 8, 9, 19, 32, 33, 70, 130) and rows
        // around their 128-row block.
        check_q8_gemm(g, k, 512, 2048, 1, 20, 1);
        check_q8_gemm(g, k, 512, 2048, 8, 21, 1);
        check_q8_gemm(g, k, 300, 2048, 9, 22, 1);
        check_q8_gemm(g, k, 37, 96, 19, 23, 1);
        check_q8_gemm(g, k, 65, 256, 33, 26, 1);
        check_q8_gemm(g, k, 128, 64, 32, 27, 1);
        check_q8_gemm(g, k, 129, 64, 70, 28, 1);
        // The tensor-core GEMM's 64-token tiles: three, the last partial, over an odd block count.
        check_q8_gemm(g, k, 160, 352, 130, 29, 1);
    }
    // Real projection shape over a chunk, and the split.
    check_q8_gemm(g, &g.kernels, 4096, 2048, 12, 24, 1);
    let k = Kernels::new(&g.ctx).with_max_binding(3 << 20);
    check_q8_gemm(g, &k, 5_003, 2048, 10, 25, 4);
}

#[test]
fn embed_q8_rows_and_split() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(11);
    for (rows, cols, max_binding) in
        [(1000usize, 2048usize, u64::MAX), (3001, 2048, 1 << 20), (50, 96, u64::MAX)]
    {
        let q = rng.vec_i8(rows * cols);
        let s = rng.vec_scales(rows * cols / 32);
        let ids: Vec<u32> = vec![0, rows as u32 - 1, 7, 7, rows as u32 + 5, (rows / 2) as u32];
        let (qb, sb, ib) = (upload(g, &q), upload(g, &s), upload(g, &ids));
        let out = poisoned(g, 4 * ids.len() * cols);
        let k = Kernels::new(&g.ctx).with_max_binding(max_binding);
        let w = Q8Matrix { q: (&qb).into(), scales: (&sb).into(), rows: rows as u32, cols: cols as u32 };
        let d = k.embed_q8((&ib).into(), w, (&out).into(), ids.len() as u32).unwrap();
        run(g, &[&d]);
        let got = read_n::<f32>(g, &out, ids.len() * cols);
        let want = cpu::embed_q8(&q, &s, cols, &ids);
        // Exact: one f32 product of exactly representable values on both sides.
        let zeros = vec![0.0; want.len()];
        assert_close(&format!("embed_q8 {rows}x{cols} parts={}", d.parts()), &got, &want, &zeros, 0.0, 0.0);
    }
}

#[test]
fn rms_norm_rows() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(12);
    for (n, t) in [(2048usize, 1usize), (2048, 3), (128, 4), (1000, 2), (13, 1)] {
        let x = rng.vec_f32(n * t, -2.0, 2.0);
        let w = rng.vec_f32(n, 0.5, 1.5);
        let (xb, wb) = (upload(g, &x), upload(g, &w));
        let out = poisoned(g, 4 * n * t);
        let d =
            g.kernels.rms_norm((&xb).into(), (&wb).into(), (&out).into(), n as u32, t as u32, 1e-6).unwrap();
        run(g, &[&d]);
        let got = read_n::<f32>(g, &out, n * t);
        let want = cpu::rms_norm(&x, &w, n, 1e-6);
        // Tolerance: the mean square is an f32 tree sum on the GPU (f64 on the CPU): relative error
        // ~log2(n)·eps ≈ 1.3e-6, halved by the square root, plus two f32 products.
        assert_close(&format!("rms_norm n={n} T={t}"), &got, &want, &abs_of(&want), 1e-7, 4e-6);
    }
}

#[test]
fn add_rms_norm_rows() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(14);
    for (n, t) in [(2048usize, 1usize), (2048, 5), (64, 3), (1000, 2), (2052, 2), (12, 1)] {
        let (a, b) = (rng.vec_f32(n * t, -2.0, 2.0), rng.vec_f32(n * t, -2.0, 2.0));
        let w = rng.vec_f32(n, 0.5, 1.5);
        let (ab, bb, wb) = (upload(g, &a), upload(g, &b), upload(g, &w));
        let (h, out) = (poisoned(g, 4 * n * t), poisoned(g, 4 * n * t));
        let v = View::from;
        let d =
            g.kernels.add_rms_norm(v(&ab), v(&bb), v(&wb), v(&h), v(&out), n as u32, t as u32, 1e-6).unwrap();
        run(g, &[&d]);
        let (want_h, want) = cpu::add_rms_norm(&a, &b, &w, n, 1e-6);
        // h is one f32 add, exact; out as rms_norm_rows.
        let zeros = vec![0.0; n * t];
        assert_close(
            &format!("add_rms_norm h n={n} T={t}"),
            &read_n::<f32>(g, &h, n * t),
            &want_h,
            &zeros,
            0.0,
            0.0,
        );
        let got = read_n::<f32>(g, &out, n * t);
        assert_close(&format!("add_rms_norm n={n} T={t}"), &got, &want, &abs_of(&want), 1e-7, 4e-6);
    }
}

#[test]
fn f32_gemv_router_shapes() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(13);
    // The GEMM (chunks) on its shapes too: a 512-token chunk, tokens and rows around its 32 × 16 tile.
    // With a bias (a forced routing's mask: 0 or -1e30, here any values) added in the GEMV's dispatch.
    let cases = [
        (128usize, 2048usize, 1usize, false, false),
        (128, 2048, 4, false, false),
        (5, 12, 2, false, false),
        (60, 2048, 1, false, false),
        (256, 2048, 1, false, true),
        (7, 64, 3, false, true),
        (128, 2048, 512, true, false),
        (17, 96, 33, true, false),
        (1, 32, 1, true, false),
    ];
    for (rows, cols, t, gemm, biased) in cases {
        let w = rng.vec_f32(rows * cols, -0.1, 0.1);
        let x = rng.vec_f32(t * cols, -1.0, 1.0);
        let bias = rng.vec_f32(rows * t, -2.0, 2.0);
        let (wb, xb, bb) = (upload(g, &w), upload(g, &x), upload(g, &bias));
        let y = poisoned(g, 4 * rows * t);
        let (shape, views) = ((rows as u32, cols as u32), ((&xb).into(), (&y).into()));
        let d = match (gemm, biased) {
            (true, _) => g.kernels.f32_gemm((&wb).into(), shape, views.0, views.1, t as u32),
            (false, true) => {
                g.kernels.f32_gemv_bias((&wb).into(), shape, views.0, (&bb).into(), views.1, t as u32)
            }
            (false, false) => g.kernels.f32_gemv((&wb).into(), shape.0, shape.1, views.0, views.1, t as u32),
        };
        run(g, &[&d.unwrap()]);
        let got = read_n::<f32>(g, &y, rows * t);
        let mut want = cpu::f32_gemv(&w, rows, cols, &x);
        if biased {
            want.iter_mut().zip(&bias).for_each(|(y, b)| *y += b);
        }
        let wa = abs_of(&w);
        let mut mag = cpu::f32_gemv(&wa, rows, cols, &abs_of(&x));
        if biased {
            mag.iter_mut().zip(&bias).for_each(|(m, b)| *m += b.abs());
        }
        // Tolerance: as q8_gemv, f32 sums in another order, 2e-6·Σ|w·x| (and the bias's rounding).
        let what =
            format!("{} {rows}x{cols} T={t} bias {biased}", if gemm { "f32_gemm" } else { "f32_gemv" });
        assert_close(&what, &got, &want, &mag, 1e-7, 2e-6);
    }
}

#[test]
fn f32_gemv_norm_writes_the_normed_rows() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(306);
    // (1, 2048): one workgroup writes the whole normed row, a vec4 a lane and more; (2, 2048 * 33): steps of
    // 128 vec4s a workgroup, 66 of them. Quantised too where cols allow it.
    for (rows, cols, t) in [
        (128usize, 2048usize, 1usize),
        (128, 2048, 3),
        (5, 12, 2),
        (1, 2048, 2),
        (60, 2052, 1),
        (7, 96, 2),
        (2, 2048 * 33, 1),
    ] {
        let w = rng.vec_f32(rows * cols, -0.1, 0.1);
        let x = rng.vec_f32(t * cols, -2.0, 2.0);
        let nw = rng.vec_f32(cols, 0.5, 1.5);
        let (wb, xb, nb) = (upload(g, &w), upload(g, &x), upload(g, &nw));
        let (y, normed) = (poisoned(g, 4 * rows * t), poisoned(g, 4 * cols * t));
        let quantise = cols % 32 == 0;
        let q_bytes = t * q8_row_bytes(cols as u32) as usize;
        let normed_q = poisoned(g, q_bytes);
        let norm = InputNorm {
            weight: (&nb).into(),
            eps: 1e-6,
            normed: (&normed).into(),
            quantised: quantise.then(|| (&normed_q).into()),
        };
        let shape = (rows as u32, cols as u32);
        // A bias (a forced routing's mask: 0 or very negative) on every other shape.
        let with_bias = rows % 2 == 1;
        let bias: Vec<f32> = (0..rows * t).map(|i| if i % 3 == 0 { -1e30 } else { 0.0 }).collect();
        let bb = upload(g, &bias);
        let bias_view = with_bias.then(|| (&bb).into());
        let (wv, xv, yv) = ((&wb).into(), (&xb).into(), (&y).into());
        let d = g.kernels.f32_gemv_norm(wv, shape, xv, yv, t as u32, norm, bias_view);
        run(g, &[&d.unwrap()]);
        let want_normed = cpu::rms_norm(&x, &nw, cols, 1e-6);
        let got_normed = read_n::<f32>(g, &normed, cols * t);
        // As rms_norm_rows.
        let what = format!("f32_gemv_norm normed {rows}x{cols} T={t}");
        assert_close(&what, &got_normed, &want_normed, &abs_of(&want_normed), 1e-7, 4e-6);
        if quantise {
            // The quantisation of the normed rows the kernel wrote, as quantize_q8's.
            let got_q = read_n::<u8>(g, &normed_q, q_bytes);
            check_q8_rows(
                &format!("f32_gemv_norm quantised {rows}x{cols} T={t}"),
                &got_q,
                &got_normed,
                t,
                cols,
            );
        }
        let mut want = cpu::f32_gemv(&w, rows, cols, &want_normed);
        if with_bias {
            want.iter_mut().zip(&bias).for_each(|(y, b)| *y += b);
        }
        let mag = cpu::f32_gemv(&abs_of(&w), rows, cols, &abs_of(&want_normed));
        // As f32_gemv_router_shapes; the folded norm adds roundings of relative size eps.
        let got = read_n::<f32>(g, &y, rows * t);
        assert_close(&format!("f32_gemv_norm {rows}x{cols} T={t}"), &got, &want, &mag, 1e-7, 2e-6);
    }
}

#[test]
fn add_elements() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(14);
    for n in [2048usize, 1, 1001] {
        let a = rng.vec_f32(n, -3.0, 3.0);
        let b = rng.vec_f32(n, -3.0, 3.0);
        let (ab, bb) = (upload(g, &a), upload(g, &b));
        let out = poisoned(g, 4 * n);
        let d = g.kernels.add((&ab).into(), (&bb).into(), (&out).into(), n as u32).unwrap();
        run(g, &[&d]);
        // Exact: one f32 addition on both sides.
        let zeros = vec![0.0; n];
        assert_close(&format!("add n={n}"), &read_n::<f32>(g, &out, n), &cpu::add(&a, &b), &zeros, 0.0, 0.0);
    }
}

#[test]
fn argmax_ties_to_lower_index() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(15);
    let n = 151_936usize;
    let mut logits = rng.vec_f32(3 * n, -10.0, 10.0);
    // Row 0: the max twice, far apart (lower wins). Row 1: max at the very end. Row 2: tie at 0 and n-1.
    logits[100_000] = 20.0;
    logits[5_000] = 20.0;
    logits[n + n - 1] = 30.0;
    logits[2 * n] = 25.0;
    logits[2 * n + n - 1] = 25.0;
    // Slices of 2,048 values: ties within one slice (row 0 of the third case), across slices (row 0
    // above), one more value than a slice holds (the fourth).
    let mut within = rng.vec_f32(2 * 4096, -1.0, 1.0);
    within[3000] = 2.0;
    within[2100] = 2.0;
    within[4096 + 4095] = 2.0;
    let mut past = rng.vec_f32(2049, -1.0, 1.0);
    past[2048] = 1.5;
    let cases: Vec<(Vec<f32>, usize)> = vec![
        (logits, n),
        (vec![1.5; 300], 300),
        (within, 4096),
        (past, 2049),
        (vec![-2.0], 1),
        (rng.vec_f32(1000, -1.0, 1.0), 250),
    ];
    for (l, n) in cases {
        let t = l.len() / n;
        let lb = upload(g, &l);
        let out = poisoned(g, 4 * t);
        let partial = poisoned(g, 4 * argmax_partial_len(n as u32, t as u32) as usize);
        let d = g.kernels.argmax((&lb).into(), (&partial).into(), (&out).into(), n as u32, t as u32).unwrap();
        assert_eq!(d.parts(), 2);
        run(g, &[&d]);
        assert_eq!(read_n::<u32>(g, &out, t), cpu::argmax(&l, n), "argmax n={n} T={t}");
    }
    assert_eq!(cpu::argmax(&[1.0, 3.0, 3.0], 3), vec![1]);
}

/// `got`, `rows` rows of `cols` values Q8_0-quantised on the GPU (quantize_q8's layout), against
/// `cpu::quantize_q8` of `x`: scales f16 values within one f16 step (WGSL lets the division be 2.5 ulp off,
/// which moves the f16 rounding of a scale near a rounding boundary; lavapipe matches bit for bit); a quant
/// one off only where x / d lands within a few ulp of a half (as `quant_allowance` allows), equal elsewhere.
fn check_q8_rows(what: &str, got: &[u8], x: &[f32], rows: usize, cols: usize) {
    let (q, s) = cpu::quantize_q8(x);
    let want = cpu::pack_q8_rows(&q, &s, cols);
    let row = q8_row_bytes(cols as u32) as usize;
    for r in 0..rows {
        let (gq, wq, xr) = (&got[r * row..][..cols], &want[r * row..][..cols], &x[r * cols..][..cols]);
        for (b, block) in xr.chunks(32).enumerate() {
            let d = block.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            for (j, v) in block.iter().enumerate() {
                let (a, w) = (gq[b * 32 + j] as i8, wq[b * 32 + j] as i8);
                let t = (v * id).abs();
                let near_half = (t - t.floor() - 0.5).abs() <= 8.0 * f32::EPSILON * t;
                let ok = a == w || (near_half && (i32::from(a) - i32::from(w)).abs() == 1);
                assert!(ok, "{what} row {r} value {}: {a} against {w} (x / d = {})", b * 32 + j, v * id);
            }
        }
        let scales =
            |b: &[u8]| -> Vec<f32> { bytemuck::pod_collect_to_vec(&b[r * row + cols..][..row - cols]) };
        for (a, b) in scales(got).iter().zip(scales(&want)) {
            assert!((a - b).abs() <= b * f32::powi(2.0, -10), "{what}: scale {a} against {b}, row {r}");
            // Whatever the division's error, a scale is an f16 value (what a Q8_0 block stores).
            assert_eq!(half::f16::from_f32(*a).to_f32(), *a, "{what}: scale {a} is no f16, row {r}");
        }
    }
}

#[test]
fn quantize_q8_rows() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(90);
    for (rows, cols) in [(5usize, 2048usize), (3, 96), (37, 768)] {
        // Values over several magnitudes, a zero block (scale 0) and exact halves of a step.
        let mut x: Vec<f32> =
            (0..rows * cols).map(|i| rng.f32(-1.0, 1.0) * [0.01, 1.0, 300.0][i / 32 % 3]).collect();
        x[32..64].fill(0.0);
        x[0] = 127.0;
        x[1] = 0.5;
        x[2] = -2.5;
        let (xb, out) = (upload(g, &x), poisoned(g, rows * q8_row_bytes(cols as u32) as usize));
        let d = g.kernels.quantize_q8((&xb).into(), (&out).into(), rows as u32, cols as u32).unwrap();
        run(g, &[&d]);
        let got = read_n::<u8>(g, &out, rows * q8_row_bytes(cols as u32) as usize);
        // The step is exactly 1 in block 0 (127 its largest value): the halves round away from zero.
        assert_eq!(
            [got[0] as i8, got[1] as i8, got[2] as i8],
            [127, 1, -3],
            "quantize_q8 {rows}x{cols} halves"
        );
        check_q8_rows(&format!("quantize_q8 {rows}x{cols}"), &got, &x, rows, cols);
    }
}
