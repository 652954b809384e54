// Q8_0 GEMV over T inputs: y[t, row_begin + r] = sum_c (q[r, c] * scale[r, c/32]) * x[t, c]. With
// accumulate = 1 the result is added to y instead of stored (decode's wo adds onto the residual stream).
// 8 rows per workgroup, 32 lanes per row; each lane reads four 16-int8 chunks (vec4<u32>, 512 bytes apart) per
// step, all loads issued before any is used: decode GEMVs have few warps per SM, so a lane's loop is
// bound by its memory round trips (a 2,048-column row is one step). One dispatch per row part when the int8
// plane is split over bindings.
// The row sum (`row_sum`) is appended from row_sum_plain.wgsl or row_sum_subgroup.wgsl, `i8x4` from
// q8_helpers.wgsl.
//
// Performance notes (reasoned for the H200, not yet measured there; lavapipe numbers say nothing):
// - int8 -> f32 goes through `i8x4` (integer ops + one f32 subtract), not unpack4xI8 + I2F, whose
//   quarter-rate conversion would cap the kernel near 4 TB/s.
// - Each 16-byte weight load pulls 64 bytes of x through L1; if the H200 run shows L1-bound behaviour,
//   give each lane two rows (halves the x traffic) before trying workgroup-memory staging of x.
// - Wave quantisation: 8 rows per workgroup makes 18,992 workgroups for the lm head, 1,536 for the 8
//   gate||up picks (about 1.5 waves at 8 workgroups per SM on 132 SMs).
enable f16;

struct Params {
    rows: u32,      // rows in this part
    cols: u32,      // input length, a multiple of 32
    row_begin: u32, // first output row of this part
    out_rows: u32,  // rows of the whole matrix (stride of y)
    accumulate: u32, // 1: y += W x
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;      // [T, cols] f32
@group(0) @binding(2) var<storage, read> q: array<vec4<u32>>;      // [rows, cols] int8 (this part)
@group(0) @binding(3) var<storage, read> scales: array<f16>;       // [rows, cols/32] f16 scales (this part)
@group(0) @binding(4) var<storage, read_write> y: array<f32>;      // [T, out_rows] f32

// workgroup_id.x = block of 8 rows, workgroup_id.y = token.
@compute @workgroup_size(256)
fn q8_gemv(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>/*SG_ARGS*/) {
    let lane = li % 32u;
    let r = wg.x * 8u + li / 32u;
    let t = wg.y;
    var acc = 0.0;
    if (r < p.rows) {
        let nvec = p.cols / 16u;
        let qbase = r * nvec;
        let sbase = r * (p.cols / 32u);
        let xbase = t * (p.cols / 4u);
        for (var i = lane; i < nvec; i += 128u) {
            // Chunks i + 32, i + 64, i + 96 clamped to the row; past its end they add 0 (scale 0, finite
            // inputs).
            let last = nvec - 1u;
            let j1 = min(i + 32u, last);
            let j2 = min(i + 64u, last);
            let j3 = min(i + 96u, last);
            let w0 = q[qbase + i];
            let w1 = q[qbase + j1];
            let w2 = q[qbase + j2];
            let w3 = q[qbase + j3];
            let s0 = f32(scales[sbase + i / 2u]);
            let s1 = select(0.0, f32(scales[sbase + j1 / 2u]), i + 32u < nvec);
            let s2 = select(0.0, f32(scales[sbase + j2 / 2u]), i + 64u < nvec);
            let s3 = select(0.0, f32(scales[sbase + j3 / 2u]), i + 96u < nvec);
            acc += s0 * dot16(w0, x[xbase + i * 4u], x[xbase + i * 4u + 1u], x[xbase + i * 4u + 2u], x[xbase + i * 4u + 3u]);
            acc += s1 * dot16(w1, x[xbase + j1 * 4u], x[xbase + j1 * 4u + 1u], x[xbase + j1 * 4u + 2u], x[xbase + j1 * 4u + 3u]);
            acc += s2 * dot16(w2, x[xbase + j2 * 4u], x[xbase + j2 * 4u + 1u], x[xbase + j2 * 4u + 2u], x[xbase + j2 * 4u + 3u]);
            acc += s3 * dot16(w3, x[xbase + j3 * 4u], x[xbase + j3 * 4u + 1u], x[xbase + j3 * 4u + 2u], x[xbase + j3 * 4u + 3u]);
        }
    }
    let total = row_sum(acc, li/*SG_CALL*/);
    if (lane == 0u && r < p.rows) {
        let at = t * p.out_rows + p.row_begin + r;
        if (p.accumulate != 0u) {
            y[at] += total;
        } else {
            y[at] = total;
        }
    }
}
