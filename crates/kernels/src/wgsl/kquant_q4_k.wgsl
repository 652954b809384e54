// Q4_K blocks for kquant_gemv.wgsl (appended after it): `block_q4_K { f16 d, dmin; u8 scales[12]; u8
// qs[128]; }`, 256 values in 4 chunks of 64; chunk c's byte j holds value 64c + j in its low nibble and
// 64c + 32 + j in its high one, value = d * sc * q - dmin * m with the 6-bit (sc, m) of sub-blocks 2c and
// 2c + 1 packed in `scales` (ggml's get_scale_min_k4). 8 lanes a block: lane l takes chunk l / 2, bytes
// 16 (l % 2) .. + 16 of it (four words: blocks are 144 bytes, so words stay aligned), and decodes its two
// (sc, m) pairs once for its 32 values. `scale_min` and `block_x` come from kquant_k_scales.wgsl, appended
// too.

const BLOCK_BYTES: u32 = 144u;
const LANES_PER_BLOCK: u32 = 8u;

// Lane `lane`'s part of the block at byte `b` against its values of x (`block_x`).
fn block_dot(b: u32, lane: u32, xs: array<vec4<f32>, 8>) -> f32 {
    let bw = b / 4u;
    let dm = unpack2x16float(w[bw]);
    let s = vec3<u32>(w[bw + 1u], w[bw + 2u], w[bw + 3u]);
    let c = lane / 2u;
    let q0 = bw + 4u + c * 8u + (lane % 2u) * 4u;
    let ones = vec4<f32>(1.0);
    var lo = 0.0;
    var hi = 0.0;
    var lo_x = 0.0;
    var hi_x = 0.0;
    for (var i = 0u; i < 4u; i++) {
        let qs = vec4<u32>(w[q0 + i]) >> vec4<u32>(0u, 8u, 16u, 24u);
        lo += dot(vec4<f32>(qs & vec4<u32>(15u)), xs[i]);
        hi += dot(vec4<f32>((qs >> vec4<u32>(4u)) & vec4<u32>(15u)), xs[4u + i]);
        lo_x += dot(ones, xs[i]);
        hi_x += dot(ones, xs[4u + i]);
    }
    let a = scale_min(s, 2u * c);
    let h = scale_min(s, 2u * c + 1u);
    return dm.x * (a.x * lo + h.x * hi) - dm.y * (a.y * lo_x + h.y * hi_x);
}

// The tiled GEMMs' step `st` (columns 16 st .. 16 st + 15) of the row at byte `row`, scaled
// (kquant_tile.wgsl): sub-block (st % 16) / 2 of block st / 16, its low or high 16 values.
fn tile_load(row: u32, st: u32) -> array<vec4<f32>, 4> {
    let bw = (row + (st / 16u) * BLOCK_BYTES) / 4u;
    let c16 = st % 16u;
    let sb = c16 / 2u;
    let dm = unpack2x16float(w[bw]);
    let sm = scale_min(vec3<u32>(w[bw + 1u], w[bw + 2u], w[bw + 3u]), sb);
    let a = dm.x * sm.x;
    let m = dm.y * sm.y;
    let q0 = bw + 4u + (sb / 2u) * 8u + (c16 % 2u) * 4u;
    let shift = vec4<u32>(0u, 8u, 16u, 24u) + vec4<u32>((sb % 2u) * 4u);
    var out: array<vec4<f32>, 4>;
    for (var i = 0u; i < 4u; i++) {
        out[i] = vec4<f32>((vec4<u32>(w[q0 + i]) >> shift) & vec4<u32>(15u)) * a - m;
    }
    return out;
}
