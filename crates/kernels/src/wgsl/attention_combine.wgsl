// Split-K causal GQA attention for decode, part 2: merges the per-block (m, l, acc) of attention_split:
// M = max m_b, L = sum l_b exp(m_b - M), out = sum acc_b exp(m_b - M) / L over the blocks
// 0 .. ceil(len / 128) of each (head, token), len = min(positions[t] + 1, ctx).

struct Params {
    heads: u32,    // query heads
    head_dim: u32, // d
    tokens: u32,   // T
    ctx: u32,      // positions the cache holds
    blocks: u32,   // ceil(ctx / 128), the partial's block stride
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> partial: array<f32>;      // [T, heads, blocks, d + 2] (m, l, acc)
@group(0) @binding(2) var<storage, read> positions: array<u32>;    // [T] position of each query token
@group(0) @binding(3) var<storage, read_write> out: array<f32>;    // [T, heads, d] f32

// One workgroup per (head, token); invocation i takes dims i, i + 128, ...
@compute @workgroup_size(128)
fn attention_combine(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let h = wg.x;
    let t = wg.y;
    let d = p.head_dim;
    let stride = d + 2u;
    let len = min(positions[t] + 1u, p.ctx);
    let nb = (len + 127u) / 128u;
    let base = (t * p.heads + h) * p.blocks * stride;
    var m = -3.0e38;
    for (var b = 0u; b < nb; b++) {
        m = max(m, partial[base + b * stride]);
    }
    var l = 0.0;
    for (var b = 0u; b < nb; b++) {
        l += partial[base + b * stride + 1u] * exp(partial[base + b * stride] - m);
    }
    for (var i = li; i < d; i += 128u) {
        var acc = 0.0;
        for (var b = 0u; b < nb; b++) {
            acc += partial[base + b * stride + 2u + i] * exp(partial[base + b * stride] - m);
        }
        out[(t * p.heads + h) * d + i] = acc / l;
    }
}
