// Expert K-quant gate‖up with SwiGLU on its output (expert_kquant_gemv.wgsl's swiglu mode) that routes its
// pairs itself, for decode while every expert is resident: router_topk_slots and the GEMV in one dispatch, as
// expert_q8_gemv_routed.wgsl does for Q8_0 planes. Pair `pair` is pick r = pair % k of token pair / k: each
// workgroup computes its token's top-k from the router's logits as router_topk_slots does
// (router_topk_core.wgsl, appended: the same operations, so the same picks and weights) and looks its pick's
// slot up in the slot table (expert_route_pair.wgsl, appended); the workgroups of row block 0 write the
// pick, its weight and its slot, which down reads. A lane group takes 2 gate rows and their 2 up rows
// (`lane_dot4`, kquant_dot4.wgsl), 16 rows of y a workgroup. The block helper (kquant_q4_k.wgsl, …) and the
// row sums are appended; the other types' kernels are this file with its entry point renamed.
enable f16;

struct Params {
    rows: u32,        // rows of gate, and of up (F)
    cols: u32,        // input length, a multiple of 256
    pairs: u32,       // T·k
    k: u32,           // picks a token: input row = pair / k
    slot_begin: u32,  // first slot bound in this part
    slot_end: u32,    // one past the last slot bound in this part
    slot_bytes: u32,  // bytes a slot takes in w
    gate_bytes: u32,  // where gate starts in a slot
    up_bytes: u32,    // where up starts in a slot
    experts: u32,     // E: a token's logits
    table_base: u32,  // the layer's first entry of the slot table (layer · E)
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;      // [T, cols] f32
@group(0) @binding(2) var<storage, read> table: array<u32>;        // [entries] slot of (layer, expert)
@group(0) @binding(3) var<storage, read> w: array<u32>;            // slots slot_begin..slot_end of the plane
@group(0) @binding(4) var<storage, read> logits: array<f32>;       // [T, E] router logits
@group(0) @binding(5) var<storage, read_write> y: array<f32>;      // [P, rows] f32 silu(gate) * up
@group(0) @binding(6) var<storage, read_write> ids: array<u32>;    // [P] the picks
@group(0) @binding(7) var<storage, read_write> weights: array<f32>; // [P] their weights
@group(0) @binding(8) var<storage, read_write> slots: array<u32>;  // [P] their pool slots

// workgroup_id.x = block of 16 gate rows and their up rows, workgroup_id.y = pair.
@compute @workgroup_size(256)
fn expert_q4_k_gemv_routed(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>/*SG_ARGS*/) {
    let pair = wg.y;
    let k = p.k;
    let slot = route_pair(li, 256u, pair, k, wg.x == 0u);
    // Uniform over the workgroup (route_pair's slot): the row sums below need every lane.
    if (slot < p.slot_begin || slot >= p.slot_end) {
        return;
    }
    let lane = li % 32u;
    let base = (slot - p.slot_begin) * p.slot_bytes;
    let row_bytes = (p.cols / 256u) * BLOCK_BYTES;
    // Rows past the matrix read its last row; their sums are not stored.
    let r0 = wg.x * 16u + (li / 32u) * 2u;
    let r = min(vec2<u32>(r0) + vec2<u32>(0u, 1u), vec2<u32>(p.rows - 1u)) * row_bytes;
    let rows = vec4<u32>(base + p.gate_bytes + r, base + p.up_bytes + r);
    let total = row_sum4(lane_dot4(rows, lane, (pair / k) * (p.cols / 4u)), li/*SG_CALL*/);
    if (lane == 0u) {
        // silu(g) = g / (1 + exp(-g)), as silu_mul (ggml).
        for (var i = 0u; i < 2u; i++) {
            if (r0 + i < p.rows) {
                let g = total[i];
                y[pair * p.rows + r0 + i] = (g / (1.0 + exp(-g))) * total[2u + i];
            }
        }
    }
}
