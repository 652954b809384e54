// Down projection and MoE combine in one dispatch on a slot pool of records of GGUF blocks, for T tokens of
// k picks each (pair = t * k + j): y[t, r] += sum_j w[t, j] * (sum_c W[slot_j, r, c] * x[pair, c]), slot_j =
// slots[pair], W as in expert_kquant_gemv.wgsl (rows of cols / 256 super-blocks from byte (s - slot_begin) *
// slot_bytes + part_bytes), the k weighted terms added in pick order and then to y (the residual stream, as
// moe_combine adds the residual last). With finish = 1 it also starts the next RMSNorm as
// expert_q8_gemv_combine does: scaled[t, r] = y[t, r] * next_norm[r] and, per workgroup, the sum of the
// squares of its 4 rows of y (squares[t, block]), which qkv_rope_store adds up after the q|k|v GEMV of
// `scaled`. A pool larger than a binding is split by slot range: one dispatch per part, each adding the
// terms of the picks whose slot it binds; only the last has finish = 1. Each pick's 4 row sums are
// expert_kquant_gemv's (`lane_dot4` from kquant_dot4.wgsl); the block helper and the row sums
// (`row_sum4`) are appended as there, and the combine (`combine_rows`) from expert_combine_picks.wgsl, as
// for expert_q8_gemv_combine; the other types' kernels are this file with its entry point renamed.
enable f16;

struct Params {
    rows: u32,       // rows of one slot's matrix (H)
    cols: u32,       // input length (F), a multiple of 256
    k: u32,          // picks per token, at most MAX_PICKS
    slot_begin: u32, // first slot bound in this part
    slot_end: u32,   // one past the last slot bound in this part
    slot_bytes: u32, // bytes a slot takes in w
    part_bytes: u32, // where the matrix starts in a slot
    finish: u32,     // 1: write scaled and squares (the pool's last part)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;      // [T * k, cols] f32 (the activations)
@group(0) @binding(2) var<storage, read> slots: array<u32>;        // [T * k] pool slot per pair
@group(0) @binding(3) var<storage, read> weights: array<f32>;      // [T * k] f32 pick weights
@group(0) @binding(4) var<storage, read> w: array<u32>;            // slots slot_begin..slot_end of the plane
@group(0) @binding(5) var<storage, read> next_norm: array<f32>;    // [rows] f32 the next RMSNorm's weight
@group(0) @binding(6) var<storage, read_write> y: array<f32>;      // [T, rows] f32, added to
@group(0) @binding(7) var<storage, read_write> scaled: array<f32>; // [T, rows] f32 y * next_norm (finish)
@group(0) @binding(8) var<storage, read_write> squares: array<f32>; // [T, ceil(rows / 4)] f32 (finish)

// workgroup_id.x = block of 4 rows, workgroup_id.y = token. Lane group g (of 8) takes picks g, g + 8, ...
// over the block's 4 rows.
@compute @workgroup_size(256)
fn expert_q4_k_gemv_combine(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>/*SG_ARGS*/) {
    let t = wg.y;
    let lane = li % 32u;
    let group = li / 32u;
    let r = wg.x * 4u;
    let row_bytes = (p.cols / 256u) * BLOCK_BYTES;
    // Rows past the matrix (the last block of an odd shape) read the last row and are not written.
    let block = min(vec4<u32>(r) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.rows - 1u)) * row_bytes;
    for (var first = 0u; first < p.k; first += 8u) {
        let j = first + group;
        let pair = t * p.k + min(j, p.k - 1u);
        let slot = slots[pair];
        var acc = vec4<f32>(0.0);
        if (j < p.k && slot >= p.slot_begin && slot < p.slot_end) {
            let rows = vec4<u32>((slot - p.slot_begin) * p.slot_bytes + p.part_bytes) + block;
            acc = lane_dot4(rows, lane, pair * (p.cols / 4u));
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
