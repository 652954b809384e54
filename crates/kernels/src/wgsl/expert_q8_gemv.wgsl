// Expert Q8_0 GEMV for (token, pick) pairs, indexed by pool slot:
// y[pair, r] = sum_c (q[slot, r, c] * scale[slot, r, c/32]) * in[pair, c], slot = slots[pair], where
// in[pair] = x[pair / x_div] (gate||up: x_div = k, the picks of a token share its input; down from a
// precomputed activation: x_div = 1), or with silu_input = 1 in[pair, c] = silu(x[pair, c]) * x[pair, cols + c]
// (down straight from gate||up, SwiGLU computed as the input is read: one dispatch fewer). With
// silu_output = 1 the matrix is gate||up (rows = 2F) and the output is the activation instead,
// y[pair, j] = silu(g_j) * u_j for g = rows 0..F, u = rows F..2F: a workgroup takes 16 gate rows and the
// 16 matching up rows (8 and 8 with GROUPS 4), and pairs them in workgroup memory (SwiGLU at the end of
// gate||up, so that down reads a plain input and no lane computes an exp per weight chunk).
// A pool larger than a binding is split by slot range: one dispatch per part, pairs whose slot lies
// elsewhere leave at once. The row walk (`rows4`) is appended from expert_q8_rows.wgsl, for Q4_0 planes
// from expert_q4_rows.wgsl (the kernel expert_q4_gemv: this file with its entry point renamed), or for the
// input quantised as it is read from expert_q8i8_rows.wgsl (expert_q8_gemv_i8, likewise), or for an input
// quantised before (quantize_q8's rows) from expert_q8xq_rows.wgsl (expert_q8_gemv_xq, likewise); the row
// sums (`row_sum4`) and the quant helpers (`q8_helpers.wgsl`) as in q8_gemv.
// The params, the workgroup's rows (`pair_rows`) and the input helpers are in expert_q8_pair_rows.wgsl,
// appended (shared with expert_q8_gemv_routed.wgsl).
enable f16;

@group(0) @binding(0) var<uniform> p: Params;
// [P / x_div, cols] or [P, 2 * cols] f32 as bits (the xq walk reads quantised rows, expert_q8xq_rows.wgsl)
@group(0) @binding(1) var<storage, read> x: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> slots: array<u32>;        // [P] pool slot per pair
@group(0) @binding(3) var<storage, read> q: array<vec4<u32>>;      // [slot_end - slot_begin, rows, cols] int8 (Q4_0: cols/2 bytes)
@group(0) @binding(4) var<storage, read> scales: array<f16>;       // [slot_end - slot_begin, rows, cols/32] f16
@group(0) @binding(5) var<storage, read_write> y: array<f32>;      // [P, rows] f32 ([P, rows / 2] with silu_output)

// workgroup_id.x = block of 4 * GROUPS rows (silu_output: 2 * GROUPS gate rows and their up rows),
// workgroup_id.y = pair; each 32-lane group takes 4 of the rows (`rows4`).
@compute @workgroup_size(GROUPS * 32u)
fn expert_q8_gemv(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>/*SG_ARGS*/) {
    let pair = wg.y;
    if (li == 0u) {
        wslot = slots[pair];
    }
    let slot = workgroupUniformLoad(&wslot);
    pair_rows(li, wg.x, pair, slot/*SG_CALL*/);
}
