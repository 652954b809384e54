// K-quant GEMV over T inputs on GGUF blocks as they lie in the file: y[t, row_begin + r] = sum_c W[r, c] *
// x[t, c], W's rows of cols / 256 super-blocks of BLOCK_BYTES each. With accumulate = 1 the result is added
// to y. `q4_k_gemv`: 8 rows per workgroup, 32 lanes per row; LANES_PER_BLOCK lanes share a super-block,
// each loading its values of x (`block_x`) and summing its part of the block against them (`block_dot`),
// so one step of a lane covers 32 / LANES_PER_BLOCK super-blocks. `q4_k_gemv_rows4`: the same walk over 4
// rows a lane group (32 a workgroup), each x load used for 4 rows (`lane_dot4`, from kquant_dot4.wgsl,
// appended). The block helper appended after this file (kquant_q4_k.wgsl, kquant_q6_k.wgsl, …) defines
// BLOCK_BYTES, LANES_PER_BLOCK, `block_x` and `block_dot`; the row sums (`row_sum`, `row_sum4`) come from
// row_sum_plain.wgsl or row_sum_subgroup.wgsl. A Q6_K block need not start on a 4-byte boundary (210
// bytes): its helper reads words at any byte (`byte_word`). One dispatch per row part when the matrix is
// split over bindings.
enable f16;

struct Params {
    rows: u32,       // rows in this part
    cols: u32,       // input length, a multiple of 256
    row_begin: u32,  // first output row of this part
    out_rows: u32,   // rows of the whole matrix (stride of y)
    accumulate: u32, // 1: y += W x
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;      // [T, cols] f32
@group(0) @binding(2) var<storage, read> w: array<u32>;            // [rows, cols/256] blocks (this part)
@group(0) @binding(3) var<storage, read_write> y: array<f32>;      // [T, out_rows] f32

// workgroup_id.x = block of 8 rows, workgroup_id.y = token.
@compute @workgroup_size(256)
fn q4_k_gemv(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>/*SG_ARGS*/) {
    let lane = li % 32u;
    let r = wg.x * 8u + li / 32u;
    let t = wg.y;
    var acc = 0.0;
    if (r < p.rows) {
        let blocks = p.cols / 256u;
        let per_step = 32u / LANES_PER_BLOCK;
        let row = r * blocks * BLOCK_BYTES;
        let xrow = t * (p.cols / 4u);
        for (var sb = lane / LANES_PER_BLOCK; sb < blocks; sb += per_step) {
            let part = lane % LANES_PER_BLOCK;
            acc += block_dot(row + sb * BLOCK_BYTES, part, block_x(part, xrow + sb * 64u));
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

// workgroup_id.x = block of 32 rows (4 a lane group), workgroup_id.y = token.
@compute @workgroup_size(256)
fn q4_k_gemv_rows4(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>/*SG_ARGS*/) {
    let lane = li % 32u;
    let r0 = wg.x * 32u + (li / 32u) * 4u;
    let t = wg.y;
    var acc = vec4<f32>(0.0);
    if (r0 < p.rows) {
        let row_bytes = (p.cols / 256u) * BLOCK_BYTES;
        // Rows past the part read its last row again; their sums are not stored.
        let rows = min(vec4<u32>(r0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.rows - 1u)) * row_bytes;
        acc = lane_dot4(rows, lane, t * (p.cols / 4u));
    }
    let total = row_sum4(acc, li/*SG_CALL*/);
    if (lane == 0u) {
        for (var i = 0u; i < 4u; i++) {
            let r = r0 + i;
            if (r < p.rows) {
                let at = t * p.out_rows + p.row_begin + r;
                if (p.accumulate != 0u) {
                    y[at] += total[i];
                } else {
                    y[at] = total[i];
                }
            }
        }
    }
}
