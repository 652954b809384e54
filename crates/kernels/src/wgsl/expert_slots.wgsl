// Routing that stays on the GPU when every expert is resident: out[i] = table[base + ids[i]], the pool slot
// of each pick. Ids past the table give 0xFFFFFFFF, a slot the expert kernels skip.

struct Params {
    n: u32,       // picks (T · k)
    base: u32,    // layer · experts: the layer's first table entry
    entries: u32, // table length (layers · experts)
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;          // [n] expert ids of the layer
@group(0) @binding(2) var<storage, read> table: array<u32>;        // [entries] slot of (layer, expert)
@group(0) @binding(3) var<storage, read_write> out: array<u32>;    // [n] slots

@compute @workgroup_size(64)
fn expert_slots(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i < p.n) {
        let e = p.base + ids[i];
        out[i] = select(0xFFFFFFFFu, table[min(e, p.entries - 1u)], e < p.entries);
    }
}
