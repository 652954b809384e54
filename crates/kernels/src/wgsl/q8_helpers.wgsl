// Helpers appended to the quantised GEMV kernels (q8_gemv, expert_q8_gemv, expert_q4_gemv, ...).

// The four bytes of `b` (little-endian) as f32 plus 8388608 (2^23), without int-to-float conversions:
// put each byte in the mantissa of 2^23 (0x4B000000 | b = 8388608 + b exactly). Integer and add units do
// this at full rate, where I2F runs at a quarter rate on NVIDIA (16/clk/SM), which would cap a Q8_0
// GEMV near 4 TB/s on an H200. Callers subtract 8388608 plus their bias in one step.
fn u8x4_plus_2p23(b: u32) -> vec4<f32> {
    let m = vec4<u32>(b & 0xffu, (b >> 8u) & 0xffu, (b >> 16u) & 0xffu, b >> 24u) | vec4<u32>(0x4b000000u);
    return bitcast<vec4<f32>>(m);
}

// The four int8 of `w` (little-endian) as exact f32: bias each byte to 0..255 (xor 0x80), then
// subtract 8388608 + 128.
fn i8x4(w: u32) -> vec4<f32> {
    return u8x4_plus_2p23(w ^ 0x80808080u) - vec4<f32>(8388736.0);
}

// Q4_0 nibbles as exact f32 `nibble - 8`: the low nibbles of the four bytes of `w` (`lo4x4`), or the high
// nibbles (`hi4x4`), each moved into its own byte, then 8388608 + 8 subtracted.
fn lo4x4(w: u32) -> vec4<f32> {
    return u8x4_plus_2p23(w & 0x0f0f0f0fu) - vec4<f32>(8388616.0);
}

fn hi4x4(w: u32) -> vec4<f32> {
    return u8x4_plus_2p23((w >> 4u) & 0x0f0f0f0fu) - vec4<f32>(8388616.0);
}

// |v| < 2^22 as f32, exactly, by integer add into the mantissa of 1.5 * 2^23 (a block's sum is at most
// 32 * 128 * 128 = 2^19): full-rate integer and float adds instead of a quarter-rate conversion.
fn i32x4_to_f32(v: vec4<i32>) -> vec4<f32> {
    return bitcast<vec4<f32>>(v + vec4<i32>(0x4b400000)) - vec4<f32>(12582912.0);
}

// v >= 0 rounded to the nearest f16 value (ties to even), as f32: the scale a Q8_0 block stores, rounded as
// llama.cpp's GGML_FP32_TO_FP16 rounds it (and the CPU reference's half::f16). WGSL lets f32-to-f16
// conversions round either way, and NVIDIA's do, so this rounds by bits: below f16's normal range to a
// multiple of 2^-24 (round() ties to even), above it to 10 mantissa bits. Up to 65504 (a larger scale
// overflows f16, here as in llama.cpp, differently).
fn f16_round(v: f32) -> f32 {
    if (v < 6.103515625e-5) {
        return round(v * 16777216.0) * 5.9604644775390625e-8; // 2^-24: exact, as no division is
    }
    let b = bitcast<u32>(v);
    return bitcast<f32>((b + 0xfffu + ((b >> 13u) & 1u)) & 0xffffe000u);
}

// A 32-value block's Q8_0 step from its max |x|, as llama.cpp's quantize_row_q8_0 takes it: d = max / 127
// stored as its f16 rounding (`d`), and the values scaled by 1 / d of the unrounded d (`inv`, 0 for a block
// of zeros) before `quant4_i8`.
struct Q8Step {
    d: f32,
    inv: f32,
}

fn q8_step(amax: f32) -> Q8Step {
    let d = amax / 127.0;
    return Q8Step(f16_round(d), select(0.0, 1.0 / d, d != 0.0));
}

// Four values already divided by their block's step (`x / d`) as int8, rounded halves away from zero as
// llama.cpp's quantize_row_q8_0, packed little-endian into a word.
fn quant4_i8(s: vec4<f32>) -> u32 {
    return pack4xI8(vec4<i32>(sign(s) * floor(abs(s) + 0.5)));
}

// The 16-byte chunks `w` and `x` (16 int8 each): their exact dot product.
fn dot16_i8(w: vec4<u32>, x: vec4<u32>) -> i32 {
    let lo = dot4I8Packed(w.x, x.x) + dot4I8Packed(w.y, x.y);
    return lo + (dot4I8Packed(w.z, x.z) + dot4I8Packed(w.w, x.w));
}

// One 16-byte Q8_0 chunk (16 int8) against 16 input values.
fn dot16(w: vec4<u32>, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>) -> f32 {
    return dot(i8x4(w.x), x0) + dot(i8x4(w.y), x1) + dot(i8x4(w.z), x2) + dot(i8x4(w.w), x3);
}

// For the tiled GEMMs (q8_tile.wgsl, q8_tile_i8.wgsl): the first tile row of lane li's products (8
// consecutive rows).
fn tile_rows(li: u32) -> u32 {
    return 8u * (4u * (li / 32u) + (li % 32u) / 8u);
}

// The first tile token of lane li's products (4 consecutive tokens).
fn tile_tokens(li: u32) -> u32 {
    return 4u * (li % 8u);
}
