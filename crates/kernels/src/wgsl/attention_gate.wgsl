// qwen35moe's attention output gate: o[t, h, i] *= σ(g[t, h, i]), the gate the second half of each head's
// 2·d query rows (qg [T, heads, 2·d]: the query, then its gate).

struct Params {
    heads: u32,
    head_dim: u32, // d
    tokens: u32,
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> qg: array<f32>;           // [T, heads, 2·d]
@group(0) @binding(2) var<storage, read_write> o: array<f32>;      // [T, heads, d]

@compute @workgroup_size(256)
fn attention_gate(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n = p.tokens * p.heads * p.head_dim;
    let e = gid.x;
    if (e >= n) {
        return;
    }
    let head = e / p.head_dim;
    let g = qg[head * 2u * p.head_dim + p.head_dim + e % p.head_dim];
    o[e] = o[e] / (1.0 + exp(-g));
}
