// For delta_net_rule.wgsl: the sum of `v` over the quad of lanes 4 (li / 4) .. + 3, in every lane of it, by
// two subgroup shuffles (subgroups of consecutive local invocation indices, as row_sum_subgroup.wgsl
// assumes, of 4 lanes or more). The same sum, in the same order, as quad_sum_plain.wgsl's.
fn quad_sum(v: f32, li: u32) -> f32 {
    let pair = v + subgroupShuffleXor(v, 1u);
    return pair + subgroupShuffleXor(pair, 2u);
}
