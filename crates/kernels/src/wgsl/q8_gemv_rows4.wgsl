// Q8_0 GEMV over T inputs, 4 rows a lane group:
// y[t, row_begin + r] = sum_c (q[r, c] * scale[r, c/32]) * x[t, c].
// With accumulate = 1 the result is added to y. The expert GEMVs' row walk (`rows4`): 32 rows a workgroup,
// each 32-lane group 4 of them, so a lane reads an input chunk once for 4 rows, 8 independent 16-byte weight
// loads in flight a lane (q8_gemv: one row a lane group, q8_gemv_rows2: two). As q8_gemv_rows4 the walk is
// expert_q8_rows.wgsl's; as q8_gemv_i8 (this file with its entry point renamed) expert_q8i8_rows.wgsl's,
// which quantises each input chunk to Q8_0 as it reads it (`quant_chunk`, q8i8_input.wgsl) and sums the
// int8 products exactly: y[t, r] = sum_b (sum_c q[r, c] * xq[t, c]) * scale[r, b] * xs[t, b], what
// llama.cpp's CPU backend computes for Q8_0 weights. Few rows make few workgroups (2,048 rows: 64), so
// the small projections keep q8_gemv. One dispatch per row part when the int8 plane is split over bindings.
// Appended: the row walk (and for q8_gemv_i8 q8i8_input.wgsl and its `pair_max`), the row sums,
// q8_helpers.wgsl.
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

fn input4(base: u32, j: u32) -> vec4<f32> {
    return x[base + j];
}

// workgroup_id.x = block of 32 rows, workgroup_id.y = token.
@compute @workgroup_size(256)
fn q8_gemv_rows4(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>/*SG_ARGS*/) {
    let lane = li % 32u;
    let r = wg.x * 32u + (li / 32u) * 4u;
    let t = wg.y;
    // Rows past the part (its last block) read its last row and are not written: every lane walks, as
    // `pair_max` may shuffle.
    let rows = min(vec4<u32>(r) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.rows - 1u));
    let total = row_sum4(rows4(rows, p.cols, t * (p.cols / 4u), lane), li/*SG_CALL*/);
    if (lane == 0u) {
        for (var j = 0u; j < 4u; j++) {
            if (r + j < p.rows) {
                let at = t * p.out_rows + p.row_begin + r + j;
                if (p.accumulate != 0u) {
                    y[at] += total[j];
                } else {
                    y[at] = total[j];
                }
            }
        }
    }
}
