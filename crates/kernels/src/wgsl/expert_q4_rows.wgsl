// The row walk of the slot-indexed expert GEMVs over Q4_0 planes (appended to expert_q8_gemv and
// expert_q8_gemv_combine in place of expert_q8_rows.wgsl, with the same `rows4`): the quant plane holds
// 16 bytes per 32-value block in ggml order (the low nibble of byte j is value j, the high nibble value
// j + 16; value = (nibble - 8) * scale). A 32-lane group takes 4 rows of one slot, one whole block (one
// vec4<u32>) of each a step, so a lane reads a block's 32 input values once for 4 weight blocks, with the
// 4 loads independent. Uses the includer's `q`, `scales` and `input4(base, j)`.

// One Q4_0 block (16 bytes of nibble pairs) against its 32 input values: x0..x3 the low nibbles' (values
// 0..15), x4..x7 the high nibbles' (16..31).
fn dot32(
    w: vec4<u32>,
    x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>,
    x4: vec4<f32>, x5: vec4<f32>, x6: vec4<f32>, x7: vec4<f32>,
) -> f32 {
    let lo = dot(lo4x4(w.x), x0) + dot(lo4x4(w.y), x1) + dot(lo4x4(w.z), x2) + dot(lo4x4(w.w), x3);
    let hi = dot(hi4x4(w.x), x4) + dot(hi4x4(w.y), x5) + dot(hi4x4(w.z), x6) + dot(hi4x4(w.w), x7);
    return lo + hi;
}

// Block i of the 4 rows against its 32 input values, each row scaled: 4 partial sums. `live` 0 makes it
// add nothing (a clamped block past the row's end).
fn block4(rows: vec4<u32>, nblk: u32, base: u32, i: u32, live: bool) -> vec4<f32> {
    let at = rows * nblk + vec4<u32>(i);
    let w0 = q[at.x];
    let w1 = q[at.y];
    let w2 = q[at.z];
    let w3 = q[at.w];
    let s = select(vec4<f32>(0.0), vec4<f32>(
        f32(scales[at.x]),
        f32(scales[at.y]),
        f32(scales[at.z]),
        f32(scales[at.w]),
    ), live);
    let xb = i * 8u;
    let x0 = input4(base, xb);
    let x1 = input4(base, xb + 1u);
    let x2 = input4(base, xb + 2u);
    let x3 = input4(base, xb + 3u);
    let x4 = input4(base, xb + 4u);
    let x5 = input4(base, xb + 5u);
    let x6 = input4(base, xb + 6u);
    let x7 = input4(base, xb + 7u);
    return s * vec4<f32>(
        dot32(w0, x0, x1, x2, x3, x4, x5, x6, x7),
        dot32(w1, x0, x1, x2, x3, x4, x5, x6, x7),
        dot32(w2, x0, x1, x2, x3, x4, x5, x6, x7),
        dot32(w3, x0, x1, x2, x3, x4, x5, x6, x7),
    );
}

// A lane's partial sums of the 4 rows (`rows`: their indices in the bound planes, `cols` values each) over
// its blocks lane, lane + 32, ... Rows of up to 32 blocks (down's 24) take one block a lane; longer ones
// two a step (512 bytes apart, the second clamped and not added past the row's end), their loads
// independent. Not pairs for short rows: a lane's dead clamped block costs its whole decode (on the H200
// the 8 picks' Q4_0 down with the combine took 15.2 us with it, 11.3 without), where Q8_0's costs little.
fn rows4(rows: vec4<u32>, cols: u32, base: u32, lane: u32) -> vec4<f32> {
    let nblk = cols / 32u;
    var acc = vec4<f32>(0.0);
    if (nblk <= 32u) {
        if (lane < nblk) {
            acc = block4(rows, nblk, base, lane, true);
        }
        return acc;
    }
    for (var i = lane; i < nblk; i += 64u) {
        let c0 = block4(rows, nblk, base, i, true);
        let c1 = block4(rows, nblk, base, min(i + 32u, nblk - 1u), i + 32u < nblk);
        acc += c0;
        acc += c1;
    }
    return acc;
}
