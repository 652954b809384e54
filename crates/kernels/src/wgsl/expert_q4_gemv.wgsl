// Expert Q4_0 GEMV for (token, pick) pairs, indexed by pool slot:
// y[pair, r] = sum_c ((n[slot, r, c] - 8) * scale[slot, r, c/32]) * x[pair / x_div, c], slot = slots[pair].
// The quant plane holds 16 bytes per 32-value block in ggml order: the low nibble of byte j is value j,
// the high nibble value j + 16. One lane takes one whole block (16 bytes, one vec4<u32>) a step.
// gate||up: x_div = k (the picks of a token share its input); down: x_div = 1 (one input per pick).
// A pool larger than a binding is split by slot range: one dispatch per part, pairs whose slot lies
// elsewhere leave at once. The row sum (`row_sum`) and the nibble helpers (`q8_helpers.wgsl`) are
// appended as in expert_q8_gemv.
enable f16;

struct Params {
    rows: u32,       // rows of one slot's matrix
    cols: u32,       // input length, a multiple of 32
    pairs: u32,      // P
    x_div: u32,      // input row = pair / x_div
    slot_begin: u32, // first slot bound in this part
    slot_end: u32,   // one past the last slot bound in this part
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;      // [P / x_div, cols] f32
@group(0) @binding(2) var<storage, read> slots: array<u32>;        // [P] pool slot per pair
@group(0) @binding(3) var<storage, read> q: array<vec4<u32>>;      // [slot_end - slot_begin, rows, cols/32] 16-byte Q4_0 blocks
@group(0) @binding(4) var<storage, read> scales: array<f16>;       // [slot_end - slot_begin, rows, cols/32] f16
@group(0) @binding(5) var<storage, read_write> y: array<f32>;      // [P, rows] f32

var<workgroup> wslot: u32;

// workgroup_id.x = block of 8 rows, workgroup_id.y = pair.
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
    let r = wg.x * 8u + li / 32u;
    var acc = 0.0;
    if (r < p.rows) {
        let nblk = p.cols / 32u;
        let row = (slot - p.slot_begin) * p.rows + r;
        let base = row * nblk;
        let xbase = (pair / p.x_div) * (p.cols / 4u);
        for (var i = lane; i < nblk; i += 32u) {
            let w = q[base + i];
            // Values 0..15 (low nibbles) are x[xb .. xb + 4], values 16..31 (high nibbles) x[xb + 4 .. xb + 8].
            let xb = xbase + i * 8u;
            let d = dot(lo4x4(w.x), x[xb])
                + dot(lo4x4(w.y), x[xb + 1u])
                + dot(lo4x4(w.z), x[xb + 2u])
                + dot(lo4x4(w.w), x[xb + 3u])
                + dot(hi4x4(w.x), x[xb + 4u])
                + dot(hi4x4(w.y), x[xb + 5u])
                + dot(hi4x4(w.z), x[xb + 6u])
                + dot(hi4x4(w.w), x[xb + 7u]);
            acc += f32(scales[base + i]) * d;
        }
    }
    let total = row_sum(acc, li/*SG_CALL*/);
    if (lane == 0u && r < p.rows) {
        y[pair * p.rows + r] = total;
    }
}
