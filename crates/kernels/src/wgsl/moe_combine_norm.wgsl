// The end of a layer and the start of the next in one dispatch: the weighted sum of the k expert outputs
// plus the residual (as moe_combine: each expert output scaled by its weight, the k summed in pick order,
// then the residual), then the next RMSNorm of that row (as rms_norm): out = residual + sum_j w_j e_j;
// normed = (out * (1 / sqrt(mean(out^2) + eps))) * norm.

struct Params {
    hidden: u32, // H
    k: u32,      // picks per token
    tokens: u32, // T
    eps: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> experts: array<f32>;      // [T, k, H] f32
@group(0) @binding(2) var<storage, read> weights: array<f32>;      // [T, k] f32
@group(0) @binding(3) var<storage, read> residual: array<f32>;     // [T, H] f32
@group(0) @binding(4) var<storage, read> norm: array<f32>;         // [H] f32
@group(0) @binding(5) var<storage, read_write> out: array<f32>;    // [T, H] f32
@group(0) @binding(6) var<storage, read_write> normed: array<f32>; // [T, H] f32

const WG: u32 = 256u;
var<workgroup> red: array<f32, WG>;

// residual + sum_j w_j e_j at element i of token t's row, the k terms added in pick order; the loads of
// four picks are issued before they are used (one workgroup takes a whole row, so it is bound by memory
// round trips).
fn combined(t: u32, i: u32) -> f32 {
    let e = t * p.k;
    var sum = 0.0;
    var j = 0u;
    for (; j + 4u <= p.k; j += 4u) {
        let a = experts[(e + j) * p.hidden + i] * weights[e + j];
        let b = experts[(e + j + 1u) * p.hidden + i] * weights[e + j + 1u];
        let c = experts[(e + j + 2u) * p.hidden + i] * weights[e + j + 2u];
        let d = experts[(e + j + 3u) * p.hidden + i] * weights[e + j + 3u];
        sum += a;
        sum += b;
        sum += c;
        sum += d;
    }
    for (; j < p.k; j++) {
        sum += experts[(e + j) * p.hidden + i] * weights[e + j];
    }
    return sum + residual[t * p.hidden + i];
}

// One workgroup per token, two elements a step; each invocation writes and later rereads only its own
// elements of out.
@compute @workgroup_size(256)
fn moe_combine_norm(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let t = wg.x;
    let row = t * p.hidden;
    var ss = 0.0;
    for (var i = li; i < p.hidden; i += 2u * WG) {
        let i1 = min(i + WG, p.hidden - 1u);
        let v0 = combined(t, i);
        let v1 = combined(t, i1);
        out[row + i] = v0;
        ss += v0 * v0;
        if (i + WG < p.hidden) {
            out[row + i1] = v1;
            ss += v1 * v1;
        }
    }
    red[li] = ss;
    workgroupBarrier();
    for (var off = WG / 2u; off > 0u; off >>= 1u) {
        if (li < off) {
            red[li] += red[li + off];
        }
        workgroupBarrier();
    }
    let scale = 1.0 / sqrt(red[0] / f32(p.hidden) + p.eps);
    for (var i = li; i < p.hidden; i += WG) {
        normed[row + i] = (out[row + i] * scale) * norm[i];
    }
}
