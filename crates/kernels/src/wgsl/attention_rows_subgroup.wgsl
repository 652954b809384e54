// attention_split's sums of a row's partial dots across its lanes, with subgroup shuffles: no workgroup
// memory and no barrier. A row's lpr lanes are consecutive and aligned (lpr a power of two, at least 8),
// so they sit in one subgroup when the subgroup has at least lpr lanes (subgroups are consecutive local
// invocation indices on the Vulkan drivers we met; the GPU tests check it on the CI device).

fn rows_in_subgroups(lpr: u32, sg_lane: u32, sg_size: u32) -> bool {
    return sg_size >= lpr;
}

// The 8 heads' partial dots of this lane (heads 0-3 in `a`, 4-7 in `b`) summed over the lpr lanes of its
// row. A transposing reduction: at offsets 4, 2 and 1 a lane keeps half of what it holds and adds its
// partner's copy of that half (4 + 2 + 1 shuffles), so lane c ends with head c % 8 over 8 lanes; plain
// xor-adds finish the row. Returns head (c % 8)'s row total. Every lane of the subgroup calls it.
fn row_totals(a: vec4<f32>, b: vec4<f32>, c: u32, lpr: u32) -> f32 {
    let hi4 = (c & 4u) != 0u;
    let keep4 = select(a, b, hi4);
    let h4 = keep4 + subgroupShuffleXor(select(b, a, hi4), 4u);
    let hi2 = (c & 2u) != 0u;
    let keep2 = select(h4.xy, h4.zw, hi2);
    let h2 = keep2 + subgroupShuffleXor(select(h4.zw, h4.xy, hi2), 2u);
    let hi1 = (c & 1u) != 0u;
    var s = select(h2.x, h2.y, hi1) + subgroupShuffleXor(select(h2.y, h2.x, hi1), 1u);
    for (var off = 8u; off < lpr; off <<= 1u) {
        s += subgroupShuffleXor(s, off);
    }
    return s;
}
