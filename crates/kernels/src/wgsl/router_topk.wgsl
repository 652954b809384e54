// Router: softmax over all experts, top-k (ties to the lower index), weights renormalised to sum 1
// (llama.cpp build_moe_ffn with norm_w). The k picks are chosen by logit, which orders like the
// probabilities; weights are probs[pick] / sum of the picked probs, summed in pick order.

struct Params {
    experts: u32, // E, at most 256
    k: u32,       // picks, at most 32
    tokens: u32,  // T
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;       // [T, E] f32
@group(0) @binding(2) var<storage, read_write> ids: array<u32>;    // [T, k] expert ids, best first
@group(0) @binding(3) var<storage, read_write> weights: array<f32>; // [T, k] f32

const WG: u32 = 256u;
const NEG: f32 = -3.0e38;

var<workgroup> vals: array<f32, WG>;
var<workgroup> rv: array<f32, WG>;
var<workgroup> ri: array<u32, WG>;
var<workgroup> picked_p: array<f32, 32>;
var<workgroup> picked_i: array<u32, 32>;

// One workgroup per token.
@compute @workgroup_size(256)
fn router_topk(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let t = wg.x;
    var l = NEG;
    if (li < p.experts) {
        l = logits[t * p.experts + li];
    }
    vals[li] = l;
    // max
    rv[li] = l;
    workgroupBarrier();
    for (var off = WG / 2u; off > 0u; off >>= 1u) {
        if (li < off) {
            rv[li] = max(rv[li], rv[li + off]);
        }
        workgroupBarrier();
    }
    let m = rv[0];
    workgroupBarrier();
    var e = 0.0;
    if (li < p.experts) {
        e = exp(l - m);
    }
    rv[li] = e;
    workgroupBarrier();
    for (var off = WG / 2u; off > 0u; off >>= 1u) {
        if (li < off) {
            rv[li] += rv[li + off];
        }
        workgroupBarrier();
    }
    let prob = e / rv[0];
    workgroupBarrier();
    // k rounds of argmax over the logits; the winner is struck out.
    for (var r = 0u; r < p.k; r++) {
        rv[li] = vals[li];
        ri[li] = li;
        workgroupBarrier();
        for (var off = WG / 2u; off > 0u; off >>= 1u) {
            if (li < off) {
                let ov = rv[li + off];
                let oi = ri[li + off];
                if (ov > rv[li] || (ov == rv[li] && oi < ri[li])) {
                    rv[li] = ov;
                    ri[li] = oi;
                }
            }
            workgroupBarrier();
        }
        let win = ri[0];
        if (li == win) {
            picked_p[r] = prob;
            picked_i[r] = li;
            vals[li] = -3.4e38; // below NEG, so padding lanes never win over a real expert
        }
        workgroupBarrier();
    }
    if (li == 0u) {
        var sum = 0.0;
        for (var r = 0u; r < p.k; r++) {
            sum += picked_p[r];
        }
        for (var r = 0u; r < p.k; r++) {
            ids[t * p.k + r] = picked_i[r];
            weights[t * p.k + r] = picked_p[r] / sum;
        }
    }
}
