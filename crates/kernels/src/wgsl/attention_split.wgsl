// Split-K causal GQA attention for decode, part 1 (flash-decoding): one workgroup per (group of query
// heads, block of `block` cache positions, token) computes, for each of the G query heads of its group (G =
// the largest divisor of heads / kv_heads at most 8 and 1024 / d: Qwen3-235B-A22B's 16 query heads a kv
// head are two groups of 8, Qwen3.6's 8 at d = 256 two of 4, each group reading that kv head's K and V
// once), the block's max m, sum l = sum exp(s - m) and
// unnormalised sum acc = sum exp(s - m) v, with
// s = q . k * scale over positions blk*block .. min(blk*block + block, positions[t] + 1).
// attention_combine merges the blocks. Blocks past the token's length write nothing (the combine never
// reads them).
//
// Work layout (built for memory-level parallelism on GPUs; see BENCHMARKS.md):
// - A cache row (one position of one kv head, d f16) is d/8 chunks of 16 bytes (one vec4<u32>). A row
//   takes `lpr` consecutive lanes (d/8 rounded up to a power of two, at least 8), so consecutive lanes
//   read consecutive 16-byte chunks and a 128-lane pass covers rp = 128 / lpr rows (8 at d = 128).
// - Each lane issues all of its K and V loads (PASSES passes each, 2 or 4) before any arithmetic, so a
//   workgroup has its whole block (block = PASSES * rp positions: 16 or 32 at d = 128) in flight at
//   once. Not eight passes: a block's chain of passes and barriers bounds a workgroup, and at short
//   lengths there are few workgroups, so smaller blocks shorten the chain and add workgroups (on the
//   H200 at position 600: 13.9 us a layer with 8 passes, 8.7 with 4, 6.5 with 2). The
//   16 loads are written out one by one into plain values (no array, no loop): loaded into a
//   function-scope array in a loop, they were serialised on the H200 (one memory latency each).
// - K and V are read once for the G heads: q of the G heads sits in workgroup memory and every lane
//   dots its 8 dims of k with all of them. Partial dots are summed over a row's lanes with subgroup
//   shuffles where a row's lanes share a subgroup (one barrier for all passes), else in workgroup memory
//   (two barriers a pass). For V, two passes of chunks at a time are staged in workgroup memory
//   and lane (g, c) sums dims 8c .. 8c + 8 of head g over all rows: no sums across lanes. (Staging V as
//   f32, one pass a round, converted once instead of once per head, measured slower on the H200: 32.6
//   against 22.2 µs; barrier rounds, not conversions, bound this kernel there.)
// Loops run a fixed 2 or 4 passes or a few dozen iterations per invocation, far under lavapipe's 65,535
// (see attention.wgsl).

