// For q8i8_input.wgsl without subgroups: the larger of this lane's `m` (max|x| of chunk i) and that
// of the block's other half, chunk i ^ 1, read again by this lane.
fn pair_max(m: f32, base: u32, i: u32) -> f32 {
    return max(m, chunk_amax(base, i ^ 1u));
}
