// The router's top-k shared by router_topk, router_topk_slots and the routed expert GEMVs
// (expert_q8_gemv_routed.wgsl), appended to each; see router_topk.wgsl for what it computes. Its `pick` is
// appended after it: router_topk_plain.wgsl, or router_topk_subgroup.wgsl where the device has subgroups.

var<workgroup> vals: array<vec4<f32>, 64>; // the row, 4 logits a read
var<workgroup> picked_p: array<f32, 32>;
var<workgroup> picked_i: array<u32, 32>;

// Pick r's weight after `pick` with probs: its probability over the k picked ones', summed in pick order
// (every caller the same sum).
fn picked_weight(r: u32, k: u32) -> f32 {
    var sum = 0.0;
    for (var j = 0u; j < k; j++) {
        sum += picked_p[j];
    }
    return picked_p[r] / sum;
}
