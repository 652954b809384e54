// The row walk of the GEMVs over Q8_0 planes on Q8_0-quantised inputs (appended to expert_q8_gemv and
// expert_q8_gemv_combine for the kernels expert_q8_gemv_i8 and expert_q8_gemv_combine_i8, and to
// q8_gemv_i8): the lanes and rows of expert_q8_rows.wgsl, but each input chunk is quantised
// as it is read (`quant_chunk`, q8i8_input.wgsl) and a 16-byte chunk of a row is summed exactly in int32 by
// dot4I8Packed, then scaled by the row's and the input's block scales: what llama.cpp's CPU backend
// computes for Q8_0 weights. A lane quantises its input chunk once for its 4 rows: 4 four-way dot products
// a row and chunk instead of 16 decoded values and 16 multiply-adds. Uses the includer's `q` and `scales`.

// Chunk i (16 int8) of the 4 rows against the matching 16 input values quantised: 4 partial sums. `live` 0
// makes it add nothing (a clamped chunk past the row's end).
fn chunk4_i8(rows: vec4<u32>, nvec: u32, nblk: u32, base: u32, i: u32, live: bool) -> vec4<f32> {
    let w0 = q[rows.x * nvec + i];
    let w1 = q[rows.y * nvec + i];
    let w2 = q[rows.z * nvec + i];
    let w3 = q[rows.w * nvec + i];
    let s = select(vec4<f32>(0.0), vec4<f32>(
        f32(scales[rows.x * nblk + i / 2u]),
        f32(scales[rows.y * nblk + i / 2u]),
        f32(scales[rows.z * nblk + i / 2u]),
        f32(scales[rows.w * nblk + i / 2u]),
    ), live);
    let x = quant_chunk(base, i);
    let dots = vec4<i32>(dot16_i8(w0, x.q), dot16_i8(w1, x.q), dot16_i8(w2, x.q), dot16_i8(w3, x.q));
    return i32x4_to_f32(dots) * (s * x.d);
}

// A lane's partial sums of the 4 rows over its chunks lane, lane + 32, ..., two a step as
// expert_q8_rows.wgsl's, but with the same count of steps in every lane (chunks past the row clamped and
// dead), so that lane ^ 1 quantises the other half of the same block at the same time.
fn rows4(rows: vec4<u32>, cols: u32, base: u32, lane: u32) -> vec4<f32> {
    let nvec = cols / 16u;
    let nblk = cols / 32u;
    var acc = vec4<f32>(0.0);
    let steps = (nvec + 63u) / 64u;
    for (var step = 0u; step < steps; step++) {
        let i = step * 64u + lane;
        let j = i + 32u;
        let c0 = chunk4_i8(rows, nvec, nblk, base, min(i, nvec - 1u), i < nvec);
        let c1 = chunk4_i8(rows, nvec, nblk, base, min(j, nvec - 1u), j < nvec);
        acc += c0;
        acc += c1;
    }
    return acc;
}
