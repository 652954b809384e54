//! Protects the MoE half of a layer (router softmax + top-k + renormalise, the slot-indexed expert
//! GEMVs for all picks in one dispatch, SiLU·up, weighted sum + residual) against the CPU references on
//! a real device, with ties in the router, repeated slots, a pool split over bindings and both GEMV
//! variants.

mod common;

use common::{
    Gpu, Rng, RoutedOutputs, Scales, abs_of, assert_close, assert_some_apart, poisoned, quant_allowance,
    read_n, run, squares_scale, upload,
};
use diskformer_kernels::{
    CombineOut, EXPERT_GEMM_TILED_GROUP, ExpertGroupsParams, ExpertPlanes, ExpertSlotsParams, Kernels,
    MoeCombineNormParams, MoeCombineParams, combine_squares, cpu, expert_gemm_group_bound,
    expert_gemm_groups,
};

#[test]
fn router_topk_with_ties() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(51);
    for (experts, k, t) in [(128usize, 8usize, 1usize), (128, 8, 3), (60, 4, 2), (7, 7, 1), (256, 32, 1)] {
        let mut logits = rng.vec_f32(t * experts, -4.0, 4.0);
        for row in logits.chunks_mut(experts) {
            // Ties: a triple at the top (all picked, in index order) and a pair straddling the k-th
            // place (only the lower index picked when k leaves room for one).
            let n = row.len();
            row[n - 1] = 9.0;
            row[n / 2] = 9.0;
            row[1] = 9.0;
            if k >= 5 && n > k + 2 {
                let bound = 8.0;
                for v in row.iter_mut() {
                    if *v < 9.0 {
                        *v = v.min(7.0);
                    }
                }
                // k - 4 values strictly between, then the tie for the last place.
                for j in 0..k - 4 {
                    row[2 + j] = 8.5 - j as f32 * 0.01;
                }
                row[n - 2] = bound;
                row[k] = bound;
            }
        }
        let lb = upload(g, &logits);
        let ids = poisoned(g, 4 * t * k);
        let weights = poisoned(g, 4 * t * k);
        let d = g
            .kernels
            .router_topk((&lb).into(), (&ids).into(), (&weights).into(), experts as u32, k as u32, t as u32)
            .unwrap();
        run(g, &[&d]);
        let (want_ids, want_w) = cpu::router_topk(&logits, experts, k);
        assert_eq!(read_n::<u32>(g, &ids, t * k), want_ids, "router ids E={experts} k={k} T={t}");
        // Tolerance: the GPU's f32 exps of the picks' logits over their f32 sum (the softmax over all E
        // cancels) against the CPU's f64 softmax then f32 renormalisation: ~1e-6 relative.
        let got_w = read_n::<f32>(g, &weights, t * k);
        assert_close(
            &format!("router weights E={experts} k={k} T={t}"),
            &got_w,
            &want_w,
            &abs_of(&want_w),
            1e-8,
            4e-6,
        );
        for row in got_w.chunks(k) {
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5, "weights sum to 1");
        }

        // With the slots of a resident table (3 layers of `experts` entries, this is the middle one): the
        // same picks and weights, bit for bit, and each pick's slot.
        let table: Vec<u32> = (0..3 * experts as u32).map(|i| i.wrapping_mul(2_654_435_761) >> 7).collect();
        let tb = upload(g, &table);
        let (ids2, weights2, slots) =
            (poisoned(g, 4 * t * k), poisoned(g, 4 * t * k), poisoned(g, 4 * t * k));
        let v = diskformer_kernels::View::from;
        let base = experts as u32;
        let d = g
            .kernels
            .router_topk_slots(
                v(&lb),
                v(&tb),
                v(&ids2),
                v(&weights2),
                v(&slots),
                experts as u32,
                k as u32,
                t as u32,
                (base, table.len() as u32),
            )
            .unwrap();
        run(g, &[&d]);
        assert_eq!(read_n::<u32>(g, &ids2, t * k), want_ids, "router_topk_slots ids E={experts} k={k}");
        let got_w2 = read_n::<f32>(g, &weights2, t * k);
        assert!(got_w2.iter().zip(&got_w).all(|(a, b)| a.to_bits() == b.to_bits()), "same weights");
        let want_slots: Vec<u32> = want_ids.iter().map(|&id| table[(base + id) as usize]).collect();
        assert_eq!(read_n::<u32>(g, &slots, t * k), want_slots, "router_topk_slots slots E={experts} k={k}");
    }
    // The reference itself: the tie for the last place goes to the lower index.
    assert_eq!(cpu::router_topk(&[1.0, 3.0, 2.0, 3.0, 2.0], 5, 3).0, vec![1, 3, 2]);
}

/// A pool of expert planes with its host copy: Q8_0 (int8 quants) or, as [`Q4Pool`], Q4_0.
struct Pool<Q = i8> {
    q: Vec<Q>,
    s: Vec<half::f16>,
    qb: wgpu::Buffer,
    sb: wgpu::Buffer,
    slots: usize,
    rows: usize,
    cols: usize,
}

impl<Q> Pool<Q> {
    /// The planes as the expert kernels bind them: the whole pool, one part.
    fn planes(&self) -> ExpertPlanes<'_> {
        ExpertPlanes {
            q: (&self.qb).into(),
            scales: (&self.sb).into(),
            slots: self.slots as u32,
            first_slot: 0,
            rows: self.rows as u32,
            cols: self.cols as u32,
        }
    }
}

/// A pool's quant type: Q8_0 (`i8` quants) or Q4_0 (`u8`, nibble pairs), with its CPU references.
trait Quant: Sized {
    /// True for Q4_0.
    const Q4: bool;
    /// The slot-indexed GEMV (`cpu::expert_q8_gemv` or `cpu::expert_q4_gemv`).
    fn gemv(p: &Pool<Self>, slot_idx: &[u32], x: &[f32], x_div: usize) -> Vec<f32>;
    /// Σ|w·x| of every output of the slot-indexed GEMV: what its rounding error scales with.
    fn magnitude(p: &Pool<Self>, slot_idx: &[u32], x: &[f32], x_div: usize) -> Vec<f32>;
    /// The down GEMV with the MoE combine (`cpu::expert_q8_gemv_combine` or `cpu::expert_q4_gemv_combine`).
    fn combine(p: &Pool<Self>, k: usize, slot_idx: &[u32], x: &[f32], wrn: [&[f32]; 3]) -> [Vec<f32>; 3];
    /// Q8_0 only: the GEMV on the input quantised (`cpu::expert_q8_gemv_i8`) and its `magnitude` with
    /// [`expert_quant_allowance`] added.
    fn gemv_i8(p: &Pool<Self>, slot_idx: &[u32], x: &[f32], x_div: usize) -> (Vec<f32>, Vec<f32>);
    /// Q8_0 only: the GEMV on an input quantised before it (`cpu::expert_q8_gemm_i8` of `quantize_q8`'s
    /// output).
    fn gemv_xq(p: &Pool<Self>, slot_idx: &[u32], xq: (&[i8], &[f32]), x_div: usize) -> Vec<f32>;
    /// Q8_0 only: `combine` on each pick's input quantised (`cpu::expert_q8_gemv_combine_i8`).
    fn combine_i8(p: &Pool<Self>, k: usize, slot_idx: &[u32], x: &[f32], wrn: [&[f32]; 3]) -> [Vec<f32>; 3];
}

impl Quant for i8 {
    const Q4: bool = false;
    fn gemv(p: &Pool, slot_idx: &[u32], x: &[f32], x_div: usize) -> Vec<f32> {
        cpu::expert_q8_gemv(&p.q, &p.s, p.rows, p.cols, slot_idx, x, x_div)
    }
    fn magnitude(p: &Pool, slot_idx: &[u32], x: &[f32], x_div: usize) -> Vec<f32> {
        let qa: Vec<i8> = p.q.iter().map(|v| v.saturating_abs()).collect();
        let sa: Vec<half::f16> = p.s.iter().map(|v| half::f16::from_f32(v.to_f32().abs())).collect();
        cpu::expert_q8_gemv(&qa, &sa, p.rows, p.cols, slot_idx, &abs_of(x), x_div)
    }
    fn combine(p: &Pool, k: usize, slot_idx: &[u32], x: &[f32], [w, r, n]: [&[f32]; 3]) -> [Vec<f32>; 3] {
        let (a, b, c) = cpu::expert_q8_gemv_combine(&p.q, &p.s, (p.rows, p.cols, k), slot_idx, x, w, r, n);
        [a, b, c]
    }
    fn gemv_i8(p: &Pool, slot_idx: &[u32], x: &[f32], x_div: usize) -> (Vec<f32>, Vec<f32>) {
        let want = cpu::expert_q8_gemv_i8(&p.q, &p.s, p.rows, p.cols, slot_idx, x, x_div);
        let mag = p.magnitude(slot_idx, x, x_div);
        let allow = expert_quant_allowance(p, slot_idx, x, x_div);
        (want, mag.iter().zip(&allow).map(|(m, a)| m + a).collect())
    }
    fn gemv_xq(p: &Pool, slot_idx: &[u32], xq: (&[i8], &[f32]), x_div: usize) -> Vec<f32> {
        cpu::expert_q8_gemm_i8(&p.q, &p.s, p.rows, p.cols, slot_idx, xq, x_div)
    }
    fn combine_i8(p: &Pool, k: usize, slot_idx: &[u32], x: &[f32], [w, r, n]: [&[f32]; 3]) -> [Vec<f32>; 3] {
        let rck = (p.rows, p.cols, k);
        let (a, b, c) = cpu::expert_q8_gemv_combine_i8(&p.q, &p.s, rck, slot_idx, x, w, r, n);
        [a, b, c]
    }
}

