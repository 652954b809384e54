// Q8_0 GEMV over T inputs, two rows per lane: y[t, row_begin + r] = sum_c (q[r, c] * scale[r, c/32]) * x[t, c].
// As q8_gemv (32 lanes per row group, 16 int8 a lane a step, 512 contiguous bytes a row group a step), but
// each row group takes rows r and r + 8 of a block of 16, so every vec4 of x a lane loads feeds two rows:
// half the x traffic through L1 per weight byte, two independent weight loads in flight a lane.
// The row sum (`row_sum`) is appended from row_sum_plain.wgsl or row_sum_subgroup.wgsl, `i8x4` from
// q8_helpers.wgsl. Selectable beside q8_gemv (Kernels::q8_gemv_rows2) to compare them in the bench.
enable f16;

struct Params {
    rows: u32,      // rows in this part
    cols: u32,      // input length, a multiple of 32
    row_begin: u32, // first output row of this part
    out_rows: u32,  // rows of the whole matrix (stride of y)
    _accumulate: u32, // q8_gemv's add onto y (Q8GemvParams), not offered here: 0
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;      // [T, cols] f32
@group(0) @binding(2) var<storage, read> q: array<vec4<u32>>;      // [rows, cols] int8 (this part)
@group(0) @binding(3) var<storage, read> scales: array<f16>;       // [rows, cols/32] f16 scales (this part)
@group(0) @binding(4) var<storage, read_write> y: array<f32>;      // [T, out_rows] f32

// One 16-int8 step of row r at vec4 index i against x's 16 values xa..xd.
fn step(r: u32, nvec: u32, i: u32, xa: vec4<f32>, xb: vec4<f32>, xc: vec4<f32>, xd: vec4<f32>) -> f32 {
    let w = q[r * nvec + i];
    let d = dot(i8x4(w.x), xa) + dot(i8x4(w.y), xb) + dot(i8x4(w.z), xc) + dot(i8x4(w.w), xd);
    return f32(scales[r * (p.cols / 32u) + i / 2u]) * d;
}

// workgroup_id.x = block of 16 rows, workgroup_id.y = token.
@compute @workgroup_size(256)
fn q8_gemv_rows2(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>/*SG_ARGS*/) {
    let lane = li % 32u;
    let ra = wg.x * 16u + li / 32u;
    let rb = ra + 8u;
    let t = wg.y;
    let nvec = p.cols / 16u;
    let xbase = t * (p.cols / 4u);
    var acc_a = 0.0;
    var acc_b = 0.0;
    if (ra < p.rows) {
        for (var i = lane; i < nvec; i += 32u) {
            let xb = xbase + i * 4u;
            let x0 = x[xb];
            let x1 = x[xb + 1u];
            let x2 = x[xb + 2u];
            let x3 = x[xb + 3u];
            acc_a += step(ra, nvec, i, x0, x1, x2, x3);
            if (rb < p.rows) {
                acc_b += step(rb, nvec, i, x0, x1, x2, x3);
            }
        }
    }
    let total_a = row_sum(acc_a, li/*SG_CALL*/);
    // Both helpers reuse their workgroup scratch: every lane past the first sum before the second.
    workgroupBarrier();
    let total_b = row_sum(acc_b, li/*SG_CALL*/);
    if (lane == 0u && ra < p.rows) {
        y[t * p.out_rows + p.row_begin + ra] = total_a;
    }
    if (lane == 0u && rb < p.rows) {
        y[t * p.out_rows + p.row_begin + rb] = total_b;
    }
}
