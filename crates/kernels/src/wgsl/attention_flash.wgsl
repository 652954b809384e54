// Causal GQA attention over an f16 KV cache for a prefill chunk, as `attention` computes it, a block of
// query tokens at a time: out = softmax(q . K^T * scale) V over cache positions 0..=positions[t], kv head =
// head / (heads / kv_heads). A workgroup takes BQ = 4 consecutive tokens and up to R = 8 query heads that
// share a kv head (M = 32 query rows, row m = token m / R, head m % R) and walks the keys in tiles of KT = 32
// through workgroup memory: each key and value read serves 32 rows (attention_tiled: 8, one token), and a
// tile costs 5 barriers.
//   K tile in; each lane the scores of 2 rows x 2 keys (4 multiply-adds a workgroup-memory load); 16
//   partial maxima a row; the rows' maxima and the online-softmax rescale (32 lanes), while the V tile comes
//   in over the K tile; the probabilities, key-major; each lane adds probability x value into one vec4
//   column of 4 rows.
// The tile loader is appended from attention_tile_load.wgsl. Loops step 4 items at once or are written out: lavapipe stops an invocation's loops after 65,535
// iterations in all (see attention.wgsl); a tile costs at most 25 here at d = 128, some 32,000 for the
// model's 40,960 positions.
// Needs head_dim a multiple of 16, at most 128, and 31,380 bytes of workgroup memory (the launcher falls
// back to attention_tiled otherwise).
enable f16;

