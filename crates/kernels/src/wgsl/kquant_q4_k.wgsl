// Q4_K blocks for kquant_gemv.wgsl (appended after it): `block_q4_K { f16 d, dmin; u8 scales[12]; u8
// qs[128]; }`, 256 values in 4 chunks of 64; chunk c's byte j holds value 64c + j in its low nibble and
// 64c + 32 + j in its high one, value = d * sc * q - dmin * m with the 6-bit (sc, m) of sub-blocks 2c and
// 2c + 1 packed in `scales` (ggml's get_scale_min_k4). 32 lanes a block: lane l takes chunk l / 8, bytes
// 4 (l % 8) .. + 4 (one word: blocks are 144 bytes, so words stay aligned).

const BLOCK_BYTES: u32 = 144u;
const LANES_PER_BLOCK: u32 = 32u;

// (scale, min) of sub-block j of the block at byte `b`.
fn scale_min(b: u32, j: u32) -> vec2<f32> {
    let s = b + 4u;
    if (j < 4u) {
        return vec2<f32>(f32(byte_at(s + j) & 63u), f32(byte_at(s + j + 4u) & 63u));
    }
    let hi = byte_at(s + j + 4u);
    let sc = (hi & 15u) | ((byte_at(s + j - 4u) >> 6u) << 4u);
    let m = (hi >> 4u) | ((byte_at(s + j) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(m));
}

// Lane `lane`'s part of the block at byte `b` against x from vec4 `x4` (the block's first value) on.
fn block_part(b: u32, lane: u32, x4: u32) -> f32 {
    let dm = unpack2x16float(w[b / 4u]);
    let c = lane / 8u;
    let j = lane % 8u;
    let qs = vec4<u32>(w[b / 4u + 4u + c * 8u + j]) >> vec4<u32>(0u, 8u, 16u, 24u);
    let lo = vec4<f32>(qs & vec4<u32>(15u));
    let hi = vec4<f32>((qs >> vec4<u32>(4u)) & vec4<u32>(15u));
    let xl = x[x4 + c * 16u + j];
    let xh = x[x4 + c * 16u + 8u + j];
    let a = scale_min(b, 2u * c);
    let h = scale_min(b, 2u * c + 1u);
    let ones = vec4<f32>(1.0);
    return dm.x * (a.x * dot(lo, xl) + h.x * dot(hi, xh)) - dm.y * (a.y * dot(ones, xl) + h.y * dot(ones, xh));
}
