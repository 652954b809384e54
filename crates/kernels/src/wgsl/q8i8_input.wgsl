// The input side of the GEMVs that quantise their f32 input as they read it (the int8 row walk,
// expert_q8i8_rows.wgsl, of q8_gemv_i8 and the int8 expert GEMVs): a lane's 16-value chunk of a 32-value
// block becomes Q8_0 as llama.cpp's quantize_row_q8_0 makes it (d = max|x| / 127 kept as its f16 rounding,
// `q8_step`, q = round(x / d), `quant4_i8`; both in q8_helpers.wgsl, as is the chunks' `dot16_i8`). The
// block's other half is chunk i ^ 1, read by lane ^ 1 in the same step: `pair_max` takes the larger of the
// two halves' max|x| (pair_max_subgroup.wgsl by a shuffle, pair_max_plain.wgsl by reading that chunk
// again). Uses the includer's `input4(base, j)`.

// A chunk's 16 int8 (4 words) and its block's scale.
struct QuantChunk {
    q: vec4<u32>,
    d: f32,
}

// max|x| over the 16 input values of chunk i.
fn chunk_amax(base: u32, i: u32) -> f32 {
    let a = max(max(abs(input4(base, i * 4u)), abs(input4(base, i * 4u + 1u))),
        max(abs(input4(base, i * 4u + 2u)), abs(input4(base, i * 4u + 3u))));
    return max(max(a.x, a.y), max(a.z, a.w));
}

// Chunk i of the input quantised. Every lane of a subgroup calls it together (`pair_max` may shuffle).
fn quant_chunk(base: u32, i: u32) -> QuantChunk {
    let x0 = input4(base, i * 4u);
    let x1 = input4(base, i * 4u + 1u);
    let x2 = input4(base, i * 4u + 2u);
    let x3 = input4(base, i * 4u + 3u);
    let a = max(max(abs(x0), abs(x1)), max(abs(x2), abs(x3)));
    let step = q8_step(pair_max(max(max(a.x, a.y), max(a.z, a.w)), base, i));
    let id = step.inv;
    let q = vec4<u32>(quant4_i8(x0 * id), quant4_i8(x1 * id), quant4_i8(x2 * id), quant4_i8(x3 * id));
    return QuantChunk(q, step.d);
}
