// The MoE combine of expert_q8_ffn's shares, for T tokens of k picks each (pair = t * k + j):
// y[t, r] += sum_j w[t, j] * (sum_b partials[t * k + j, b, r]), picks whose slot is past the pool adding
// nothing (no part wrote their shares). With finish = 1 it also starts the next RMSNorm, as
// expert_q8_gemv_combine does: scaled[t, r] = y[t, r] * next_norm[r] and the sums of the squares of y over
// blocks of 4 rows (squares[t, r / 4]), which the next layer's qkv_rope_store adds up.
// A workgroup takes 16 rows of one token; its 16 lane groups each add every 16th (pick, block) share of
// them, weighted, and a tree adds the 16 sums.

struct Params {
    hidden: u32,     // H: rows of y
    blocks: u32,     // shares a pick (F / 16)
    k: u32,          // picks per token, at most MAX_PICKS
    pool_slots: u32, // slots in the pool: picks at or past it add nothing
    finish: u32,     // 1: write scaled and squares
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> partials: array<f32>;      // [T * k, blocks, H] f32
@group(0) @binding(2) var<storage, read> slots: array<u32>;         // [T * k] pool slot per pair
@group(0) @binding(3) var<storage, read> weights: array<f32>;       // [T * k] f32 pick weights
@group(0) @binding(4) var<storage, read> next_norm: array<f32>;     // [H] f32 the next RMSNorm's weight
@group(0) @binding(5) var<storage, read_write> y: array<f32>;       // [T, H] f32, added to
@group(0) @binding(6) var<storage, read_write> scaled: array<f32>;  // [T, H] f32 y * next_norm (finish)
@group(0) @binding(7) var<storage, read_write> squares: array<f32>; // [T, ceil(H / 4)] f32 (finish)

const MAX_PICKS: u32 = 64u;
var<workgroup> pick_weight: array<f32, MAX_PICKS>; // 0 for a pick past the pool
var<workgroup> sums: array<f32, 256>;

// workgroup_id.x = block of 16 rows, workgroup_id.y = token; lane li: row li % 16, lane group li / 16.
@compute @workgroup_size(256)
fn expert_ffn_combine(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let t = wg.y;
    if (li < p.k) {
        let pair = t * p.k + li;
        pick_weight[li] = select(0.0, weights[pair], slots[pair] < p.pool_slots);
    }
    workgroupBarrier();
    let r = wg.x * 16u + li % 16u;
    let row = min(r, p.hidden - 1u);
    var acc = 0.0;
    for (var i = li / 16u; i < p.k * p.blocks; i += 16u) {
        let j = i / p.blocks;
        let w = pick_weight[j];
        if (w != 0.0) {
            acc += w * partials[((t * p.k + j) * p.blocks + i % p.blocks) * p.hidden + row];
        }
    }
    sums[li] = acc;
    workgroupBarrier();
    for (var off = 128u; off >= 16u; off >>= 1u) {
        if (li < off) {
            sums[li] += sums[li + off];
        }
        workgroupBarrier();
    }
    if (li < 16u) {
        var v = 0.0;
        if (r < p.hidden) {
            let at = t * p.hidden + r;
            v = y[at] + sums[li];
            y[at] = v;
            if (p.finish != 0u) {
                scaled[at] = v * next_norm[r];
            }
        }
        // The tree is done with sums: reuse it for the squares.
        sums[li] = v * v;
    }
    if (p.finish != 0u) {
        workgroupBarrier();
        let blocks4 = (p.hidden + 3u) / 4u;
        let b = wg.x * 4u + li;
        if (li < 4u && b < blocks4) {
            let i = 4u * li;
            squares[t * blocks4 + b] = (sums[i] + sums[i + 1u]) + (sums[i + 2u] + sums[i + 3u]);
        }
    }
}
