// The row walk of the slot-indexed expert GEMVs over Q4_0 planes (appended to expert_q8_gemv and
// expert_q8_gemv_combine in place of expert_q8_rows.wgsl, with the same `rows4`): the quant plane holds
// 16 bytes per 32-value block in ggml order (the low nibble of byte j is value j, the high nibble value
// j + 16; value = (nibble - 8) * scale). A 32-lane group takes 4 rows of one slot, one whole block (one
// vec4<u32>) of each a step, so a lane reads a block's 32 input values once for 4 weight blocks, with the
// 4 loads independent. Uses the includer's `q`, `scales` and `input4(base, j)`.

// The 8 input vec4s of one 32-value block.
struct Block {
    lo: array<vec4<f32>, 4>, // values 0..15: the low nibbles
    hi: array<vec4<f32>, 4>, // values 16..31: the high nibbles
}

// One Q4_0 block (16 bytes of nibble pairs) against its 32 input values.
fn dot32(w: vec4<u32>, b: Block) -> f32 {
    return dot(lo4x4(w.x), b.lo[0]) + dot(lo4x4(w.y), b.lo[1]) + dot(lo4x4(w.z), b.lo[2])
        + dot(lo4x4(w.w), b.lo[3]) + dot(hi4x4(w.x), b.hi[0]) + dot(hi4x4(w.y), b.hi[1])
        + dot(hi4x4(w.z), b.hi[2]) + dot(hi4x4(w.w), b.hi[3]);
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
    var b: Block;
    b.lo = array(input4(base, xb), input4(base, xb + 1u), input4(base, xb + 2u), input4(base, xb + 3u));
    b.hi = array(input4(base, xb + 4u), input4(base, xb + 5u), input4(base, xb + 6u), input4(base, xb + 7u));
    return s * vec4<f32>(dot32(w0, b), dot32(w1, b), dot32(w2, b), dot32(w3, b));
}

// A lane's partial sums of the 4 rows (`rows`: their indices in the bound planes, `cols` values each) over
// its blocks lane, lane + 32, ...: two blocks a step (512 bytes apart), their loads independent.
fn rows4(rows: vec4<u32>, cols: u32, base: u32, lane: u32) -> vec4<f32> {
    let nblk = cols / 32u;
    var acc = vec4<f32>(0.0);
    for (var i = lane; i < nblk; i += 64u) {
        let c0 = block4(rows, nblk, base, i, true);
        let c1 = block4(rows, nblk, base, min(i + 32u, nblk - 1u), i + 32u < nblk);
        acc += c0;
        acc += c1;
    }
    return acc;
}
