// For q8i8_input.wgsl: the larger of this lane's `m` and lane ^ 1's, by a subgroup shuffle (the two
// lanes hold the two 16-value halves of one Q8_0 block; subgroups of consecutive local invocation indices,
// as row_sum_subgroup.wgsl assumes, of 2 lanes or more).
fn pair_max(m: f32, base: u32, i: u32) -> f32 {
    return max(m, subgroupShuffleXor(m, 1u));
}
