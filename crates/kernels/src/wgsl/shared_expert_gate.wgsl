// qwen35moe's shared expert joins the routed ones: out[t] += σ(w · u[t]) · s[t], the gate one scalar a token
// from the normed input u, s the shared expert's output.

struct Params {
    hidden: u32,
    tokens: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> u: array<f32>;            // [T, hidden] the FFN's normed input
@group(0) @binding(2) var<storage, read> w: array<f32>;            // [hidden] ffn_gate_inp_shexp
@group(0) @binding(3) var<storage, read> s: array<f32>;            // [T, hidden] the shared expert's output
@group(0) @binding(4) var<storage, read_write> out: array<f32>;    // [T, hidden] += σ(w·u)·s

const WG: u32 = 256u;
var<workgroup> red: array<f32, 256>;

// One workgroup per token.
@compute @workgroup_size(256)
fn shared_expert_gate(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let base = wg.x * p.hidden;
    var acc = 0.0;
    for (var i = li; i < p.hidden; i += WG) {
        acc += w[i] * u[base + i];
    }
    red[li] = acc;
    workgroupBarrier();
    for (var off = WG / 2u; off > 0u; off /= 2u) {
        if (li < off) {
            red[li] += red[li + off];
        }
        workgroupBarrier();
    }
    let gate = 1.0 / (1.0 + exp(-red[0]));
    for (var i = li; i < p.hidden; i += WG) {
        out[base + i] += gate * s[base + i];
    }
}
