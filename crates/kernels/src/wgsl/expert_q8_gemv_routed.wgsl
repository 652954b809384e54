// Expert Q8_0 gate||up with SwiGLU on its output (expert_q8_gemv.wgsl with silu_output = 1) that routes its
// pairs itself, for decode while every expert is resident: router_topk_slots and the GEMV in one dispatch
// (the kernels expert_q8_gemv_routed, and on an input quantised before it expert_q8_gemv_xq_routed: this
// file with its entry point renamed and expert_q8xq_rows.wgsl's walk). Pair `pair` is pick r = pair % k of
// token pair / k (x_div = k): each workgroup computes its token's top-k from the router's logits as
// router_topk_slots does (router_topk_core.wgsl, appended: the same operations, so the same picks and
// weights), and looks its pick's slot up in the slot table (expert_route_pair.wgsl, appended). The
// workgroups of row block 0 write the pick, its weight and its slot, which down reads. Every workgroup
// repeats the top-k of its token's E logits (128: a pass over 512 bytes in workgroup memory), cheaper than
// the dependent dispatch it replaces.
enable f16;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<u32>>;      // [P / k, cols] f32 bits, or xq rows
@group(0) @binding(2) var<storage, read> table: array<u32>;        // [entries] slot of (layer, expert)
@group(0) @binding(3) var<storage, read> q: array<vec4<u32>>;      // [slot_end - slot_begin, rows, cols] int8
@group(0) @binding(4) var<storage, read> scales: array<f16>;       // [slot_end - slot_begin, rows, cols/32] f16
@group(0) @binding(5) var<storage, read> logits: array<f32>;       // [P / k, E] router logits
@group(0) @binding(6) var<storage, read_write> y: array<f32>;      // [P, rows / 2] f32 silu(gate) * up
@group(0) @binding(7) var<storage, read_write> ids: array<u32>;    // [P] the picks
@group(0) @binding(8) var<storage, read_write> weights: array<f32>; // [P] their weights
@group(0) @binding(9) var<storage, read_write> slots: array<u32>;  // [P] their pool slots

// workgroup_id.x = block of 2 * GROUPS gate rows and their up rows, workgroup_id.y = pair.
@compute @workgroup_size(GROUPS * 32u)
fn expert_q8_gemv_routed(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>/*SG_ARGS*/) {
    let pair = wg.y;
    let slot = route_pair(li, GROUPS * 32u, pair, p.x_div, wg.x == 0u);
    pair_rows(li, wg.x, pair, slot/*SG_CALL*/);
}
