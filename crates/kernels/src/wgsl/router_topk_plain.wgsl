// The router's top-k by ranks (router_topk_core.wgsl's `pick` where the device has no subgroups): each lane
// finds its expert's rank (how many logits beat it) in one pass over the row in workgroup memory. The
// includer declares `logits`.

// The k picks of the e logits from `row` into picked_i, best first, and with `probs` their probabilities
// into picked_p (complete in every lane on return). Every lane of the workgroup (`lanes` of them, E at most
// 256, k at most 32) calls it from uniform control flow.
fn pick(li: u32, lanes: u32, row: u32, e: u32, k: u32, probs: bool) {
    let n4 = (e + 3u) / 4u;
    for (var i = li; i < 4u * n4; i += lanes) {
        var l = 0.0;
        if (i < e) {
            l = logits[row + i];
        }
        vals[i / 4u][i % 4u] = l; // the padding past E is masked out below
    }
    if (li < k) {
        // Only read if a NaN logit leaves a rank unfilled.
        picked_p[li] = 0.0;
        picked_i[li] = 0u;
    }
    workgroupBarrier();
    for (var i = li; i < e; i += lanes) {
        let l = vals[i / 4u][i % 4u];
        // Same address in every lane: broadcast reads.
        var m4 = vec4<f32>(-3.4e38);
        var rank = 0u;
        for (var j = 0u; j < n4; j++) {
            let v = vals[j];
            let idx = vec4<u32>(4u * j) + vec4<u32>(0u, 1u, 2u, 3u);
            let real = idx < vec4<u32>(e);
            m4 = max(m4, select(vec4<f32>(-3.4e38), v, real));
            let beats = (v > vec4<f32>(l)) | ((v == vec4<f32>(l)) & (idx < vec4<u32>(i)));
            rank += dot(select(vec4<u32>(0u), vec4<u32>(1u), beats & real), vec4<u32>(1u));
        }
        if (rank < k) {
            if (probs) {
                let m = max(max(m4.x, m4.y), max(m4.z, m4.w));
                var s4 = vec4<f32>(0.0);
                for (var j = 0u; j < n4; j++) {
                    let idx = vec4<u32>(4u * j) + vec4<u32>(0u, 1u, 2u, 3u);
                    s4 += select(vec4<f32>(0.0), exp(vals[j] - m), idx < vec4<u32>(e));
                }
                picked_p[rank] = exp(l - m) / (s4.x + s4.y + s4.z + s4.w);
            }
            picked_i[rank] = i;
        }
    }
    workgroupBarrier();
}
