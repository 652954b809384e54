// The product of the expert GEMM on tensor cores (expert_q8_gemm_coop: expert_q8_gemm_tiled.wgsl with this
// `tile_product`, f32 inputs; appended after that file, which declares `p.cols`, `q: array<vec4<u32>>` and
// `scales: array<f16>`, and before q8_helpers.wgsl). Same contract as q8_tile.wgsl's: a workgroup of 128
// lanes takes 128 rows x 32 pairs (a group holds at most 32), and lane li returns rows `tile_rows(li)`.. x
// pairs `tile_tokens(li)`... It needs 32-lane subgroups (the launchers check), so subgroup s is lanes
// 32s..32s + 31, and the rows of its lanes' products are the tile's rows 32s..32s + 31. (The dense GEMM,
// q8_gemm_coop.wgsl, has tiles of 64 tokens and writes its products out itself.)
//
// A stage is one Q8_0 block (32 columns): lane li decodes row li's 32 weights times their scale to f16
// (coop_w: [column][rows], rows padded to 136 so that the 16-byte rows of a tile load fall in distinct banks)
// and 8 of pair li % 32's inputs (coop_x: [column][pairs], padded to 40); then subgroup s multiplies pairs
// 0..31 by its rows 32s..32s + 31 as four 16 x 16 x 16 products a 16-column half (A = inputs, B = weights, C
// in f32): C[pair][row] += x[pair][k] w[row][k]. (On the H200 this beat stages of two blocks in 27 KB of
// workgroup memory by a third, probably as fewer of those workgroups fit an SM; crates/kernels/BENCHMARKS.md.)
// Rounding: each weight is q * d rounded once to f16 (q * d is exact in f32), each input is rounded to f16,
// and products are summed in f32 (cpu::q8_gemv_f16 computes the same values in f64).
// Staging writes put consecutive lanes on consecutive halves (no bank conflicts); step s + 1's global loads
// are issued before step s's products, as in q8_tile.wgsl. 15 KB of workgroup memory.

@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>; // input rows, f32

// Elements of `x` a row: cols f32, 4 a vec4.
fn x_row_len() -> u32 {
    return p.cols / 4u;
}

var<workgroup> coop_w: array<f16, 4352>; // [32 columns][136] scaled weights
var<workgroup> coop_x: array<f16, 1280>; // [32 columns][40] inputs
var<workgroup> coop_c: array<f32, 1024>; // [4 subgroups][16 rows][16 tokens] products on their way out

// The four f16 values q[c] * s of word w at columns c0..c0 + 3 of row li.
fn coop_put_w(li: u32, c0: u32, w: u32, s: f32) {
    let v = i8x4(w) * s;
    coop_w[c0 * 136u + li] = f16(v.x);
    coop_w[(c0 + 1u) * 136u + li] = f16(v.y);
    coop_w[(c0 + 2u) * 136u + li] = f16(v.z);
    coop_w[(c0 + 3u) * 136u + li] = f16(v.w);
}

fn coop_put_x(lt: u32, c0: u32, v: vec4<f32>) {
    coop_x[c0 * 40u + lt] = f16(v.x);
    coop_x[(c0 + 1u) * 40u + lt] = f16(v.y);
    coop_x[(c0 + 2u) * 40u + lt] = f16(v.z);
    coop_x[(c0 + 3u) * 40u + lt] = f16(v.w);
}

// Lane li's 32 products from a staged 16 x 16 product (coop_c at `base`, C(token m, row n) at n * 16 + m):
// tokens m0..m0 + 3, rows n0..n0 + 7, laid out as q8_tile.wgsl returns them.
fn coop_take(base: u32, m0: u32, n0: u32) -> array<vec4<f32>, 8> {
    var out: array<vec4<f32>, 8>;
    for (var j = 0u; j < 4u; j++) {
        for (var h = 0u; h < 2u; h++) {
            let n = base + (n0 + 4u * h) * 16u + m0 + j;
            out[2u * j + h] = vec4<f32>(coop_c[n], coop_c[n + 16u], coop_c[n + 32u], coop_c[n + 48u]);
        }
    }
    return out;
}

