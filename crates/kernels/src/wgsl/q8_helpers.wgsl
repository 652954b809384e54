// Helpers appended to the Q8_0 GEMV kernels (q8_gemv, expert_q8_gemv).

// The four int8 of `w` (little-endian) as exact f32, without int-to-float conversions: bias each byte
// to 0..255 (xor 0x80), put it in the mantissa of 2^23 (0x4B000000 | b = 8388608 + b exactly), subtract
// 8388608 + 128. Integer and add units do this at full rate, where I2F runs at a quarter rate on NVIDIA
// (16/clk/SM), which would cap a Q8_0 GEMV near 4 TB/s on an H200.
fn i8x4(w: u32) -> vec4<f32> {
    let b = w ^ 0x80808080u;
    let m = vec4<u32>(b & 0xffu, (b >> 8u) & 0xffu, (b >> 16u) & 0xffu, b >> 24u) | vec4<u32>(0x4b000000u);
    return bitcast<vec4<f32>>(m) - vec4<f32>(8388736.0);
}
