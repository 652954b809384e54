// Expert Q4_0 GEMM for prefill over Q4_0 pool planes (16 bytes of nibbles per 32-value block in ggml order:
// the low nibble of byte j is value j, the high nibble value j + 16; value = (nibble - 8) * scale). (Token,
// pick) pairs grouped by pool slot, up to 8 a group, so each block is read and unpacked once per group
// rather than once per pair. Group g names a slot and a run of `order`: y[pair] = W[slot] x[pair / x_div]
// for pair = order[first + j], j < count. Groups with count 0 (padding up to the dispatch size) and slots
// outside this part leave at once. The row sum and the nibble helpers (`q8_helpers.wgsl`) are appended as in expert_q4_gemv.
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
@group(0) @binding(2) var<storage, read> groups: array<vec4<u32>>; // [G] (slot, first, count <= 8, 0)
@group(0) @binding(3) var<storage, read> order: array<u32>;        // [P] pair ids, grouped by slot
@group(0) @binding(4) var<storage, read> q: array<vec4<u32>>;      // [slot_end - slot_begin, rows, cols/32] 16-byte Q4_0 blocks
@group(0) @binding(5) var<storage, read> scales: array<f16>;       // [slot_end - slot_begin, rows, cols/32] f16
@group(0) @binding(6) var<storage, read_write> y: array<f32>;      // [P, rows] f32

const TB: u32 = 8u; // pairs per group at most

var<workgroup> wgroup: vec4<u32>;

// workgroup_id.x = block of 8 rows, workgroup_id.y = group.
@compute @workgroup_size(256)
fn expert_q4_gemm(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>/*SG_ARGS*/) {
    if (li == 0u) {
        wgroup = groups[wg.y];
    }
    let grp = workgroupUniformLoad(&wgroup);
    let slot = grp.x;
    let nt = min(grp.z, TB);
    if (nt == 0u || slot < p.slot_begin || slot >= p.slot_end) {
        return;
    }
    let lane = li % 32u;
    let r = wg.x * 8u + li / 32u;
    var xrows: array<u32, TB>;
    var acc: array<f32, TB>;
    for (var j = 0u; j < TB; j++) {
        acc[j] = 0.0;
        xrows[j] = 0u;
        if (j < nt) {
            xrows[j] = (order[grp.y + j] / p.x_div) * (p.cols / 4u);
        }
    }
    if (r < p.rows) {
        let nblk = p.cols / 32u;
        let base = ((slot - p.slot_begin) * p.rows + r) * nblk;
        for (var i = lane; i < nblk; i += 32u) {
            let w = q[base + i];
            let s = f32(scales[base + i]);
            let l0 = lo4x4(w.x);
            let l1 = lo4x4(w.y);
            let l2 = lo4x4(w.z);
            let l3 = lo4x4(w.w);
            let h0 = hi4x4(w.x);
            let h1 = hi4x4(w.y);
            let h2 = hi4x4(w.z);
            let h3 = hi4x4(w.w);
            for (var j = 0u; j < TB; j++) {
                if (j < nt) {
                    // Values 0..15 (low nibbles) are x[xb .. xb + 4], 16..31 (high nibbles) x[xb + 4 .. xb + 8].
                    let xb = xrows[j] + i * 8u;
                    let lo = dot(l0, x[xb]) + dot(l1, x[xb + 1u]) + dot(l2, x[xb + 2u]) + dot(l3, x[xb + 3u]);
                    let hi = dot(h0, x[xb + 4u]) + dot(h1, x[xb + 5u]) + dot(h2, x[xb + 6u]) + dot(h3, x[xb + 7u]);
                    acc[j] += s * (lo + hi);
                }
            }
        }
    }
    for (var j = 0u; j < TB; j++) {
        let total = row_sum(acc[j], li/*SG_CALL*/);
        if (lane == 0u && r < p.rows && j < nt) {
            y[order[grp.y + j] * p.rows + r] = total;
        }
        // row_sum reuses its workgroup memory: wait before the next pair's sum.
        workgroupBarrier();
    }
}
