// The product of the K-quant tiled GEMMs (kquant_gemm, expert_kquant_gemm; appended after their own file,
// which declares `p.cols`, the blocks `w: array<u32>` and `TILE_PAIRS`, 32 or 64; the input `x` is declared
// here), before the block helper (kquant_q4_k.wgsl, kquant_q6_k.wgsl), whose `tile_load` decodes and scales
// a row's 16 columns a step. As q8_tile.wgsl's `tile_product` (its layout and lane roles), with the weights
// scaled as they are decoded: a workgroup of 4 * TILE_PAIRS lanes takes 128 rows x TILE_PAIRS tokens
// (pairs), 16 columns at a time, each weight read once per TILE_PAIRS tokens. Lanes 0..127 load the rows;
// with 64 pairs lanes 128..255 take pairs 32..63 of the same rows, so a weight read serves twice the pairs
// at the same registers a lane.

@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>; // input rows, f32

// Elements of `x` a row: cols f32, 4 a vec4.
fn x_row_len() -> u32 {
    return p.cols / 4u;
}

const TILE_K: u32 = 16u;
// Vec4s of a column of tile_x: 4 tokens each.
const TILE_X4: u32 = TILE_PAIRS / 4u;

var<workgroup> tile_w: array<vec4<f32>, 512>; // [TILE_K][32] 4 rows each
var<workgroup> tile_x: array<vec4<f32>, TILE_K * TILE_X4>; // [TILE_K][TILE_X4] 4 tokens each

// Rows 8 * rg .. of the lane's products, rg = 4 * (l / 32) + (l % 32) / 8 for l = li % 128.
fn tile_rows(li: u32) -> u32 {
    let l = li % 128u;
    return 8u * (4u * (l / 32u) + (l % 32u) / 8u);
}

// Tokens 4 * tg .. of the lane's products, tg = 8 * (li / 128) + li % 8.
fn tile_tokens(li: u32) -> u32 {
    return 32u * (li / 128u) + 4u * (li % 8u);
}

// The tile's token whose inputs lane li loads.
fn tile_pair(li: u32) -> u32 {
    return li % TILE_PAIRS;
}

// The tile's rows: `base` the byte where its first row starts, `row_bytes` apart, `rows` of them (<= 128;
// 0: none read ahead, for weights in device memory).
struct TileRows {
    base: u32,
    row_bytes: u32,
    rows: u32,
}

// Reads run `run` (256 columns, BLOCK_BYTES a row) of every row of the tile, each warp's lanes 32
// consecutive words of a row at a time, and returns their xor (kept by the caller, so the reads stay).
// `tile_load` reads a row's run a few bytes a step, each warp from 32 rows at once: sectors that, from
// host memory over the bus, travel as requests of 32 bytes each, about half the bus's rate; read whole
// lines first, the steps after find them in the L2 cache.
fn tile_touch(li: u32, t: TileRows, run: u32) -> u32 {
    let lane = li % 32u;
    let warps = TILE_PAIRS / 8u;
    var seen = 0u;
    for (var r = li / 32u; r < t.rows; r += warps) {
        let at = t.base + r * t.row_bytes + run * BLOCK_BYTES;
        let words = (at % 4u + BLOCK_BYTES + 3u) / 4u;
        for (var o = lane; o < words; o += 32u) {
            seen ^= w[at / 4u + o];
        }
    }
    return seen;
}

// Lane li's products: [2 * j + h] = rows tile_rows(li) + 4h .. + 3 for token tile_tokens(li) + j. Lanes
// li < 128 bring, 16 columns at a time, the weights of the row at byte `lrow` (the tile's row li, clamped by
// the caller, one of `tile`'s), and every lane 4 inputs of input row `xrow` (a vec4 index, the tile's token
// tile_pair(li); zeros unless `live`). A lane whose tokens are all past the tile's end (`busy` false) skips
// the products. Each run of 256 columns is read whole (`tile_touch`) a run ahead of its steps. Call from
// uniform control flow (it holds barriers).
fn tile_product(li: u32, lrow: u32, tile: TileRows, xrow: u32, live: bool, busy: bool) -> array<vec4<f32>, 8> {
    let nstep = p.cols / TILE_K;
    let lt = tile_pair(li);
    let lc = li / TILE_PAIRS;
    let loads_w = li < 128u;
    let rows4 = tile_rows(li) / 4u;
    let tokens4 = tile_tokens(li) / 4u;
    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    var a2 = vec4<f32>(0.0);
    var a3 = vec4<f32>(0.0);
    var a4 = vec4<f32>(0.0);
    var a5 = vec4<f32>(0.0);
    var a6 = vec4<f32>(0.0);
    var a7 = vec4<f32>(0.0);
    // Register double buffering: step s + 1's loads are issued before step s's multiply.
    let runs = p.cols / 256u;
    var seen = tile_touch(li, tile, 0u);
    var wv: array<vec4<f32>, 4>;
    if (loads_w) {
        wv = tile_load(lrow, 0u);
    }
    var xv = select(vec4<f32>(0.0), x[xrow + lc], live);
    for (var st = 0u; st < nstep; st++) {
        if (st % 16u == 0u && st / 16u + 1u < runs) {
            seen ^= tile_touch(li, tile, st / 16u + 1u);
        }
        let w0 = wv[0];
        let w1 = wv[1];
        let w2 = wv[2];
        let w3 = wv[3];
        let xb = xv;
        workgroupBarrier(); // the last step's reads are done
        for (var j = 0u; j < 4u; j++) {
            if (loads_w) {
                tile_w[j * 32u + li / 4u][li % 4u] = w0[j];
                tile_w[(4u + j) * 32u + li / 4u][li % 4u] = w1[j];
                tile_w[(8u + j) * 32u + li / 4u][li % 4u] = w2[j];
                tile_w[(12u + j) * 32u + li / 4u][li % 4u] = w3[j];
            }
            tile_x[(lc * 4u + j) * TILE_X4 + lt / 4u][lt % 4u] = xb[j];
        }
        workgroupBarrier();
        let ns = min(st + 1u, nstep - 1u);
        if (loads_w) {
            wv = tile_load(lrow, ns);
        }
        xv = select(vec4<f32>(0.0), x[xrow + ns * 4u + lc], live);
        if (busy) {
            for (var k = 0u; k < TILE_K; k++) {
                let w_lo = tile_w[k * 32u + rows4];
                let w_hi = tile_w[k * 32u + rows4 + 1u];
                let t = tile_x[k * TILE_X4 + tokens4];
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
    }
    // Never true (the columns are whole runs): the touches' words are used, so their reads are made.
    if (seen == 0x9e3779b9u && p.cols == 0u) {
        a0.x += 1.0;
    }
    return array<vec4<f32>, 8>(a0, a1, a2, a3, a4, a5, a6, a7);
}