struct Params {
    heads: u32,    // query heads
    kv_heads: u32, // key/value heads, divides heads
    head_dim: u32, // d, a multiple of 16, at most 128
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

const WG: u32 = 256u;
const R: u32 = 8u;   // query heads of one kv head a workgroup
const BQ: u32 = 4u;  // tokens a workgroup
const M: u32 = 32u;  // query rows, R x BQ
const KT: u32 = 32u; // keys a tile
const NEG: f32 = -3.0e38;

var<workgroup> qs: array<vec4<f32>, 1024>; // [M, d/4] the query rows
var<workgroup> kv: array<vec4<f16>, 1056>; // [KT, d/4 + 1] the K tile, then the V tile (rows padded)
var<workgroup> ps: array<vec4<f32>, 256>;  // [KT, M/4] probabilities, key-major, 4 rows a vec4
var<workgroup> red: array<f32, 544>;       // [M, 17] 16 partial maxima a row (padded), at the end row sums
var<workgroup> mrow: array<f32, M>;        // running maximum of each row
var<workgroup> alpha: array<f32, M>;       // this tile's rescale of each row's earlier terms; at the end 1/sum
var<workgroup> wlen: array<u32, BQ>;       // keys each token attends
var<workgroup> wkmax: u32;                 // the most any of them attends

// One vec4 of query vec4s a, b (indices in qs) against key vec4s x, y (indices in kv), added to the
// (a x, a y, b x, b y) sums.
fn score_step(a: u32, b: u32, x: u32, y: u32, acc: ptr<function, array<vec4<f32>, 4>>) {
    let qa = qs[a];
    let qb = qs[b];
    let kx = vec4<f32>(kv[x]);
    let ky = vec4<f32>(kv[y]);
    (*acc)[0] += qa * kx;
    (*acc)[1] += qa * ky;
    (*acc)[2] += qb * kx;
    (*acc)[3] += qb * ky;
}

// Rows r0, r1 against keys j0, j1 of the tile: (r0 j0, r0 j1, r1 j0, r1 j1), d/4 vec4 (a multiple of 4),
// four a step.
fn scores4(r0: u32, r1: u32, j0: u32, j1: u32, d4: u32) -> vec4<f32> {
    let q0 = r0 * d4;
    let q1 = r1 * d4;
    let k0 = j0 * (d4 + 1u);
    let k1 = j1 * (d4 + 1u);
    var acc = array<vec4<f32>, 4>(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    for (var i = 0u; i < d4; i += 4u) {
        score_step(q0 + i, q1 + i, k0 + i, k1 + i, &acc);
        score_step(q0 + i + 1u, q1 + i + 1u, k0 + i + 1u, k1 + i + 1u, &acc);
        score_step(q0 + i + 2u, q1 + i + 2u, k0 + i + 2u, k1 + i + 2u, &acc);
        score_step(q0 + i + 3u, q1 + i + 3u, k0 + i + 3u, k1 + i + 3u, &acc);
    }
    let s00 = acc[0];
    let s01 = acc[1];
    let s10 = acc[2];
    let s11 = acc[3];
    let sum = vec4<f32>(s00.x + s00.y, s01.x + s01.y, s10.x + s10.y, s11.x + s11.y)
        + vec4<f32>(s00.z + s00.w, s01.z + s01.w, s10.z + s10.w, s11.z + s11.w);
    return sum;
}

// Key j's probabilities of rows 4g..4g+3 times its value columns `col`, added to acc.
fn pv(j: u32, g: u32, d4: u32, col: u32, acc: ptr<function, array<vec4<f32>, 4>>) {
    let x = vec4<f32>(kv[j * (d4 + 1u) + col]);
    let pr = ps[j * (M / 4u) + g];
    (*acc)[0] += pr.x * x;
    (*acc)[1] += pr.y * x;
    (*acc)[2] += pr.z * x;
    (*acc)[3] += pr.w * x;
}

// workgroup_id.x = kv head x blocks of R of its query heads, workgroup_id.y = block of BQ tokens.
@compute @workgroup_size(256)
fn attention_flash(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let d4 = p.head_dim / 4u;
    let g = p.heads / p.kv_heads;
    let blocks = (g + R - 1u) / R;
    let kvh = wg.x / blocks;
    let h0 = kvh * g + (wg.x % blocks) * R;
    let rows = min(R, kvh * g + g - h0);
    let t0 = wg.y * BQ;
    // The query rows, zeros for heads or tokens past the block.
    for (var e = li; e < M * d4; e += WG) {
        let m = e / d4;
        let t = t0 + m / R;
        var x = vec4<f32>(0.0);
        if (m % R < rows && t < p.tokens) {
            x = q[(t * p.heads + h0 + m % R) * d4 + e % d4];
        }
        qs[e] = x;
    }
    if (li < M) {
        mrow[li] = NEG;
    }
    if (li == 0u) {
        var kmax = 0u;
        for (var i = 0u; i < BQ; i++) {
            var len = 0u;
            if (t0 + i < p.tokens) {
                len = min(positions[t0 + i] + 1u, p.ctx);
            }
            wlen[i] = len;
            kmax = max(kmax, len);
        }
        wkmax = kmax;
    }
    // Also the barrier after the query rows and wlen.
    let kmax = workgroupUniformLoad(&wkmax);
    // Scores: lane li takes rows r0 = li / 16 and r1 = r0 + 16 (tokens 0-1 and 2-3), keys j0 = li % 16 and
    // j1 = j0 + 16.
    let r0 = li / 16u;
    let r1 = r0 + 16u;
    let j0 = li % 16u;
    let j1 = j0 + 16u;
    let live0 = r0 % R < rows;
    let live1 = r1 % R < rows;
    let len0 = wlen[r0 / R];
    let len1 = wlen[r1 / R];
    // Output: lane li adds into vec4 column `col` of rows 4 grp .. 4 grp + 3.
    let col = li % 32u;
    let grp = li / 32u;
    var acc = array<vec4<f32>, 4>(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    // This lane's share of rows r0 and r1's softmax denominators.
    var l0 = 0.0;
    var l1 = 0.0;
    for (var c = 0u; c < kmax; c += KT) {
        load_tile(0u, c, kmax, KT, d4, kvh, li);
        workgroupBarrier();
        var s = scores4(r0, r1, j0, j1, d4) * p.scale;
        let valid = vec4<bool>(live0 && c + j0 < len0, live0 && c + j1 < len0, live1 && c + j0 < len1, live1 && c + j1 < len1);
        s = select(vec4<f32>(NEG), s, valid);
        red[r0 * 17u + j0] = max(s.x, s.y);
        red[r1 * 17u + j0] = max(s.z, s.w);
        workgroupBarrier();
        // The V tile over the K tile (the scores are done), while 32 lanes fold the rows' maxima.
        load_tile(1u, c, kmax, KT, d4, kvh, li);
        if (li < M) {
            var mx = mrow[li];
            for (var j = 0u; j < 16u; j += 4u) {
                let at = li * 17u + j;
                mx = max(mx, max(max(red[at], red[at + 1u]), max(red[at + 2u], red[at + 3u])));
            }
            alpha[li] = exp(mrow[li] - mx);
            mrow[li] = mx;
        }
        workgroupBarrier();
        let pr = select(vec4<f32>(0.0), exp(s - vec4<f32>(mrow[r0], mrow[r0], mrow[r1], mrow[r1])), valid);
        ps[j0 * (M / 4u) + r0 / 4u][r0 % 4u] = pr.x;
        ps[j1 * (M / 4u) + r0 / 4u][r0 % 4u] = pr.y;
        ps[j0 * (M / 4u) + r1 / 4u][r1 % 4u] = pr.z;
        ps[j1 * (M / 4u) + r1 / 4u][r1 % 4u] = pr.w;
        l0 = l0 * alpha[r0] + (pr.x + pr.y);
        l1 = l1 * alpha[r1] + (pr.z + pr.w);
        workgroupBarrier();
        if (col < d4) {
            for (var i = 0u; i < 4u; i++) {
                acc[i] *= alpha[4u * grp + i];
            }
            for (var j = 0u; j < KT; j += 4u) {
                pv(j, grp, d4, col, &acc);
                pv(j + 1u, grp, d4, col, &acc);
                pv(j + 2u, grp, d4, col, &acc);
                pv(j + 3u, grp, d4, col, &acc);
            }
        }
        workgroupBarrier();
    }
    // Row sums: 16 lanes' shares a row.
    red[r0 * 17u + j0] = l0;
    red[r1 * 17u + j0] = l1;
    workgroupBarrier();
    if (li < M) {
        var l = 0.0;
        for (var j = 0u; j < 16u; j += 4u) {
            let at = li * 17u + j;
            l += (red[at] + red[at + 1u]) + (red[at + 2u] + red[at + 3u]);
        }
        alpha[li] = 1.0 / l;
    }
    workgroupBarrier();
    if (col < d4) {
        for (var i = 0u; i < 4u; i++) {
            let m = 4u * grp + i;
            let t = t0 + m / R;
            if (m % R < rows && t < p.tokens) {
                out[(t * p.heads + h0 + m % R) * d4 + col] = acc[i] * alpha[m];
            }
        }
    }
}
