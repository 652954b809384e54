// Residual add then RMSNorm in one dispatch (a layer's attention output joining the residual stream before
// the FFN norm): h = a + b; out = (h * (1 / sqrt(mean(h^2) + eps))) * w, llama.cpp's order as rms_norm.

struct Params {
    n: u32,      // row length, a multiple of 4
    tokens: u32, // rows T
    eps: f32,
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<vec4<f32>>;         // [T, n] f32
@group(0) @binding(2) var<storage, read> b: array<vec4<f32>>;         // [T, n] f32
@group(0) @binding(3) var<storage, read> w: array<vec4<f32>>;         // [n] f32
@group(0) @binding(4) var<storage, read_write> h: array<vec4<f32>>;   // [T, n] f32, a + b
@group(0) @binding(5) var<storage, read_write> out: array<vec4<f32>>; // [T, n] f32

const WG: u32 = 256u;

// One workgroup per row, read as vec4, two a lane a step (their loads issued together: one workgroup takes
// a whole row, so it is bound by memory round trips; at n = 2048 a lane's share is one step); each
// invocation writes and later rereads only its own elements of h.
@compute @workgroup_size(256)
fn add_rms_norm(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let n4 = p.n / 4u;
    let base = wg.x * n4;
    // The first step's two vec4 and their norm weights stay in registers (at n = 2048 a lane's whole
    // share), the weights loaded before the reduction: after it, nothing waits on memory.
    let w0 = w[min(li, n4 - 1u)];
    let w1 = w[min(li + WG, n4 - 1u)];
    var kept = array<vec4<f32>, 2>(vec4<f32>(0.0), vec4<f32>(0.0));
    var ss = 0.0;
    for (var i = li; i < n4; i += 2u * WG) {
        let i1 = min(i + WG, n4 - 1u);
        let v0 = a[base + i] + b[base + i];
        let v1 = a[base + i1] + b[base + i1];
        if (i == li) {
            kept = array<vec4<f32>, 2>(v0, v1);
        }
        h[base + i] = v0;
        ss += dot(v0, v0);
        if (i + WG < n4) {
            h[base + i1] = v1;
            ss += dot(v1, v1);
        }
    }
    let scale = rms_scale(ss, li, WG, p.n, p.eps);
    if (li < n4) {
        out[base + li] = (kept[0] * scale) * w0;
    }
    if (li + WG < n4) {
        out[base + li + WG] = (kept[1] * scale) * w1;
    }
    for (var i = li + 2u * WG; i < n4; i += WG) {
        out[base + i] = (h[base + i] * scale) * w[i];
    }
}
