// The body of the slot-indexed Q8_0 expert GEMV, shared by expert_q8_gemv.wgsl and
// expert_q8_gemv_routed.wgsl (appended to each, after the row sums and q8 helpers): both declare `p`
// (with the fields used here), `x`, `q`, `scales` and `y` under these names. See expert_q8_gemv.wgsl for
// what it computes.

var<workgroup> wsum: array<f32, 32>; // silu_output: the 16 gate rows' sums, then the 16 up rows'

// Four consecutive input values (vec4 index j of the pair's input row starting at `base`).
fn input4(base: u32, j: u32) -> vec4<f32> {
    if (p.silu_input == 0u) {
        return x[base + j];
    }
    let g = x[base + j];
    let u = x[base + p.cols / 4u + j];
    return (g / (1.0 + exp(-g))) * u;
}

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

// The rows of workgroup `wg` for `pair`, whose matrix is pool slot `slot` (workgroup-uniform, in this
// part): workgroup_id.x = block of 32 rows (silu_output: 16 gate rows and their up rows). Each 32-lane
// group takes 4 rows, so a lane reads its input chunk once for 4 weight chunks, with the 4 loads
// independent. Every lane calls it.
fn gemv_rows(li: u32, wg: vec3<u32>, pair: u32, slot: u32/*SG_PARAMS*/) {
    let lane = li % 32u;
    let group = li / 32u;
    var r = wg.x * 32u + group * 4u;
    if (p.silu_output != 0u) {
        // Groups 0-3 the gate rows, 4-7 the up rows F later.
        r = wg.x * 16u + (group % 4u) * 4u + select(0u, p.rows / 2u, group >= 4u);
    }
    let nvec = p.cols / 16u;
    let nblk = p.cols / 32u;
    // Rows past the matrix (the last block of an odd shape) read the last row and are not written.
    let first = (slot - p.slot_begin) * p.rows;
    let last = p.rows - 1u;
    let rows = vec4<u32>(first) + min(vec4<u32>(r) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(last));
    var base = (pair / p.x_div) * (p.cols / 4u);
    if (p.silu_input != 0u) {
        base = pair * (p.cols / 2u);
    }
    // Two chunks a step (512 bytes apart), their loads independent: a lane's loop is bound by its memory
    // round trips, and two in flight halve them.
    var acc = vec4<f32>(0.0);
    for (var i = lane; i < nvec; i += 64u) {
        let c0 = chunk4(rows, nvec, nblk, base, i, true);
        let c1 = chunk4(rows, nvec, nblk, base, min(i + 32u, nvec - 1u), i + 32u < nvec);
        acc += c0;
        acc += c1;
    }
    let total = row_sum4(acc, li/*SG_CALL*/);
    if (p.silu_output != 0u) {
        if (lane == 0u) {
            for (var j = 0u; j < 4u; j++) {
                wsum[group * 4u + j] = total[j];
            }
        }
        workgroupBarrier();
        if (li < 16u) {
            let g = wsum[li];
            y[pair * (p.rows / 2u) + wg.x * 16u + li] = (g / (1.0 + exp(-g))) * wsum[16u + li];
        }
        return;
    }
    if (lane == 0u) {
        for (var j = 0u; j < 4u; j++) {
            if (r + j < p.rows) {
                y[pair * p.rows + r + j] = total[j];
            }
        }
    }
}
