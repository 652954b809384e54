// Q8_0 GEMM for prefill: y[t, row_begin + r] = sum_c (q[r, c] * scale[r, c/32]) * x[t, c] for a block of
// up to 8 tokens per workgroup, so each weight is read and converted once per 8 tokens (q8_gemv reads
// it once per token). Same layout as q8_gemv: 8 rows per workgroup, 32 lanes per row, one vec4<u32>
// (16 int8) per lane per step. The row sum and `i8x4` are appended as in q8_gemv.
enable f16;

struct Params {
    rows: u32,      // rows in this part
    cols: u32,      // input length, a multiple of 32
    row_begin: u32, // first output row of this part
    out_rows: u32,  // rows of the whole matrix (stride of y)
    tokens: u32,    // T
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;      // [T, cols] f32
@group(0) @binding(2) var<storage, read> q: array<vec4<u32>>;      // [rows, cols] int8 (this part)
@group(0) @binding(3) var<storage, read> scales: array<f16>;       // [rows, cols/32] f16 scales (this part)
@group(0) @binding(4) var<storage, read_write> y: array<f32>;      // [T, out_rows] f32

const TB: u32 = 8u; // tokens per workgroup

// workgroup_id.x = block of 8 rows, workgroup_id.y = block of TB tokens.
@compute @workgroup_size(256)
fn q8_gemm(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>/*SG_ARGS*/) {
    let lane = li % 32u;
    let r = wg.x * 8u + li / 32u;
    let t0 = wg.y * TB;
    let nt = min(TB, p.tokens - t0);
    var acc: array<f32, TB>;
    for (var tt = 0u; tt < TB; tt++) {
        acc[tt] = 0.0;
    }
    if (r < p.rows) {
        let nvec = p.cols / 16u;
        let qbase = r * nvec;
        let sbase = r * (p.cols / 32u);
        let xrow = p.cols / 4u;
        for (var i = lane; i < nvec; i += 32u) {
            let w = q[qbase + i];
            let s = f32(scales[sbase + i / 2u]);
            let a = i8x4(w.x);
            let b = i8x4(w.y);
            let c = i8x4(w.z);
            let d = i8x4(w.w);
            // A constant trip count lets the compiler unroll and keep `acc` in registers.
            for (var tt = 0u; tt < TB; tt++) {
                if (tt < nt) {
                    let xb = (t0 + tt) * xrow + i * 4u;
                    acc[tt] += s * (dot(a, x[xb]) + dot(b, x[xb + 1u]) + dot(c, x[xb + 2u]) + dot(d, x[xb + 3u]));
                }
            }
        }
    }
    for (var tt = 0u; tt < TB; tt++) {
        let total = row_sum(acc[tt], li/*SG_CALL*/);
        if (lane == 0u && r < p.rows && tt < nt) {
            y[(t0 + tt) * p.out_rows + p.row_begin + r] = total;
        }
        // row_sum reuses its workgroup memory: wait before the next token's sum.
        workgroupBarrier();
    }
}
