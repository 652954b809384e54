// F32 matrices for the block kernels (appended after them, with kquant_floats.wgsl and
// kquant_byte_word.wgsl): f32s, read 256 at a time.

const BLOCK_BYTES: u32 = 1024u;
const LANES_PER_BLOCK: u32 = 8u;
const VALUE_BYTES: u32 = 4u;

// The 4 values at byte `at`.
fn vec4_at(at: u32) -> vec4<f32> {
    return bitcast<vec4<f32>>(vec4<u32>(byte_word(at), byte_word(at + 4u), byte_word(at + 8u), byte_word(at + 12u)));
}
