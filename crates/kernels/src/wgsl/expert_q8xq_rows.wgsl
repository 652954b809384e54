// The row walk of the expert GEMVs over Q8_0 planes on an input quantised before them (appended to
// expert_q8_gemv for the kernel expert_q8_gemv_xq). The input row is Q8_0 already (a quantize_q8 row:
// cols / 4 words of int8, then cols / 32 f32 block scales), as llama.cpp quantises activations before its
// GEMVs. A 32-lane group takes 4 rows of one slot, as in expert_q8_rows.wgsl, but a lane takes one whole
// block (its two 16-byte chunks) of each a step, blocks lane, lane + 32, ...: one scale load a row and
// block where a lane per chunk loads each block's scale twice (on the H200, in workgroups of 8 lane groups,
// gate‖up 11.2 µs against 12.1, down 7.4 against 8.0; of 4, gate‖up 10.85). The block's 32 products are
// summed exactly in int32 by dot4I8Packed, then scaled by the row's and the input's block scales: what
// llama.cpp computes for Q8_0 weights. (The f32 walk does not gain from whole blocks: its 32 input floats
// a lane cost more than the scale loads save.) Uses the includer's `q`, `scales` and `x` (the quantised
// rows as words; `cols` a multiple of 128 so that every row starts on a vec4, or one row).

// Block b of the 4 rows against the input's block b (vec4s `xrow + 2b` and `+ 1`, its scale word b of the
// row's scales from vec4 `xscales`): 4 partial sums.
fn block4_xq(rows: vec4<u32>, nvec: u32, nblk: u32, xrow: u32, xscales: u32, b: u32) -> vec4<f32> {
    let at = rows * nvec + vec4<u32>(2u * b);
    let w0 = q[at.x];
    let w1 = q[at.y];
    let w2 = q[at.z];
    let w3 = q[at.w];
    let v0 = q[at.x + 1u];
    let v1 = q[at.y + 1u];
    let v2 = q[at.z + 1u];
    let v3 = q[at.w + 1u];
    let s = vec4<f32>(
        f32(scales[rows.x * nblk + b]),
        f32(scales[rows.y * nblk + b]),
        f32(scales[rows.z * nblk + b]),
        f32(scales[rows.w * nblk + b]),
    );
    let lo = x[xrow + 2u * b];
    let hi = x[xrow + 2u * b + 1u];
    let d = bitcast<f32>(x[xscales + b / 4u][b % 4u]);
    let dots = vec4<i32>(
        dot16_i8(w0, lo) + dot16_i8(v0, hi),
        dot16_i8(w1, lo) + dot16_i8(v1, hi),
        dot16_i8(w2, lo) + dot16_i8(v2, hi),
        dot16_i8(w3, lo) + dot16_i8(v3, hi),
    );
    return i32x4_to_f32(dots) * (s * d);
}

// A lane's partial sums of the 4 rows over its blocks lane, lane + 32, ... `base` is the includer's offset
// of an f32 input row (vec4s); here that row is a quantised one of 9 · cols / 128 vec4s (row 0 at 0 for any
// cols).
fn rows4(rows: vec4<u32>, cols: u32, base: u32, lane: u32) -> vec4<f32> {
    let nvec = cols / 16u;
    let nblk = cols / 32u;
    let xrow = (base / (cols / 4u)) * (9u * cols / 128u);
    let xscales = xrow + nblk * 2u;
    var acc = vec4<f32>(0.0);
    for (var b = lane; b < nblk; b += 32u) {
        acc += block4_xq(rows, nvec, nblk, xrow, xscales, b);
    }
    return acc;
}
