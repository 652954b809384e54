// Causal GQA attention over an f16 KV cache, one query token per (head, token) workgroup:
// out = softmax(q . K^T * scale) V over cache positions 0..=positions[t]; kv head = head / (heads / kv_heads)
// (ggml's broadcast). Keys go in chunks of 128 (one per invocation) with a running max and sum
// (online softmax), so any length up to the cache size works with no scratch buffer.
// Loops step 4 keys / 4 dims at a time: besides fewer branches on GPUs, this keeps lavapipe under its
// loop limit (Mesa gallivm LP_MAX_TGSI_LOOP_ITERATIONS: 65,535 iterations shared by every loop of an
// invocation), which silently cut the one-key-per-step version short past ~31,000 positions.
// For one decode token, attention_split + attention_combine spread the keys over many workgroups.
enable f16;

struct Params {
    heads: u32,    // query heads
    kv_heads: u32, // key/value heads, divides heads
    head_dim: u32, // d, at most 256
    tokens: u32,   // T
    ctx: u32,      // positions the cache holds
    scale: f32,    // 1 / sqrt(d)
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;            // [T, heads, d] f32
@group(0) @binding(2) var<storage, read> k: array<f16>;            // [ctx, kv_heads, d] f16
@group(0) @binding(3) var<storage, read> v: array<f16>;            // [ctx, kv_heads, d] f16
@group(0) @binding(4) var<storage, read> positions: array<u32>;    // [T] position of each query token
@group(0) @binding(5) var<storage, read_write> out: array<f32>;    // [T, heads, d] f32

const CHUNK: u32 = 128u;
const NEG: f32 = -3.0e38;

var<workgroup> qs: array<f32, 256>;
var<workgroup> ps: array<f32, CHUNK>;
var<workgroup> red: array<f32, CHUNK>;
var<workgroup> wlen: u32;

// v[base + i] as f32, or 0 past the head dim.
fn v_at(base: u32, i: u32, d: u32) -> f32 {
    if (i < d) {
        return f32(v[base + i]);
    }
    return 0.0;
}

fn reduce_max(li: u32, x: f32) -> f32 {
    red[li] = x;
    workgroupBarrier();
    for (var off = CHUNK / 2u; off > 0u; off >>= 1u) {
        if (li < off) {
            red[li] = max(red[li], red[li + off]);
        }
        workgroupBarrier();
    }
    let m = red[0];
    workgroupBarrier();
    return m;
}

fn reduce_sum(li: u32, x: f32) -> f32 {
    red[li] = x;
    workgroupBarrier();
    for (var off = CHUNK / 2u; off > 0u; off >>= 1u) {
        if (li < off) {
            red[li] += red[li + off];
        }
        workgroupBarrier();
    }
    let s = red[0];
    workgroupBarrier();
    return s;
}

@compute @workgroup_size(128)
fn attention(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let h = wg.x;
    let t = wg.y;
    let d = p.head_dim;
    let kvh = h / (p.heads / p.kv_heads);
    let qbase = (t * p.heads + h) * d;
    for (var i = li; i < d; i += CHUNK) {
        qs[i] = q[qbase + i];
    }
    if (li == 0u) {
        wlen = min(positions[t] + 1u, p.ctx);
    }
    let len = workgroupUniformLoad(&wlen);
    let row = p.kv_heads * d; // cache stride per position
    let d0 = li;
    let d1 = li + CHUNK;
    var m = NEG;
    var l = 0.0; // this invocation's share of the softmax denominator
    var acc0 = 0.0;
    var acc1 = 0.0;
    for (var c = 0u; c < len; c += CHUNK) {
        let j = c + li;
        var s = NEG;
        if (j < len) {
            let kb = j * row + kvh * d;
            var dotv = 0.0;
            var i = 0u;
            for (; i + 4u <= d; i += 4u) {
                dotv += qs[i] * f32(k[kb + i]) + qs[i + 1u] * f32(k[kb + i + 1u])
                    + qs[i + 2u] * f32(k[kb + i + 2u]) + qs[i + 3u] * f32(k[kb + i + 3u]);
            }
            for (; i < d; i++) {
                dotv += qs[i] * f32(k[kb + i]);
            }
            s = dotv * p.scale;
        }
        let m_new = max(m, reduce_max(li, s));
        let alpha = exp(m - m_new);
        var pj = 0.0;
        if (j < len) {
            pj = exp(s - m_new);
        }
        ps[li] = pj;
        l = l * alpha + pj;
        workgroupBarrier();
        acc0 *= alpha;
        acc1 *= alpha;
        let n = min(CHUNK, len - c);
        let vb = c * row + kvh * d;
        var jj = 0u;
        for (; jj + 4u <= n; jj += 4u) {
            for (var u = 0u; u < 4u; u++) {
                acc0 += ps[jj + u] * v_at(vb + (jj + u) * row, d0, d);
                acc1 += ps[jj + u] * v_at(vb + (jj + u) * row, d1, d);
            }
        }
        for (; jj < n; jj++) {
            acc0 += ps[jj] * v_at(vb + jj * row, d0, d);
            acc1 += ps[jj] * v_at(vb + jj * row, d1, d);
        }
        m = m_new;
        workgroupBarrier();
    }
    let total = reduce_sum(li, l);
    let obase = (t * p.heads + h) * d;
    if (d0 < d) {
        out[obase + d0] = acc0 / total;
    }
    if (d1 < d) {
        out[obase + d1] = acc1 / total;
    }
}
