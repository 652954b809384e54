// Split-K causal GQA attention for decode, part 2: merges the per-block (m, l, acc) of attention_split:
// M = max m_b, L = sum l_b exp(m_b - M), out = sum acc_b exp(m_b - M) / L over the blocks
// 0 .. ceil(len / block) of each (head, token), len = min(positions[t] + 1, ctx).
// The blocks are spread over the workgroup's lanes (M and L by one workgroup reduction of (m, l) pairs;
// acc by 16 groups of 8 lanes, a workgroup per 32 dims, each group a share of the blocks, 16 bytes a lane
// a load, eight loads in flight a lane), so no lane walks all blocks serially.

struct Params {
    heads: u32,    // query heads
    head_dim: u32, // d, a multiple of 8, at most 256
    tokens: u32,   // T
    ctx: u32,      // positions the cache holds
    blocks: u32,   // ceil(ctx / block), the partial's block stride
    block: u32,    // positions per block of attention_split
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> partial: array<vec4<f32>>; // [T, heads, blocks, 4 + d] (m, l, 0, 0, acc)
@group(0) @binding(2) var<storage, read> positions: array<u32>;     // [T] position of each query token
@group(0) @binding(3) var<storage, read_write> out: array<vec4<f32>>; // [T, heads, d] f32

const LANES: u32 = 128u;
const NEG: f32 = -3.0e38;
const SLICE: u32 = 8u;              // vec4 of dims per workgroup (32 dims)
const GROUPS: u32 = LANES / SLICE; // lanes per dim vec4, each a share of the blocks

var<workgroup> red: array<vec2<f32>, LANES>; // (m, l) pairs
var<workgroup> accs: array<vec4<f32>, LANES>;

// (m, l) merged: max, and the sums rescaled to it.
fn merge(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
    let m = max(a.x, b.x);
    return vec2<f32>(m, a.y * exp(a.x - m) + b.y * exp(b.x - m));
}

// One workgroup per (head, token, slice of 32 dims): x = head, y = token, z = slice.
@compute @workgroup_size(128)
fn attention_combine(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let h = wg.x;
    let t = wg.y;
    let d4 = p.head_dim / 4u;
    let stride4 = d4 + 1u;
    let len = min(positions[t] + 1u, p.ctx);
    let nb = (len + p.block - 1u) / p.block;
    let base = (t * p.heads + h) * p.blocks * stride4;
    // M and L in one pass: each lane merges its blocks, then a tree over the lanes.
    var ml = vec2<f32>(NEG, 0.0);
    for (var b = li; b < nb; b += LANES) {
        ml = merge(ml, partial[base + b * stride4].xy);
    }
    red[li] = ml;
    workgroupBarrier();
    for (var off = LANES / 2u; off > 0u; off >>= 1u) {
        if (li < off) {
            red[li] = merge(red[li], red[li + off]);
        }
        workgroupBarrier();
    }
    let mm = red[0].x;
    let ll = red[0].y;

    // Lane li: dims 4i .. 4i + 4 (i = 8 * slice + li % 8) of blocks bg, bg + 16, ... (bg = li / 8), eight
    // independent loads per step.
    let i = wg.z * SLICE + li % SLICE;
    let bg = li / SLICE;
    var acc = vec4<f32>(0.0);
    if (i < d4) {
        for (var b = bg; b < nb; b += 8u * GROUPS) {
            for (var u = 0u; u < 8u; u++) {
                let bb = b + u * GROUPS;
                if (bb < nb) {
                    let at = base + bb * stride4;
                    acc += partial[at + 1u + i] * exp(partial[at].x - mm);
                }
            }
        }
    }
    accs[li] = acc;
    workgroupBarrier();
    if (li < SLICE && i < d4) {
        var s = vec4<f32>(0.0);
        for (var g = 0u; g < GROUPS; g++) {
            s += accs[g * SLICE + li];
        }
        out[(t * p.heads + h) * d4 + i] = s / ll;
    }
}
