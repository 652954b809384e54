// Greedy pick: out[t] = index of the largest logit of row t, ties to the lower index.

struct Params {
    n: u32,      // row length (vocabulary)
    tokens: u32, // T
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;       // [T, n] f32
@group(0) @binding(2) var<storage, read_write> out: array<u32>;    // [T] u32

const WG: u32 = 256u;
var<workgroup> rv: array<f32, WG>;
var<workgroup> ri: array<u32, WG>;

// Keeps (v, i) as the best so far if v is larger, or if nothing is kept yet (indices come in increasing
// order, so the first of equal values stays).
fn take(v: f32, i: u32, bv: ptr<function, f32>, bi: ptr<function, u32>) {
    if (v > *bv || *bi == 0xffffffffu) {
        *bv = v;
        *bi = i;
    }
}

// One workgroup per row; each invocation scans a strided share in increasing index order.
@compute @workgroup_size(256)
fn argmax(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let base = wg.x * p.n;
    var bv = -3.4e38;
    var bi = 0xffffffffu;
    // Four values a step (WG apart, loads issued before any is used: one workgroup scans the whole row,
    // so its loop is bound by memory round trips), taken in increasing index order.
    for (var i = li; i < p.n; i += 4u * WG) {
        let last = p.n - 1u;
        let v0 = logits[base + i];
        let v1 = logits[base + min(i + WG, last)];
        let v2 = logits[base + min(i + 2u * WG, last)];
        let v3 = logits[base + min(i + 3u * WG, last)];
        take(v0, i, &bv, &bi);
        if (i + WG < p.n) {
            take(v1, i + WG, &bv, &bi);
        }
        if (i + 2u * WG < p.n) {
            take(v2, i + 2u * WG, &bv, &bi);
        }
        if (i + 3u * WG < p.n) {
            take(v3, i + 3u * WG, &bv, &bi);
        }
    }
    rv[li] = bv;
    ri[li] = bi;
    workgroupBarrier();
    for (var off = WG / 2u; off > 0u; off >>= 1u) {
        if (li < off) {
            let ov = rv[li + off];
            let oi = ri[li + off];
            if (oi != 0xffffffffu && (ri[li] == 0xffffffffu || ov > rv[li] || (ov == rv[li] && oi < ri[li]))) {
                rv[li] = ov;
                ri[li] = oi;
            }
        }
        workgroupBarrier();
    }
    if (li == 0u) {
        out[wg.x] = ri[0];
    }
}
