// Router: softmax over all experts, top-k (ties to the lower index), weights renormalised to sum 1
// (llama.cpp build_moe_ffn with norm_w). The k picks are chosen by logit, which orders like the
// probabilities; weights are probs[pick] / sum of the picked probs, which is exp(l_pick - l_best) / the sum
// of that over the picks (in pick order): the softmax's denominator over all E cancels, so no pass of E
// exps (router_topk_core.wgsl's `picked_weight`).
//
// Each lane finds its expert's rank (how many logits beat it) in one pass over the row in workgroup memory,
// so a token costs two barriers instead of k rounds of a reduction tree (a decode step's latency).

struct Params {
    experts: u32,   // E, at most 256
    k: u32,         // picks, at most 32
    tokens: u32,    // T
    slot_base: u32, // router_topk_slots: the layer's first entry of the slot table (layer · experts)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;       // [T, E] f32
@group(0) @binding(2) var<storage, read_write> ids: array<u32>;     // [T, k] expert ids, best first
@group(0) @binding(3) var<storage, read_write> weights: array<f32>; // [T, k] f32

// One workgroup per token; the work is in router_topk_core.wgsl (appended).
@compute @workgroup_size(256)
fn router_topk(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let t = wg.x;
    pick(li, 256u, t * p.experts, p.experts, p.k, true);
    if (li < p.k) {
        ids[t * p.k + li] = picked_i[li];
        weights[t * p.k + li] = picked_weight(li, p.k);
    }
}
