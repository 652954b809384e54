// The attention block's per-head step in one dispatch (what qk_norm_rope twice and kv_store twice do):
// from one token's stacked projections [Q heads | K heads | V heads],
// Q: per-head RMSNorm with q_norm then NeoX RoPE -> q_out (f32);
// K: the same with k_norm -> the K cache at the token's position (f16);
// V: copied -> the V cache at the token's position (f16). Positions at or past ctx are not stored.
// Same arithmetic as qk_norm_rope (llama.cpp order) and kv_store (f16 round to nearest even).
// With in_squares > 0 the projections came from the residual stream times the attention norm's weight, not
// yet scaled (fused decode: expert_q8_gemv_combine wrote that row and `squares`, per-block sums of the
// stream's squares): every head first scales its values by 1 / sqrt(sum(squares) / hidden + eps), the
// attention norm's scale (a GEMV is linear in its input, so scaling after it is scaling before it).
enable f16;

struct Params {
    heads: u32,    // query heads per token
    kv_heads: u32, // key/value heads per token
    head_dim: u32, // d, even, at most 256
    tokens: u32,   // T
    eps: f32,
    ctx: u32,      // positions the caches hold
    in_squares: u32, // squares per token (0: the projections are already normed)
    hidden: u32,     // the attention norm's length (with in_squares)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;          // [T, heads + 2 kv_heads, d] f32
@group(0) @binding(2) var<storage, read> q_norm: array<f32>;       // [d] f32
@group(0) @binding(3) var<storage, read> k_norm: array<f32>;       // [d] f32
@group(0) @binding(4) var<storage, read> rope: array<vec2<f32>>;   // [T, d/2] (cos, sin)
@group(0) @binding(5) var<storage, read> positions: array<u32>;    // [T]
@group(0) @binding(6) var<storage, read> squares: array<f32>;      // [T, in_squares] f32 (in_squares > 0)
@group(0) @binding(7) var<storage, read_write> q_out: array<f32>;  // [T, heads, d] f32
@group(0) @binding(8) var<storage, read_write> k_cache: array<f16>; // [ctx, kv_heads, d] f16
@group(0) @binding(9) var<storage, read_write> v_cache: array<f16>; // [ctx, kv_heads, d] f16


// One workgroup per (stacked head, token); invocation i handles the pair (i, i + d/2).
@compute @workgroup_size(128)
fn qkv_rope_store(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let d = p.head_dim;
    let half = d / 2u;
    let t = wg.y;
    let head = wg.x;
    let base = (t * (p.heads + 2u * p.kv_heads) + head) * d;
    let pos = positions[t];
    let kv_row = pos * p.kv_heads * d;
    var a = 0.0;
    var b = 0.0;
    if (li < half) {
        a = qkv[base + li];
        b = qkv[base + li + half];
    }
    if (p.in_squares != 0u) {
        var ss = 0.0;
        for (var i = li; i < p.in_squares; i += 128u) {
            ss += squares[t * p.in_squares + i];
        }
        let in_scale = rms_scale(ss, li, 128u, p.hidden, p.eps);
        a *= in_scale;
        b *= in_scale;
        // rms_scale's scratch is used again below.
        workgroupBarrier();
    }
    if (head >= p.heads + p.kv_heads) {
        // V: no norm, no rotation.
        if (li < half && pos < p.ctx) {
            let o = kv_row + (head - p.heads - p.kv_heads) * d;
            v_cache[o + li] = f16(a);
            v_cache[o + li + half] = f16(b);
        }
        return;
    }
    let scale = rms_scale(a * a + b * b, li, 128u, d, p.eps);
    if (li >= half) {
        return;
    }
    let cs = rope[t * half + li];
    if (head < p.heads) {
        let h0 = (a * scale) * q_norm[li];
        let h1 = (b * scale) * q_norm[li + half];
        let o = (t * p.heads + head) * d;
        q_out[o + li] = h0 * cs.x - h1 * cs.y;
        q_out[o + li + half] = h0 * cs.y + h1 * cs.x;
    } else if (pos < p.ctx) {
        let h0 = (a * scale) * k_norm[li];
        let h1 = (b * scale) * k_norm[li + half];
        let o = kv_row + (head - p.heads) * d;
        k_cache[o + li] = f16(h0 * cs.x - h1 * cs.y);
        k_cache[o + li + half] = f16(h0 * cs.y + h1 * cs.x);
    }
}