impl Quant for u8 {
    const Q4: bool = true;
    fn gemv(p: &Q4Pool, slot_idx: &[u32], x: &[f32], x_div: usize) -> Vec<f32> {
        cpu::expert_q4_gemv(&p.q, &p.s, p.rows, p.cols, slot_idx, x, x_div)
    }
    fn magnitude(p: &Q4Pool, slot_idx: &[u32], x: &[f32], x_div: usize) -> Vec<f32> {
        // The dequantised pool (exact in f32) in absolute value against |x|.
        let (wa, xa, m) = (abs_of(&cpu::dequant_q4_0(&p.q, &p.s)), abs_of(x), p.rows * p.cols);
        slot_idx
            .iter()
            .enumerate()
            .flat_map(|(pair, &slot)| {
                let xt = &xa[pair / x_div * p.cols..][..p.cols];
                cpu::f32_gemv(&wa[slot as usize * m..][..m], p.rows, p.cols, xt)
            })
            .collect()
    }
    fn combine(p: &Q4Pool, k: usize, slot_idx: &[u32], x: &[f32], [w, r, n]: [&[f32]; 3]) -> [Vec<f32>; 3] {
        let (a, b, c) = cpu::expert_q4_gemv_combine(&p.q, &p.s, (p.rows, p.cols, k), slot_idx, x, w, r, n);
        [a, b, c]
    }
    fn gemv_i8(_: &Q4Pool, _: &[u32], _: &[f32], _: usize) -> (Vec<f32>, Vec<f32>) {
        unreachable!("no Q4_0 expert GEMV on int8 inputs")
    }
    fn gemv_xq(_: &Q4Pool, _: &[u32], _: (&[i8], &[f32]), _: usize) -> Vec<f32> {
        unreachable!("no Q4_0 expert GEMV on int8 inputs")
    }
    fn combine_i8(_: &Q4Pool, _: usize, _: &[u32], _: &[f32], _: [&[f32]; 3]) -> [Vec<f32>; 3] {
        unreachable!("no Q4_0 expert GEMV on int8 inputs")
    }
}

impl<Q: Quant> Pool<Q> {
    fn reference(&self, slot_idx: &[u32], x: &[f32], x_div: usize) -> Vec<f32> {
        Q::gemv(self, slot_idx, x, x_div)
    }

    fn magnitude(&self, slot_idx: &[u32], x: &[f32], x_div: usize) -> Vec<f32> {
        Q::magnitude(self, slot_idx, x, x_div)
    }
}

fn pool(g: &Gpu, rng: &mut Rng, slots: usize, rows: usize, cols: usize) -> Pool {
    let q = rng.vec_i8(slots * rows * cols);
    let s = rng.vec_scales(slots * rows * cols / 32);
    let (qb, sb) = (upload(g, &q), upload(g, &s));
    Pool { q, s, qb, sb, slots, rows, cols }
}

fn check_expert(g: &Gpu, k: &Kernels, p: &Pool, slot_idx: &[u32], x_div: usize, seed: u64, min_parts: usize) {
    check_expert_kernel(g, k, p, slot_idx, x_div, seed, min_parts, "expert_q8_gemv");
    check_expert_kernel(g, k, p, slot_idx, x_div, seed, min_parts, "expert_q8_gemv_i8");
    if p.cols % 128 == 0 {
        check_expert_kernel(g, k, p, slot_idx, x_div, seed, min_parts, "expert_q8_gemv_xq");
    } else {
        // A quantised row must start on a 16-byte boundary: a clear error, not a misread.
        let xq = upload(g, &vec![0u32; slot_idx.len() * p.cols]);
        let (ib, y) = (upload(g, slot_idx), poisoned(g, 4 * slot_idx.len() * p.rows));
        let (pairs, x_div) = (slot_idx.len() as u32, x_div as u32);
        let e = k.expert_q8_gemv_xq(p.planes(), (&xq).into(), (&ib).into(), (&y).into(), pairs, x_div);
        if pairs == x_div {
            // One input row (a token's gate‖up, padded to 16 bytes) is taken whatever cols.
            check_expert_kernel(g, k, p, slot_idx, x_div as usize, seed, min_parts, "expert_q8_gemv_xq");
        } else {
            let msg = e.expect_err("cols not a multiple of 128").to_string();
            assert!(msg.contains("multiple of 128"), "{msg}");
        }
    }
}

/// `cpu::pack_q8_rows`, padded to 16 bytes (the xq GEMV reads its input in 16-byte vectors).
fn padded_q8_rows(q: &[i8], s: &[f32], cols: usize) -> Vec<u8> {
    let mut rows = cpu::pack_q8_rows(q, s, cols);
    rows.resize(rows.len().next_multiple_of(16), 0);
    rows
}

/// [`quant_allowance`] of every output of the slot-indexed GEMV on `x`, as a `magnitude`-like scale for
/// its 2e-6 tolerance.
fn expert_quant_allowance(p: &Pool, slot_idx: &[u32], x: &[f32], x_div: usize) -> Vec<f32> {
    let m = p.rows * p.cols;
    let mut out = Vec::with_capacity(slot_idx.len() * p.rows);
    for (pair, &slot) in slot_idx.iter().enumerate() {
        let (q, s) = (&p.q[slot as usize * m..][..m], &p.s[slot as usize * m / 32..][..m / 32]);
        let xt = &x[pair / x_div * p.cols..][..p.cols];
        out.extend(quant_allowance(q, s, p.rows, p.cols, xt).into_iter().map(|a| a / 2e-6));
    }
    out
}

fn check_expert_gemm(
    g: &Gpu,
    k: &Kernels,
    p: &Pool,
    slot_idx: &[u32],
    x_div: usize,
    seed: u64,
    min_parts: usize,
) {
    check_expert_kernel(g, k, p, slot_idx, x_div, seed, min_parts, "expert_q8_gemm_tiled");
    check_expert_kernel(g, k, p, slot_idx, x_div, seed, min_parts, "expert_q8_gemm_i8");
    check_expert_kernel(g, k, p, slot_idx, x_div, seed, min_parts, "expert_q8_gemm_coop");
}

