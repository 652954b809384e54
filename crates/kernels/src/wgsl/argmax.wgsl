// Greedy pick: out[t] = index of the largest logit of row t, ties to the lower index. Two stages, one
// dispatch each (one pipeline, two bindings of src and dst): stage 0 has a workgroup per (slice of SLICE
// values, row) write its slice's best (value bits, index) pair to the partial buffer; stage 1 has a
// workgroup per row merge the row's pairs. One workgroup over a 151,936-value row was bound by its
// ~150 memory round trips (35 us on the H200); a slice takes two.

struct Params {
    n: u32,      // row length (vocabulary)
    tokens: u32, // T
    slices: u32, // ceil(n / SLICE)
    stage: u32,  // 0: slices to pairs; 1: pairs to the row's index
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;       // stage 0: [T, n] f32 bits; 1: [T, slices] pairs
@group(0) @binding(2) var<storage, read_write> dst: array<u32>; // stage 0: [T, slices] (value bits, index) pairs; 1: [T] u32

const WG: u32 = 256u;
override SLICE: u32; // values a stage-0 workgroup scans: ARGMAX_SLICE, given by the launcher's pipeline
const NONE: u32 = 0xffffffffu;
var<workgroup> rv: array<f32, WG>;
var<workgroup> ri: array<u32, WG>;

// Keeps (v, i) if v is larger, or if nothing is kept yet; equal values keep the lower index.
fn take(v: f32, i: u32, bv: ptr<function, f32>, bi: ptr<function, u32>) {
    if (i != NONE && (*bi == NONE || v > *bv || (v == *bv && i < *bi))) {
        *bv = v;
        *bi = i;
    }
}

// Candidate j of this workgroup: a value of the slice (stage 0) or a row's pair (stage 1), as (value,
// index), index NONE past the end.
fn candidate(j: u32, begin: u32, end: u32, row: u32) -> vec2<u32> {
    if (begin + j >= end) {
        return vec2<u32>(0u, NONE);
    }
    if (p.stage == 0u) {
        return vec2<u32>(src[row * p.n + begin + j], begin + j);
    }
    let at = 2u * (row * p.slices + j);
    return vec2<u32>(src[at], src[at + 1u]);
}

@compute @workgroup_size(256)
fn argmax(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    var row = wg.y;
    var begin = wg.x * SLICE;
    var end = min(begin + SLICE, p.n);
    if (p.stage == 1u) {
        row = wg.x;
        begin = 0u;
        end = p.slices;
    }
    var bv = -3.4e38;
    var bi = NONE;
    // Four candidates a step, WG apart, loaded before any is used.
    for (var j = li; begin + j < end; j += 4u * WG) {
        let c0 = candidate(j, begin, end, row);
        let c1 = candidate(j + WG, begin, end, row);
        let c2 = candidate(j + 2u * WG, begin, end, row);
        let c3 = candidate(j + 3u * WG, begin, end, row);
        take(bitcast<f32>(c0.x), c0.y, &bv, &bi);
        take(bitcast<f32>(c1.x), c1.y, &bv, &bi);
        take(bitcast<f32>(c2.x), c2.y, &bv, &bi);
        take(bitcast<f32>(c3.x), c3.y, &bv, &bi);
    }
    rv[li] = bv;
    ri[li] = bi;
    workgroupBarrier();
    for (var off = WG / 2u; off > 0u; off >>= 1u) {
        if (li < off) {
            var v = rv[li];
            var i = ri[li];
            take(rv[li + off], ri[li + off], &v, &i);
            rv[li] = v;
            ri[li] = i;
        }
        workgroupBarrier();
    }
    if (li == 0u) {
        if (p.stage == 0u) {
            let at = 2u * (row * p.slices + wg.x);
            dst[at] = bitcast<u32>(rv[0]);
            dst[at + 1u] = ri[0];
        } else {
            dst[row] = ri[0];
        }
    }
}
