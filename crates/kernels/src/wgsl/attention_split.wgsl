// Split-K causal GQA attention for decode, part 1 (flash-decoding): one workgroup per (kv head, block of
// 128 cache positions, token) computes, for each of the G = heads / kv_heads query heads sharing that
// kv head, the block's running max m, sum l = sum exp(s - m) and unnormalised sum acc = sum exp(s - m) v,
// with s = q . k * scale over positions block*128 .. min(block*128 + 128, positions[t] + 1).
// K and V are read once for all G heads. attention_combine merges the blocks. Blocks past the token's
// length write nothing (the combine never reads them).
enable f16;

struct Params {
    heads: u32,    // query heads
    kv_heads: u32, // key/value heads; heads / kv_heads <= 8
    head_dim: u32, // d, a multiple of 4, at most 256
    tokens: u32,   // T
    ctx: u32,      // positions the cache holds
    scale: f32,    // 1 / sqrt(d)
    blocks: u32,   // ceil(ctx / 128), the partial's block stride
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;      // [T, heads, d] f32
@group(0) @binding(2) var<storage, read> k: array<vec4<f16>>;      // [ctx, kv_heads, d] f16
@group(0) @binding(3) var<storage, read> v: array<f16>;            // [ctx, kv_heads, d] f16
@group(0) @binding(4) var<storage, read> positions: array<u32>;    // [T] position of each query token
@group(0) @binding(5) var<storage, read_write> partial: array<f32>; // [T, heads, blocks, d + 2] (m, l, acc)

const BLOCK: u32 = 128u;
const GMAX: u32 = 8u;
const NEG: f32 = -3.0e38;

var<workgroup> qs: array<vec4<f32>, 512>;       // [G, d / 4]
var<workgroup> red: array<f32, 1024>;           // [G, BLOCK]
var<workgroup> wlen: u32;

// Reduces red[g * BLOCK ..] for every g < G to red[g * BLOCK] (max or sum).
fn reduce(li: u32, g_count: u32, is_max: bool) {
    workgroupBarrier();
    for (var off = BLOCK / 2u; off > 0u; off >>= 1u) {
        if (li < off) {
            for (var g = 0u; g < g_count; g++) {
                let a = red[g * BLOCK + li];
                let b = red[g * BLOCK + li + off];
                red[g * BLOCK + li] = select(a + b, max(a, b), is_max);
            }
        }
        workgroupBarrier();
    }
}

@compute @workgroup_size(128)
fn attention_split(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let kvh = wg.x;
    let blk = wg.y;
    let t = wg.z;
    if (li == 0u) {
        wlen = min(positions[t] + 1u, p.ctx);
    }
    let len = workgroupUniformLoad(&wlen);
    let start = blk * BLOCK;
    if (start >= len) {
        return;
    }
    let n = min(BLOCK, len - start);
    let d = p.head_dim;
    let d4 = d / 4u;
    let g_count = p.heads / p.kv_heads;
    let h0 = kvh * g_count;
    for (var i = li; i < g_count * d4; i += BLOCK) {
        qs[i] = q[(t * p.heads + h0) * d4 + i];
    }
    workgroupBarrier();

    // Scores: invocation li takes position start + li for every head of the group.
    var s: array<f32, GMAX>;
    for (var g = 0u; g < GMAX; g++) {
        s[g] = NEG;
    }
    if (li < n) {
        let kb = ((start + li) * p.kv_heads + kvh) * d4;
        var dots: array<f32, GMAX>;
        for (var g = 0u; g < GMAX; g++) {
            dots[g] = 0.0;
        }
        for (var i = 0u; i < d4; i++) {
            let kv = vec4<f32>(k[kb + i]);
            for (var g = 0u; g < GMAX; g++) {
                if (g < g_count) {
                    dots[g] += dot(qs[g * d4 + i], kv);
                }
            }
        }
        for (var g = 0u; g < GMAX; g++) {
            s[g] = dots[g] * p.scale;
        }
    }
    for (var g = 0u; g < GMAX; g++) {
        if (g < g_count) {
            red[g * BLOCK + li] = s[g];
        }
    }
    reduce(li, g_count, true);
    var m: array<f32, GMAX>;
    for (var g = 0u; g < GMAX; g++) {
        m[g] = 0.0;
        if (g < g_count) {
            m[g] = red[g * BLOCK];
        }
    }
    workgroupBarrier();
    for (var g = 0u; g < GMAX; g++) {
        if (g < g_count) {
            var e = 0.0;
            if (li < n) {
                e = exp(s[g] - m[g]);
            }
            red[g * BLOCK + li] = e;
        }
    }
    workgroupBarrier();

    // Weighted V: invocation li takes dims li and li + 128 for every head of the group.
    var acc0: array<f32, GMAX>;
    var acc1: array<f32, GMAX>;
    for (var g = 0u; g < GMAX; g++) {
        acc0[g] = 0.0;
        acc1[g] = 0.0;
    }
    let d0 = li;
    let d1 = li + BLOCK;
    for (var j = 0u; j < n; j++) {
        let vb = ((start + j) * p.kv_heads + kvh) * d;
        var v0 = 0.0;
        var v1 = 0.0;
        if (d0 < d) {
            v0 = f32(v[vb + d0]);
        }
        if (d1 < d) {
            v1 = f32(v[vb + d1]);
        }
        for (var g = 0u; g < GMAX; g++) {
            if (g < g_count) {
                let e = red[g * BLOCK + j];
                acc0[g] += e * v0;
                acc1[g] += e * v1;
            }
        }
    }
    let stride = d + 2u;
    for (var g = 0u; g < GMAX; g++) {
        if (g < g_count) {
            let base = ((t * p.heads + h0 + g) * p.blocks + blk) * stride;
            if (d0 < d) {
                partial[base + 2u + d0] = acc0[g];
            }
            if (d1 < d) {
                partial[base + 2u + d1] = acc1[g];
            }
        }
    }
    // Block sums: after every invocation has read the weights above.
    workgroupBarrier();
    reduce(li, g_count, false);
    if (li == 0u) {
        for (var g = 0u; g < GMAX; g++) {
            if (g < g_count) {
                let base = ((t * p.heads + h0 + g) * p.blocks + blk) * stride;
                partial[base] = m[g];
                partial[base + 1u] = red[g * BLOCK];
            }
        }
    }
}
