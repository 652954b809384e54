// The router's top-k shared by router_topk and router_topk_slots (appended to each; see router_topk.wgsl
// for what it computes).

struct Params {
    experts: u32,   // E, at most 256
    k: u32,         // picks, at most 32
    tokens: u32,    // T
    slot_base: u32, // router_topk_slots: the layer's first entry of the slot table (layer · experts)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>; // [T, E] f32
// The entry point's file declares the outputs `ids` ([T, k] expert ids, best first) and `weights`
// ([T, k] f32).

var<workgroup> vals: array<vec4<f32>, 64>; // the row, 4 logits a read
var<workgroup> picked_p: array<f32, 32>;
var<workgroup> picked_i: array<u32, 32>;

// Token t's picks into picked_i / picked_p (complete in every lane on return), and lanes r < k write
// ids[t, r] and weights[t, r] (the probability over the k picked ones', summed in pick order in every lane,
// so every lane gets the same sum). Every lane of the 256-lane workgroup calls it.
fn pick(li: u32, t: u32) {
    let e = p.experts;
    let k = p.k;
    let n4 = (e + 3u) / 4u;
    var l = 0.0;
    if (li < e) {
        l = logits[t * e + li];
    }
    if (li < 4u * n4) {
        vals[li / 4u][li % 4u] = l; // the padding past E is masked out below
    }
    if (li < k) {
        // Only read if a NaN logit leaves a rank unfilled.
        picked_p[li] = 0.0;
        picked_i[li] = 0u;
    }
    workgroupBarrier();
    if (li < e) {
        // Same address in every lane: broadcast reads.
        var m4 = vec4<f32>(-3.4e38);
        var rank = 0u;
        for (var j = 0u; j < n4; j++) {
            let v = vals[j];
            let idx = vec4<u32>(4u * j) + vec4<u32>(0u, 1u, 2u, 3u);
            let real = idx < vec4<u32>(e);
            m4 = max(m4, select(vec4<f32>(-3.4e38), v, real));
            let beats = (v > vec4<f32>(l)) | ((v == vec4<f32>(l)) & (idx < vec4<u32>(li)));
            rank += dot(select(vec4<u32>(0u), vec4<u32>(1u), beats & real), vec4<u32>(1u));
        }
        if (rank < k) {
            let m = max(max(m4.x, m4.y), max(m4.z, m4.w));
            var s4 = vec4<f32>(0.0);
            for (var j = 0u; j < n4; j++) {
                let idx = vec4<u32>(4u * j) + vec4<u32>(0u, 1u, 2u, 3u);
                s4 += select(vec4<f32>(0.0), exp(vals[j] - m), idx < vec4<u32>(e));
            }
            picked_p[rank] = exp(l - m) / (s4.x + s4.y + s4.z + s4.w);
            picked_i[rank] = li;
        }
    }
    workgroupBarrier();
    if (li < k) {
        var sum = 0.0;
        for (var j = 0u; j < k; j++) {
            sum += picked_p[j];
        }
        ids[t * k + li] = picked_i[li];
        weights[t * k + li] = picked_p[li] / sum;
    }
}
