// Split-K causal GQA attention for decode, part 2: merges the per-block (m, l, acc) of attention_split:
// M = max m_b, L = sum l_b exp(m_b - M), out = sum acc_b exp(m_b - M) / L over the blocks
// 0 .. ceil(len / block) of each (head, token), len = min(positions[t] + 1, ctx).
// The blocks are spread over the workgroup's lanes (M and L by one workgroup reduction of (m, l) pairs;
// acc by 16 groups of 8 lanes, a workgroup per 32 dims, each group a share of the blocks, 16 bytes a lane
// a load, eight loads in flight a lane, the first eight issued before the (m, l) tree), so no lane walks
// all blocks serially.

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

// Block bb's acc chunk i and its m, or zeros and NEG (adding nothing) for a lane past the dims or a block
// past the token's length.
fn acc_at(base: u32, bb: u32, nb: u32, stride4: u32, i: u32, live: bool) -> vec4<f32> {
    if (live && bb < nb) {
        return partial[base + bb * stride4 + 1u + i];
    }
    return vec4<f32>(0.0);
}

fn m_at(base: u32, bb: u32, nb: u32, stride4: u32, live: bool) -> f32 {
    if (live && bb < nb) {
        return partial[base + bb * stride4].x;
    }
    return NEG;
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
    // Lane li: dims 4i .. 4i + 4 (i = 8 * slice + li % 8) of blocks bg, bg + 16, ... (bg = li / 8). Its
    // first eight blocks' chunks and m are loaded here, before the (m, l) tree, so that their latency
    // overlaps it (written out, not an array in a loop: see attention_split.wgsl).
    let i = wg.z * SLICE + li % SLICE;
    let bg = li / SLICE;
    let live = i < d4;
    let a0 = acc_at(base, bg, nb, stride4, i, live);
    let a1 = acc_at(base, bg + GROUPS, nb, stride4, i, live);
    let a2 = acc_at(base, bg + 2u * GROUPS, nb, stride4, i, live);
    let a3 = acc_at(base, bg + 3u * GROUPS, nb, stride4, i, live);
    let a4 = acc_at(base, bg + 4u * GROUPS, nb, stride4, i, live);
    let a5 = acc_at(base, bg + 5u * GROUPS, nb, stride4, i, live);
    let a6 = acc_at(base, bg + 6u * GROUPS, nb, stride4, i, live);
    let a7 = acc_at(base, bg + 7u * GROUPS, nb, stride4, i, live);
    let m0 = m_at(base, bg, nb, stride4, live);
    let m1 = m_at(base, bg + GROUPS, nb, stride4, live);
    let m2 = m_at(base, bg + 2u * GROUPS, nb, stride4, live);
    let m3 = m_at(base, bg + 3u * GROUPS, nb, stride4, live);
    let m4 = m_at(base, bg + 4u * GROUPS, nb, stride4, live);
    let m5 = m_at(base, bg + 5u * GROUPS, nb, stride4, live);
    let m6 = m_at(base, bg + 6u * GROUPS, nb, stride4, live);
    let m7 = m_at(base, bg + 7u * GROUPS, nb, stride4, live);

    // M and L in one pass: each lane merges its blocks, then a tree over the lanes, four a step (then a
    // last pair: 128 lanes take 4 barriers).
    var ml = vec2<f32>(NEG, 0.0);
    for (var b = li; b < nb; b += LANES) {
        ml = merge(ml, partial[base + b * stride4].xy);
    }
    red[li] = ml;
    workgroupBarrier();
    var n = LANES;
    for (; n >= 4u; n /= 4u) {
        let off = n / 4u;
        if (li < off) {
            red[li] = merge(merge(red[li], red[li + off]), merge(red[li + 2u * off], red[li + 3u * off]));
        }
        workgroupBarrier();
    }
    if (n == 2u) {
        if (li == 0u) {
            red[0] = merge(red[0], red[1]);
        }
        workgroupBarrier();
    }
    let mm = red[0].x;
    let ll = red[0].y;

    // The blocks in the order as before: the loaded eight, then eight more a step.
    var acc = vec4<f32>(0.0);
    acc += a0 * exp(m0 - mm);
    acc += a1 * exp(m1 - mm);
    acc += a2 * exp(m2 - mm);
    acc += a3 * exp(m3 - mm);
    acc += a4 * exp(m4 - mm);
    acc += a5 * exp(m5 - mm);
    acc += a6 * exp(m6 - mm);
    acc += a7 * exp(m7 - mm);
    if (live) {
        for (var b = bg + 8u * GROUPS; b < nb; b += 8u * GROUPS) {
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
