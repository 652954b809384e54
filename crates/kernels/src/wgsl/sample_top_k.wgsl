// A sampled pick on the GPU: top-k of a row of logits, then temperature, top-p, min-p and a draw with a
// uniform the host supplies, so a sampled step can be queued before the last one's token is read (as a
// greedy step is on argmax.wgsl). Levels, one dispatch each (one pipeline): at level 0 a workgroup ranks a
// tile of TILE logits and writes its k best as (key, index) pairs, best first; each later level does the
// same to the lists of the level before, until one workgroup holds them all: it draws (lane 0). A tile is
// sorted in workgroup memory by a bitonic network over the next power of two of what it holds.
//
// Keys order floats as total_cmp does (a non-negative float's bits with the sign bit set, a negative one's
// bits inverted), so -0.0 ranks under +0.0 and ranking is integer comparison; ties go to the lower index.
// NaN logits are never candidates (empty pairs, index NONE, rank last). On the H200, for the chat defaults:
// 99.6 us (tiles of 1,024, 55 dependent barrier steps a level, three levels), 113 us with tiles of 2,048,
// 145 us ranking by k rounds of subgroup maxima, 195 us by k rounds of a workgroup-wide best; the levels
// without their sort take 12 us, so the sort's dependent steps are the cost.
//
// The draw (as cpu::sample_top_k): weights w_r = exp((l_r - l_0) / temperature) for the k candidates best
// first; top-p keeps the shortest prefix whose weight reaches top_p of the total (all if none does), min-p
// those with w_r >= min_p (l_0 weighs 1); then the first r with u * kept total < w_0 + ... + w_r is the
// pick. One valid candidate or an infinite best logit: the best is the pick; no valid candidate: token 0.