#[allow(clippy::too_many_arguments)]
fn check_expert_kernel(
    g: &Gpu,
    k: &Kernels,
    p: &Pool,
    slot_idx: &[u32],
    x_div: usize,
    seed: u64,
    min_parts: usize,
    name: &str,
) {
    let mut rng = Rng::new(seed);
    let pairs = slot_idx.len();
    let x = rng.vec_f32(pairs / x_div * p.cols, -1.0, 1.0);
    // The int8 GEMM and the xq GEMV read the input Q8_0-quantised (quantize_q8's rows, here made on the
    // CPU).
    let (xq, xs) = cpu::quantize_q8(&x);
    let quantised = matches!(name, "expert_q8_gemm_i8" | "expert_q8_gemv_xq");
    let xb = if quantised { upload(g, &padded_q8_rows(&xq, &xs, p.cols)) } else { upload(g, &x) };
    let ib = upload(g, slot_idx);
    let y = poisoned(g, 4 * pairs * p.rows);
    let planes = p.planes();
    let size = EXPERT_GEMM_TILED_GROUP;
    let groups_len = expert_gemm_group_bound(pairs, p.slots, size);
    let (groups, order) = expert_gemm_groups(slot_idx, size, groups_len);
    let (gb, ob) = (upload(g, &groups), upload(g, &order));
    let (pairs_u, x_div_u) = (pairs as u32, x_div as u32);
    let sizes = (pairs_u, groups_len as u32);
    let (xv, gb, ob, yv) = ((&xb).into(), (&gb).into(), (&ob).into(), (&y).into());
    if name == "expert_q8_gemm_coop" && !k.cooperative_matrix() {
        // Devices without cooperative matrices (lavapipe) refuse it with the error that names the fallback.
        let e = k.expert_q8_gemm_coop(planes, xv, gb, ob, yv, sizes, x_div_u).unwrap_err();
        assert!(matches!(e, diskformer_kernels::Error::NoCooperativeMatrix { .. }), "{e}");
        return;
    }
    let d = match name {
        "expert_q8_gemm_coop" => k.expert_q8_gemm_coop(planes, xv, gb, ob, yv, sizes, x_div_u),
        "expert_q8_gemm_tiled" => k.expert_q8_gemm_tiled(planes, xv, gb, ob, yv, sizes, x_div_u),
        "expert_q8_gemm_i8" => k.expert_q8_gemm_i8(planes, xv, gb, ob, yv, sizes, x_div_u),
        "expert_q8_gemv_i8" => k.expert_q8_gemv_i8(planes, xv, (&ib).into(), yv, pairs_u, x_div_u),
        "expert_q8_gemv_xq" => k.expert_q8_gemv_xq(planes, xv, (&ib).into(), yv, pairs_u, x_div_u),
        _ => k.expert_q8_gemv(planes, xv, (&ib).into(), yv, pairs_u, x_div_u),
    }
    .unwrap();
    assert_eq!(d.kernel().name(), name);
    assert!(d.parts() >= min_parts, "expected >= {min_parts} pool parts, got {}", d.parts());
    run(g, &[&d]);
    let got = read_n::<f32>(g, &y, pairs * p.rows);
    let (want, mag) = match name {
        "expert_q8_gemm_i8" | "expert_q8_gemv_xq" => {
            let want = cpu::expert_q8_gemm_i8(&p.q, &p.s, p.rows, p.cols, slot_idx, (&xq, &xs), x_div);
            (want, p.magnitude(slot_idx, &x, x_div))
        }
        "expert_q8_gemv_i8" => {
            // The kernel quantises x itself (`quant_allowance`); the tolerance must still tell its
            // quantised arithmetic from the f32 GEMV's.
            let (want, mag) = <i8 as Quant>::gemv_i8(p, slot_idx, &x, x_div);
            let f32_want = p.reference(slot_idx, &x, x_div);
            let what = format!("{name}: the f32 GEMV lies within the int8 tolerance");
            assert_some_apart(&what, &f32_want, &want, &mag, 2e-6);
            (want, mag)
        }
        "expert_q8_gemm_coop" => {
            // Weights and inputs rounded to f16, as the tensor cores take them (dense.rs, q8_gemm_coop).
            let want = cpu::expert_q8_gemv_f16(&p.q, &p.s, p.rows, p.cols, slot_idx, &x, x_div);
            let (f32_want, mag) = (p.reference(slot_idx, &x, x_div), p.magnitude(slot_idx, &x, x_div));
            let what = format!("{name}: the f32 GEMM lies within the f16 GEMM's tolerance");
            assert_some_apart(&what, &f32_want, &want, &mag, 2e-6);
            (want, mag)
        }
        _ => (p.reference(slot_idx, &x, x_div), p.magnitude(slot_idx, &x, x_div)),
    };
    // Tolerance: as q8_gemv (same arithmetic; the int8 GEMM's block sums exact): 2e-6·Σ|w·x|.
    let what = format!(
        "{name} {}x{} pairs={pairs} x_div={x_div} sg={} parts={}",
        p.rows,
        p.cols,
        k.subgroups(),
        d.parts()
    );
    assert_close(&what, &got, &want, &mag, 1e-6, 2e-6);
}

#[test]
fn expert_gemv_model_shapes() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(52);
    // Real expert shapes (H 2048, F 768), a 10-slot pool, the 8 picks of one token in shuffled slots.
    let gate_up = pool(g, &mut rng, 10, 2 * 768, 2048);
    let down = pool(g, &mut rng, 10, 2048, 768);
    let picks = [3u32, 7, 0, 9, 4, 1, 8, 5];
    for k in [&g.kernels, &g.plain] {
        check_expert(g, k, &gate_up, &picks, 8, 53, 1); // shared input
        check_expert(g, k, &down, &picks, 1, 54, 1); // per-pick input
        // A 2-token chunk: 16 (token, pick) pairs, slots repeating across tokens.
        let chunk = [3u32, 7, 0, 9, 4, 1, 8, 5, 3, 2, 6, 9, 0, 1, 7, 4];
        check_expert(g, k, &gate_up, &chunk, 8, 55, 1);
        check_expert(g, k, &down, &chunk, 1, 56, 1);
    }
}

#[test]
fn expert_gemv_pool_split_and_odd() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(57);
    // 3 MiB a gate‖up slot; a 7 MiB binding limit holds 2 slots a part, so 10 slots make 5 parts.
    let gate_up = pool(g, &mut rng, 10, 2 * 768, 2048);
    let picks = [9u32, 0, 5, 4, 2, 7, 1, 6];
    let k = Kernels::new(&g.ctx).with_max_binding(7 << 20);
    check_expert(g, &k, &gate_up, &picks, 8, 58, 5);
    let k = Kernels::with_subgroups(&g.ctx, false).with_max_binding(7 << 20);
    check_expert(g, &k, &gate_up, &picks, 8, 59, 5);
    // Odd: 3 slots of 40 x 96, 2 tokens of 3 picks.
    let odd = pool(g, &mut rng, 3, 40, 96);
    for k in [&g.kernels, &g.plain] {
        check_expert(g, k, &odd, &[2, 0, 1, 1, 2, 0], 3, 60, 1);
        check_expert(g, k, &odd, &[2, 0, 1, 1, 2, 0], 1, 61, 1);
        // One token's 3 picks: one input row, which the xq GEMV takes at any cols.
        check_expert(g, k, &odd, &[2, 0, 1], 3, 63, 1);
    }
    // That row's scales end inside a 16-byte vector (108 bytes): without the padding, a clear error.
    let xq = upload(g, &cpu::pack_q8_rows(&[1; 96], &[0.5; 3], 96));
    let (ib, y) = (upload(g, &[2u32, 0, 1]), poisoned(g, 4 * 3 * 40));
    let e = g.kernels.expert_q8_gemv_xq(odd.planes(), (&xq).into(), (&ib).into(), (&y).into(), 3, 3);
    assert!(matches!(e, Err(diskformer_kernels::Error::BufferTooSmall { name: "x", .. })), "{e:?}");
    // Odd rows (37: the last workgroup's rows partly past the matrix), 20 blocks a row (lanes 20-31 idle)
    // and input rows of 180 words: the xq GEMV on several rows, beside its error for 96 columns above.
    let odd_xq = pool(g, &mut rng, 3, 37, 640);
    for k in [&g.kernels, &g.plain] {
        check_expert(g, k, &odd_xq, &[2, 0, 1, 1, 2, 0], 3, 62, 1);
    }
}

/// A Q4_0 pool: 16 bytes of nibble pairs per 32-value block (ggml order) and one f16 scale per block.
/// A pool of Q4_0 planes (16 bytes of nibble pairs a 32-value block).
type Q4Pool = Pool<u8>;

fn q4_pool(g: &Gpu, rng: &mut Rng, slots: usize, rows: usize, cols: usize) -> Q4Pool {
    // Uniform random bytes: every nibble 0..=15 (values -8..=7) in both halves of a byte.
    let q: Vec<u8> = rng.vec_i8(slots * rows * cols / 2).into_iter().map(|v| v as u8).collect();
    let s = rng.vec_scales(slots * rows * cols / 32);
    let (qb, sb) = (upload(g, &q), upload(g, &s));
    Pool { q, s, qb, sb, slots, rows, cols }
}

fn check_expert_q4(
    g: &Gpu,
    k: &Kernels,
    p: &Q4Pool,
    slot_idx: &[u32],
    x_div: usize,
    seed: u64,
    min_parts: usize,
) {
    check_expert_q4_kernel(g, k, p, slot_idx, x_div, seed, min_parts, false);
}

#[allow(clippy::too_many_arguments)]
fn check_expert_q4_kernel(
    g: &Gpu,
    k: &Kernels,
    p: &Q4Pool,
    slot_idx: &[u32],
    x_div: usize,
    seed: u64,
    min_parts: usize,
    gemm: bool,
) {
    let mut rng = Rng::new(seed);
    let pairs = slot_idx.len();
    let x = rng.vec_f32(pairs / x_div * p.cols, -1.0, 1.0);
    let (xb, ib) = (upload(g, &x), upload(g, slot_idx));
    let y = poisoned(g, 4 * pairs * p.rows);
    let planes = p.planes();
    let groups_len = expert_gemm_group_bound(pairs, p.slots, EXPERT_GEMM_TILED_GROUP);
    let (groups, order) = expert_gemm_groups(slot_idx, EXPERT_GEMM_TILED_GROUP, groups_len);
    let (gb, ob) = (upload(g, &groups), upload(g, &order));
    let (pairs_u, x_div_u) = (pairs as u32, x_div as u32);
    let sizes = (pairs_u, groups_len as u32);
    let d = if gemm {
        k.expert_q4_gemm(planes, (&xb).into(), (&gb).into(), (&ob).into(), (&y).into(), sizes, x_div_u)
    } else {
        k.expert_q4_gemv(planes, (&xb).into(), (&ib).into(), (&y).into(), pairs_u, x_div_u)
    }
    .unwrap();
    let name = if gemm { "expert_q4_gemm" } else { "expert_q4_gemv" };
    assert_eq!(d.kernel().name(), name);
    assert!(d.parts() >= min_parts, "expected >= {min_parts} pool parts, got {}", d.parts());
    run(g, &[&d]);
    let got = read_n::<f32>(g, &y, pairs * p.rows);
    let want = p.reference(slot_idx, &x, x_div);
    let mag = p.magnitude(slot_idx, &x, x_div);
    // Tolerance: (nibble - 8) and f16 scales are exact in f32, so the GPU's error is f32 rounding of the
    // products and sums. Each output passes through at most ~18 roundings in sequence (4 products and 3
    // adds in a dot, 7 adds over a block's 8 dots, the scale multiply, one add per block a lane takes
    // (≤ 2 at cols 2048), 5 levels of the 32-lane row sum), each ≤ 2^-24 of the partial sums it touches,
    // so |err| ≤ ~18·2^-24·Σ|w·x| ≈ 1.1e-6·Σ|w·x|; the CPU's f64 sum rounds once. 2e-6·Σ|w·x| as in
    // expert_q8_gemv; the 1e-6 floor only matters where Σ|w·x| is tiny. The GEMM adds a block's low and high
    // halves before the scale: the same count of roundings.
    let what = format!(
        "{name} {}x{} pairs={pairs} x_div={x_div} sg={} parts={}",
        p.rows,
        p.cols,
        k.subgroups(),
        d.parts()
    );
    assert_close(&what, &got, &want, &mag, 1e-6, 2e-6);
}

