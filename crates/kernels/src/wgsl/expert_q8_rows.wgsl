// The row walk of the slot-indexed expert GEMVs over Q8_0 planes (appended to expert_q8_gemv and
// expert_q8_gemv_combine; expert_q4_rows.wgsl is the Q4_0 one): a 32-lane group takes 4 rows of one slot,
// so a lane reads its input chunk once for 4 weight chunks, with the 4 loads independent. Uses the
// includer's `q` (int8, `cols` bytes a row), `scales` and `input4(base, j)` (vec4 j of the pair's input row
// starting at `base`).

// Chunk i (16 int8) of the 4 rows against the matching 16 input values, each row scaled: 4 partial sums.
// `live` 0 makes it add nothing (a clamped chunk past the row's end).
fn chunk4(rows: vec4<u32>, nvec: u32, nblk: u32, base: u32, i: u32, live: bool) -> vec4<f32> {
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
    let x0 = input4(base, i * 4u);
    let x1 = input4(base, i * 4u + 1u);
    let x2 = input4(base, i * 4u + 2u);
    let x3 = input4(base, i * 4u + 3u);
    return s * vec4<f32>(
        dot16(w0, x0, x1, x2, x3),
        dot16(w1, x0, x1, x2, x3),
        dot16(w2, x0, x1, x2, x3),
        dot16(w3, x0, x1, x2, x3),
    );
}

// A lane's partial sums of the 4 rows (`rows`: their indices in the bound planes, `cols` values each) over
// its chunks lane, lane + 32, ...: two chunks a step (512 bytes apart), their loads independent: a lane's
// loop is bound by its memory round trips, and two in flight halve them.
fn rows4(rows: vec4<u32>, cols: u32, base: u32, lane: u32) -> vec4<f32> {
    let nvec = cols / 16u;
    let nblk = cols / 32u;
    var acc = vec4<f32>(0.0);
    for (var i = lane; i < nvec; i += 64u) {
        let c0 = chunk4(rows, nvec, nblk, base, i, true);
        let c1 = chunk4(rows, nvec, nblk, base, min(i + 32u, nvec - 1u), i + 32u < nvec);
        acc += c0;
        acc += c1;
    }
    return acc;
}
