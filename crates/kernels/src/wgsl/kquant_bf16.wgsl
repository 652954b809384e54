// BF16 matrices for the block kernels (appended after them, with kquant_floats.wgsl and
// kquant_byte_word.wgsl): bfloat16s, read 256 at a time. A bfloat16 is the high half of an f32.

const BLOCK_BYTES: u32 = 512u;
const LANES_PER_BLOCK: u32 = 8u;
const VALUE_BYTES: u32 = 2u;

// The 4 values at byte `at`.
fn vec4_at(at: u32) -> vec4<f32> {
    let a = byte_word(at);
    let b = byte_word(at + 4u);
    return bitcast<vec4<f32>>(vec4<u32>(a << 16u, a & 0xffff0000u, b << 16u, b & 0xffff0000u));
}
