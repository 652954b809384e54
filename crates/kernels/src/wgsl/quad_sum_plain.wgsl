// For delta_net_rule.wgsl without subgroups: the sum of `v` over the quad of lanes 4 (li / 4) .. + 3, in
// every lane of it, through workgroup memory (two barriers: call from uniform control flow).

var<workgroup> quad: array<f32, 128>;

fn quad_sum(v: f32, li: u32) -> f32 {
    quad[li] = v;
    workgroupBarrier();
    let q0 = li & ~3u;
    let total = (quad[q0] + quad[q0 + 1u]) + (quad[q0 + 2u] + quad[q0 + 3u]);
    workgroupBarrier(); // read before the next call writes
    return total;
}
