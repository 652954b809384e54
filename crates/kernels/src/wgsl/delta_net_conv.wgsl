// DeltaNet's causal depthwise conv over T tokens with its saved inputs, then SiLU (llama.cpp's
// ssm_conv + silu): per channel c and token t, in llama.cpp's order (oldest tap first, the token last),
//   out[t, c] = silu(Σ_{i<K-1} state[i, c] · w[c, i] + x[t, c] · w[c, K-1]),
// then the state drops its oldest input and takes x[t, c]. One lane a channel: channels are
// independent, a channel's tokens follow each other.

struct Params {
    channels: u32, // C
    taps: u32,     // K (at least 1)
    tokens: u32,   // T
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;              // [T, C] projected inputs
@group(0) @binding(2) var<storage, read> w: array<f32>;              // [C, K] taps
@group(0) @binding(3) var<storage, read_write> state: array<f32>;    // [K-1, C] saved inputs, oldest first
@group(0) @binding(4) var<storage, read_write> out: array<f32>;      // [T, C]

@compute @workgroup_size(64)
fn delta_net_conv(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c = gid.x;
    if (c >= p.channels) {
        return;
    }
    let k = p.taps;
    for (var t = 0u; t < p.tokens; t++) {
        let xt = x[t * p.channels + c];
        var acc = 0.0;
        for (var i = 0u; i + 1u < k; i++) {
            acc += state[i * p.channels + c] * w[c * k + i];
        }
        acc += xt * w[c * k + k - 1u];
        out[t * p.channels + c] = acc / (1.0 + exp(-acc));
        for (var i = 0u; i + 2u < k; i++) {
            state[i * p.channels + c] = state[(i + 1u) * p.channels + c];
        }
        if (k > 1u) {
            state[(k - 2u) * p.channels + c] = xt;
        }
    }
}
