// DeltaNet's output norm, per row r of n values (a token's v head):
//   out[r, i] = (o[r, i] · (1 / sqrt(mean(o[r]²) + eps))) · w[i] · silu(z[r, i]).

struct Params {
    n: u32,    // row length S
    rows: u32, // T · H_v
    eps: f32,
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> o: array<f32>;            // [R, n]
@group(0) @binding(2) var<storage, read> z: array<f32>;            // [R, n] the gate
@group(0) @binding(3) var<storage, read> w: array<f32>;            // [n]
@group(0) @binding(4) var<storage, read_write> out: array<f32>;    // [R, n]

const WG: u32 = 256u;

// One workgroup per row.
@compute @workgroup_size(256)
fn gated_rms_norm(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let base = wg.x * p.n;
    var ss = 0.0;
    for (var i = li; i < p.n; i += WG) {
        let v = o[base + i];
        ss += v * v;
    }
    let scale = rms_scale(ss, li, WG, p.n, p.eps);
    for (var i = li; i < p.n; i += WG) {
        let g = z[base + i];
        out[base + i] = ((o[base + i] * scale) * w[i]) * (g / (1.0 + exp(-g)));
    }
}
