// The router's top-k shared by router_topk, router_topk_slots and the routed expert GEMVs
// (expert_q8_gemv.wgsl's `expert_q8_gemv_routed`), appended to each; see router_topk.wgsl for what it
// computes. The includer declares `logits` (its [T, E] f32 router logits).

var<workgroup> vals: array<vec4<f32>, 64>; // the row, 4 logits a read
var<workgroup> picked_p: array<f32, 32>;
var<workgroup> picked_i: array<u32, 32>;

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

// Pick r's weight after `pick` with probs: its probability over the k picked ones', summed in pick order
// (every caller the same sum).
fn picked_weight(r: u32, k: u32) -> f32 {
    var sum = 0.0;
    for (var j = 0u; j < k; j++) {
        sum += picked_p[j];
    }
    return picked_p[r] / sum;
}