// Lane li brings row `lrow`'s weights (the plane row for the tile's row li, clamped by the caller) and 8
// inputs a block of input row `xrow` (a vec4 index, the tile's token li % 32; zeros unless `live`; columns
// 8 * (li / 32)..). Call from uniform control flow (barriers and subgroup-wide products).
fn tile_product(li: u32, lrow: u32, xrow: u32, live: bool) -> array<vec4<f32>, 8> {
    let nblk = p.cols / 32u;
    let lt = li % 32u;
    let sg = li / 32u;
    let wrow = lrow * nblk * 2u;
    var c00 = coop_mat16x16<f32, C>(); // tokens 0..15 x rows 32sg..32sg + 15
    var c01 = coop_mat16x16<f32, C>(); // tokens 0..15 x rows 32sg + 16..
    var c10 = coop_mat16x16<f32, C>(); // tokens 16..31 x rows 32sg..
    var c11 = coop_mat16x16<f32, C>(); // tokens 16..31 x rows 32sg + 16..
    var w0 = q[wrow];
    var w1 = q[wrow + 1u];
    var s = f32(scales[lrow * nblk]);
    var xa = select(vec4<f32>(0.0), x[xrow + 2u * sg], live);
    var xb = select(vec4<f32>(0.0), x[xrow + 2u * sg + 1u], live);
    for (var kb = 0u; kb < nblk; kb++) {
        workgroupBarrier(); // the last stage's products have read the tiles
        coop_put_w(li, 0u, w0.x, s);
        coop_put_w(li, 4u, w0.y, s);
        coop_put_w(li, 8u, w0.z, s);
        coop_put_w(li, 12u, w0.w, s);
        coop_put_w(li, 16u, w1.x, s);
        coop_put_w(li, 20u, w1.y, s);
        coop_put_w(li, 24u, w1.z, s);
        coop_put_w(li, 28u, w1.w, s);
        coop_put_x(lt, 8u * sg, xa);
        coop_put_x(lt, 8u * sg + 4u, xb);
        workgroupBarrier();
        let nb = min(kb + 1u, nblk - 1u);
        w0 = q[wrow + 2u * nb];
        w1 = q[wrow + 2u * nb + 1u];
        s = f32(scales[lrow * nblk + nb]);
        xa = select(vec4<f32>(0.0), x[xrow + 8u * nb + 2u * sg], live);
        xb = select(vec4<f32>(0.0), x[xrow + 8u * nb + 2u * sg + 1u], live);
        for (var h = 0u; h < 2u; h++) {
            // A (token m, column k) at coop_x[k * 32 + m]: column-major; B (column k, row n) at
            // coop_w[k * 128 + n]: row-major.
            let a0 = coopLoad<coop_mat16x16<f16, A>>(&coop_x[h * 640u], 40u);
            let a1 = coopLoad<coop_mat16x16<f16, A>>(&coop_x[h * 640u + 16u], 40u);
            let b0 = coopLoadT<coop_mat16x16<f16, B>>(&coop_w[h * 2176u + 32u * sg], 136u);
            let b1 = coopLoadT<coop_mat16x16<f16, B>>(&coop_w[h * 2176u + 32u * sg + 16u], 136u);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
        }
    }
    // Each lane's products lie in one of its subgroup's four: tokens tile_tokens(li) (half m / 16), rows
    // tile_rows(li) - 32sg (half n / 16). Out through coop_c one product at a time.
    let m = tile_tokens(li);
    let n = tile_rows(li) - 32u * sg;
    let mine = 2u * (m / 16u) + n / 16u;
    let base = 256u * sg;
    var out: array<vec4<f32>, 8>;
    coopStore(c00, &coop_c[base], 16u);
    workgroupBarrier();
    if (mine == 0u) {
        out = coop_take(base, m % 16u, n % 16u);
    }
    workgroupBarrier();
    coopStore(c01, &coop_c[base], 16u);
    workgroupBarrier();
    if (mine == 1u) {
        out = coop_take(base, m % 16u, n % 16u);
    }
    workgroupBarrier();
    coopStore(c10, &coop_c[base], 16u);
    workgroupBarrier();
    if (mine == 2u) {
        out = coop_take(base, m % 16u, n % 16u);
    }
    workgroupBarrier();
    coopStore(c11, &coop_c[base], 16u);
    workgroupBarrier();
    if (mine == 3u) {
        out = coop_take(base, m % 16u, n % 16u);
    }
    return out;
}
