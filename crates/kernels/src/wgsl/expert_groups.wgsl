// A chunk's (token, pick) pairs grouped by expert for the tiled expert GEMMs, on the GPU: with every expert
// resident a chunk then needs no read-back of its picks. As `expert_gemm_groups` on the host, but the groups
// in expert order rather than first use, and a group's pairs in no set order (the GEMMs compute each pair's
// output alone, so the order changes nothing). One workgroup: counts per expert (workgroup atomics), their
// prefix sums, each pair placed in its expert's run by an atomic cursor, then ceil(count / size) groups
// (slot, first, count <= size, 0) per expert and count-0 entries up to len.

struct Params {
    pairs: u32,   // P = T · k
    experts: u32, // E, at most MAX_E; pairs whose id is E or more are left out (no group, no output)
    size: u32,    // pairs a group at most
    len: u32,     // group entries (the GEMM's dispatch rows)
    base: u32,    // layer · experts: the layer's first table entry
    entries: u32, // table length (layers · experts)
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;               // [P] expert id of each pair
@group(0) @binding(2) var<storage, read> table: array<u32>;             // [entries] slot of (layer, expert)
@group(0) @binding(3) var<storage, read_write> groups: array<vec4<u32>>; // [len] (slot, first, count, 0)
@group(0) @binding(4) var<storage, read_write> order: array<u32>;       // [P] pair ids, grouped

const WG: u32 = 256u;
const MAX_E: u32 = 256u; // router_topk's limit too

var<workgroup> cursor: array<atomic<u32>, MAX_E>; // pairs counted, then placed, per expert
var<workgroup> total: array<u32, MAX_E>;          // pairs per expert
var<workgroup> first: array<u32, MAX_E>;          // the expert's run in `order`
var<workgroup> gfirst: array<u32, MAX_E>;         // the expert's first group
var<workgroup> ngroups: u32;

@compute @workgroup_size(256)
fn expert_groups(@builtin(local_invocation_index) li: u32) {
    for (var e = li; e < p.experts; e += WG) {
        atomicStore(&cursor[e], 0u);
    }
    workgroupBarrier();
    for (var i = li; i < p.pairs; i += WG) {
        let e = ids[i];
        if (e < p.experts) {
            atomicAdd(&cursor[e], 1u);
        }
    }
    workgroupBarrier();
    if (li == 0u) {
        var at = 0u;
        var g = 0u;
        for (var e = 0u; e < p.experts; e++) {
            let c = atomicLoad(&cursor[e]);
            total[e] = c;
            first[e] = at;
            gfirst[e] = g;
            at += c;
            g += (c + p.size - 1u) / p.size;
            atomicStore(&cursor[e], 0u);
        }
        ngroups = g;
    }
    workgroupBarrier();
    for (var i = li; i < p.pairs; i += WG) {
        let e = ids[i];
        if (e < p.experts) {
            order[first[e] + atomicAdd(&cursor[e], 1u)] = i;
        }
    }
    for (var e = li; e < p.experts; e += WG) {
        let c = total[e];
        let slot = table[min(p.base + e, p.entries - 1u)];
        for (var j = 0u; j * p.size < c; j++) {
            let gi = gfirst[e] + j;
            if (gi < p.len) {
                groups[gi] = vec4<u32>(slot, first[e] + j * p.size, min(p.size, c - j * p.size), 0u);
            }
        }
    }
    for (var gi = ngroups + li; gi < p.len; gi += WG) {
        groups[gi] = vec4<u32>(0u);
    }
}
