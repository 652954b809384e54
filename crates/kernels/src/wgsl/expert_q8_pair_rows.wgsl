// The shared part of the slot-indexed expert GEMVs (expert_q8_gemv.wgsl, expert_q8_gemv_routed.wgsl):
// their params, and the rows one workgroup computes for one pair once its slot is known. Uses the
// includer's bindings `p`, `x` and `y` (and through the row walk `q` and `scales`).

struct Params {
    rows: u32,       // rows of one slot's matrix
    cols: u32,       // input length, a multiple of 32
    pairs: u32,      // P
    x_div: u32,      // input row = pair / x_div (1 with silu_input)
    slot_begin: u32, // first slot bound in this part
    slot_end: u32,   // one past the last slot bound in this part
    silu_input: u32, // 1: x is [P, 2 * cols] gate then up, the input is silu(gate) * up
    silu_output: u32, // 1: rows are gate then up, y is [P, rows / 2] silu(gate) * up
    experts: u32,    // routed: E, the logits of a token
    table_base: u32, // routed: the layer's first entry of the slot table (layer * experts)
    _pad0: u32,
    _pad1: u32,
}

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

// The row block `block` of pair `pair`, whose matrix is pool slot `slot` (uniform in the workgroup).
fn pair_rows(li: u32, block: u32, pair: u32, slot: u32/*SG_PARAMS*/) {
    if (slot < p.slot_begin || slot >= p.slot_end) {
        return;
    }
    let lane = li % 32u;
    let group = li / 32u;
    var r = block * GROUPS * 4u + group * 4u;
    // silu_output: the first half of the groups takes gate rows, the second the up rows F later.
    let half = GROUPS / 2u;
    let acts = half * 4u; // activations a workgroup
    if (p.silu_output != 0u) {
        r = block * acts + (group % half) * 4u + select(0u, p.rows / 2u, group >= half);
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
            y[pair * (p.rows / 2u) + block * acts + li] = (g / (1.0 + exp(-g))) * wsum[acts + li];
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