#[test]
fn expert_q4_gemv_shapes_split_and_odd() {
    // The reference's nibble order: byte j holds value j (low nibble) and value j + 16 (high nibble).
    let mut block = [0x88u8; 16];
    block[0] = 0xf0; // value 0 = (0 - 8)·d, value 16 = (15 - 8)·d
    block[15] = 0x19; // value 15 = (9 - 8)·d, value 31 = (1 - 8)·d
    let w = cpu::dequant_q4_0(&block, &[half::f16::from_f32(0.5)]);
    assert_eq!((w[0], w[16], w[15], w[31], w[1], w[17]), (-4.0, 3.5, 0.5, -3.5, 0.0, 0.0));

    let g = gpu_or_skip!();
    let mut rng = Rng::new(80);
    // Real expert shapes (H 2048, F 768), a 10-slot pool, the 8 picks of one token in shuffled slots.
    let gate_up = q4_pool(g, &mut rng, 10, 2 * 768, 2048);
    let down = q4_pool(g, &mut rng, 10, 2048, 768);
    let picks = [3u32, 7, 0, 9, 4, 1, 8, 5];
    // A 2-token chunk: 16 (token, pick) pairs, slots repeating across tokens.
    let chunk = [3u32, 7, 0, 9, 4, 1, 8, 5, 3, 2, 6, 9, 0, 1, 7, 4];
    for k in [&g.kernels, &g.plain] {
        check_expert_q4(g, k, &gate_up, &picks, 8, 81, 1); // shared input
        check_expert_q4(g, k, &down, &picks, 1, 82, 1); // per-pick input
        check_expert_q4(g, k, &gate_up, &chunk, 8, 83, 1);
        check_expert_q4(g, k, &down, &chunk, 1, 84, 1);
    }
    // 1.5 MiB a Q4_0 gate‖up slot (half the Q8_0 one); a 3.5 MiB binding limit holds 2 slots a part, so
    // 10 slots make 5 parts.
    let split = [(Kernels::new(&g.ctx), 85), (Kernels::with_subgroups(&g.ctx, false), 86)];
    for (k, seed) in split {
        let k = k.with_max_binding(7 << 19);
        check_expert_q4(g, &k, &gate_up, &[9, 0, 5, 4, 2, 7, 1, 6], 8, seed, 5);
    }
    // Odd: 3 slots of 37 x 96 (3 blocks a row, a partial group of 8 rows), 2 tokens of 3 picks.
    let odd = q4_pool(g, &mut rng, 3, 37, 96);
    for k in [&g.kernels, &g.plain] {
        check_expert_q4(g, k, &odd, &[2, 0, 1, 1, 2, 0], 3, 87, 1);
        check_expert_q4(g, k, &odd, &[2, 0, 1, 1, 2, 0], 1, 88, 1);
    }
}

/// `tokens` tokens of `k` distinct picks each from `slots` slots.
fn chunk_picks(rng: &mut Rng, tokens: usize, k: usize, slots: u64) -> Vec<u32> {
    let mut chunk = Vec::new();
    for _ in 0..tokens {
        let mut picks: Vec<u32> = Vec::new();
        while picks.len() < k {
            let s = rng.below(slots) as u32;
            if !picks.contains(&s) {
                picks.push(s);
            }
        }
        chunk.extend(picks);
    }
    chunk
}

#[test]
fn expert_gemm_grouped_pairs() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(70);
    // Small slots, a 12-token chunk of 8 picks from 10 slots: most slots have more pairs than one group
    // of 8 holds, and the pool splits into 5 parts under a 32 KiB binding limit.
    let small = pool(g, &mut rng, 10, 64, 256);
    let chunk = chunk_picks(&mut rng, 12, 8, 10);
    let (groups, _) = expert_gemm_groups(&chunk, 8, expert_gemm_group_bound(chunk.len(), 10, 8));
    assert!(groups.iter().any(|g| g[2] == 8) && groups.iter().any(|g| g[2] == 0), "groups {groups:?}");
    // The bound holds however the pairs fall: all on one slot, one each, and random chunks.
    let one_slot = vec![3u32; 20];
    let each_own: Vec<u32> = (0..20).collect();
    let mut cases = vec![one_slot, each_own];
    cases.extend((0..20).map(|i| chunk_picks(&mut rng, 1 + i % 7, 8, 10)));
    for (picks, size) in cases.into_iter().flat_map(|c| [(c.clone(), 8), (c, 32)]) {
        let distinct = picks.iter().collect::<std::collections::HashSet<_>>().len();
        let bound = expert_gemm_group_bound(picks.len(), distinct, size);
        let (groups, order) = expert_gemm_groups(&picks, size, bound);
        assert_eq!(groups.len(), bound);
        assert!(groups.iter().all(|g| g[2] as usize <= size), "{groups:?}");
        assert_eq!(groups.iter().map(|g| g[2] as usize).sum::<usize>(), picks.len(), "{picks:?}");
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..picks.len() as u32).collect::<Vec<_>>());
    }
    let split = Kernels::new(&g.ctx).with_max_binding(32 << 10);
    for k in [&g.kernels, &g.plain] {
        check_expert_gemm(g, k, &small, &chunk, 8, 71, 1);
        check_expert_gemm(g, k, &small, &chunk, 1, 72, 1);
    }
    check_expert_gemm(g, &split, &small, &chunk, 8, 73, 5);
    // Real expert shapes over a 3-token chunk, and one token's picks (groups of one).
    let gate_up = pool(g, &mut rng, 10, 2 * 768, 2048);
    let down = pool(g, &mut rng, 10, 2048, 768);
    let chunk = chunk_picks(&mut rng, 3, 8, 10);
    for k in [&g.kernels, &g.plain] {
        check_expert_gemm(g, k, &gate_up, &chunk, 8, 74, 1);
        check_expert_gemm(g, k, &down, &chunk, 1, 75, 1);
    }
    check_expert_gemm(g, &g.kernels, &down, &chunk[..8], 1, 76, 1);
    // 40 tokens of 8 picks from 10 slots: full 32-pair groups and slots split over two groups; 130 rows,
    // a 128-row tile and 2 rows of the next.
    let wide = pool(g, &mut rng, 10, 130, 96);
    let many = chunk_picks(&mut rng, 40, 8, 10);
    let (groups, _) = expert_gemm_groups(&many, 32, expert_gemm_group_bound(many.len(), 10, 32));
    assert!(groups.iter().any(|g| g[2] == 32), "groups {groups:?}");
    check_expert_gemm(g, &g.kernels, &wide, &many, 8, 79, 1);
    check_expert_gemm(g, &g.plain, &wide, &many, 1, 80, 1);
    // Odd: 3 slots of 40 x 96 (rows short of one 128-row tile), 2 tokens of 3 picks.
    let odd = pool(g, &mut rng, 3, 40, 96);
    check_expert_gemm(g, &g.kernels, &odd, &[2, 0, 1, 1, 2, 0], 3, 77, 1);
    check_expert_gemm(g, &g.kernels, &odd, &[2, 0, 1, 1, 2, 0], 1, 78, 1);
}

#[test]
fn expert_q4_gemm_grouped_pairs() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(90);
    // A 12-token chunk of 8 picks from 10 small slots (groups of up to 32 and padding), split into 4 parts
    // under a 24 KiB binding limit (a 64 x 256 Q4_0 slot is 8 KiB of nibbles; y, 96 pairs x 64 rows, is 24
    // KiB); and a 48-token one, whose slots get more than 32 pairs (full groups, then a short one).
    let small = q4_pool(g, &mut rng, 10, 64, 256);
    let chunk = chunk_picks(&mut rng, 12, 8, 10);
    let long = chunk_picks(&mut rng, 48, 8, 10);
    let split = Kernels::new(&g.ctx).with_max_binding(24 << 10);
    for k in [&g.kernels, &g.plain] {
        check_expert_q4_kernel(g, k, &small, &chunk, 8, 91, 1, true);
        check_expert_q4_kernel(g, k, &small, &chunk, 1, 92, 1, true);
        check_expert_q4_kernel(g, k, &small, &long, 8, 97, 1, true);
    }
    check_expert_q4_kernel(g, &split, &small, &chunk, 8, 93, 4, true);
    // Real expert shapes over a 3-token chunk; an odd shape (3 blocks a row, 37 rows).
    let gate_up = q4_pool(g, &mut rng, 10, 2 * 768, 2048);
    let down = q4_pool(g, &mut rng, 10, 2048, 768);
    let chunk = chunk_picks(&mut rng, 3, 8, 10);
    let odd = q4_pool(g, &mut rng, 3, 37, 96);
    for k in [&g.kernels, &g.plain] {
        check_expert_q4_kernel(g, k, &gate_up, &chunk, 8, 94, 1, true);
        check_expert_q4_kernel(g, k, &down, &chunk, 1, 95, 1, true);
        check_expert_q4_kernel(g, k, &odd, &[2, 0, 1, 1, 2, 0], 3, 96, 1, true);
    }
}