struct Params {
    heads: u32,    // query heads
    kv_heads: u32, // key/value heads, dividing heads
    head_dim: u32, // d, a multiple of 8, at most 256, G * d <= 1024 (G: query heads a workgroup)
    tokens: u32,   // T
    ctx: u32,      // positions the cache holds
    scale: f32,    // 1 / sqrt(d)
    blocks: u32,   // ceil(ctx / block), the partial's block stride
    block: u32,    // positions per block: PASSES * rp (64, 32 or 16)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;       // [T, heads, d] f32
@group(0) @binding(2) var<storage, read> k: array<vec4<u32>>;       // [ctx, kv_heads, d] f16, 8 a vec4<u32>
@group(0) @binding(3) var<storage, read> v: array<vec4<u32>>;       // [ctx, kv_heads, d] f16, 8 a vec4<u32>
@group(0) @binding(4) var<storage, read> positions: array<u32>;     // [T] position of each query token
@group(0) @binding(5) var<storage, read_write> partial: array<vec4<f32>>; // [T, heads, blocks, 4 + d] (m, l, 0, 0, acc)

const LANES: u32 = 128u;
// 2, 4 or 8 (the code below is written out for 8): set per pipeline from the launcher's SHORT_SPLIT_PASSES
// and LONG_SPLIT_PASSES (AttentionShape::split_passes picks one by cache length).
override PASSES: u32;
const GMAX: u32 = 8u;
const NEG: f32 = -3.0e38;

var<workgroup> qs: array<vec4<f32>, 256>;  // [G, d / 4]
var<workgroup> red: array<vec4<u32>, 256>; // f32 bits of the partial dots [G, 128 lanes]; then V chunks of two passes [2, rp, lpr]
var<workgroup> sc: array<f32, 1024>;       // [G, block] scores, then exp(s - m)
var<workgroup> stat: array<f32, 16>;       // [G] block max, then at 8 + g the block sums
var<workgroup> wlen: u32;
var<workgroup> wshuffle: u32;

// The lane's place, the same for every phase.
struct Lane {
    li: u32,
    r: u32,     // row within a pass
    c: u32,     // 16-byte chunk within the row
    busy: bool, // c < d / 8
    rp: u32,    // rows per pass
    lpr: u32,   // lanes per row
    n: u32,     // positions of this block below the token's length
    g_count: u32,
    d4: u32,
    shuffle: bool, // a row's lanes share a subgroup: row sums by shuffles (attention_rows_subgroup.wgsl)
}

// The 8 f16 of a 16-byte chunk as two vec4<f32> (exact). unpack2x16float, not bitcast<vec2<f16>>: the
// bitcast read zeros on lavapipe (Mesa 22.3).
fn lo(c: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(c.x), unpack2x16float(c.y));
}

fn hi(c: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(c.z), unpack2x16float(c.w));
}

// One chunk of a cache row of pass i, or zeros for lanes and rows past the data.
fn load_k(ln: Lane, base: u32, step: u32, i: u32) -> vec4<u32> {
    if (i < PASSES && ln.busy && i * ln.rp + ln.r < ln.n) {
        return k[base + i * step];
    }
    return vec4<u32>(0u);
}

fn load_v(ln: Lane, base: u32, step: u32, i: u32) -> vec4<u32> {
    if (i < PASSES && ln.busy && i * ln.rp + ln.r < ln.n) {
        return v[base + i * step];
    }
    return vec4<u32>(0u);
}

// This lane's 8-dim partial dot of head g's q with its chunk of k (0 past the heads or the row's chunks).
fn head_dot(ln: Lane, g: u32, k0: vec4<f32>, k1: vec4<f32>) -> f32 {
    if (g >= ln.g_count || !ln.busy) {
        return 0.0;
    }
    let qa = g * ln.d4 + 2u * ln.c;
    return dot(qs[qa], k0) + dot(qs[qa + 1u], k1);
}

// Scores of pass i: each lane's 8-dim partial dot for every head (lanes past the row's d / 8 chunks give
// 0), then lane g * rp + r2 sums row r2's lpr partial dots for head g (lpr / 4 vec4 reads) into sc.
// The partial dots are single components of red's vec4: separate memory locations in WGSL, so lanes
// writing neighbouring components do not race.
fn scores(ln: Lane, i: u32, kc: vec4<u32>) {
    let k0 = lo(kc);
    let k1 = hi(kc);
    if (ln.shuffle) {
        // The row's partial dots of the 8 heads summed across its lanes in registers; lane c < 8 of the row
        // writes head c's score. No barrier per pass (the caller waits once after the last).
        let a = vec4<f32>(head_dot(ln, 0u, k0, k1), head_dot(ln, 1u, k0, k1), head_dot(ln, 2u, k0, k1), head_dot(ln, 3u, k0, k1));
        let b = vec4<f32>(head_dot(ln, 4u, k0, k1), head_dot(ln, 5u, k0, k1), head_dot(ln, 6u, k0, k1), head_dot(ln, 7u, k0, k1));
        let s = row_totals(a, b, ln.c, ln.lpr);
        let j = i * ln.rp + ln.r;
        if (ln.c < ln.g_count) {
            sc[ln.c * p.block + j] = select(NEG, s * p.scale, j < ln.n);
        }
        return;
    }
    for (var g = 0u; g < GMAX; g++) {
        if (g < ln.g_count) {
            var pd = 0.0;
            if (ln.busy) {
                let qa = g * ln.d4 + 2u * ln.c;
                pd = dot(qs[qa], k0) + dot(qs[qa + 1u], k1);
            }
            let at = g * LANES + ln.li;
            red[at / 4u][at % 4u] = bitcast<u32>(pd);
        }
    }
    workgroupBarrier();
    if (ln.li < ln.rp * ln.g_count) {
        let g2 = ln.li / ln.rp;
        let r2 = ln.li % ln.rp;
        let lpr4 = ln.lpr / 4u;
        var s4 = vec4<f32>(0.0);
        for (var c4 = 0u; c4 < lpr4; c4++) {
            s4 += bitcast<vec4<f32>>(red[g2 * (LANES / 4u) + r2 * lpr4 + c4]);
        }
        let j = i * ln.rp + r2;
        sc[g2 * p.block + j] = select(NEG, (s4.x + s4.y + s4.z + s4.w) * p.scale, j < ln.n);
    }
    workgroupBarrier();
}

