// The product of the tiled GEMMs on f32 inputs (q8_gemm_tiled, expert_q8_gemm_tiled, expert_q4_gemm;
// appended after their own file, which declares `p.cols`, `q: array<vec4<u32>>` and `scales: array<f16>`;
// the input `x` is declared here), and before the weights' helper, which reads and decodes a row's 16
// columns a step (`tile_word`, `tile_values`: q8_tile_weights.wgsl, q4_tile_weights.wgsl).
// A workgroup of 128 lanes takes 128 rows x 32 tokens (pairs), 16 columns at a time: tile_w[k * 32 + i] =
// the scaled weights of rows 4i..4i+3 at column k; tile_x[k * 8 + j] = the inputs of tokens 4j..4j+3 at
// column k (10 KB in all, under WebGPU's 16 KB floor). Lane li multiplies rows 8 * rg.. by tokens 4 * tg..,
// rg = 4 * (li / 32) + (li % 32) / 8 and tg = li % 8: per column two vec4 loads of weights and one of inputs
// for 32 multiply-adds, and a 32-lane group reads only 4 distinct weight vec4s and 8 consecutive input vec4s
// a load (no bank conflicts), so the loop is bound by the multiply-adds rather than workgroup memory.

@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>; // input rows, f32

// Elements of `x` a row: cols f32, 4 a vec4.
fn x_row_len() -> u32 {
    return p.cols / 4u;
}

const TILE_K: u32 = 16u;

var<workgroup> tile_w: array<vec4<f32>, 512>; // [TILE_K][32] 4 rows each
var<workgroup> tile_x: array<vec4<f32>, 128>; // [TILE_K][8] 4 tokens each

// Lane li's products: [2 * j + h] = rows 8 * rg + 4h..8 * rg + 4h + 3 (the lane's `tile_rows`) for token 4 *
// tg + j (`tile_tokens`). Lane li brings, 16 columns at a time, the weights of row `lrow` (the plane row for
// the tile's row li, clamped by the caller) and 4 inputs of input row `xrow` (a vec4 index, the tile's token
// li % 32; zeros unless `live`; columns 4 * (li / 32)..). Call from uniform control flow (it holds barriers).
fn tile_product(li: u32, lrow: u32, xrow: u32, live: bool) -> array<vec4<f32>, 8> {
    let nblk = p.cols / 32u;
    let nstep = p.cols / TILE_K;
    let lt = li % 32u;
    let lc = li / 32u;
    let rows4 = tile_rows(li) / 4u; // the vec4 index of the lane's first 4 rows in a column
    let tokens4 = tile_tokens(li) / 4u;
    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    var a2 = vec4<f32>(0.0);
    var a3 = vec4<f32>(0.0);
    var a4 = vec4<f32>(0.0);
    var a5 = vec4<f32>(0.0);
    var a6 = vec4<f32>(0.0);
    var a7 = vec4<f32>(0.0);
    // Register double buffering: step s + 1's global loads are issued before step s's multiply, so their
    // latency hides behind it (the last step loads itself again).
    var word = tile_word(lrow, 0u);
    var s = f32(scales[lrow * nblk]);
    var xv = select(vec4<f32>(0.0), x[xrow + lc], live);
    for (var st = 0u; st < nstep; st++) {
        let wv = tile_values(word, st);
        let w0 = wv[0] * s;
        let w1 = wv[1] * s;
        let w2 = wv[2] * s;
        let w3 = wv[3] * s;
        let xb = xv;
        workgroupBarrier(); // the last step's reads are done
        for (var j = 0u; j < 4u; j++) {
            tile_w[j * 32u + li / 4u][li % 4u] = w0[j];
            tile_w[(4u + j) * 32u + li / 4u][li % 4u] = w1[j];
            tile_w[(8u + j) * 32u + li / 4u][li % 4u] = w2[j];
            tile_w[(12u + j) * 32u + li / 4u][li % 4u] = w3[j];
            tile_x[(lc * 4u + j) * 8u + lt / 4u][lt % 4u] = xb[j];
        }
        workgroupBarrier();
        let ns = min(st + 1u, nstep - 1u);
        word = tile_word(lrow, ns);
        s = f32(scales[lrow * nblk + ns / 2u]);
        xv = select(vec4<f32>(0.0), x[xrow + ns * 4u + lc], live);
        for (var k = 0u; k < TILE_K; k++) {
            let w_lo = tile_w[k * 32u + rows4];
            let w_hi = tile_w[k * 32u + rows4 + 1u];
            let t = tile_x[k * 8u + tokens4];
            a0 += w_lo * t.x;
            a1 += w_hi * t.x;
            a2 += w_lo * t.y;
            a3 += w_hi * t.y;
            a4 += w_lo * t.z;
            a5 += w_hi * t.z;
            a6 += w_lo * t.w;
            a7 += w_hi * t.w;
        }
    }
    return array<vec4<f32>, 8>(a0, a1, a2, a3, a4, a5, a6, a7);
}
