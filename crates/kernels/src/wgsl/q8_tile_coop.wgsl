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
// and brings 2 of the 256 vec4s of the 32 pairs' inputs, 8 lanes to a pair's 128 bytes (coop_x: [pairs][10
// vec4<f16>], padded likewise); then subgroup s multiplies pairs 0..31 by its rows 32s..32s + 31 as four
// 16 x 16 x 16 products a 16-column half (A = inputs, B = weights, C in f32): C[pair][row] += x[pair][k]
// w[row][k]. Global loads run two stages ahead (two register sets, the loop taken two stages a turn).
// On the H200 (crates/kernels/BENCHMARKS.md): reading the inputs 8 lanes a pair instead of a lane a pair
// (32 rows a load) took gate-up from 700 to 626 us, and loading two stages ahead to 566-577 (down 353 to 296);
// stages of two blocks in 27 KB were a third slower than one, and 4 halves a staging write slower than one.
// Rounding: each weight is q * d rounded once to f16 (q * d is exact in f32), each input is rounded to f16,
// and products are summed in f32 (cpu::q8_gemv_f16 computes the same values in f64). 15 KB of workgroup
// memory.

@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>; // input rows, f32

// Elements of `x` a row: cols f32, 4 a vec4.
fn x_row_len() -> u32 {
    return p.cols / 4u;
}

var<workgroup> coop_w: array<f16, 4352>; // [32 columns][136] scaled weights
var<workgroup> coop_x: array<vec4<f16>, 320>; // [32 pairs][10] inputs, A row-major
var<workgroup> coop_xrow: array<vec2<u32>, 32>; // pairs' input rows and whether live
var<workgroup> coop_c: array<f32, 1024>; // [4 subgroups][16 rows][16 tokens] products on their way out

// The four f16 values q[c] * s of word w at columns c0..c0 + 3 of row li.
fn coop_put_w(li: u32, c0: u32, w: u32, s: f32) {
    let v = i8x4(w) * s;
    coop_w[c0 * 136u + li] = f16(v.x);
    coop_w[(c0 + 1u) * 136u + li] = f16(v.y);
    coop_w[(c0 + 2u) * 136u + li] = f16(v.z);
    coop_w[(c0 + 3u) * 136u + li] = f16(v.w);
}

// One stage's global loads for a lane: block b of plane row `lrow` (its two vec4s of int8 and its scale,
// 0 past the last block) and the lane's vec4 `ch` of that block of input rows `ra` and `rb` (vec4 index,
// live), zeros where not live.
struct CoopStage {
    w0: vec4<u32>,
    w1: vec4<u32>,
    s: f32,
    xa: vec4<f32>,
    xb: vec4<f32>,
}

fn coop_load(lrow: u32, b: u32, ra: vec2<u32>, rb: vec2<u32>, ch: u32) -> CoopStage {
    let nblk = p.cols / 32u;
    let nb = min(b, nblk - 1u);
    let w = (lrow * nblk + nb) * 2u;
    var st: CoopStage;
    st.w0 = q[w];
    st.w1 = q[w + 1u];
    st.s = select(0.0, f32(scales[lrow * nblk + nb]), b < nblk);
    st.xa = select(vec4<f32>(0.0), x[ra.x + 8u * nb + ch], ra.y != 0u);
    st.xb = select(vec4<f32>(0.0), x[rb.x + 8u * nb + ch], rb.y != 0u);
    return st;
}

// A stage into workgroup memory: lane li's row li of weights, and its input vec4s of pairs pa and 16 + pa.
fn coop_put(li: u32, pa: u32, ch: u32, st: CoopStage) {
    coop_put_w(li, 0u, st.w0.x, st.s);
    coop_put_w(li, 4u, st.w0.y, st.s);
    coop_put_w(li, 8u, st.w0.z, st.s);
    coop_put_w(li, 12u, st.w0.w, st.s);
    coop_put_w(li, 16u, st.w1.x, st.s);
    coop_put_w(li, 20u, st.w1.y, st.s);
    coop_put_w(li, 24u, st.w1.z, st.s);
    coop_put_w(li, 28u, st.w1.w, st.s);
    coop_x[pa * 10u + ch] = vec4<f16>(st.xa);
    coop_x[(16u + pa) * 10u + ch] = vec4<f16>(st.xb);
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

// Lane li brings row `lrow`'s weights (the plane row for the tile's row li, clamped by the caller) and
// `xrow`, the input row of the tile's pair li % 32 (a vec4 index; zeros unless `live`), which the lanes
// share through coop_xrow. Call from uniform control flow (barriers and subgroup-wide products).
fn tile_product(li: u32, lrow: u32, xrow: u32, live: bool) -> array<vec4<f32>, 8> {
    let nblk = p.cols / 32u;
    let sg = li / 32u;
    var c00 = coop_mat16x16<f32, C>(); // tokens 0..15 x rows 32sg..32sg + 15
    var c01 = coop_mat16x16<f32, C>(); // tokens 0..15 x rows 32sg + 16..
    var c10 = coop_mat16x16<f32, C>(); // tokens 16..31 x rows 32sg..
    var c11 = coop_mat16x16<f32, C>(); // tokens 16..31 x rows 32sg + 16..
    // Lane li brings vec4 li % 8 of pairs li / 8 and 16 + li / 8 a block (their rows through coop_xrow).
    if (li < 32u) {
        coop_xrow[li] = vec2<u32>(xrow, u32(live));
    }
    workgroupBarrier();
    let ch = li % 8u;
    let pa = li / 8u;
    let ra = coop_xrow[pa];
    let rb = coop_xrow[16u + pa];
    // Two register sets, a stage apart: each stage's loads are issued two stages before it is staged.
    var sa = coop_load(lrow, 0u, ra, rb, ch);
    var sb = coop_load(lrow, 1u, ra, rb, ch);
    for (var kb = 0u; kb < nblk; kb += 2u) {
        workgroupBarrier(); // the last stage's products have read the tiles
        coop_put(li, pa, ch, sa);
        workgroupBarrier();
        sa = coop_load(lrow, kb + 2u, ra, rb, ch);
        for (var h = 0u; h < 2u; h++) {
            // A (pair m, column k) at coop_x[m * 10 + k / 4]: row-major; B (column k, row n) at
            // coop_w[k * 136 + n]: row-major.
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&coop_x[4u * h], 10u);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&coop_x[160u + 4u * h], 10u);
            let b0 = coopLoadT<coop_mat16x16<f16, B>>(&coop_w[h * 2176u + 32u * sg], 136u);
            let b1 = coopLoadT<coop_mat16x16<f16, B>>(&coop_w[h * 2176u + 32u * sg + 16u], 136u);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
        }
        // Stage kb + 1: with an odd block count the last one is past the end, of scale 0 (the same code
        // whatever the count: the products must stay in uniform control flow).
        workgroupBarrier();
        coop_put(li, pa, ch, sb);
        workgroupBarrier();
        sb = coop_load(lrow, kb + 3u, ra, rb, ch);
        for (var h = 0u; h < 2u; h++) {
            // A (pair m, column k) at coop_x[m * 10 + k / 4]: row-major; B (column k, row n) at
            // coop_w[k * 136 + n]: row-major.
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&coop_x[4u * h], 10u);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&coop_x[160u + 4u * h], 10u);
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
