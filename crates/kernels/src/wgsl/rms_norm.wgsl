// RMSNorm per row, llama.cpp order: out = (x * (1 / sqrt(mean(x^2) + eps))) * w.

struct Params {
    n: u32,      // row length
    tokens: u32, // rows T
    eps: f32,
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;            // [T, n] f32
@group(0) @binding(2) var<storage, read> w: array<f32>;            // [n] f32
@group(0) @binding(3) var<storage, read_write> out: array<f32>;    // [T, n] f32

const WG: u32 = 256u;

// One workgroup per row.
@compute @workgroup_size(256)
fn rms_norm(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let base = wg.x * p.n;
    var ss = 0.0;
    for (var i = li; i < p.n; i += WG) {
        let v = x[base + i];
        ss += v * v;
    }
    let scale = rms_scale(ss, li, WG, p.n, p.eps);
    for (var i = li; i < p.n; i += WG) {
        out[base + i] = (x[base + i] * scale) * w[i];
    }
}
