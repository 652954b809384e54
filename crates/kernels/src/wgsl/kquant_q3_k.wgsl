// Q3_K blocks for the K-quant kernels (appended after them, with kquant_halves.wgsl): `block_q3_K { u8
// hmask[32]; u8 qs[64]; u8 scales[12]; f16 d; }`, 110 bytes, 256 values in two halves of 128. Value
// 128h + 32k + l has its low 2 bits at bits 2k of qs[32h + l] and is 4 less unless bit 4h + k of hmask[l]
// is set; it is d * (s - 32) * q with s the 6-bit scale number 8h + 2k + l / 16 of 16 packed in scales
// (`q3_scale`).

const BLOCK_BYTES: u32 = 110u;
const LANES_PER_BLOCK: u32 = 8u;

// Scale `j` (0..16) of the block at byte `b`, less 32: its low 4 bits nibble j / 8 of byte j % 8, its high
// 2 bits bits 2 (j / 4) of byte 8 + j % 4 (ggml's kmask unpacking).
fn q3_scale(b: u32, j: u32) -> f32 {
    let lo = (byte_word(b + 96u + j % 8u) >> (4u * (j / 8u))) & 15u;
    let hi = (byte_word(b + 104u + j % 4u) >> (2u * (j / 4u))) & 3u;
    return f32(lo | (hi << 4u)) - 32.0;
}

// Lane `lane`'s part of the block at byte `b` against its values of x (`block_x`).
fn block_dot(b: u32, lane: u32, xs: array<vec4<f32>, 8>) -> f32 {
    let h = lane / 4u;
    let l0 = (lane % 4u) * 8u;
    let bytes = vec4<u32>(0u, 8u, 16u, 24u);
    var s = vec4<f32>(0.0);
    for (var i = 0u; i < 2u; i++) {
        let qs = vec4<u32>(byte_word(b + 32u + 32u * h + l0 + 4u * i)) >> bytes;
        let hm = vec4<u32>(byte_word(b + l0 + 4u * i)) >> (bytes + vec4<u32>(4u * h));
        for (var k = 0u; k < 4u; k++) {
            let low = (qs >> vec4<u32>(2u * k)) & vec4<u32>(3u);
            let high = (hm >> vec4<u32>(k)) & vec4<u32>(1u);
            s[k] += dot(vec4<f32>(low + 4u * high) - 4.0, xs[4u * i + k]);
        }
    }
    let j = 8u * h + l0 / 16u;
    let sc = vec4<f32>(q3_scale(b, j), q3_scale(b, j + 2u), q3_scale(b, j + 4u), q3_scale(b, j + 6u));
    return unpack2x16float(byte_word(b + 108u)).x * dot(sc, s);
}

// The tiled GEMMs' step `st` (columns 16 st .. 16 st + 15) of the row at byte `row`, scaled
// (kquant_tile.wgsl): values v0 .. v0 + 15 of block st / 16, v0 = 16 (st % 16), one half, quarter and scale.
fn tile_load(row: u32, st: u32) -> array<vec4<f32>, 4> {
    let b = row + (st / 16u) * BLOCK_BYTES;
    let v0 = (st % 16u) * 16u;
    let h = v0 / 128u;
    let k = (v0 % 128u) / 32u;
    let l0 = v0 % 32u;
    let a = unpack2x16float(byte_word(b + 108u)).x * q3_scale(b, v0 / 16u);
    let bytes = vec4<u32>(0u, 8u, 16u, 24u);
    var out: array<vec4<f32>, 4>;
    for (var i = 0u; i < 4u; i++) {
        let low = (vec4<u32>(byte_word(b + 32u + 32u * h + l0 + 4u * i)) >> (bytes + vec4<u32>(2u * k))) & vec4<u32>(3u);
        let high = (vec4<u32>(byte_word(b + l0 + 4u * i)) >> (bytes + vec4<u32>(4u * h + k))) & vec4<u32>(1u);
        out[i] = (vec4<f32>(low + 4u * high) - 4.0) * a;
    }
    return out;
}
