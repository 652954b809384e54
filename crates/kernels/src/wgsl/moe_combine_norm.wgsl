// The end of a layer and the start of the next in one dispatch: the weighted sum of the k expert outputs
// plus the residual (as moe_combine: each expert output scaled by its weight, the k summed in pick order,
// then the residual), then the next RMSNorm of that row (as rms_norm): out = residual + sum_j w_j e_j;
// normed = (out * (1 / sqrt(mean(out^2) + eps))) * norm.
//
// One workgroup takes a whole row, so the kernel is bound by memory round trips, not bytes: rows are read
// as vec4 (H a multiple of 4), eight picks a step with every load issued before any is used, and two
// vec4 a lane a step (at H = 2048 a lane's whole share in one step).
//
// What the picks are added onto comes from the helper appended: moe_combine_plain.wgsl (the residual) for
// moe_combine_norm, moe_combine_shared.wgsl (the residual plus qwen35moe's σ-gated shared expert) for
// moe_combine_shared_norm.

struct Params {
    hidden: u32, // H, a multiple of 4
    k: u32,      // picks per token
    tokens: u32, // T
    eps: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> experts: array<vec4<f32>>;      // [T, k, H] f32
@group(0) @binding(2) var<storage, read> weights: array<f32>;            // [T, k] f32
@group(0) @binding(3) var<storage, read> residual: array<vec4<f32>>;     // [T, H] f32
@group(0) @binding(4) var<storage, read> norm: array<vec4<f32>>;         // [H] f32
// `out` and `normed` ([T, H] f32 each, written) are declared by the helper appended, after its inputs.

const WG: u32 = 256u;

// Pick j's weighted term at vec4 i of token t's row; picks past k read the last pick with weight 0 (so
// the loads need no branch) and add exactly nothing.
fn term(t: u32, j: u32, i: u32, h4: u32) -> vec4<f32> {
    let e = t * p.k + min(j, p.k - 1u);
    let w = select(0.0, weights[e], j < p.k);
    return experts[e * h4 + i] * w;
}

// residual + sum_j w_j e_j at vec4 i of token t's row, the k terms added in pick order (the residual's
// term from `residual_term`).
fn combined(t: u32, i: u32, h4: u32) -> vec4<f32> {
    var sum = vec4<f32>(0.0);
    for (var j = 0u; j < p.k; j += 8u) {
        let a = term(t, j, i, h4);
        let b = term(t, j + 1u, i, h4);
        let c = term(t, j + 2u, i, h4);
        let d = term(t, j + 3u, i, h4);
        let e = term(t, j + 4u, i, h4);
        let f = term(t, j + 5u, i, h4);
        let g = term(t, j + 6u, i, h4);
        let h = term(t, j + 7u, i, h4);
        sum += a;
        sum += b;
        sum += c;
        sum += d;
        sum += e;
        sum += f;
        sum += g;
        sum += h;
    }
    return sum + residual_term(t, i, h4);
}

// One workgroup per token; each invocation writes and later rereads only its own elements of out.
@compute @workgroup_size(256)
fn moe_combine_norm(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let t = wg.x;
    let h4 = p.hidden / 4u;
    let row = t * h4;
    begin_row(li, t, h4);
    // The first step's two vec4 and their norm weights stay in registers (at H = 2048 a lane's whole
    // share), the weights loaded before the reduction: after it, nothing waits on memory.
    let n0 = norm[min(li, h4 - 1u)];
    let n1 = norm[min(li + WG, h4 - 1u)];
    var kept = array<vec4<f32>, 2>(vec4<f32>(0.0), vec4<f32>(0.0));
    var ss = 0.0;
    for (var i = li; i < h4; i += 2u * WG) {
        let i1 = min(i + WG, h4 - 1u);
        let v0 = combined(t, i, h4);
        let v1 = combined(t, i1, h4);
        if (i == li) {
            kept = array<vec4<f32>, 2>(v0, v1);
        }
        out[row + i] = v0;
        ss += dot(v0, v0);
        if (i + WG < h4) {
            out[row + i1] = v1;
            ss += dot(v1, v1);
        }
    }
    let scale = rms_scale(ss, li, WG, p.hidden, p.eps);
    if (li < h4) {
        normed[row + li] = (kept[0] * scale) * n0;
    }
    if (li + WG < h4) {
        normed[row + li + WG] = (kept[1] * scale) * n1;
    }
    for (var i = li + 2u * WG; i < h4; i += WG) {
        normed[row + i] = (out[row + i] * scale) * norm[i];
    }
}
