// Expert Q8_0 GEMV for (token, pick) pairs, indexed by pool slot:
// y[pair, r] = sum_c (q[slot, r, c] * scale[slot, r, c/32]) * in[pair, c], slot = slots[pair], where
// in[pair] = x[pair / x_div] (gate||up: x_div = k, the picks of a token share its input; down from a
// precomputed activation: x_div = 1), or with silu_input = 1 in[pair, c] = silu(x[pair, c]) * x[pair, cols + c]
// (down straight from gate||up, SwiGLU computed as the input is read: one dispatch fewer). With
// silu_output = 1 the matrix is gate||up (rows = 2F) and the output is the activation instead,
// y[pair, j] = silu(g_j) * u_j for g = rows 0..F, u = rows F..2F: a workgroup takes 16 gate rows and the
// 16 matching up rows, and pairs them in workgroup memory (SwiGLU at the end of gate||up, so that down
// reads a plain input and no lane computes an exp per weight chunk).
// A pool larger than a binding is split by slot range: one dispatch per part, pairs whose slot lies
// elsewhere leave at once. The row sums (`row_sum4`), `i8x4` and `dot16` are appended as in q8_gemv, then
// the GEMV's body (expert_q8_gemv_core.wgsl).
enable f16;

struct Params {
    rows: u32,       // rows of one slot's matrix
    cols: u32,       // input length, a multiple of 32
    pairs: u32,      // P
    x_div: u32,      // input row = pair / x_div (1 with silu_input)
    slot_begin: u32, // first slot bound in this part
    slot_end: u32,   // one past the last slot bound in this part
    silu_input: u32, // 1: x is [P, 2 * cols] gate then up, the input is silu(gate) * up
    silu_output: u32, // 1: rows are gate then up, y is [P, rows / 2] silu(gate) * up
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;      // [P / x_div, cols] or [P, 2 * cols] f32
@group(0) @binding(2) var<storage, read> slots: array<u32>;        // [P] pool slot per pair
@group(0) @binding(3) var<storage, read> q: array<vec4<u32>>;      // [slot_end - slot_begin, rows, cols] int8
@group(0) @binding(4) var<storage, read> scales: array<f16>;       // [slot_end - slot_begin, rows, cols/32] f16
@group(0) @binding(5) var<storage, read_write> y: array<f32>;      // [P, rows] f32 ([P, rows / 2] with silu_output)

var<workgroup> wslot: u32;

// workgroup_id.y = pair; the rows are in expert_q8_gemv_core.wgsl (appended).
@compute @workgroup_size(256)
fn expert_q8_gemv(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>/*SG_ARGS*/) {
    let pair = wg.y;
    if (li == 0u) {
        wslot = slots[pair];
    }
    let slot = workgroupUniformLoad(&wslot);
    if (slot < p.slot_begin || slot >= p.slot_end) {
        return;
    }
    gemv_rows(li, wg, pair, slot/*SG_CALL*/);
}
