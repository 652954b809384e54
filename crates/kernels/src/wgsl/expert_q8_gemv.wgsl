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
// [P / x_div, cols] or [P, 2 * cols] f32 as bits (the xq walk reads quantised rows, expert_q8xq_rows.wgsl)
@group(0) @binding(1) var<storage, read> x: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> slots: array<u32>;        // [P] pool slot per pair
@group(0) @binding(3) var<storage, read> q: array<vec4<u32>>;      // [slot_end - slot_begin, rows, cols] int8 (Q4_0: cols/2 bytes)
@group(0) @binding(4) var<storage, read> scales: array<f16>;       // [slot_end - slot_begin, rows, cols/32] f16
@group(0) @binding(5) var<storage, read_write> y: array<f32>;      // [P, rows] f32 ([P, rows / 2] with silu_output)

// 32-lane groups a workgroup, 4 rows each: 8, or 4 for expert_q8_gemv_xq (its pipeline sets it: on the
// H200 its gate||up ran 4 % faster in workgroups of 16 rows, where the f32 walk ran 4 % slower).
override GROUPS: u32 = 8u;

var<workgroup> wslot: u32;
var<workgroup> wsum: array<f32, 32>; // silu_output: the gate rows' sums, then the up rows'

// Four consecutive input values (vec4 index j of the pair's input row starting at `base`).
fn input4(base: u32, j: u32) -> vec4<f32> {
    if (p.silu_input == 0u) {
        return bitcast<vec4<f32>>(x[base + j]);
    }
    let g = bitcast<vec4<f32>>(x[base + j]);
    let u = bitcast<vec4<f32>>(x[base + p.cols / 4u + j]);
    return (g / (1.0 + exp(-g))) * u;
}

// workgroup_id.x = block of 4 * GROUPS rows (silu_output: 2 * GROUPS gate rows and their up rows),
// workgroup_id.y = pair; each 32-lane group takes 4 of the rows (`rows4`).
@compute @workgroup_size(GROUPS * 32u)
fn expert_q8_gemv(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>/*SG_ARGS*/) {
    let pair = wg.y;
    if (li == 0u) {
        wslot = slots[pair];
    }
    let slot = workgroupUniformLoad(&wslot);
    if (slot < p.slot_begin || slot >= p.slot_end) {
        return;
    }
    let lane = li % 32u;
    let group = li / 32u;
    var r = wg.x * GROUPS * 4u + group * 4u;
    // silu_output: the first half of the groups takes gate rows, the second the up rows F later.
    let half = GROUPS / 2u;
    let acts = half * 4u; // activations a workgroup
    if (p.silu_output != 0u) {
        r = wg.x * acts + (group % half) * 4u + select(0u, p.rows / 2u, group >= half);
    }
    // Rows past the matrix (the last block of an odd shape) read the last row and are not written.
    let first = (slot - p.slot_begin) * p.rows;
    let last = p.rows - 1u;
    let rows = vec4<u32>(first) + min(vec4<u32>(r) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(last));
    var base = (pair / p.x_div) * (p.cols / 4u);
    if (p.silu_input != 0u) {
        base = pair * (p.cols / 2u);
    }
    let total = row_sum4(rows4(rows, p.cols, base, lane), li/*SG_CALL*/);
    if (p.silu_output != 0u) {
        if (lane == 0u) {
            for (var j = 0u; j < 4u; j++) {
                wsum[group * 4u + j] = total[j];
            }
        }
        workgroupBarrier();
        if (li < acts) {
            let g = wsum[li];
            y[pair * (p.rows / 2u) + wg.x * acts + li] = (g / (1.0 + exp(-g))) * wsum[acts + li];
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
