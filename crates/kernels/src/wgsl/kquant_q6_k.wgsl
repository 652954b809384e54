// Q6_K blocks for the K-quant kernels (appended after them, with kquant_halves.wgsl): `block_q6_K { u8
// ql[128]; u8 qh[64]; i8 scales[16]; f16 d; }`, 210 bytes, 256 values in two halves of 128. In half h, for
// l in 0..32, with is = l / 16, ql = ql[64h..], qh = qh[32h..], sc = scales[8h..]: value 128h + l + 32k
// (k = 0..3) is d * sc[is + 2k] * (q - 32), its low 4 bits the low (k even) or high (k odd) nibble of
// ql[l + 32 (k % 2)], its high 2 bits bits 2k..2k+1 of qh[l]. A lane loads its 4 scales and d once for its
// 32 values.

const BLOCK_BYTES: u32 = 210u;
const LANES_PER_BLOCK: u32 = 8u;

// Bytes 0 and 2 of a word as signed values.
fn i8_pair(v: u32) -> vec2<f32> {
    return vec2<f32>(f32(i32(v << 24u) >> 24u), f32(i32(v << 8u) >> 24u));
}

// Lane `lane`'s part of the block at byte `b` against its values of x (`block_x`).
fn block_dot(b: u32, lane: u32, xs: array<vec4<f32>, 8>) -> f32 {
    let h = lane / 4u;
    let l0 = (lane % 4u) * 8u;
    let bytes = vec4<u32>(0u, 8u, 16u, 24u);
    let m4 = vec4<u32>(15u);
    let m2 = vec4<u32>(3u);
    var s0 = 0.0;
    var s1 = 0.0;
    var s2 = 0.0;
    var s3 = 0.0;
    for (var i = 0u; i < 2u; i++) {
        let l = l0 + 4u * i;
        let lo = vec4<u32>(byte_word(b + 64u * h + l)) >> bytes;
        let hi = vec4<u32>(byte_word(b + 64u * h + 32u + l)) >> bytes;
        let qh = vec4<u32>(byte_word(b + 128u + 32u * h + l)) >> bytes;
        let q0 = vec4<f32>((lo & m4) | ((qh & m2) << vec4<u32>(4u))) - 32.0;
        let q1 = vec4<f32>((hi & m4) | (((qh >> vec4<u32>(2u)) & m2) << vec4<u32>(4u))) - 32.0;
        let q2 = vec4<f32>(((lo >> vec4<u32>(4u)) & m4) | (((qh >> vec4<u32>(4u)) & m2) << vec4<u32>(4u))) - 32.0;
        let q3 = vec4<f32>(((hi >> vec4<u32>(4u)) & m4) | (((qh >> vec4<u32>(6u)) & m2) << vec4<u32>(4u))) - 32.0;
        s0 += dot(q0, xs[4u * i]);
        s1 += dot(q1, xs[4u * i + 1u]);
        s2 += dot(q2, xs[4u * i + 2u]);
        s3 += dot(q3, xs[4u * i + 3u]);
    }
    let sc = b + 192u + 8u * h + l0 / 16u;
    let s02 = i8_pair(byte_word(sc));
    let s46 = i8_pair(byte_word(sc + 4u));
    let d = unpack2x16float(byte_word(b + 208u)).x;
    return d * (s02.x * s0 + s02.y * s1 + s46.x * s2 + s46.y * s3);
}

// The tiled GEMMs' step `st` (columns 16 st .. 16 st + 15) of the row at byte `row`, scaled
// (kquant_tile.wgsl): values v0 .. v0 + 15 of block st / 16, v0 = 16 (st % 16), one half h, quarter k and
// scale.
fn tile_load(row: u32, st: u32) -> array<vec4<f32>, 4> {
    let b = row + (st / 16u) * BLOCK_BYTES;
    let v0 = (st % 16u) * 16u;
    let h = v0 / 128u;
    let k = (v0 % 128u) / 32u;
    let l0 = v0 % 32u;
    let d = unpack2x16float(byte_word(b + 208u)).x;
    let sc = f32(i32(byte_word(b + 192u + 8u * h + l0 / 16u + 2u * k) << 24u) >> 24u);
    let a = d * sc;
    let lo_at = b + 64u * h + l0 + 32u * (k % 2u);
    let hi_at = b + 128u + 32u * h + l0;
    let bytes = vec4<u32>(0u, 8u, 16u, 24u);
    var out: array<vec4<f32>, 4>;
    for (var i = 0u; i < 4u; i++) {
        let lo = (vec4<u32>(byte_word(lo_at + 4u * i)) >> (bytes + vec4<u32>((k / 2u) * 4u))) & vec4<u32>(15u);
        let hi = (vec4<u32>(byte_word(hi_at + 4u * i)) >> (bytes + vec4<u32>(2u * k))) & vec4<u32>(3u);
        out[i] = (vec4<f32>(lo | (hi << vec4<u32>(4u))) - 32.0) * a;
    }
    return out;
}
