// The router's top-k with subgroup operations (router_topk_core.wgsl's `pick` where the device has
// subgroups; router_topk_plain.wgsl's otherwise). The first subgroup alone takes k rounds of an
// argmax over the row (a lane's logits from workgroup memory, then subgroupMax, and for ties
// subgroupMin of the index): E·k/32 compares a subgroup instead of E² a workgroup, which matters where
// every workgroup of a dispatch routes (`expert_q8_gemv_routed`). Assumes subgroups are consecutive local
// invocation indices, as row_sum_subgroup.wgsl does. The includer declares `logits`.

// As router_topk_plain.wgsl's `pick`: the k picks (ties to the lower index) into picked_i, best first, and
// with `probs` their probabilities into picked_p. A NaN logit is never picked (a rank past the real logits
// gets expert 0, probability 0). Every lane of the workgroup calls it from uniform control flow.
fn pick(li: u32, lanes: u32, row: u32, e: u32, k: u32, probs: bool, sg_lane: u32, sg_size: u32) {
    for (var i = li; i < e; i += lanes) {
        vals[i / 4u][i % 4u] = logits[row + i];
    }
    workgroupBarrier();
    if (li < sg_size) {
        let none = bitcast<f32>(0xff800000u); // -inf: below every real logit
        // Lane sg_lane holds logits sg_lane + j * sg_size, j < 64 (E <= 256, subgroups of >= 4 lanes);
        // bit j of `taken` marks one picked.
        var taken = vec2<u32>(0u);
        var top = none;
        for (var r = 0u; r < k; r++) {
            var best = none;
            var best_i = 0xffffffffu;
            var j = 0u;
            for (var i = sg_lane; i < e; i += sg_size) {
                let v = vals[i / 4u][i % 4u];
                if (v > best && ((taken[j / 32u] >> (j % 32u)) & 1u) == 0u) {
                    best = v;
                    best_i = i;
                }
                j++;
            }
            let m = subgroupMax(best);
            let w = subgroupMin(select(0xffffffffu, best_i, best == m && best_i != 0xffffffffu));
            if (w != 0xffffffffu && w % sg_size == sg_lane) {
                let jw = w / sg_size;
                taken[jw / 32u] |= 1u << (jw % 32u);
            }
            if (r == 0u) {
                top = m;
            }
            if (sg_lane == 0u) {
                picked_i[r] = select(w, 0u, w == 0xffffffffu);
                picked_p[r] = select(m, none, w == 0xffffffffu); // the logit for now
            }
        }
        if (probs) {
            var s = 0.0;
            for (var i = sg_lane; i < e; i += sg_size) {
                s += exp(vals[i / 4u][i % 4u] - top);
            }
            let sum = subgroupAdd(s);
            // Lane 0 wrote the logits; the same lane turns them into probabilities (exp(-inf) = 0).
            if (sg_lane == 0u) {
                for (var r = 0u; r < k; r++) {
                    picked_p[r] = exp(picked_p[r] - top) / sum;
                }
            }
        }
    }
    workgroupBarrier();
}
