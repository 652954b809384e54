// Per-head RMSNorm then partial NeoX RoPE (qwen35moe's gated attention): h = (x * (1/sqrt(mean(x^2)+eps))) * w
// over the head's d values; the first r dims turn as pairs (i, i + r/2) with the host's (cos, sin) for
// pair i (cpu::rope_cos_sin over r dims; a pair IMROPE's sections leave still gets (1, 0)); dims r..d stay
// as normed. Heads are read `in_stride` floats apart (2·d for the query rows interleaved with their gate
// rows), written packed.

struct Params {
    heads: u32,     // heads per token
    head_dim: u32,  // d, at most 256
    tokens: u32,    // T
    eps: f32,
    rope_dims: u32, // r, even, at most d
    in_stride: u32, // floats from one head's input to the next (a token's heads are contiguous)
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;            // [T, heads, in_stride] f32
@group(0) @binding(2) var<storage, read> w: array<f32>;            // [d] f32 norm weight
@group(0) @binding(3) var<storage, read> rope: array<vec2<f32>>;   // [T, r/2] (cos, sin)
@group(0) @binding(4) var<storage, read_write> out: array<f32>;    // [T, heads, d] f32

var<workgroup> normed: array<f32, 256>;

// One workgroup per (head, token); lane i holds dims i and i + 128.
@compute @workgroup_size(128)
fn qk_norm_rope_partial(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let t = wg.y;
    let d = p.head_dim;
    let src = (t * p.heads + wg.x) * p.in_stride;
    let dst = (t * p.heads + wg.x) * d;
    var a = 0.0;
    var b = 0.0;
    if (li < d) {
        a = x[src + li];
    }
    if (li + 128u < d) {
        b = x[src + li + 128u];
    }
    let scale = rms_scale(a * a + b * b, li, 128u, d, p.eps);
    if (li < d) {
        normed[li] = (a * scale) * w[li];
    }
    if (li + 128u < d) {
        normed[li + 128u] = (b * scale) * w[li + 128u];
    }
    workgroupBarrier();
    let half = p.rope_dims / 2u;
    for (var e = li; e < d; e += 128u) {
        var v = normed[e];
        if (e < half) {
            let cs = rope[t * half + e];
            v = normed[e] * cs.x - normed[e + half] * cs.y;
        } else if (e < p.rope_dims) {
            let cs = rope[t * half + e - half];
            v = normed[e - half] * cs.y + normed[e] * cs.x;
        }
        out[dst + e] = v;
    }
}
