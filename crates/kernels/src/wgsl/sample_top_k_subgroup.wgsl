// sample_top_k's ranking of a tile with subgroups: k rounds in each subgroup, a round's winner the
// subgroup's maximum key (then minimum index) among what ranks after the last winner, into the subgroup's
// list in `tile` (no barrier: a subgroup's lanes step together); then k rounds over the lists' heads into
// `top`. Two barriers a tile, where the sort takes 55. Every subgroup merges (only lane 0 writes), so the
// subgroup operations stay in uniform control flow. Subgroups are consecutive local invocation indices
// (as row_sum_subgroup.wgsl assumes); under 8 lanes they leave more lists than `tile` holds, and sort.

const OWN: u32 = 2u; // lists a lane merges: WG / sg_size lists over sg_size lanes, for sg_size >= 8
const EMPTY: vec2<u32> = vec2<u32>(0u, NONE);

// The best of `c` that ranks after `prev` (all when `prev` is empty), or `best` if better.
fn best_after(c: vec2<u32>, prev: vec2<u32>, best: vec2<u32>) -> vec2<u32> {
    if (prev.y != NONE && !before(prev, c)) {
        return best;
    }
    return select(best, c, before(c, best));
}

// The best of the subgroup's `mine` (the same in every lane; empty when all are).
fn subgroup_best(mine: vec2<u32>) -> vec2<u32> {
    let key = subgroupMax(select(0u, mine.x, mine.y != NONE));
    let id = subgroupMin(select(NONE, mine.y, mine.y != NONE && mine.x == key));
    return vec2<u32>(select(0u, key, id != NONE), id);
}

fn tile_top(li: u32, k: u32, c: array<vec2<u32>, PER_LANE>, held: u32, sg_lane: u32, sg_size: u32) {
    if (sg_size < 8u) {
        bitonic_top(li, k, c, held);
        return;
    }
    let lists = WG / sg_size;
    let len = TILE / lists; // >= KMAX
    let cap = min(k, PER_LANE * sg_size);
    let sg = li / sg_size;
    if (li < KMAX) {
        top[li] = EMPTY;
    }
    var prev = EMPTY;
    for (var r = 0u; r < cap; r++) {
        var mine = EMPTY;
        for (var j = 0u; j < PER_LANE; j++) {
            mine = best_after(c[j], prev, mine);
        }
        let w = subgroup_best(mine);
        if (sg_lane == 0u) {
            tile[sg * len + r] = w;
        }
        if (w.y == NONE) {
            break;
        }
        prev = w;
    }
    workgroupBarrier();
    var head: array<u32, OWN>;
    for (var r = 0u; r < k; r++) {
        var best = EMPTY;
        var owner = OWN;
        for (var m = 0u; m < OWN; m++) {
            let list = sg_lane + m * sg_size;
            if (list < lists && head[m] < cap) {
                let h = tile[list * len + head[m]];
                if (before(h, best)) {
                    best = h;
                    owner = m;
                }
            }
        }
        let w = subgroup_best(best);
        if (li == 0u) {
            top[r] = w;
        }
        if (w.y == NONE) {
            break;
        }
        for (var m = 0u; m < OWN; m++) {
            if (m == owner && all(best == w)) {
                head[m] += 1u;
            }
        }
    }
    workgroupBarrier();
}
