// Q5_K blocks for the K-quant kernels (appended after them, with kquant_k_scales.wgsl): `block_q5_K { f16 d,
// dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; }`, 176 bytes, 256 values laid out as Q4_K's (chunk c's byte
// j of qs holds value 64c + j in its low nibble and 64c + 32 + j in its high one) with a fifth bit each:
// bit 2c of qh[j] for the low value, bit 2c + 1 for the high one; value = d * sc * q - dmin * m with the
// 6-bit (sc, m) of its sub-block. 8 lanes a block, as Q4_K's (blocks of 176 bytes keep words aligned).

const BLOCK_BYTES: u32 = 176u;
const LANES_PER_BLOCK: u32 = 8u;

// Lane `lane`'s part of the block at byte `b` against its values of x (`block_x`).
fn block_dot(b: u32, lane: u32, xs: array<vec4<f32>, 8>) -> f32 {
    let bw = b / 4u;
    let c = lane / 2u;
    let q0 = bw + 12u + c * 8u + (lane % 2u) * 4u;
    let h0 = bw + 4u + (lane % 2u) * 4u;
    let bytes = vec4<u32>(0u, 8u, 16u, 24u);
    let ones = vec4<f32>(1.0);
    var s = vec4<f32>(0.0);
    for (var i = 0u; i < 4u; i++) {
        let qs = vec4<u32>(w[q0 + i]) >> bytes;
        let qh = vec4<u32>(w[h0 + i]) >> bytes;
        let ql = (qs & vec4<u32>(15u)) | (((qh >> vec4<u32>(2u * c)) & vec4<u32>(1u)) << vec4<u32>(4u));
        let qu = ((qs >> vec4<u32>(4u)) & vec4<u32>(15u)) | (((qh >> vec4<u32>(2u * c + 1u)) & vec4<u32>(1u)) << vec4<u32>(4u));
        s.x += dot(vec4<f32>(ql), xs[i]);
        s.y += dot(vec4<f32>(qu), xs[4u + i]);
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
    let q0 = bw + 12u + (sb / 2u) * 8u + (c16 % 2u) * 4u;
    let h0 = bw + 4u + (c16 % 2u) * 4u;
    let shift = vec4<u32>(0u, 8u, 16u, 24u);
    var out: array<vec4<f32>, 4>;
    for (var i = 0u; i < 4u; i++) {
        let q = (vec4<u32>(w[q0 + i]) >> (shift + vec4<u32>((sb % 2u) * 4u))) & vec4<u32>(15u);
        let qh = (vec4<u32>(w[h0 + i]) >> (shift + vec4<u32>(sb))) & vec4<u32>(1u);
        out[i] = vec4<f32>(q | (qh << vec4<u32>(4u))) * am.x - am.y;
    }
    return out;
}
