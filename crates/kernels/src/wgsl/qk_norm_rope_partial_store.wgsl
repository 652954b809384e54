// qwen35moe's gated attention, its queries and keys in one dispatch: per head, RMSNorm over its d values,
// h = (x * (1/sqrt(mean(x^2)+eps))) * w, then partial NeoX RoPE: the first r dims turn as pairs (i, i + r/2)
// with the host's (cos, sin) for pair i (cpu::rope_cos_sin over r dims; a pair IMROPE's sections leave still
// gets (1, 0)); dims r..d stay as normed. The query heads are read `q_stride` floats apart (2·d: their rows
// between the gate rows) and written packed into `queries`; the key heads are read packed and stored as f16
// into the key cache at the token's position (positions at or past ctx are skipped).
enable f16;

struct Params {
    heads: u32,     // query heads per token
    kv_heads: u32,  // key heads per token
    head_dim: u32,  // d, at most 256
    tokens: u32,    // T
    eps: f32,
    rope_dims: u32, // r, even, at most d
    q_stride: u32,  // floats from one query head's input to the next (a token's heads are contiguous)
    ctx: u32,       // positions the key cache holds
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> xq: array<f32>;            // [T, heads, q_stride] f32
@group(0) @binding(2) var<storage, read> xk: array<f32>;            // [T, kv_heads, d] f32
@group(0) @binding(3) var<storage, read> wq: array<f32>;            // [d] the query norm's weight
@group(0) @binding(4) var<storage, read> wk: array<f32>;            // [d] the key norm's weight
@group(0) @binding(5) var<storage, read> rope: array<vec2<f32>>;    // [T, r/2] (cos, sin)
@group(0) @binding(6) var<storage, read> positions: array<u32>;     // [T]
@group(0) @binding(7) var<storage, read_write> queries: array<f32>; // [T, heads, d] f32
@group(0) @binding(8) var<storage, read_write> keys: array<f16>;    // [ctx, kv_heads, d] f16

var<workgroup> normed: array<f32, 256>;

// Value i of the query or key inputs.
fn head_input(query: bool, i: u32) -> f32 {
    if (query) {
        return xq[i];
    }
    return xk[i];
}

// Dim i of the query or key norm's weight.
fn norm_weight(query: bool, i: u32) -> f32 {
    if (query) {
        return wq[i];
    }
    return wk[i];
}

// One workgroup per (head, token), the query heads first, then the key heads; lane i holds dims i and
// i + 128.
@compute @workgroup_size(128)
fn qk_norm_rope_partial_store(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let t = wg.y;
    let d = p.head_dim;
    let query = wg.x < p.heads; // the same in every lane of the workgroup
    let kh = wg.x - select(p.heads, 0u, query);
    let src = select((t * p.kv_heads + kh) * d, (t * p.heads + wg.x) * p.q_stride, query);
    var a = 0.0;
    var b = 0.0;
    var wa = 0.0;
    var wb = 0.0;
    if (li < d) {
        a = head_input(query, src + li);
        wa = norm_weight(query, li);
    }
    if (li + 128u < d) {
        b = head_input(query, src + li + 128u);
        wb = norm_weight(query, li + 128u);
    }
    let scale = rms_scale(a * a + b * b, li, 128u, d, p.eps);
    if (li < d) {
        normed[li] = (a * scale) * wa;
    }
    if (li + 128u < d) {
        normed[li + 128u] = (b * scale) * wb;
    }
    workgroupBarrier();
    let half = p.rope_dims / 2u;
    let pos = positions[t];
    for (var e = li; e < d; e += 128u) {
        var v = normed[e];
        if (e < half) {
            let cs = rope[t * half + e];
            v = normed[e] * cs.x - normed[e + half] * cs.y;
        } else if (e < p.rope_dims) {
            let cs = rope[t * half + e - half];
            v = normed[e - half] * cs.y + normed[e] * cs.x;
        }
        if (query) {
            queries[(t * p.heads + wg.x) * d + e] = v;
        } else if (pos < p.ctx) {
            keys[(pos * p.kv_heads + kh) * d + e] = f16(v);
        }
    }
}
