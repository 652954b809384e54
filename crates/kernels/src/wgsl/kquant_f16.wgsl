// F16 matrices for the block kernels (appended after them, with kquant_floats.wgsl and
// kquant_byte_word.wgsl): IEEE halves, read 256 at a time.

const BLOCK_BYTES: u32 = 512u;
const LANES_PER_BLOCK: u32 = 8u;
const VALUE_BYTES: u32 = 2u;

// The 4 values at byte `at`.
fn vec4_at(at: u32) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(byte_word(at)), unpack2x16float(byte_word(at + 4u)));
}
