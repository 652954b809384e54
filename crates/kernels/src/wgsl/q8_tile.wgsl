// The workgroup-memory tile of the tiled Q8_0 GEMMs (q8_gemm_tiled, expert_q8_gemm_tiled; appended to both
// after their own file). Per 32-column block: tile_w[k * 16 + i] = the scaled weights of rows 4i..4i+3 at
// column k; tile_x[k * 16 + j] = the inputs of tokens (pairs) 2j, 2j+1 at column k. A lane reads one vec4
// and one vec2 per column for 8 multiply-adds.

var<workgroup> tile_w: array<vec4<f32>, 512>;
var<workgroup> tile_x: array<vec2<f32>, 512>;

// One 32-column block, for the workgroup's 256 lanes: lane li brings 8 weights of row li / 4 (columns
// 8 * (li % 4).., `word` scaled by `s`) and 4 inputs of token li / 8 (columns 4 * (li % 8).., `xv`), then
// adds the block's products to its rows 4 * (li % 16).. (4 of them) for tokens 2 * (li / 16) (`acc0`) and the
// next (`acc1`). Call from uniform control flow: it holds two workgroup barriers.
fn tile_block(li: u32, word: vec2<u32>, s: f32, xv: vec4<f32>, acc0: ptr<function, vec4<f32>>,
              acc1: ptr<function, vec4<f32>>) {
    let lo = i8x4(word.x) * s;
    let hi = i8x4(word.y) * s;
    let lr = li / 4u;
    let lk = (li % 4u) * 8u;
    let lt = li / 8u;
    let lk4 = li % 8u;
    workgroupBarrier(); // the last block's reads are done
    for (var j = 0u; j < 4u; j++) {
        tile_w[(lk + j) * 16u + lr / 4u][lr % 4u] = lo[j];
        tile_w[(lk + 4u + j) * 16u + lr / 4u][lr % 4u] = hi[j];
        tile_x[(lk4 * 4u + j) * 16u + lt / 2u][lt % 2u] = xv[j];
    }
    workgroupBarrier();
    let ri = li % 16u;
    let tj = li / 16u;
    for (var k = 0u; k < 32u; k++) {
        let a = tile_w[k * 16u + ri];
        let t = tile_x[k * 16u + tj];
        *acc0 += a * t.x;
        *acc1 += a * t.y;
    }
}
