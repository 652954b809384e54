// What the routed expert GEMVs share (expert_q8_gemv_routed.wgsl, expert_kquant_gemv_routed.wgsl; appended
// after router_topk_core.wgsl): a workgroup's pick and its pool slot. Uses the includer's `p.experts`,
// `p.table_base` and bindings `table`, `ids`, `weights`, `slots`.

var<workgroup> route_slot: u32;

// The pool slot of pair `pair` (pick pair % k of token pair / k): the layer's row of the slot table staged,
// the token's top-k ranked (`pick`) and the pick looked up; with `writes` (the workgroups of row block 0)
// the pick, its weight and its slot are written for down. Every lane of the workgroup (`lanes` of them)
// calls it from uniform control flow, and gets the slot back.
fn route_pair(li: u32, lanes: u32, pair: u32, k: u32, writes: bool) -> u32 {
    for (var i = li; i < p.experts; i += lanes) {
        wtable[i] = table[p.table_base + i];
    }
    pick(li, lanes, (pair / k) * p.experts, p.experts, k, writes);
    if (li == 0u) {
        let id = picked_i[pair % k];
        let slot = wtable[id];
        route_slot = slot;
        if (writes) {
            ids[pair] = id;
            weights[pair] = picked_weight(pair % k, k);
            slots[pair] = slot;
        }
    }
    return workgroupUniformLoad(&route_slot);
}
