// Down projection and MoE combine in one dispatch, for T tokens of k picks each (pair = t * k + j):
// y[t, r] += sum_j w[t, j] * (sum_c (q[slot_j, r, c] * scale[slot_j, r, c/32]) * x[pair, c]),
// slot_j = slots[pair], the k weighted terms added in pick order and then to y (the residual stream, as
// moe_combine adds the residual last). Each pick's row sums are the ones expert_q8_gemv computes (the same
// row walk, `rows4`), so the result is moe_combine's of expert_q8_gemv's output; decode runs it instead of
// the two: no combine dispatch, no [T, k, H] round trip. With finish = 1 it also starts the next RMSNorm
// (the next layer's attention norm), which needs the whole row and so cannot end here: it writes
// scaled[t, r] = y[t, r] * next_norm[r] and, per workgroup, the sum of the squares of its 4 rows of y
// (squares[t, block]); qkv_rope_store adds those up and applies the norm's scale after the q|k|v GEMV of
// `scaled`.
// A pool larger than a binding is split by slot range: one dispatch per part, each adding the terms of the
// picks whose slot it binds (a pick elsewhere adds 0 here); only the last has finish = 1.
// The row walk (`rows4`) is appended from expert_q8_rows.wgsl, for Q4_0 planes from expert_q4_rows.wgsl
// (the kernel expert_q4_gemv_combine: this file with its entry point renamed), or for the input quantised
// as it is read from expert_q8i8_rows.wgsl (expert_q8_gemv_combine_i8, likewise); the row sums
// (`row_sum4`) and the quant helpers (`q8_helpers.wgsl`) as in q8_gemv; the combine of the picks' sums
// (`combine_rows`) from expert_combine_picks.wgsl.
enable f16;

struct Params {
    rows: u32,       // rows of one slot's matrix (H)
    cols: u32,       // input length (F), a multiple of 32
    k: u32,          // picks per token, at most MAX_PICKS
    slot_begin: u32, // first slot bound in this part
    slot_end: u32,   // one past the last slot bound in this part
    finish: u32,     // 1: write scaled and squares (the pool's last part)
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;      // [T * k, cols] f32 (the activations)
@group(0) @binding(2) var<storage, read> slots: array<u32>;        // [T * k] pool slot per pair
@group(0) @binding(3) var<storage, read> weights: array<f32>;      // [T * k] f32 pick weights
@group(0) @binding(4) var<storage, read> q: array<vec4<u32>>;      // [slot_end - slot_begin, rows, cols] int8 (Q4_0: cols/2 bytes)
@group(0) @binding(5) var<storage, read> scales: array<f16>;       // [slot_end - slot_begin, rows, cols/32] f16
@group(0) @binding(6) var<storage, read> next_norm: array<f32>;    // [rows] f32 the next RMSNorm's weight
@group(0) @binding(7) var<storage, read_write> y: array<f32>;      // [T, rows] f32, added to
@group(0) @binding(8) var<storage, read_write> scaled: array<f32>; // [T, rows] f32 y * next_norm (finish)
@group(0) @binding(9) var<storage, read_write> squares: array<f32>; // [T, ceil(rows / 4)] f32 (finish)

fn input4(base: u32, j: u32) -> vec4<f32> {
    return x[base + j];
}

// workgroup_id.x = block of 4 rows, workgroup_id.y = token. Lane group g (of 8) takes picks g, g + 8, ...
// over the block's 4 rows.
@compute @workgroup_size(256)
fn expert_q8_gemv_combine(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>/*SG_ARGS*/) {
    let t = wg.y;
    let lane = li % 32u;
    let group = li / 32u;
    let r = wg.x * 4u;
    // Rows past the matrix (the last block of an odd shape) read the last row and are not written.
    let last = p.rows - 1u;
    let block = min(vec4<u32>(r) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(last));
    for (var first = 0u; first < p.k; first += 8u) {
        let j = first + group;
        let pair = t * p.k + min(j, p.k - 1u);
        let slot = slots[pair];
        var acc = vec4<f32>(0.0);
        // Uniform within a 32-lane group (one pick), which is all the int8 walk's lane ^ 1 shuffle needs.
        if (j < p.k && slot >= p.slot_begin && slot < p.slot_end) {
            let rows = vec4<u32>((slot - p.slot_begin) * p.rows) + block;
            acc = rows4(rows, p.cols, pair * (p.cols / 4u), lane);
        }
        let total = row_sum4(acc, li/*SG_CALL*/);
        if (lane == 0u && j < p.k) {
            pick_sums[j] = total;
        }
        // row_sum4's scratch is reused by the next round.
        workgroupBarrier();
    }
    combine_rows(li, t, r, wg.x);
}
