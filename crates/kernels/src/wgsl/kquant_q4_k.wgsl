// Q4_K blocks for kquant_gemv.wgsl (appended after it): `block_q4_K { f16 d, dmin; u8 scales[12]; u8
// qs[128]; }`, 256 values in 4 chunks of 64; chunk c's byte j holds value 64c + j in its low nibble and
// 64c + 32 + j in its high one, value = d * sc * q - dmin * m with the 6-bit (sc, m) of sub-blocks 2c and
// 2c + 1 packed in `scales` (ggml's get_scale_min_k4). 8 lanes a block: lane l takes chunk l / 2, bytes
// 16 (l % 2) .. + 16 of it (four words: blocks are 144 bytes, so words stay aligned), and decodes its two
// (sc, m) pairs once for its 32 values. `chunk_total`, `tile_scale_min` and `block_x` come from kquant_k_scales.wgsl, appended
// too.

const BLOCK_BYTES: u32 = 144u;
const LANES_PER_BLOCK: u32 = 8u;

// Lane `lane`'s part of the block at byte `b` against its values of x (`block_x`).
fn block_dot(b: u32, lane: u32, xs: array<vec4<f32>, 8>) -> f32 {
    let bw = b / 4u;
    let q0 = bw + 4u + (lane / 2u) * 8u + (lane % 2u) * 4u;
    let ones = vec4<f32>(1.0);
    var s = vec4<f32>(0.0);
    for (var i = 0u; i < 4u; i++) {
        let qs = vec4<u32>(w[q0 + i]) >> vec4<u32>(0u, 8u, 16u, 24u);
        s.x += dot(vec4<f32>(qs & vec4<u32>(15u)), xs[i]);
        s.y += dot(vec4<f32>((qs >> vec4<u32>(4u)) & vec4<u32>(15u)), xs[4u + i]);
        s.z += dot(ones, xs[i]);
        s.w += dot(ones, xs[4u + i]);
    }
    return chunk_total(bw, lane, s);
}

// The tiled GEMMs' step `st` (columns 16 st .. 16 st + 15) of the row at byte `row`, scaled
// (kquant_tile.wgsl): sub-block (st % 16) / 2 of block st / 16, its low or high 16 values.
fn tile_load(row: u32, st: u32) -> array<vec4<f32>, 4> {
    let bw = (row + (st / 16u) * BLOCK_BYTES) / 4u;
    let c16 = st % 16u;
    let sb = c16 / 2u;
    let am = tile_scale_min(bw, sb);
    let q0 = bw + 4u + (sb / 2u) * 8u + (c16 % 2u) * 4u;
    let shift = vec4<u32>(0u, 8u, 16u, 24u) + vec4<u32>((sb % 2u) * 4u);
    var out: array<vec4<f32>, 4>;
    for (var i = 0u; i < 4u; i++) {
        out[i] = vec4<f32>((vec4<u32>(w[q0 + i]) >> shift) & vec4<u32>(15u)) * am.x - am.y;
    }
    return out;
}