/// A resident slot table of `entries` entries: a random permutation of the slots (Fisher-Yates).
fn shuffled_slots(rng: &mut Rng, entries: u32) -> Vec<u32> {
    let mut table: Vec<u32> = (0..entries).collect();
    for i in (1..table.len()).rev() {
        table.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    table
}

#[test]
fn expert_slots_from_a_resident_table() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(63);
    // 48 layers x 128 experts as in Qwen3-30B-A3B, the table a permutation of the slots; and a small one.
    for (layers, experts, n) in [(48u32, 128u32, 8usize), (3, 8, 70)] {
        let entries = layers * experts;
        let table = shuffled_slots(&mut rng, entries);
        let tb = upload(g, &table);
        for layer in [0, layers - 1] {
            let mut ids: Vec<u32> = (0..n).map(|_| (rng.next_u64() % u64::from(experts)) as u32).collect();
            // An id past the last layer's table comes out as the slot the expert kernels skip.
            ids[n - 1] = experts + 1;
            let ib = upload(g, &ids);
            let out = poisoned(g, 4 * n);
            let p = ExpertSlotsParams { n: n as u32, base: layer * experts, entries, _pad: 0 };
            let d = g.kernels.expert_slots((&ib).into(), (&tb).into(), (&out).into(), p).unwrap();
            run(g, &[&d]);
            let want = cpu::expert_slots(&ids, &table, layer * experts);
            assert_eq!(read_n::<u32>(g, &out, n), want, "layers {layers}, layer {layer}");
            if layer == layers - 1 {
                assert_eq!(want[n - 1], u32::MAX);
            }
        }
    }
}

#[test]
fn expert_groups_on_the_gpu() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(64);
    // A 512-token chunk of the model's 8 picks from 128 experts (some experts past 32 pairs: several
    // groups), a small one with one expert taking every token, groups of 8, and a layer past the first.
    for (layers, experts, tokens, k, size, layer) in
        [(48u32, 128u32, 512usize, 8usize, 32usize, 5u32), (2, 6, 40, 2, 8, 1), (1, 3, 1, 3, 32, 0)]
    {
        let entries = layers * experts;
        let table = shuffled_slots(&mut rng, entries);
        let ids = if experts == 6 {
            (0..tokens).flat_map(|t| [0, 1 + (t as u32 % 5)]).collect::<Vec<u32>>()
        } else {
            chunk_picks(&mut rng, tokens, k, u64::from(experts))
        };
        let pairs = ids.len();
        let len = expert_gemm_group_bound(pairs, experts as usize, size);
        let (tb, ib) = (upload(g, &table), upload(g, &ids));
        let (gb, ob) = (poisoned(g, 16 * len), poisoned(g, 4 * pairs));
        let p = ExpertGroupsParams {
            pairs: pairs as u32,
            experts,
            size: size as u32,
            len: len as u32,
            base: layer * experts,
            entries,
            _pad: [0; 2],
        };
        let d = g.kernels.expert_groups((&ib).into(), (&tb).into(), (&gb).into(), (&ob).into(), p).unwrap();
        run(g, &[&d]);
        let (want_groups, want_order) =
            cpu::expert_groups(&ids, &table, (layer * experts, experts), size, len);
        let got_groups: Vec<[u32; 4]> = read_n::<[u32; 4]>(g, &gb, len);
        assert_eq!(got_groups, want_groups, "groups, {experts} experts, {pairs} pairs");
        assert!(tokens == 1 || want_groups.iter().any(|g| g[2] as usize == size), "a full group");
        // Each expert's run holds its pairs, in any order.
        let mut got_order = read_n::<u32>(g, &ob, pairs);
        let mut at = 0;
        for e in 0..experts {
            let c = ids.iter().filter(|&&i| i == e).count();
            got_order[at..at + c].sort_unstable();
            at += c;
        }
        assert_eq!(got_order, want_order, "order, {experts} experts, {pairs} pairs");
    }
}

#[test]
fn silu_mul_rows() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(62);
    for (ffn, rows) in [(768usize, 8usize), (768, 16), (100, 3)] {
        let gu = rng.vec_f32(rows * 2 * ffn, -8.0, 8.0);
        let gb = upload(g, &gu);
        let out = poisoned(g, 4 * rows * ffn);
        let d = g.kernels.silu_mul((&gb).into(), (&out).into(), ffn as u32, rows as u32).unwrap();
        run(g, &[&d]);
        let got = read_n::<f32>(g, &out, rows * ffn);
        let want = cpu::silu_mul(&gu, ffn);
        // Tolerance: the GPU's exp is within a few ulp (WGSL: 3 + 2·|x| ulp), then one divide and one
        // multiply: 2e-6 relative.
        assert_close(&format!("silu_mul F={ffn} rows={rows}"), &got, &want, &abs_of(&want), 1e-9, 2e-6);
    }
}

#[test]
fn moe_combine_order() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(63);
    for (hidden, k, t) in [(2048usize, 8usize, 1usize), (2048, 8, 2), (100, 3, 3)] {
        let experts = rng.vec_f32(t * k * hidden, -2.0, 2.0);
        let weights = rng.vec_f32(t * k, 0.01, 0.3);
        let residual = rng.vec_f32(t * hidden, -5.0, 5.0);
        let (eb, wb, rb) = (upload(g, &experts), upload(g, &weights), upload(g, &residual));
        let out = poisoned(g, 4 * t * hidden);
        let p = MoeCombineParams { hidden: hidden as u32, k: k as u32, tokens: t as u32, _pad: 0 };
        let d = g.kernels.moe_combine((&eb).into(), (&wb).into(), (&rb).into(), (&out).into(), p).unwrap();
        run(g, &[&d]);
        let got = read_n::<f32>(g, &out, t * hidden);
        let want = cpu::moe_combine(&experts, &weights, &residual, hidden, k);
        // Tolerance: same operations in the same order; a compiler may fuse multiply-adds, which
        // changes each of the k+1 roundings by at most half an ulp of the running sum.
        let scale: Vec<f32> = (0..t * hidden)
            .map(|i| {
                let (tt, h) = (i / hidden, i % hidden);
                residual[i].abs()
                    + (0..k)
                        .map(|j| (experts[(tt * k + j) * hidden + h] * weights[tt * k + j]).abs())
                        .sum::<f32>()
            })
            .collect();
        assert_close(&format!("moe_combine H={hidden} k={k} T={t}"), &got, &want, &scale, 0.0, 1e-6);
    }
}

/// `expert_q8_gemv_combine` (or over a Q4_0 pool `expert_q4_gemv_combine`) against the CPU's expert GEMV
/// then `cpu::moe_combine` onto the residual's old values; picks whose slot is past the pool add nothing;
/// the next norm's inputs (the new residual times its weight, sums of squares of 4 rows) as the CPU
/// computes them from the expected residual.
fn check_combine<Q: Quant>(
    g: &Gpu,
    k: &Kernels,
    p: &Pool<Q>,
    slot_idx: &[u32],
    picks: usize,
    seed: u64,
    min_parts: usize,
) {
    check_combine_kernel(g, k, p, slot_idx, (picks, false), seed, min_parts);
    if !Q::Q4 {
        check_combine_kernel(g, k, p, slot_idx, (picks, true), seed, min_parts);
    }
}

