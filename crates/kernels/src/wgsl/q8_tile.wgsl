// The product of the tiled Q8_0 GEMMs (q8_gemm_tiled, expert_q8_gemm_tiled; appended to both after their own
// file, which declares `p.cols`, `q: array<vec2<u32>>`, `scales: array<f16>` and `x: array<vec4<f32>>`).
// Per 32-column block: tile_w[k * 16 + i] = the scaled weights of rows 4i..4i+3 at column k; tile_x[k * 16 +
// j] = the inputs of tokens (pairs) 2j, 2j+1 at column k. A lane reads one vec4 and one vec2 per column for 8
// multiply-adds.

var<workgroup> tile_w: array<vec4<f32>, 512>;
var<workgroup> tile_x: array<vec2<f32>, 512>;

// The workgroup's 64 rows x 32 tokens over all columns, for its 256 lanes. Lane li brings, block by block, 8
// weights of its row `lrow` (the plane row for the tile's row li / 4, clamped by the caller; columns
// 8 * (li % 4)..) and 4 inputs of its token's input row `xrow` (a vec4 index, for the tile's token li / 8;
// zeros unless `live`; columns 4 * (li % 8)..). Returns the lane's products for rows 4 * (li % 16).. (4 of
// them): [0] for token 2 * (li / 16), [1] for the next. Call from uniform control flow (it holds barriers).
fn tile_gemm(li: u32, lrow: u32, xrow: u32, live: bool) -> array<vec4<f32>, 2> {
    let nblk = p.cols / 32u;
    let lr = li / 4u;
    let lk = (li % 4u) * 8u;
    let lt = li / 8u;
    let lk4 = li % 8u;
    let ri = li % 16u;
    let tj = li / 16u;
    var acc = array<vec4<f32>, 2>(vec4<f32>(0.0), vec4<f32>(0.0));
    // Register double buffering: block b + 1's global loads are issued before block b's multiply, so their
    // latency hides behind it (the last block loads itself again).
    var word = q[(lrow * p.cols + lk) / 8u];
    var s = f32(scales[lrow * nblk]);
    var xv = select(vec4<f32>(0.0), x[xrow + lk4], live);
    for (var b = 0u; b < nblk; b++) {
        let lo = i8x4(word.x) * s;
        let hi = i8x4(word.y) * s;
        let xb = xv;
        workgroupBarrier(); // the last block's reads are done
        for (var j = 0u; j < 4u; j++) {
            tile_w[(lk + j) * 16u + lr / 4u][lr % 4u] = lo[j];
            tile_w[(lk + 4u + j) * 16u + lr / 4u][lr % 4u] = hi[j];
            tile_x[(lk4 * 4u + j) * 16u + lt / 2u][lt % 2u] = xb[j];
        }
        workgroupBarrier();
        let nb = min(b + 1u, nblk - 1u);
        word = q[(lrow * p.cols + nb * 32u + lk) / 8u];
        s = f32(scales[lrow * nblk + nb]);
        xv = select(vec4<f32>(0.0), x[xrow + nb * 8u + lk4], live);
        for (var k = 0u; k < 32u; k++) {
            let a = tile_w[k * 16u + ri];
            let t = tile_x[k * 16u + tj];
            acc[0] += a * t.x;
            acc[1] += a * t.y;
        }
    }
    return acc;
}