// Weighted V over passes i and i + 1: their chunks go through workgroup memory, then lane gv * d8 + cv adds
// dims 8cv .. 8cv + 8 of head gv over the 2 rp rows. Two passes a round: half the barriers of one.
fn weigh(ln: Lane, i: u32, va: vec4<u32>, vb: vec4<u32>, gv: u32, cv: u32, acc: ptr<function, array<vec4<f32>, 2>>) {
    red[ln.r * ln.lpr + ln.c] = va;
    red[(ln.rp + ln.r) * ln.lpr + ln.c] = vb;
    workgroupBarrier();
    if (gv < ln.g_count) {
        var a0 = (*acc)[0];
        var a1 = (*acc)[1];
        for (var r2 = 0u; r2 < 2u * ln.rp; r2++) {
            let j = i * ln.rp + r2;
            if (j < ln.n) {
                let e = sc[gv * p.block + j];
                let ch = red[r2 * ln.lpr + cv];
                a0 += e * lo(ch);
                a1 += e * hi(ch);
            }
        }
        (*acc)[0] = a0;
        (*acc)[1] = a1;
    }
    workgroupBarrier();
}

@compute @workgroup_size(128)
fn attention_split(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>/*SG_ARGS*/) {
    // wg.x: a group of G query heads, h0 .. h0 + G, all of kv head kvh.
    let per_kv = p.heads / p.kv_heads;
    // G: the largest divisor of per_kv at most GMAX and 1024 / d (AttentionShape::split_group).
    var g_count = min(min(per_kv, GMAX), max(1024u / p.head_dim, 1u));
    while (per_kv % g_count != 0u) {
        g_count -= 1u;
    }
    let h0 = wg.x * g_count;
    let kvh = h0 / per_kv;
    let blk = wg.y;
    let t = wg.z;
    let d = p.head_dim;
    let d8 = d / 8u;
    let rp = p.block / PASSES;
    let lpr = LANES / rp;
    if (li == 0u) {
        wlen = min(positions[t] + 1u, p.ctx);
        wshuffle = select(0u, 1u, rows_in_subgroups(lpr/*SG_CALL*/));
    }
    let len = workgroupUniformLoad(&wlen);
    let shuffle = workgroupUniformLoad(&wshuffle) == 1u;
    let start = blk * p.block;
    if (start >= len) {
        return;
    }
    let ln = Lane(li, li / lpr, li % lpr, li % lpr < d8, rp, lpr, min(p.block, len - start), g_count, d / 4u, shuffle);

    // Every K and V load of this lane first: rows r, r + rp, ... of the block, chunk c.
    let step = rp * p.kv_heads * d8;
    let base = (start + ln.r) * p.kv_heads * d8 + kvh * d8 + ln.c;
    let k0 = load_k(ln, base, step, 0u);
    let k1 = load_k(ln, base, step, 1u);
    let k2 = load_k(ln, base, step, 2u);
    let k3 = load_k(ln, base, step, 3u);
    let k4 = load_k(ln, base, step, 4u);
    let k5 = load_k(ln, base, step, 5u);
    let k6 = load_k(ln, base, step, 6u);
    let k7 = load_k(ln, base, step, 7u);
    let v0 = load_v(ln, base, step, 0u);
    let v1 = load_v(ln, base, step, 1u);
    let v2 = load_v(ln, base, step, 2u);
    let v3 = load_v(ln, base, step, 3u);
    let v4 = load_v(ln, base, step, 4u);
    let v5 = load_v(ln, base, step, 5u);
    let v6 = load_v(ln, base, step, 6u);
    let v7 = load_v(ln, base, step, 7u);
    for (var i = li; i < g_count * ln.d4; i += LANES) {
        qs[i] = q[(t * p.heads + h0) * ln.d4 + i];
    }
    workgroupBarrier();

    scores(ln, 0u, k0);
    scores(ln, 1u, k1);
    if (PASSES >= 4u) {
        scores(ln, 2u, k2);
        scores(ln, 3u, k3);
    }
    if (PASSES == 8u) {
        scores(ln, 4u, k4);
        scores(ln, 5u, k5);
        scores(ln, 6u, k6);
        scores(ln, 7u, k7);
    }
    workgroupBarrier(); // the shuffle path's only one for the scores

    // Block max and sum per head: 16 lanes per head over the block, then one lane over the 16.
    let n = ln.n;
    let gb = li / 16u;
    let sub = li % 16u;
    var mx = NEG;
    if (gb < g_count) {
        for (var j = sub; j < n; j += 16u) {
            mx = max(mx, sc[gb * p.block + j]);
        }
    }
    red[li / 4u][li % 4u] = bitcast<u32>(mx);
    workgroupBarrier();
    if (li < g_count) {
        var m4 = bitcast<vec4<f32>>(red[li * 4u]);
        for (var i = 1u; i < 4u; i++) {
            m4 = max(m4, bitcast<vec4<f32>>(red[li * 4u + i]));
        }
        stat[li] = max(max(m4.x, m4.y), max(m4.z, m4.w));
    }
    workgroupBarrier();
    var sum = 0.0;
    if (gb < g_count) {
        let m = stat[gb];
        for (var j = sub; j < n; j += 16u) {
            let e = exp(sc[gb * p.block + j] - m);
            sc[gb * p.block + j] = e;
            sum += e;
        }
    }
    red[li / 4u][li % 4u] = bitcast<u32>(sum);
    workgroupBarrier();
    if (li < g_count) {
        var l4 = bitcast<vec4<f32>>(red[li * 4u]);
        for (var i = 1u; i < 4u; i++) {
            l4 += bitcast<vec4<f32>>(red[li * 4u + i]);
        }
        stat[8u + li] = l4.x + l4.y + l4.z + l4.w;
    }
    workgroupBarrier();

    // Weighted V: no sums across lanes are left.
    let gv = li / d8;
    let cv = li % d8;
    var acc: array<vec4<f32>, 2>;
    acc[0] = vec4<f32>(0.0);
    acc[1] = vec4<f32>(0.0);
    weigh(ln, 0u, v0, v1, gv, cv, &acc);
    if (PASSES >= 4u) {
        weigh(ln, 2u, v2, v3, gv, cv, &acc);
    }
    if (PASSES == 8u) {
        weigh(ln, 4u, v4, v5, gv, cv, &acc);
        weigh(ln, 6u, v6, v7, gv, cv, &acc);
    }
    let stride4 = ln.d4 + 1u;
    if (gv < g_count) {
        let at = ((t * p.heads + h0 + gv) * p.blocks + blk) * stride4 + 1u + 2u * cv;
        partial[at] = acc[0];
        partial[at + 1u] = acc[1];
    }
    if (li < g_count) {
        partial[((t * p.heads + h0 + li) * p.blocks + blk) * stride4] = vec4<f32>(stat[li], stat[8u + li], 0.0, 0.0);
    }
}