/// One case of [`check_combine`]; with `i8` (Q8_0) the kernel that quantises each pick's input as it
/// reads it (`expert_q8_gemv_combine_i8`).
fn check_combine_kernel<Q: Quant>(
    g: &Gpu,
    k: &Kernels,
    p: &Pool<Q>,
    slot_idx: &[u32],
    (picks, i8): (usize, bool),
    seed: u64,
    min_parts: usize,
) {
    let mut rng = Rng::new(seed);
    let (pairs, tokens) = (slot_idx.len(), slot_idx.len() / picks);
    let x = rng.vec_f32(pairs * p.cols, -1.0, 1.0);
    let weights = rng.vec_f32(pairs, 0.01, 0.3);
    let residual = rng.vec_f32(tokens * p.rows, -5.0, 5.0);
    let next_norm = rng.vec_f32(p.rows, 0.5, 1.5);
    let (xb, ib, wb, y) = (upload(g, &x), upload(g, slot_idx), upload(g, &weights), upload(g, &residual));
    let blocks = combine_squares(p.rows as u32) as usize;
    let (nb, scaled, squares) =
        (upload(g, &next_norm), poisoned(g, 4 * tokens * p.rows), poisoned(g, 4 * tokens * blocks));
    let v = diskformer_kernels::View::from;
    let out = CombineOut {
        weights: v(&wb),
        residual: v(&y),
        next_norm: v(&nb),
        scaled: v(&scaled),
        squares: v(&squares),
        finish: true,
    };
    let tk = (tokens as u32, picks as u32);
    let d = if Q::Q4 {
        k.expert_q4_gemv_combine(p.planes(), v(&xb), v(&ib), out, tk)
    } else if i8 {
        k.expert_q8_gemv_combine_i8(p.planes(), v(&xb), v(&ib), out, tk)
    } else {
        k.expert_q8_gemv_combine(p.planes(), v(&xb), v(&ib), out, tk)
    }
    .unwrap();
    assert!(d.parts() >= min_parts, "expected >= {min_parts} pool parts, got {}", d.parts());
    run(g, &[&d]);
    let got = read_n::<f32>(g, &y, tokens * p.rows);
    let wrn = [&weights[..], &residual, &next_norm];
    let [want, want_scaled, want_squares] =
        if i8 { Q::combine_i8(p, picks, slot_idx, &x, wrn) } else { Q::combine(p, picks, slot_idx, &x, wrn) };
    // Σ|w·x| of each pick's rows (0 for a pick outside the pool, which adds nothing).
    let inside: Vec<u32> = slot_idx.iter().map(|&s| if (s as usize) < p.slots { s } else { 0 }).collect();
    let mut mags = if i8 { Q::gemv_i8(p, &inside, &x, 1).1 } else { p.magnitude(&inside, &x, 1) };
    for (pair, &s) in slot_idx.iter().enumerate() {
        if s as usize >= p.slots {
            mags[pair * p.rows..][..p.rows].fill(0.0);
        }
    }
    // Tolerance: each pick's row sum as expert_q8_gemv's (2e-6·Σ|w·x|), weighted, plus the combine's
    // k+1 roundings (as moe_combine_order): 2e-6 of |residual| + Σ_j weight_j·Σ|w·x|_j.
    let scale: Vec<f32> = (0..tokens * p.rows)
        .map(|i| {
            let (t, r) = (i / p.rows, i % p.rows);
            residual[i].abs()
                + (0..picks).map(|j| weights[t * picks + j] * mags[(t * picks + j) * p.rows + r]).sum::<f32>()
        })
        .collect();
    let what = format!(
        "{} {}x{} T={tokens} k={picks} sg={} parts={}",
        d.kernel().name(),
        p.rows,
        p.cols,
        k.subgroups(),
        d.parts()
    );
    assert_close(&what, &got, &want, &scale, 1e-6, 2e-6);
    // The next norm's inputs: the residual's error times the weight (< 1.5), and its squares' (relative
    // error twice the residual's, plus 3 roundings of a sum of positive terms).
    let got_scaled = read_n::<f32>(g, &scaled, tokens * p.rows);
    let scaled_scale: Vec<f32> = scale.iter().enumerate().map(|(i, s)| s * next_norm[i % p.rows]).collect();
    assert_close(&what, &got_scaled, &want_scaled, &scaled_scale, 1e-6, 2e-6);
    let squares_scale = squares_scale(&got, &scale, p.rows);
    let got_squares = read_n::<f32>(g, &squares, tokens * blocks);
    assert_close(&what, &got_squares, &want_squares, &squares_scale, 1e-6, 2e-6);
}

#[test]
fn expert_gemv_combine_adds_the_picks_onto_the_residual() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(307);
    // The real down shape: one token's 8 picks, then two tokens with slots repeating.
    let down = pool(g, &mut rng, 10, 2048, 768);
    let odd = pool(g, &mut rng, 3, 42, 96);
    for k in [&g.kernels, &g.plain] {
        check_combine(g, k, &down, &[3, 7, 0, 9, 4, 1, 8, 5], 8, 308, 1);
        check_combine(g, k, &down, &[3, 7, 0, 9, 4, 1, 8, 5, 3, 2, 6, 9, 0, 1, 7, 4], 8, 309, 1);
        // Odd rows (the last block part past the matrix), 3 picks, one of them outside the pool.
        check_combine(g, k, &odd, &[2, 0, 1, 1, u32::MAX, 0], 3, 310, 1);
        // More picks than lane groups: two rounds.
        check_combine(g, k, &odd, &[2, 0, 1, 1, 2, 0, 0, 1, 2, 2, 1, 0], 12, 311, 1);
    }
    // A pool split over bindings (1.5 MiB a down slot, 2 slots a part): every part adds its own picks.
    let k = Kernels::new(&g.ctx).with_max_binding(3 << 20);
    check_combine(g, &k, &down, &[9, 0, 5, 4, 2, 7, 1, 6], 8, 312, 5);
    let k = Kernels::with_subgroups(&g.ctx, false).with_max_binding(3 << 20);
    check_combine(g, &k, &down, &[9, 0, 5, 4, 2, 7, 1, 6], 8, 313, 5);
    // The same over Q4_0 planes (`expert_q4_gemv_combine`): 24 blocks a down row, so 8 of a lane group's
    // 32 lanes idle; odd rows of 41 blocks, so lanes 0-8 take a second block and lane 9 is the first whose
    // second is clamped; 0.75 MiB of quants a slot, 4 slots a 3 MiB part, 3 parts.
    let (down4, odd4) = (q4_pool(g, &mut rng, 10, 2048, 768), q4_pool(g, &mut rng, 3, 42, 41 * 32));
    for k in [&g.kernels, &g.plain] {
        check_combine(g, k, &down4, &[3, 7, 0, 9, 4, 1, 8, 5], 8, 314, 1);
        check_combine(g, k, &down4, &[3, 7, 0, 9, 4, 1, 8, 5, 3, 2, 6, 9, 0, 1, 7, 4], 8, 315, 1);
        check_combine(g, k, &odd4, &[2, 0, 1, 1, u32::MAX, 0], 3, 316, 1);
        check_combine(g, k, &odd4, &[2, 0, 1, 1, 2, 0, 0, 1, 2, 2, 1, 0], 12, 317, 1);
    }
    for (k, seed) in [(Kernels::new(&g.ctx), 318), (Kernels::with_subgroups(&g.ctx, false), 319)] {
        check_combine(g, &k.with_max_binding(3 << 20), &down4, &[9, 0, 5, 4, 2, 7, 1, 6], 8, seed, 3);
    }
    // Picks a token out of range are refused.
    let (x, i) = (upload(g, &[0.0f32; 4]), upload(g, &[0u32; 4]));
    let v = diskformer_kernels::View::from;
    let out = CombineOut {
        weights: v(&i),
        residual: v(&x),
        next_norm: v(&x),
        scaled: v(&x),
        squares: v(&x),
        finish: true,
    };
    let err = g.kernels.expert_q8_gemv_combine(down.planes(), v(&x), v(&i), out, (1, 65)).unwrap_err();
    assert!(err.to_string().contains("picks a token"), "{err}");
}

/// The down projection from gate‖up (`expert_q8_gemv_swiglu`, `expert_q4_gemv_swiglu`) against the CPU's
/// silu_mul then expert GEMV.
#[test]
fn expert_gemv_swiglu_input() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(64);
    let (q8, q4) = (pool(g, &mut rng, 10, 2048, 768), q4_pool(g, &mut rng, 10, 2048, 768));
    let (q8_odd, q4_odd) = (pool(g, &mut rng, 3, 40, 96), q4_pool(g, &mut rng, 3, 40, 96));
    // 3 MiB bindings: 2 Q8_0 slots (1.5 MiB) a part, 5 parts; 4 Q4_0 slots (0.75 MiB) a part, 3 parts.
    let split = Kernels::new(&g.ctx).with_max_binding(3 << 20);
    let cases: [(&Kernels, &[u32], usize); 4] = [
        (&g.kernels, &[3, 7, 0, 9, 4, 1, 8, 5], 1),
        (&g.plain, &[3, 7, 0, 9, 4, 1, 8, 5], 1),
        (&split, &[9, 0, 5, 4, 2, 7, 1, 6], 5),
        (&g.kernels, &[2, 0, 1, 1, 2, 0], 1),
    ];
    for (i, (k, slot_idx, min_parts)) in cases.into_iter().enumerate() {
        let odd = i == 3;
        let pairs = slot_idx.len();
        for q4_planes in [false, true] {
            let (rows, cols, slots) = if odd { (40, 96, 3) } else { (2048, 768, 10) };
            let (qb, sb) = match (q4_planes, odd) {
                (false, false) => (&q8.qb, &q8.sb),
                (false, true) => (&q8_odd.qb, &q8_odd.sb),
                (true, false) => (&q4.qb, &q4.sb),
                (true, true) => (&q4_odd.qb, &q4_odd.sb),
            };
            let planes = ExpertPlanes {
                q: qb.into(),
                scales: sb.into(),
                slots,
                first_slot: 0,
                rows: rows as u32,
                cols: cols as u32,
            };
            let gu = rng.vec_f32(pairs * 2 * cols, -4.0, 4.0);
            let (gub, ib) = (upload(g, &gu), upload(g, slot_idx));
            let y = poisoned(g, 4 * pairs * rows);
            let (x, v) = (pairs as u32, diskformer_kernels::View::from);
            let d = if q4_planes {
                k.expert_q4_gemv_swiglu(planes, v(&gub), v(&ib), v(&y), x)
            } else {
                k.expert_q8_gemv_swiglu(planes, v(&gub), v(&ib), v(&y), x)
            }
            .unwrap();
            let min_parts = if q4_planes { min_parts.min(3) } else { min_parts };
            assert!(d.parts() >= min_parts, "expected >= {min_parts} pool parts, got {}", d.parts());
            run(g, &[&d]);
            let act = cpu::silu_mul(&gu, cols);
            let (want, mag) = if q4_planes {
                let p = if odd { &q4_odd } else { &q4 };
                (p.reference(slot_idx, &act, 1), p.magnitude(slot_idx, &act, 1))
            } else {
                let p = if odd { &q8_odd } else { &q8 };
                (p.reference(slot_idx, &act, 1), p.magnitude(slot_idx, &act, 1))
            };
            let got = read_n::<f32>(g, &y, pairs * rows);
            // Tolerance: the GEMV's 2e-6·Σ|w·a| plus silu_mul's 2e-6 relative error in each input a:
            // 4e-6·Σ|w·a|.
            let what = format!(
                "swiglu gemv q4 {q4_planes} {rows}x{cols} pairs {pairs} sg {} parts {}",
                k.subgroups(),
                d.parts()
            );
            assert_close(&what, &got, &want, &mag, 1e-6, 4e-6);
        }
    }
}

