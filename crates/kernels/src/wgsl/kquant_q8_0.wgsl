// Q8_0 blocks for the block kernels (appended after them, with kquant_runs32.wgsl and
// kquant_byte_word.wgsl): `block_q8_0 { f16 d; i8 qs[32]; }`, 34 bytes: d * q, 8 blocks a 256-value
// step (dense Q8_0 matrices are kept as planes; this reads Q8_0 parts of records of blocks).

const BLOCK_BYTES: u32 = 272u;
const LANES_PER_BLOCK: u32 = 8u;

// Lane `lane`'s block of the 8 at byte `b` against its values of x (`block_x`). A block starts on a 2-byte
// boundary: its scale and quants lie in the 10 words from its own, each read once (`byte_word` would read
// two words for each of the 9 it takes), the quants shifted by half a word where the block starts on one.
fn block_dot(b: u32, lane: u32, xs: array<vec4<f32>, 8>) -> f32 {
    let at = b + 34u * lane;
    let w0 = at / 4u;
    let aligned = at % 4u == 0u; // then the quants start half a word in
    var lo = w[w0];
    let d = unpack2x16float(select(lo >> 16u, lo, aligned)).x;
    var s = 0.0;
    for (var i = 0u; i < 8u; i++) {
        let hi = w[w0 + 1u + i];
        let q = select(hi, (lo >> 16u) | (hi << 16u), aligned);
        lo = hi;
        let v = vec4<i32>(bitcast<i32>(q)) << vec4<u32>(24u, 16u, 8u, 0u);
        s += dot(vec4<f32>(v >> vec4<u32>(24u)), xs[i]);
    }
    return d * s;
}

// The tiled GEMMs' step `st` (columns 16 st .. 16 st + 15) of the row at byte `row`, scaled
// (kquant_tile.wgsl): half st % 2 of block (st % 16) / 2 of the 8 at step st / 16.
fn tile_load(row: u32, st: u32) -> array<vec4<f32>, 4> {
    let at = row + (st / 16u) * BLOCK_BYTES + 34u * ((st % 16u) / 2u);
    let d = unpack2x16float(byte_word(at)).x;
    var out: array<vec4<f32>, 4>;
    for (var i = 0u; i < 4u; i++) {
        let v = vec4<i32>(bitcast<i32>(byte_word(at + 2u + 16u * (st % 2u) + 4u * i))) << vec4<u32>(24u, 16u, 8u, 0u);
        out[i] = vec4<f32>(v >> vec4<u32>(24u)) * d;
    }
    return out;
}
