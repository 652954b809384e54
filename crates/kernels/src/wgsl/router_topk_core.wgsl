// The router's top-k shared by router_topk, router_topk_slots and the routed expert GEMVs
// (expert_q8_gemv_routed.wgsl), appended to each; see router_topk.wgsl for what it
// computes. The includer declares `logits` (its [T, E] f32 router logits).

var<workgroup> vals: array<vec4<f32>, 64>; // the row, 4 logits a read
var<workgroup> picked_l: array<f32, 32>;
var<workgroup> picked_i: array<u32, 32>;
// The layer's row of the slot table (router_topk_slots and the routed GEMVs stage it before `pick`, so the
// picks' slots need no dependent load from memory).
var<workgroup> wtable: array<u32, 256>;

// The k picks of the e logits from `row` into picked_i, best first, and with `logits_too` their logits into
// picked_l (complete in every lane on return). Every lane of the workgroup (`lanes` of them, E at most 256,
// k at most 32) calls it from uniform control flow.
fn pick(li: u32, lanes: u32, row: u32, e: u32, k: u32, logits_too: bool) {
    let n4 = (e + 3u) / 4u;
    for (var i = li; i < 4u * n4; i += lanes) {
        var l = 0.0;
        if (i < e) {
            l = logits[row + i];
        }
        vals[i / 4u][i % 4u] = l; // the padding past E is masked out below
    }
    if (li < k) {
        // Only read if a NaN logit leaves a rank unfilled: -inf, weight 0.
        picked_l[li] = bitcast<f32>(0xff800000u);
        picked_i[li] = 0u;
    }
    workgroupBarrier();
    // Each lane ranks experts li, li + lanes, … (at most 4: E ≤ 256, lanes ≥ 64) against the whole row, the
    // row's loop outermost and the same in every lane: with a lane's own loop outermost and the row's inside
    // it, lavapipe (Mesa 22.3) kept ~170 KB a dispatch until the device went.
    let per = (e + lanes - 1u) / lanes;
    var ls: array<f32, 4>;
    var ranks = vec4<u32>(0u);
    for (var m = 0u; m < per; m++) {
        let i = li + m * lanes;
        if (i < e) {
            ls[m] = vals[i / 4u][i % 4u];
        }
    }
    for (var j = 0u; j < n4; j++) {
        let v = vals[j];
        let idx = vec4<u32>(4u * j) + vec4<u32>(0u, 1u, 2u, 3u);
        let real = idx < vec4<u32>(e);
        for (var m = 0u; m < per; m++) {
            let l = ls[m];
            let i = li + m * lanes;
            // Same address in every lane: broadcast reads.
            let beats = (v > vec4<f32>(l)) | ((v == vec4<f32>(l)) & (idx < vec4<u32>(i)));
            ranks[m] += dot(select(vec4<u32>(0u), vec4<u32>(1u), beats & real), vec4<u32>(1u));
        }
    }
    for (var m = 0u; m < per; m++) {
        let i = li + m * lanes;
        if (i < e && ranks[m] < k) {
            if (logits_too) {
                picked_l[ranks[m]] = ls[m];
            }
            picked_i[ranks[m]] = i;
        }
    }
    workgroupBarrier();
}

// Pick r's weight after `pick` with logits_too: its softmax probability over the k picked ones'. The
// softmax over all E cancels in that ratio (p_r / sum p_j = exp(l_r - m) / sum exp(l_j - m)), so only the
// k picks' exps are taken, relative to the best pick's logit and summed in pick order (every caller the
// same sum: the same bits in every kernel that routes).
fn picked_weight(r: u32, k: u32) -> f32 {
    let top = picked_l[0];
    var sum = 0.0;
    for (var j = 0u; j < k; j++) {
        sum += exp(picked_l[j] - top);
    }
    return exp(picked_l[r] - top) / sum;
}