/// gate‖up with SwiGLU on its output (`expert_q8_gemv_gate_up_swiglu`, over Q4_0 planes
/// `expert_q4_gemv_gate_up_swiglu`) against the CPU's expert GEMV then silu_mul, at the real shape (shared
/// input, x_div = k) and an odd one, split and plain; and the refusal of a gate half that is not a multiple
/// of 16 rows.
#[test]
fn expert_gemv_gate_up_swiglu_output() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(66);
    let (real, odd) = (pool(g, &mut rng, 10, 1536, 2048), pool(g, &mut rng, 3, 64, 96));
    let (real4, odd4) = (q4_pool(g, &mut rng, 10, 1536, 2048), q4_pool(g, &mut rng, 3, 64, 96));
    // 7 MiB bindings: 2 Q8_0 slots of 3.1 MiB a part, 5 parts; 4 Q4_0 slots of 1.7 MiB, 3 parts.
    let split = Kernels::new(&g.ctx).with_max_binding(7 << 20);
    let long = [9, 0, 5, 4, 2, 7, 1, 6, 3, 3, 8, 0, 1, 2, 6, 5];
    let picks = [3, 7, 0, 9, 4, 1, 8, 5];
    for (k, slot_idx, (q8_parts, q4_parts)) in
        [(&g.kernels, &picks[..], (1, 1)), (&g.plain, &picks[..], (1, 1)), (&split, &long[..], (5, 3))]
    {
        for input in [Input::F32, Input::I8, Input::Xq] {
            check_gate_up_swiglu(g, k, &real, slot_idx, (8, input), q8_parts, &mut rng);
        }
        check_gate_up_swiglu(g, k, &real4, slot_idx, (8, Input::F32), q4_parts, &mut rng);
    }
    for (k, x_div) in [(&g.kernels, 3), (&g.plain, 1)] {
        for input in [Input::F32, Input::I8] {
            check_gate_up_swiglu(g, k, &odd, &[2, 0, 1, 1, 2, 0], (x_div, input), 1, &mut rng);
        }
        // One token (one input row): the xq kernel at 96 columns.
        check_gate_up_swiglu(g, k, &odd, &[2, 0, 1], (3, Input::Xq), 1, &mut rng);
        check_gate_up_swiglu(g, k, &odd4, &[2, 0, 1, 1, 2, 0], (x_div, Input::F32), 1, &mut rng);
    }
    let bad = pool(g, &mut rng, 1, 40, 32);
    let planes = ExpertPlanes {
        q: (&bad.qb).into(),
        scales: (&bad.sb).into(),
        slots: 1,
        first_slot: 0,
        rows: 40,
        cols: 32,
    };
    let (xb, ib, y) = (upload(g, &[0.5f32; 32]), upload(g, &[0u32]), poisoned(g, 4 * 20));
    let err = g.kernels.expert_q8_gemv_gate_up_swiglu(planes, (&xb).into(), (&ib).into(), (&y).into(), 1, 1);
    assert!(err.unwrap_err().to_string().contains("multiple of 16"));
}

/// How a gate‖up kernel takes its input.
#[derive(Clone, Copy, PartialEq)]
enum Input {
    /// f32.
    F32,
    /// f32, Q8_0-quantised as it is read (the `_i8` kernel).
    I8,
    /// Q8_0-quantised before (`quantize_q8`'s rows; the `_xq` kernel).
    Xq,
}

/// One case of `expert_gemv_gate_up_swiglu_output` over a Q8_0 or Q4_0 pool, the input as `input` says
/// (Q8_0 only for the int8 kernels).
fn check_gate_up_swiglu<Q: Quant>(
    g: &Gpu,
    k: &Kernels,
    p: &Pool<Q>,
    slot_idx: &[u32],
    (x_div, input): (usize, Input),
    min_parts: usize,
    rng: &mut Rng,
) {
    let (pairs, ffn) = (slot_idx.len(), p.rows / 2);
    let x = rng.vec_f32(pairs / x_div * p.cols, -1.0, 1.0);
    let (xq, xs) = cpu::quantize_q8(&x);
    let xb = if input == Input::Xq { upload(g, &padded_q8_rows(&xq, &xs, p.cols)) } else { upload(g, &x) };
    let ib = upload(g, slot_idx);
    let y = poisoned(g, 4 * pairs * ffn);
    let (planes, v) = (p.planes(), diskformer_kernels::View::from);
    let (pairs_u, x_div_u) = (pairs as u32, x_div as u32);
    let d = match input {
        _ if Q::Q4 => k.expert_q4_gemv_gate_up_swiglu(planes, v(&xb), v(&ib), v(&y), pairs_u, x_div_u),
        Input::I8 => k.expert_q8_gemv_gate_up_swiglu_i8(planes, v(&xb), v(&ib), v(&y), pairs_u, x_div_u),
        Input::Xq => k.expert_q8_gemv_gate_up_swiglu_xq(planes, v(&xb), v(&ib), v(&y), pairs_u, x_div_u),
        Input::F32 => k.expert_q8_gemv_gate_up_swiglu(planes, v(&xb), v(&ib), v(&y), pairs_u, x_div_u),
    }
    .unwrap();
    assert!(d.parts() >= min_parts, "expected >= {min_parts} pool parts, got {}", d.parts());
    run(g, &[&d]);
    let (gate_up, mag) = match input {
        Input::I8 => Q::gemv_i8(p, slot_idx, &x, x_div),
        Input::Xq => (Q::gemv_xq(p, slot_idx, (&xq, &xs), x_div), p.magnitude(slot_idx, &x, x_div)),
        Input::F32 => (p.reference(slot_idx, &x, x_div), p.magnitude(slot_idx, &x, x_div)),
    };
    let want = cpu::silu_mul(&gate_up, ffn);
    // Tolerance: each of gate and up within the GEMV's 2e-6·Σ|w·x| (mag); silu's slope is at most
    // 1.1 in magnitude, so the product moves by 1.1·|u|·δg + |silu(g)|·δu, plus silu_mul's own 2e-6
    // relative: 2e-6 times the scale below (plus 1e-9 absolute).
    let scale: Vec<f32> = (0..pairs * ffn)
        .map(|i| {
            let (pair, j) = (i / ffn, i % ffn);
            let (gi, ui) = (pair * p.rows + j, pair * p.rows + ffn + j);
            let (gv, uv) = (gate_up[gi], gate_up[ui]);
            let silu = gv / (1.0 + (-gv).exp());
            1.1 * uv.abs() * mag[gi] + silu.abs() * mag[ui] + want[i].abs()
        })
        .collect();
    let got = read_n::<f32>(g, &y, pairs * ffn);
    let what = format!(
        "{} swiglu out {}x{} pairs {pairs} sg {} parts {}",
        d.kernel().name(),
        p.rows,
        p.cols,
        k.subgroups(),
        d.parts()
    );
    assert_close(&what, &got, &want, &scale, 1e-9, 2e-6);
}

