// Q2_K blocks for the K-quant kernels (appended after them, with kquant_halves.wgsl): `block_q2_K { u8
// scales[16]; u8 qs[64]; f16 d, dmin; }`, 84 bytes, 256 values in two halves of 128. Value 128h + 32k + l
// is bits 2k of qs[32h + l], and d * (s & 15) * q - dmin * (s >> 4) with s = scales[8h + 2k + l / 16].

const BLOCK_BYTES: u32 = 84u;
const LANES_PER_BLOCK: u32 = 8u;

// Lane `lane`'s part of the block at byte `b` against its values of x (`block_x`).
fn block_dot(b: u32, lane: u32, xs: array<vec4<f32>, 8>) -> f32 {
    let h = lane / 4u;
    let l0 = (lane % 4u) * 8u;
    let bytes = vec4<u32>(0u, 8u, 16u, 24u);
    let ones = vec4<f32>(1.0);
    var s = vec4<f32>(0.0);
    var sx = vec4<f32>(0.0);
    for (var i = 0u; i < 2u; i++) {
        let qs = vec4<u32>(byte_word(b + 16u + 32u * h + l0 + 4u * i)) >> bytes;
        for (var k = 0u; k < 4u; k++) {
            s[k] += dot(vec4<f32>((qs >> vec4<u32>(2u * k)) & vec4<u32>(3u)), xs[4u * i + k]);
            sx[k] += dot(ones, xs[4u * i + k]);
        }
    }
    let j = b + 8u * h + l0 / 16u;
    let sc = vec4<u32>(byte_word(j), byte_word(j + 2u), byte_word(j + 4u), byte_word(j + 6u)) & vec4<u32>(255u);
    let dm = unpack2x16float(byte_word(b + 80u));
    return dm.x * dot(vec4<f32>(sc & vec4<u32>(15u)), s) - dm.y * dot(vec4<f32>(sc >> vec4<u32>(4u)), sx);
}

// The tiled GEMMs' step `st` (columns 16 st .. 16 st + 15) of the row at byte `row`, scaled
// (kquant_tile.wgsl): values v0 .. v0 + 15 of block st / 16, v0 = 16 (st % 16), one half, quarter and scale.
fn tile_load(row: u32, st: u32) -> array<vec4<f32>, 4> {
    let b = row + (st / 16u) * BLOCK_BYTES;
    let v0 = (st % 16u) * 16u;
    let h = v0 / 128u;
    let k = (v0 % 128u) / 32u;
    let l0 = v0 % 32u;
    let sc = byte_word(b + v0 / 16u) & 255u;
    let dm = unpack2x16float(byte_word(b + 80u));
    let a = dm.x * f32(sc & 15u);
    let m = dm.y * f32(sc >> 4u);
    let bytes = vec4<u32>(0u, 8u, 16u, 24u);
    var out: array<vec4<f32>, 4>;
    for (var i = 0u; i < 4u; i++) {
        let q = (vec4<u32>(byte_word(b + 16u + 32u * h + l0 + 4u * i)) >> (bytes + vec4<u32>(2u * k))) & vec4<u32>(3u);
        out[i] = vec4<f32>(q) * a - m;
    }
    return out;
}
