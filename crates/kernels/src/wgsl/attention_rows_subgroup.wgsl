// attention_split's sum of a row's partial dots across its lanes, with subgroup shuffles: no workgroup
// memory and no barrier. A row's lpr lanes are consecutive and aligned (lpr a power of two), so they sit in
// one subgroup when the subgroup has at least lpr lanes (subgroups are consecutive local invocation
// indices on the Vulkan drivers we met; the GPU tests check it on the CI device).

fn rows_in_subgroups(lpr: u32, sg_lane: u32, sg_size: u32) -> bool {
    return sg_size >= lpr;
}

// The sum of `pd` over the lpr lanes of this lane's row, in every lane of the row. Every lane of the
// subgroup calls it (lpr is uniform).
fn row_total(pd: f32, lpr: u32) -> f32 {
    var s = pd;
    for (var off = lpr / 2u; off > 0u; off >>= 1u) {
        s += subgroupShuffleXor(s, off);
    }
    return s;
}
