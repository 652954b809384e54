// Causal GQA attention over an f16 KV cache for a prefill chunk, as `attention` computes it:
// out = softmax(q . K^T * scale) V over cache positions 0..=positions[t], kv head = head / (heads / kv_heads).
// A workgroup takes one token and up to R = 8 query heads that share a kv head, so each key and value
// row it reads serves 8 query rows (`attention` reads them once per query head, 16 bits at a time). Keys
// go in tiles of KT = min(32, the power of two at most 2048 / d) through workgroup memory:
//   K tile in; scores of the R rows x KT keys (one or more a lane); each row's tile maximum by a tree;
//   the running maximum, the rescale of what came before (online softmax) and the probabilities; the V
//   tile in (over the K tile); each lane adds probability x value into a vec4 of output columns of its rows.
// Loops step several items at once or are written out: lavapipe stops an invocation's loops after 65,535
// iterations in all (see attention.wgsl), and at d = 128 a 16-key tile costs about 15 here (loop entries
// counted), some 38,000 for the model's 40,960 positions.
// Needs d a multiple of 16, at most 256 (the launcher falls back to `attention` otherwise). The tile loader is
// appended from attention_tile_load.wgsl.
enable f16;

struct Params {
    heads: u32,    // query heads
    kv_heads: u32, // key/value heads, divides heads
    head_dim: u32, // d, a multiple of 16, at most 256
    tokens: u32,   // T
    ctx: u32,      // positions the cache holds
    scale: f32,    // 1 / sqrt(d)
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;      // [T, heads, d] f32
@group(0) @binding(2) var<storage, read> k: array<vec4<f16>>;      // [ctx, kv_heads, d] f16
@group(0) @binding(3) var<storage, read> v: array<vec4<f16>>;      // [ctx, kv_heads, d] f16
@group(0) @binding(4) var<storage, read> positions: array<u32>;    // [T] position of each query token
@group(0) @binding(5) var<storage, read_write> out: array<vec4<f32>>; // [T, heads, d] f32

const WG: u32 = 128u;
const R: u32 = 8u;          // query rows (heads of one kv head) a workgroup
const TILE: u32 = 2048u;    // f16 values of a K or V tile
const MAX_KT: u32 = 32u;
const NEG: f32 = -3.0e38;

var<workgroup> qs: array<vec4<f32>, 512>;  // [R, d/4] the query rows
var<workgroup> kv: array<vec4<f16>, 576>;  // [KT, d/4 + 1] the K tile, then the V tile (rows padded)
var<workgroup> ps: array<f32, 256>;        // [R, KT] scores, then probabilities
var<workgroup> red: array<f32, 256>;       // [R, KT] the row-maximum tree; at the end the row sums
var<workgroup> mrow: array<f32, R>;        // running maximum of each row
var<workgroup> alpha: array<f32, R>;       // this tile's rescale of each row's earlier terms
var<workgroup> wlen: u32;

// Four terms of a query row against a key row of the tile, from vec4 i.
fn dot4(qb: u32, kb: u32, i: u32) -> vec4<f32> {
    return qs[qb + i] * vec4<f32>(kv[kb + i]) + qs[qb + i + 1u] * vec4<f32>(kv[kb + i + 1u])
        + qs[qb + i + 2u] * vec4<f32>(kv[kb + i + 2u]) + qs[qb + i + 3u] * vec4<f32>(kv[kb + i + 3u]);
}

// Query row r against key row j of the tile: d/4 vec4 (a multiple of 4), sixteen a step, then the rest.
fn score(r: u32, j: u32, d4: u32) -> f32 {
    let qb = r * d4;
    let kb = j * (d4 + 1u);
    var s = vec4<f32>(0.0);
    var i = 0u;
    for (; i + 16u <= d4; i += 16u) {
        s += (dot4(qb, kb, i) + dot4(qb, kb, i + 4u)) + (dot4(qb, kb, i + 8u) + dot4(qb, kb, i + 12u));
    }
    if (i + 8u <= d4) {
        s += dot4(qb, kb, i) + dot4(qb, kb, i + 4u);
        i += 8u;
    }
    if (i < d4) {
        s += dot4(qb, kb, i);
    }
    return (s.x + s.y) + (s.z + s.w);
}

// One step of the rows' maximum trees: entry e of R x half (R x KT / 2 <= 128: one a lane).
fn fold_max(e: u32, half: u32, kt: u32) {
    if (e < R * half) {
        let at = (e / half) * kt + e % half;
        red[at] = max(red[at], red[at + half]);
    }
}

// Row r's probabilities of keys j..j+3 times their value columns `col`.
fn pv(r: u32, j: u32, kt: u32, d4: u32, col: u32) -> vec4<f32> {
    let pr = r * kt + j;
    let vr = j * (d4 + 1u) + col;
    return ps[pr] * vec4<f32>(kv[vr]) + ps[pr + 1u] * vec4<f32>(kv[vr + d4 + 1u])
        + ps[pr + 2u] * vec4<f32>(kv[vr + 2u * (d4 + 1u)]) + ps[pr + 3u] * vec4<f32>(kv[vr + 3u * (d4 + 1u)]);
}

// workgroup_id.x = kv head x blocks of R of its query heads, workgroup_id.y = token.
@compute @workgroup_size(128)
fn attention_tiled(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let d4 = p.head_dim / 4u;
    let g = p.heads / p.kv_heads;
    let blocks = (g + R - 1u) / R;
    let kvh = wg.x / blocks;
    let h0 = kvh * g + (wg.x % blocks) * R;
    let rows = min(R, kvh * g + g - h0);
    let t = wg.y;
    let kt = min(MAX_KT, 1u << firstLeadingBit(TILE / p.head_dim));
    for (var e = li; e < R * d4; e += WG) {
        let r = e / d4;
        var x = vec4<f32>(0.0);
        if (r < rows) {
            x = q[(t * p.heads + h0 + r) * d4 + e % d4];
        }
        qs[e] = x;
    }
    if (li < R) {
        mrow[li] = NEG;
    }
    if (li == 0u) {
        wlen = min(positions[t] + 1u, p.ctx);
    }
    let len = workgroupUniformLoad(&wlen);
    // Output: lane li adds into the vec4 column `col` of rows grp, grp + groups, ... (d/4 columns).
    let groups = WG / d4;
    let col = li % d4;
    let grp = li / d4;
    var acc = array<vec4<f32>, 4>(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    // This lane's share of each row's softmax denominator, one per score slot e = li + s * WG.
    var lsum = array<f32, 2>(0.0, 0.0);
    let slots = R * kt;
    for (var c = 0u; c < len; c += kt) {
        load_tile(0u, c, len, kt, d4, kvh, li);
        workgroupBarrier();
        for (var e = li; e < slots; e += WG) {
            let r = e / kt;
            let j = e % kt;
            var s = NEG;
            if (r < rows && c + j < len) {
                s = score(r, j, d4) * p.scale;
            }
            ps[e] = s;
            red[e] = s;
        }
        workgroupBarrier();
        // The V tile over the K tile (the scores are done), while the tree runs.
        load_tile(1u, c, len, kt, d4, kvh, li);
        // The rows' maxima by a tree, written out (KT is 8, 16 or 32).
        if (kt == 32u) {
            fold_max(li, 16u, kt);
            workgroupBarrier();
        }
        if (kt >= 16u) {
            fold_max(li, 8u, kt);
            workgroupBarrier();
        }
        fold_max(li, 4u, kt);
        workgroupBarrier();
        fold_max(li, 2u, kt);
        workgroupBarrier();
        fold_max(li, 1u, kt);
        workgroupBarrier();
        if (li < R) {
            let m_new = max(mrow[li], red[li * kt]);
            alpha[li] = exp(mrow[li] - m_new);
            mrow[li] = m_new;
        }
        workgroupBarrier();
        for (var e = li; e < slots; e += WG) {
            let r = e / kt;
            let s = ps[e];
            var pj = 0.0;
            if (s > NEG) {
                pj = exp(s - mrow[r]);
            }
            ps[e] = pj;
            let slot = (e - li) / WG;
            lsum[slot] = lsum[slot] * alpha[r] + pj;
        }
        workgroupBarrier();
        if (grp < groups) {
            // KT is 8, 16 or 32: 16 keys a step, or the 8 of the smallest tile.
            for (var r = grp; r < R; r += groups) {
                let i = (r - grp) / groups;
                var a = acc[i] * alpha[r];
                if (kt == 8u) {
                    a += pv(r, 0u, kt, d4, col) + pv(r, 4u, kt, d4, col);
                }
                for (var j = 0u; j + 16u <= kt; j += 16u) {
                    a += (pv(r, j, kt, d4, col) + pv(r, j + 4u, kt, d4, col))
                        + (pv(r, j + 8u, kt, d4, col) + pv(r, j + 12u, kt, d4, col));
                }
                acc[i] = a;
            }
        }
        workgroupBarrier();
    }
    // Row sums: every score slot's share, added per row.
    for (var e = li; e < slots; e += WG) {
        red[e] = lsum[(e - li) / WG];
    }
    workgroupBarrier();
    if (li < R) {
        var l = 0.0;
        for (var j = 0u; j < kt; j++) {
            l += red[li * kt + j];
        }
        alpha[li] = l;
    }
    workgroupBarrier();
    if (grp < groups) {
        for (var r = grp; r < rows; r += groups) {
            out[(t * p.heads + h0 + r) * d4 + col] = acc[(r - grp) / groups] / alpha[r];
        }
    }
}
