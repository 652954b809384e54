// router_topk and expert_slots in one dispatch, for decode while every expert is resident: the picks,
// their weights, and the pool slot of each pick, slots[t, r] = table[slot_base + ids[t, r]] (one dependent
// dispatch a layer fewer). The work is in router_topk_core.wgsl (appended); `Params` as in router_topk.wgsl.

struct Params {
    experts: u32,
    k: u32,
    tokens: u32,
    slot_base: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;        // [T, E] f32
@group(0) @binding(2) var<storage, read> table: array<u32>;         // [entries] slot of (layer, expert)
@group(0) @binding(3) var<storage, read_write> ids: array<u32>;     // [T, k] expert ids, best first
@group(0) @binding(4) var<storage, read_write> weights: array<f32>; // [T, k] f32
@group(0) @binding(5) var<storage, read_write> slots: array<u32>;   // [T, k] pool slots of the picks

// One workgroup per token.
@compute @workgroup_size(256)
fn router_topk_slots(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let t = wg.x;
    for (var i = li; i < p.experts; i += 256u) {
        wtable[i] = table[p.slot_base + i];
    }
    pick(li, 256u, t * p.experts, p.experts, p.k, true);
    if (li < p.k) {
        ids[t * p.k + li] = picked_i[li];
        weights[t * p.k + li] = picked_weight(li, p.k);
        slots[t * p.k + li] = wtable[picked_i[li]];
    }
}