#[test]
fn moe_combine_norm_rows() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(65);
    for (hidden, k, t) in [(2048usize, 8usize, 1usize), (2048, 8, 3), (100, 3, 2), (12, 1, 1), (2052, 9, 2)] {
        let experts = rng.vec_f32(t * k * hidden, -2.0, 2.0);
        let weights = rng.vec_f32(t * k, 0.01, 0.3);
        let residual = rng.vec_f32(t * hidden, -5.0, 5.0);
        let norm = rng.vec_f32(hidden, 0.5, 1.5);
        let (eb, wb, rb, nb) =
            (upload(g, &experts), upload(g, &weights), upload(g, &residual), upload(g, &norm));
        let (out, normed) = (poisoned(g, 4 * t * hidden), poisoned(g, 4 * t * hidden));
        let p = MoeCombineNormParams { hidden: hidden as u32, k: k as u32, tokens: t as u32, eps: 1e-6 };
        let v = diskformer_kernels::View::from;
        let d =
            g.kernels.moe_combine_norm(v(&eb), v(&wb), v(&rb), v(&nb), v(&out), v(&normed), None, p).unwrap();
        run(g, &[&d]);
        let (want, want_n) = cpu::moe_combine_norm(&experts, &weights, &residual, &norm, (hidden, k), 1e-6);
        // Tolerance: out as moe_combine_order (same operations and order, multiply-adds may fuse);
        // normed as add_rms_norm_rows.
        let scale: Vec<f32> = (0..t * hidden)
            .map(|i| {
                let (tt, h) = (i / hidden, i % hidden);
                residual[i].abs()
                    + (0..k)
                        .map(|j| (experts[(tt * k + j) * hidden + h] * weights[tt * k + j]).abs())
                        .sum::<f32>()
            })
            .collect();
        let what = format!("moe_combine_norm H={hidden} k={k} T={t}");
        assert_close(&what, &read_n::<f32>(g, &out, t * hidden), &want, &scale, 0.0, 1e-6);
        assert_close(&what, &read_n::<f32>(g, &normed, t * hidden), &want_n, &abs_of(&want_n), 1e-7, 4e-6);
    }
}

/// The routed gate‖up (`expert_q8_gemv_gate_up_swiglu_routed`, on a quantised input `_xq_routed`) against
/// `router_topk_slots` then the slot-indexed gate‖up it replaces: the same picks, weights and slots bit for
/// bit (the same top-k operations), and the same activations bit for bit (the same rows from the same
/// slots). Ties in the logits, E = 128 (the model's, one expert a lane), 256 (two a lane in the
/// quantised kernel's 128-lane workgroups) and 60, one and two tokens, a pool split over bindings (every
/// part's first row block writes the picks); and the refusals of k over 32 and a layer past the table.
#[test]
fn routed_gate_up_matches_router_then_gemv() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(71);
    let (real, odd) = (pool(g, &mut rng, 10, 1536, 2048), pool(g, &mut rng, 3, 64, 96));
    let split = Kernels::new(&g.ctx).with_max_binding(7 << 20);
    let cases: [(&Kernels, &Pool, usize, usize, usize, usize); 6] = [
        (&g.kernels, &real, 128, 8, 1, 1),
        (&g.plain, &real, 128, 8, 2, 1),
        (&split, &real, 128, 8, 1, 5),
        (&g.kernels, &real, 256, 32, 1, 1),
        (&g.kernels, &odd, 60, 4, 1, 1),
        (&g.plain, &odd, 7, 7, 1, 1),
    ];
    for (k, p, experts, top_k, t, min_parts) in cases {
        let mut logits = rng.vec_f32(t * experts, -4.0, 4.0);
        for row in logits.chunks_mut(experts) {
            // A tie at the top and one across the k-th place: the lower index wins both.
            let n = row.len();
            (row[1], row[n - 1]) = (9.0, 9.0);
            let kth = row.iter().copied().fold(f32::MIN, f32::max).min(4.0);
            (row[2], row[n - 2]) = (kth, kth);
        }
        // Three layers of `experts` entries into the pool's slots; this is the middle one.
        let table: Vec<u32> =
            (0..3 * experts as u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 7) % p.slots as u32).collect();
        let (base, entries) = (experts as u32, table.len() as u32);
        let (lb, tb) = (upload(g, &logits), upload(g, &table));
        let pairs = t * top_k;
        let x = rng.vec_f32(t * p.cols, -1.0, 1.0);
        let (xq, xs) = cpu::quantize_q8(&x);
        let (xb, xqb) = (upload(g, &x), upload(g, &padded_q8_rows(&xq, &xs, p.cols)));
        let ffn = p.rows / 2;
        for quantised in [false, true] {
            let v = diskformer_kernels::View::from;
            let out = RoutedOutputs::new(g, pairs, pairs * ffn);
            let (e, kk, tt) = (experts as u32, top_k as u32, t as u32);
            let router = out.router(k, (&lb, &tb), (e, kk, tt), (base, entries));
            let route = out.route((&lb, &tb), e, (base, entries));
            let (want_slots, want_act, act) = (&out.want[2], &out.want[3], &out.got[3]);
            let (gemv, routed) = if quantised {
                (
                    k.expert_q8_gemv_gate_up_swiglu_xq(
                        p.planes(),
                        v(&xqb),
                        v(want_slots),
                        v(want_act),
                        kk * tt,
                        kk,
                    ),
                    k.expert_q8_gemv_gate_up_swiglu_xq_routed(p.planes(), v(&xqb), route, v(act), (tt, kk)),
                )
            } else {
                (
                    k.expert_q8_gemv_gate_up_swiglu(
                        p.planes(),
                        v(&xb),
                        v(want_slots),
                        v(want_act),
                        kk * tt,
                        kk,
                    ),
                    k.expert_q8_gemv_gate_up_swiglu_routed(p.planes(), v(&xb), route, v(act), (tt, kk)),
                )
            };
            let (gemv, routed) = (gemv.unwrap(), routed.unwrap());
            assert!(
                routed.parts() >= min_parts,
                "expected >= {min_parts} pool parts, got {}",
                routed.parts()
            );
            run(g, &[&router, &gemv, &routed]);
            let what = format!(
                "{} E={experts} k={top_k} T={t} {}x{} sg {} parts {}",
                routed.kernel().name(),
                p.rows,
                p.cols,
                k.subgroups(),
                routed.parts()
            );
            out.assert_same(g, &what);
            // And the picks are the reference's (the tie across the k-th place to the lower index).
            assert_eq!(
                read_n::<u32>(g, &out.got[0], pairs),
                cpu::router_topk(&logits, experts, top_k).0,
                "{what}"
            );
        }
    }
    // Refusals: k over 32, and the layer's entries past the table.
    let (lb, tb, out) = (upload(g, &[0.5f32; 64]), upload(g, &[0u32; 64]), poisoned(g, 4 * 64 * 768));
    let xb = upload(g, &[0.5f32; 2048]);
    let v = diskformer_kernels::View::from;
    let route = |base, experts| diskformer_kernels::Route {
        logits: v(&lb),
        table: v(&tb),
        table_range: (base, 64),
        experts,
        ids: v(&out),
        weights: v(&out),
        slots: v(&out),
    };
    let err =
        |r, kk| g.kernels.expert_q8_gemv_gate_up_swiglu_routed(real.planes(), v(&xb), r, v(&out), (1, kk));
    assert!(err(route(0, 64), 33).unwrap_err().to_string().contains("k <= min(32"));
    assert!(err(route(32, 40), 8).unwrap_err().to_string().contains("run past the table"));
}

/// `residual_join` (the CPU tier's sum onto the residual after the fused combine) against its CPU
/// reference: rows that do not fill a block of 4, two tokens, the next norm's inputs written with `finish`
/// and left untouched without it.
#[test]
fn residual_join_adds_the_sum_and_rewrites_the_norm_inputs() {
    use diskformer_kernels::JoinOut;
    let g = gpu_or_skip!();
    let mut rng = Rng::new(331);
    for (rows, tokens) in [(42, 2), (2048, 1)] {
        let residual = rng.vec_f32(tokens * rows, -5.0, 5.0);
        let sum = rng.vec_f32(tokens * rows, -1.0, 1.0);
        let next_norm = rng.vec_f32(rows, 0.5, 1.5);
        let (want, want_scaled, want_squares) = cpu::residual_join(&residual, &sum, &next_norm);
        let blocks = combine_squares(rows as u32) as usize;
        for finish in [true, false] {
            let (y, sb, nb) = (upload(g, &residual), upload(g, &sum), upload(g, &next_norm));
            let (scaled, squares) = (poisoned(g, 4 * tokens * rows), poisoned(g, 4 * tokens * blocks));
            let v = diskformer_kernels::View::from;
            let out = JoinOut {
                residual: v(&y),
                next_norm: v(&nb),
                scaled: v(&scaled),
                squares: v(&squares),
                finish,
            };
            run(g, &[&g.kernels.residual_join(v(&sb), out, rows as u32, tokens as u32).unwrap()]);
            let what = format!("residual_join {rows} rows, {tokens} tokens, finish {finish}");
            // One rounding of a sum: bit for bit as the reference's f32 add.
            assert_eq!(read_n::<f32>(g, &y, tokens * rows), want, "{what}");
            let (got_scaled, got_squares) =
                (read_n::<u32>(g, &scaled, tokens * rows), read_n::<u32>(g, &squares, tokens * blocks));
            if finish {
                let scaled_f: Vec<f32> = got_scaled.iter().map(|&b| f32::from_bits(b)).collect();
                assert_eq!(scaled_f, want_scaled, "{what}: scaled");
                let squares_f: Vec<f32> = got_squares.iter().map(|&b| f32::from_bits(b)).collect();
                let scale: Vec<f32> = want_squares.iter().map(|v| v.abs()).collect();
                assert_close(&format!("{what}: squares"), &squares_f, &want_squares, &scale, 1e-6, 1e-6);
            } else {
                assert!(got_scaled.iter().chain(&got_squares).all(|&b| b == u32::MAX), "{what}: untouched");
            }
        }
    }
}
