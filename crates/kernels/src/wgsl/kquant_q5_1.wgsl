// Q5_1 blocks for the block kernels (appended after them, with kquant_runs32.wgsl and
// kquant_byte_word.wgsl): `block_q5_1 { f16 d, m; u8 qh[4]; u8 qs[16]; }`, 24 bytes: d * q + m, q
// a nibble and its fifth bit, 8 blocks a 256-value step.

const BLOCK_BYTES: u32 = 192u;
const LANES_PER_BLOCK: u32 = 8u;

// Lane `lane`'s block of the 8 at byte `b` against its values of x (`block_x`).
fn block_dot(b: u32, lane: u32, xs: array<vec4<f32>, 8>) -> f32 {
    let at = b + 24u * lane;
    let dm = unpack2x16float(byte_word(at));
    let s = nibble_dot(nibble_words(at + 8u), xs);
    let h = fifth_dot(byte_word(at + 4u), xs);
    return dm.x * (s.x + s.y + 16.0 * h) + dm.y * (s.z + s.w);
}

// The tiled GEMMs' step `st` (columns 16 st .. 16 st + 15) of the row at byte `row`, scaled
// (kquant_tile.wgsl): half st % 2 of block (st % 16) / 2 of the 8 at step st / 16.
fn tile_load(row: u32, st: u32) -> array<vec4<f32>, 4> {
    let at = row + (st / 16u) * BLOCK_BYTES + 24u * ((st % 16u) / 2u);
    let dm = unpack2x16float(byte_word(at));
    let q = tile_nibbles(at + 8u, st % 2u);
    let h = tile_fifth(byte_word(at + 4u), st % 2u);
    var out: array<vec4<f32>, 4>;
    for (var i = 0u; i < 4u; i++) {
        out[i] = vec4<f32>(q[i] | (h[i] << vec4<u32>(4u))) * dm.x + dm.y;
    }
    return out;
}
