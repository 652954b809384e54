// The product of the grouped expert block GEMM on tensor cores (expert_q8_0_block_gemm_coop:
// expert_kquant_gemm.wgsl with this in place of kquant_tile.wgsl, before the block helper, whose
// `tile_load` decodes and scales a row's 16 columns a step). Same contract as kquant_tile.wgsl's
// `tile_product` with 64 pairs: a workgroup of 256 lanes takes 128 rows x 64 pairs, lane li returns rows
// `tile_rows(li)`.. x pairs `tile_tokens(li)`... It needs 32-lane subgroups (the launcher checks), so
// subgroup s is lanes 32s..32s + 31, and its lanes' products are the tile's rows 32 (s % 4).. x pairs
// 32 (s / 4)..: four 16 x 16 products, as q8_tile_coop.wgsl's subgroups compute theirs.
//
// A stage is 32 columns: lane li decodes 16 of them of the tile's row li % 128 (the first 16 for li < 128,
// the last for the rest) times their scale to f16 (coop_w: [column][rows], rows padded to 136 as in
// q8_tile_coop.wgsl), and brings 2 of the 512 vec4s of the 64 pairs' inputs, 4 lanes to a pair's 128 bytes
// (coop_x: [pairs][10 vec4<f16>]); then each subgroup multiplies its 32 pairs by its 32 rows a 16-column
// half at a time (A = inputs, B = weights, C in f32). Global loads run a stage ahead. The weights are read
// in device memory only (the launcher refuses a part in host memory: kquant_tile.wgsl's whole-run reads
// are not here).
// Rounding: each weight is tile_load's f32 value rounded once to f16 (for Q8_0, q * d, exact in f32), each
// input is rounded to f16, products summed in f32 (cpu::expert_kquant_gemv_f16). 22 KB of workgroup memory.

@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>; // input rows, f32

// Elements of `x` a row: cols f32, 4 a vec4.
fn x_row_len() -> u32 {
    return p.cols / 4u;
}

var<workgroup> coop_w: array<f16, 4352>; // [32 columns][136] scaled weights
var<workgroup> coop_x: array<vec4<f16>, 640>; // [64 pairs][10] inputs, A row-major
var<workgroup> coop_xrow: array<vec2<u32>, 64>; // pairs' input rows and whether live
var<workgroup> coop_c: array<f32, 2048>; // [8 subgroups][16 rows][16 tokens] products on their way out

// Rows 8 * rg .. of the lane's products, rg = 4 * (l / 32) + (l % 32) / 8 for l = li % 128 (as
// kquant_tile.wgsl's).
fn tile_rows(li: u32) -> u32 {
    let l = li % 128u;
    return 8u * (4u * (l / 32u) + (l % 32u) / 8u);
}

// Tokens 4 * tg .. of the lane's products, tg = 8 * (li / 128) + li % 8 (as kquant_tile.wgsl's).
fn tile_tokens(li: u32) -> u32 {
    return 32u * (li / 128u) + 4u * (li % 8u);
}

// The tile's token whose input row lane li names to tile_product.
fn tile_pair(li: u32) -> u32 {
    return li % 64u;
}

// kquant_tile.wgsl's description of the tile's rows, for its whole-run reads from host memory: unused here.
struct TileRows {
    base: u32,
    row_bytes: u32,
    rows: u32,
}

// One stage's global loads for a lane: 16 scaled weights of its row and its two vec4s of inputs (zeros
// where the pair is not live).
struct CoopStage {
    w: array<vec4<f32>, 4>,
    xa: vec4<f32>,
    xb: vec4<f32>,
}

// Stage `s` (columns 32 s .. 32 s + 31) for lane li: the row at byte `lrow`'s step 2 s + li / 128, and
// vec4s `ch` and `ch + 4` of the stage's columns of input row `xr` (live where xr.y != 0).
fn coop_load(li: u32, lrow: u32, s: u32, xr: vec2<u32>, ch: u32) -> CoopStage {
    let ns = min(s, p.cols / 32u - 1u);
    var st: CoopStage;
    st.w = tile_load(lrow, 2u * ns + li / 128u);
    st.xa = select(vec4<f32>(0.0), x[xr.x + 8u * ns + ch], xr.y != 0u);
    st.xb = select(vec4<f32>(0.0), x[xr.x + 8u * ns + ch + 4u], xr.y != 0u);
    return st;
}

