// Per-head RMSNorm (QK-norm) then NeoX RoPE, llama.cpp order: h = (x * (1/sqrt(mean(x^2)+eps))) * w;
// out[i] = h[i]*cos - h[i+d/2]*sin; out[i+d/2] = h[i]*sin + h[i+d/2]*cos (ggml rope_neox).
// cos/sin come from the host, computed in f32 as ggml does (see cpu::rope_cos_sin).

struct Params {
    heads: u32,    // heads per token
    head_dim: u32, // d, even, at most 256
    tokens: u32,   // T
    eps: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;            // [T, heads, d] f32
@group(0) @binding(2) var<storage, read> w: array<f32>;            // [d] f32 norm weight
@group(0) @binding(3) var<storage, read> rope: array<vec2<f32>>;   // [T, d/2] (cos, sin)
@group(0) @binding(4) var<storage, read_write> out: array<f32>;    // [T, heads, d] f32


// One workgroup per (head, token); invocation i handles the pair (i, i + d/2).
@compute @workgroup_size(128)
fn qk_norm_rope(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let half = p.head_dim / 2u;
    let t = wg.y;
    let base = (t * p.heads + wg.x) * p.head_dim;
    var a = 0.0;
    var b = 0.0;
    if (li < half) {
        a = x[base + li];
        b = x[base + li + half];
    }
    let scale = rms_scale(a * a + b * b, li, 128u, p.head_dim, p.eps);
    if (li < half) {
        let h0 = (a * scale) * w[li];
        let h1 = (b * scale) * w[li + half];
        let cs = rope[t * half + li];
        out[base + li] = h0 * cs.x - h1 * cs.y;
        out[base + li + half] = h0 * cs.y + h1 * cs.x;
    }
}
