// A sampled pick on the GPU: top-k of a row of logits, then temperature, top-p, min-p and a draw with a
// uniform the host supplies, so a sampled step can be queued before the last one's token is read (as a
// greedy step is on argmax.wgsl). Two stages, one dispatch each (one pipeline, two bindings of src and
// dst):
// stage 0 has a workgroup per slice of SLICE logits write its slice's k best as (key, index) pairs, best
// first; stage 1 has one workgroup take the k best of those pairs, then draw.
//
// Keys order floats as total_cmp does (the bits of a non-negative float with the sign bit set, a negative
// one's bits inverted), so -0.0 ranks under +0.0 and ranking is integer comparison; ties go to the lower
// index. NaN logits are never candidates. The k best are found in k rounds: a round's winner is the best
// candidate ranking after the previous round's, so nothing is marked or moved and every lane keeps its
// candidates in registers.
//
// The draw (lane 0 of stage 1, as cpu::sample_top_k): weights w_r = exp((l_r - l_0) / temperature) for the
// k candidates best first; top-p keeps the shortest prefix whose weight reaches top_p of the total (all
// if none does), min-p those with w_r >= min_p (l_0 weighs 1); then the first r with u * kept total <
// w_0 + ... + w_r is the pick. One valid candidate or an infinite best logit: the best is the pick; no
// valid candidate: token 0.

struct Params {
    n: u32,      // row length (vocabulary)
    slices: u32, // ceil(n / SLICE)
    stage: u32,  // 0: slices to their k best; 1: the k best of those, then the draw
    kmax: u32,   // pairs a slice has room for in stage 0's dst (k <= kmax)
}

// What the host writes before each sampled step.
struct Step {
    k: u32,
    temperature: f32,
    top_p: f32,
    min_p: f32,
    u: f32, // uniform in [0, 1)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> step: Step;
@group(0) @binding(2) var<storage, read> src: array<u32>;        // stage 0: [n] f32 bits; 1: the pairs
@group(0) @binding(3) var<storage, read_write> dst: array<u32>;  // stage 0: [slices, kmax] (key, index); 1: [1] the pick

const WG: u32 = 256u;
const PER_LANE: u32 = 32u; // candidates a lane ranks
const SLICE: u32 = WG * PER_LANE; // logits a stage-0 workgroup ranks (SAMPLE_SLICE); stage 1: slices * k <= SLICE
const NONE: u32 = 0xffffffffu;
const KMAX: u32 = 64u;
const NEG_INF_KEY: u32 = 0x007fffffu;
const POS_INF_KEY: u32 = 0xff800000u;

var<workgroup> lane_best: array<vec2<u32>, WG>;
var<workgroup> group_best: array<vec2<u32>, 16>;
var<workgroup> top: array<vec2<u32>, KMAX>;

fn key_of(bits: u32) -> u32 {
    return select(bits | 0x80000000u, ~bits, (bits & 0x80000000u) != 0u);
}

fn value_of(key: u32) -> f32 {
    return bitcast<f32>(select(~key, key & 0x7fffffffu, (key & 0x80000000u) != 0u));
}

// Whether a ranks before b: the higher key, on ties the lower index; an empty pair (index NONE) last.
fn before(a: vec2<u32>, b: vec2<u32>) -> bool {
    return a.y != NONE && (b.y == NONE || a.x > b.x || (a.x == b.x && a.y < b.y));
}

fn better(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    return select(b, a, before(a, b));
}

// The best of `c` that ranks after `prev` (empty when none does).
fn best_after(c: vec2<u32>, prev: vec2<u32>, best: vec2<u32>) -> vec2<u32> {
    if (prev.y != NONE && !before(prev, c)) {
        return best;
    }
    return better(c, best);
}

// The workgroup's best of the lanes' `mine` (the same in every lane): 16 lanes reduce 16 each, then every
// lane the 16. Two barriers; the caller's next write to lane_best comes after the second.
fn workgroup_best(mine: vec2<u32>, li: u32) -> vec2<u32> {
    lane_best[li] = mine;
    workgroupBarrier();
    if (li < 16u) {
        var b = vec2<u32>(0u, NONE);
        for (var j = 0u; j < 16u; j++) {
            b = better(lane_best[li * 16u + j], b);
        }
        group_best[li] = b;
    }
    workgroupBarrier();
    var b = vec2<u32>(0u, NONE);
    for (var j = 0u; j < 16u; j++) {
        b = better(group_best[j], b);
    }
    return b;
}

@compute @workgroup_size(256)
fn sample_top_k(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let k = min(step.k, p.kmax);
    // Every load before any ranking: a lane's 32 loads are in flight at once.
    var cand: array<vec2<u32>, PER_LANE>;
    for (var j = 0u; j < PER_LANE; j++) {
        let at = li + j * WG;
        var c = vec2<u32>(0u, NONE);
        if (p.stage == 0u) {
            let i = wg.x * SLICE + at;
            if (i < p.n) {
                let bits = src[i];
                // NaN: exponent all ones and a mantissa.
                if ((bits & 0x7fffffffu) <= 0x7f800000u) {
                    c = vec2<u32>(key_of(bits), i);
                }
            }
        } else if (at < p.slices * k) {
            let pair = 2u * ((at / k) * p.kmax + at % k);
            c = vec2<u32>(src[pair], src[pair + 1u]);
        }
        cand[j] = c;
    }
    var prev = vec2<u32>(0u, NONE);
    for (var r = 0u; r < k; r++) {
        var mine = vec2<u32>(0u, NONE);
        for (var j = 0u; j < PER_LANE; j++) {
            mine = best_after(cand[j], prev, mine);
        }
        let w = workgroup_best(mine, li);
        if (li == 0u) {
            if (p.stage == 0u) {
                let at = 2u * (wg.x * p.kmax + r);
                dst[at] = w.x;
                dst[at + 1u] = w.y;
            } else {
                top[r] = w;
            }
        }
        // An empty winner ends the candidates: later rounds would find nothing after it.
        prev = select(w, vec2<u32>(0u, 0u), w.y == NONE);
    }
    if (p.stage == 0u || li != 0u) {
        return;
    }
    dst[0] = draw(k);
}

// Lane 0 of stage 1: the pick from the k best in `top`.
fn draw(k: u32) -> u32 {
    var n = 0u;
    while (n < k && top[n].y != NONE) {
        n++;
    }
    if (n == 0u) {
        return 0u;
    }
    let best = top[0];
    if (n == 1u || best.x == POS_INF_KEY || best.x == NEG_INF_KEY) {
        return best.y;
    }
    let l0 = value_of(best.x);
    var w: array<f32, KMAX>;
    var total = 0.0;
    for (var r = 0u; r < n; r++) {
        // -inf weighs nothing (computed from its key: no reliance on inf arithmetic).
        w[r] = select(exp((value_of(top[r].x) - l0) / step.temperature), 0.0, top[r].x == NEG_INF_KEY);
        total += w[r];
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
        var m = 0u;
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
            return top[r].y;
        }
    }
    // Only reached when rounding puts x at the kept total: the last candidate with any weight.
    return top[last].y;
}