struct Params {
    n: u32,     // level 0: logits in src; later: lists of k pairs in src (the level before's workgroups)
    level: u32, // 0: src holds f32 logits; else (key, index) pairs
    last: u32,  // 1: a single workgroup, which draws into dst[0]
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> step: Step; // sample_step.wgsl
@group(0) @binding(2) var<storage, read> src: array<u32>;       // [n] f32 bits, or [n * k] (key, index)
@group(0) @binding(3) var<storage, read_write> dst: array<u32>; // [groups * k] (key, index), or [1] the pick

const WG: u32 = 128u;
const PER_LANE: u32 = 8u;
const TILE: u32 = WG * PER_LANE; // candidates a workgroup ranks (SAMPLE_TILE)
const NONE: u32 = 0xffffffffu;
const KMAX: u32 = 64u;
const NEG_INF_KEY: u32 = 0x007fffffu;
const POS_INF_KEY: u32 = 0xff800000u;

var<workgroup> tile: array<vec2<u32>, TILE>; // (key, index); sorted, the k best first

fn key_of(bits: u32) -> u32 {
    return select(bits | 0x80000000u, ~bits, (bits & 0x80000000u) != 0u);
}

fn value_of(key: u32) -> f32 {
    return bitcast<f32>(select(~key, key & 0x7fffffffu, (key & 0x80000000u) != 0u));
}

// Whether a ranks before b: the higher key, on ties the lower index; an empty pair last.
fn before(a: vec2<u32>, b: vec2<u32>) -> bool {
    return a.y != NONE && (b.y == NONE || a.x > b.x || (a.x == b.x && a.y < b.y));
}

// Candidate `at` of the level's input: (key, index), empty past the end or for a NaN logit.
fn candidate(at: u32, count: u32) -> vec2<u32> {
    if (at >= count) {
        return vec2<u32>(0u, NONE);
    }
    if (p.level == 0u) {
        let bits = src[at];
        // NaN: exponent all ones and a mantissa.
        if ((bits & 0x7fffffffu) > 0x7f800000u) {
            return vec2<u32>(0u, NONE);
        }
        return vec2<u32>(key_of(bits), at);
    }
    return vec2<u32>(src[2u * at], src[2u * at + 1u]);
}

// The tile's sort: the lanes' candidates into `tile`, sorted over the next power of two of what it holds
// (`held`, at least 2), best first.
fn sort_tile(li: u32, c: array<vec2<u32>, PER_LANE>, held: u32) {
    for (var j = 0u; j < PER_LANE; j++) {
        tile[li + j * WG] = c[j];
    }
    workgroupBarrier();
    let span = max(2u, 1u << (32u - countLeadingZeros(max(held, 1u) - 1u)));
    // Blocks of `size` alternate direction until the last, which ranks best first.
    for (var size = 2u; size <= span; size <<= 1u) {
        for (var stride = size >> 1u; stride > 0u; stride >>= 1u) {
            for (var t = li; t < span / 2u; t += WG) {
                let a = 2u * stride * (t / stride) + t % stride;
                let b = a + stride;
                let x = tile[a];
                let y = tile[b];
                let best_first = (a & size) == 0u;
                if (select(before(x, y), before(y, x), best_first)) {
                    tile[a] = y;
                    tile[b] = x;
                }
            }
            workgroupBarrier();
        }
    }
}

@compute @workgroup_size(128)
fn sample_top_k(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let k = clamp(step.k, 1u, KMAX);
    let count = select(p.n * k, p.n, p.level == 0u);
    let begin = wg.x * TILE;
    let held = min(TILE, count - min(count, begin));
    // Every load before any use: a lane's loads are in flight at once.
    var c: array<vec2<u32>, PER_LANE>;
    for (var j = 0u; j < PER_LANE; j++) {
        c[j] = candidate(begin + li + j * WG, count);
    }
    sort_tile(li, c, held);
    if (p.last == 0u) {
        if (li < k) {
            let at = 2u * (wg.x * k + li);
            dst[at] = tile[li].x;
            dst[at + 1u] = tile[li].y;
        }
        return;
    }
    if (li == 0u) {
        dst[0] = draw(k);
    }
}

// Lane 0 of the last level: the pick from the k best, first in the sorted `tile`.
fn draw(k: u32) -> u32 {
    var n = 0u;
    while (n < k && tile[n].y != NONE) {
        n++;
    }
    if (n == 0u) {
        return 0u;
    }
    if (n == 1u || tile[0].x == POS_INF_KEY || tile[0].x == NEG_INF_KEY) {
        return tile[0].y;
    }
    let l0 = value_of(tile[0].x);
    var w: array<f32, KMAX>;
    var total = 0.0;
    for (var r = 0u; r < n; r++) {
        var wr = exp((value_of(tile[r].x) - l0) / step.temperature);
        if (r == 0u) {
            wr = 1.0; // exactly, as exp(0) on the CPU
        }
        if (tile[r].x == NEG_INF_KEY) {
            wr = 0.0; // from its key: no reliance on inf arithmetic
        }
        w[r] = wr;
        total += wr;
    }
    var keep = n;
    if (step.top_p < 1.0) {
        let goal = step.top_p * total;
        var mass = 0.0;
        for (var r = 0u; r < n; r++) {
            mass += w[r];
            if (mass >= goal) {
                keep = r + 1u;
                break;
            }
        }
    }
    if (step.min_p > 0.0) {
        // The best weighs 1: it stays for any min_p.
        var m = 1u;
        while (m < keep && w[m] >= step.min_p) {
            m++;
        }
        keep = m;
    }
    var kept = 0.0;
    for (var r = 0u; r < keep; r++) {
        kept += w[r];
    }
    let x = step.u * kept;
    var mass = 0.0;
    var last = 0u;
    for (var r = 0u; r < keep; r++) {
        mass += w[r];
        if (w[r] > 0.0) {
            last = r;
        }
        if (x < mass) {
            return tile[r].y;
        }
    }
    // Only reached when rounding puts x at the kept total: the last candidate with any weight.
    return tile[last].y;
}