// A stage into workgroup memory: lane li's 16 weights into columns 16 (li / 128).. of row li % 128, its
// inputs into pair pa's vec4s ch and ch + 4.
fn coop_put(li: u32, pa: u32, ch: u32, st: CoopStage) {
    let c0 = 16u * (li / 128u);
    let r = li % 128u;
    for (var i = 0u; i < 4u; i++) {
        let v = st.w[i];
        coop_w[(c0 + 4u * i) * 136u + r] = f16(v.x);
        coop_w[(c0 + 4u * i + 1u) * 136u + r] = f16(v.y);
        coop_w[(c0 + 4u * i + 2u) * 136u + r] = f16(v.z);
        coop_w[(c0 + 4u * i + 3u) * 136u + r] = f16(v.w);
    }
    coop_x[pa * 10u + ch] = vec4<f16>(st.xa);
    coop_x[pa * 10u + ch + 4u] = vec4<f16>(st.xb);
}

// Lane li's 32 products from a staged 16 x 16 product (coop_c at `base`, C(token m, row n) at n * 16 + m):
// tokens m0..m0 + 3, rows n0..n0 + 7, laid out as kquant_tile.wgsl returns them.
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

// Lane li brings the row at byte `lrow` (the tile's row li % 128, clamped by the caller) and, for li < 64,
// `xrow`, the input row of the tile's pair li (a vec4 index; zeros unless `live`), which the lanes share
// through coop_xrow. `tile` and `busy` are kquant_tile.wgsl's (unused: every subgroup takes part in the
// products). Call from uniform control flow (barriers and subgroup-wide products).
fn tile_product(li: u32, lrow: u32, tile: TileRows, xrow: u32, live: bool, busy: bool) -> array<vec4<f32>, 8> {
    let nstage = p.cols / 32u;
    let sg = li / 32u;
    let rb = 32u * (sg % 4u); // the subgroup's rows
    let pb = 32u * (sg / 4u); // the subgroup's pairs
    var c00 = coop_mat16x16<f32, C>(); // pairs pb..pb + 15 x rows rb..rb + 15
    var c01 = coop_mat16x16<f32, C>(); // pairs pb.. x rows rb + 16..
    var c10 = coop_mat16x16<f32, C>(); // pairs pb + 16.. x rows rb..
    var c11 = coop_mat16x16<f32, C>(); // pairs pb + 16.. x rows rb + 16..
    if (li < 64u) {
        coop_xrow[li] = vec2<u32>(xrow, u32(live));
    }
    workgroupBarrier();
    // Lane li brings vec4s li % 4 and li % 4 + 4 of pair li / 4 a stage.
    let ch = li % 4u;
    let pa = li / 4u;
    let xr = coop_xrow[pa];
    var st = coop_load(li, lrow, 0u, xr, ch);
    for (var s = 0u; s < nstage; s++) {
        workgroupBarrier(); // the last stage's products have read the tiles
        coop_put(li, pa, ch, st);
        workgroupBarrier();
        st = coop_load(li, lrow, s + 1u, xr, ch);
        for (var h = 0u; h < 2u; h++) {
            // A (pair m, column k) at coop_x[m * 10 + k / 4]: row-major; B (column k, row n) at
            // coop_w[k * 136 + n]: row-major.
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&coop_x[pb * 10u + 4u * h], 10u);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&coop_x[(pb + 16u) * 10u + 4u * h], 10u);
            let b0 = coopLoadT<coop_mat16x16<f16, B>>(&coop_w[h * 2176u + rb], 136u);
            let b1 = coopLoadT<coop_mat16x16<f16, B>>(&coop_w[h * 2176u + rb + 16u], 136u);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
        }
    }
    // Each lane's products lie in one of its subgroup's four: pairs tile_tokens(li) - pb (half m / 16),
    // rows tile_rows(li) - rb (half n / 16). Out through coop_c one product at a time.
    let m = tile_tokens(li) - pb;
    let n = tile_rows(li) - rb;
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
