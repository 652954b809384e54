// IQ4_XS blocks for the block kernels (appended after them, with kquant_iq4.wgsl, kquant_runs32.wgsl and
// kquant_byte_word.wgsl): `block_iq4_xs { f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]; }`, 136 bytes,
// 8 runs of 32 each IQ4_NL's nibble layout at qs[16 ib..], scaled by d * (s - 32) with the 6-bit s of run
// ib: its low 4 bits nibble ib % 2 of scales_l[ib / 2], its high 2 bits bits 2 ib of scales_h.

const BLOCK_BYTES: u32 = 136u;
const LANES_PER_BLOCK: u32 = 8u;

// d * (s - 32) of run `ib` of the block at byte `b`.
fn iq4_xs_scale(b: u32, ib: u32) -> f32 {
    let head = byte_word(b);
    let lo = (byte_word(b + 4u + ib / 2u) >> (4u * (ib % 2u))) & 15u;
    let hi = (head >> (16u + 2u * ib)) & 3u;
    return unpack2x16float(head).x * (f32(lo | (hi << 4u)) - 32.0);
}

// Lane `lane`'s run of the block at byte `b` against its values of x (`block_x`).
fn block_dot(b: u32, lane: u32, xs: array<vec4<f32>, 8>) -> f32 {
    return iq4_xs_scale(b, lane) * codebook_dot(nibble_words(b + 8u + 16u * lane), xs);
}

// The tiled GEMMs' step `st` (columns 16 st .. 16 st + 15) of the row at byte `row`, scaled
// (kquant_tile.wgsl): half st % 2 of run (st % 16) / 2 of block st / 16.
fn tile_load(row: u32, st: u32) -> array<vec4<f32>, 4> {
    let b = row + (st / 16u) * BLOCK_BYTES;
    let ib = (st % 16u) / 2u;
    return tile_codebook(b + 8u + 16u * ib, st % 2u, iq4_xs_scale(b, ib));
}
