// Expert Q4_0 GEMV for (token, pick) pairs, indexed by pool slot:
// y[pair, r] = sum_c ((n[slot, r, c] - 8) * scale[slot, r, c/32]) * in[pair, c], slot = slots[pair], with the
// input as in expert_q8_gemv (x[pair / x_div], or silu(gate) * up read from gate||up with silu_input = 1).
// The quant plane holds 16 bytes per 32-value block in ggml order: the low nibble of byte j is value j,
// the high nibble value j + 16. One lane takes one whole block (16 bytes, one vec4<u32>) of 4 rows a step.
// A pool larger than a binding is split by slot range: one dispatch per part, pairs whose slot lies
// elsewhere leave at once. The row sums (`row_sum4`) and the nibble helpers (`q8_helpers.wgsl`) are
// appended as in expert_q8_gemv.
enable f16;

struct Params {
    rows: u32,       // rows of one slot's matrix
    cols: u32,       // input length, a multiple of 32
    pairs: u32,      // P
    x_div: u32,      // input row = pair / x_div (1 with silu_input)
    slot_begin: u32, // first slot bound in this part
    slot_end: u32,   // one past the last slot bound in this part
    silu_input: u32, // 1: x is [P, 2 * cols] gate then up, the input is silu(gate) * up
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;      // [P / x_div, cols] or [P, 2 * cols] f32
@group(0) @binding(2) var<storage, read> slots: array<u32>;        // [P] pool slot per pair
@group(0) @binding(3) var<storage, read> q: array<vec4<u32>>;      // [slot_end - slot_begin, rows, cols/32] 16-byte Q4_0 blocks
@group(0) @binding(4) var<storage, read> scales: array<f16>;       // [slot_end - slot_begin, rows, cols/32] f16
@group(0) @binding(5) var<storage, read_write> y: array<f32>;      // [P, rows] f32

var<workgroup> wslot: u32;

// Four consecutive input values (vec4 index j of the pair's input row starting at `base`).
fn input4(base: u32, j: u32) -> vec4<f32> {
    if (p.silu_input == 0u) {
        return x[base + j];
    }
    let g = x[base + j];
    let u = x[base + p.cols / 4u + j];
    return (g / (1.0 + exp(-g))) * u;
}

// The 8 input vec4s of one 32-value block.
struct Block {
    lo: array<vec4<f32>, 4>, // values 0..15: the low nibbles
    hi: array<vec4<f32>, 4>, // values 16..31: the high nibbles
}

// One Q4_0 block (16 bytes of nibble pairs) against its 32 input values.
fn dot32(w: vec4<u32>, b: Block) -> f32 {
    return dot(lo4x4(w.x), b.lo[0]) + dot(lo4x4(w.y), b.lo[1]) + dot(lo4x4(w.z), b.lo[2])
        + dot(lo4x4(w.w), b.lo[3]) + dot(hi4x4(w.x), b.hi[0]) + dot(hi4x4(w.y), b.hi[1])
        + dot(hi4x4(w.z), b.hi[2]) + dot(hi4x4(w.w), b.hi[3]);
}

// Block i of the 4 rows (`rows` = their first blocks) against its 32 input values, each row scaled: 4
// partial sums. `live` 0 makes it add nothing (a clamped block past the row's end).
fn block4(rows: vec4<u32>, base: u32, i: u32, live: bool) -> vec4<f32> {
    let w0 = q[rows.x + i];
    let w1 = q[rows.y + i];
    let w2 = q[rows.z + i];
    let w3 = q[rows.w + i];
    let s = select(vec4<f32>(0.0), vec4<f32>(
        f32(scales[rows.x + i]),
        f32(scales[rows.y + i]),
        f32(scales[rows.z + i]),
        f32(scales[rows.w + i]),
    ), live);
    let xb = i * 8u;
    var b: Block;
    b.lo = array(input4(base, xb), input4(base, xb + 1u), input4(base, xb + 2u), input4(base, xb + 3u));
    b.hi = array(input4(base, xb + 4u), input4(base, xb + 5u), input4(base, xb + 6u), input4(base, xb + 7u));
    return s * vec4<f32>(dot32(w0, b), dot32(w1, b), dot32(w2, b), dot32(w3, b));
}

// workgroup_id.x = block of 32 rows, workgroup_id.y = pair. Each 32-lane group takes 4 rows, so a lane
// reads a block's inputs once for 4 weight blocks, with the 4 loads independent.
@compute @workgroup_size(256)
fn expert_q4_gemv(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>/*SG_ARGS*/) {
    let pair = wg.y;
    if (li == 0u) {
        wslot = slots[pair];
    }
    let slot = workgroupUniformLoad(&wslot);
    if (slot < p.slot_begin || slot >= p.slot_end) {
        return;
    }
    let lane = li % 32u;
    let r = wg.x * 32u + (li / 32u) * 4u;
    let nblk = p.cols / 32u;
    // Rows past the matrix (the last block of an odd shape) read the last row and are not written.
    let first = (slot - p.slot_begin) * p.rows;
    let last = p.rows - 1u;
    let rows = (vec4<u32>(first) + min(vec4<u32>(r) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(last))) * nblk;
    var base = (pair / p.x_div) * (p.cols / 4u);
    if (p.silu_input != 0u) {
        base = pair * (p.cols / 2u);
    }
    // Two blocks a step (512 bytes apart), their loads independent: a lane's loop is bound by its memory
    // round trips, and two in flight halve them.
    var acc = vec4<f32>(0.0);
    for (var i = lane; i < nblk; i += 64u) {
        let c0 = block4(rows, base, i, true);
        let c1 = block4(rows, base, min(i + 32u, nblk - 1u), i + 32u < nblk);
        acc += c0;
        acc += c1;
    }
    let total = row_sum4(acc, li/*SG_CALL*/);
    if (lane == 0u) {
        for (var j = 0u; j < 4u; j++) {
            if (r + j < p.rows) {
                y[pair * p.rows + r + j] = total[j];
            }
        }
    }
}
