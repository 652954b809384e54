// Q5_0 blocks for the block kernels (appended after them, with kquant_runs32.wgsl and
// kquant_byte_word.wgsl): `block_q5_0 { f16 d; u8 qh[4]; u8 qs[16]; }`, 22 bytes: d * (q - 16), q
// a nibble and its fifth bit, 8 blocks a 256-value step.

const BLOCK_BYTES: u32 = 176u;
const LANES_PER_BLOCK: u32 = 8u;

// Lane `lane`'s block of the 8 at byte `b` against its values of x (`block_x`).
fn block_dot(b: u32, lane: u32, xs: array<vec4<f32>, 8>) -> f32 {
    let at = b + 22u * lane;
    let s = nibble_dot(nibble_words(at + 6u), xs);
    let h = fifth_dot(byte_word(at + 2u), xs);
    return unpack2x16float(byte_word(at)).x * (s.x + s.y + 16.0 * h - 16.0 * (s.z + s.w));
}

// The tiled GEMMs' step `st` (columns 16 st .. 16 st + 15) of the row at byte `row`, scaled
// (kquant_tile.wgsl): half st % 2 of block (st % 16) / 2 of the 8 at step st / 16.
fn tile_load(row: u32, st: u32) -> array<vec4<f32>, 4> {
    let at = row + (st / 16u) * BLOCK_BYTES + 22u * ((st % 16u) / 2u);
    let d = unpack2x16float(byte_word(at)).x;
    let q = tile_nibbles(at + 6u, st % 2u);
    let h = tile_fifth(byte_word(at + 2u), st % 2u);
    var out: array<vec4<f32>, 4>;
    for (var i = 0u; i < 4u; i++) {
        out[i] = (vec4<f32>(q[i] | (h[i] << vec4<u32>(4u))) - 16.0) * d;
    }
    return out;
}
