// Q8_0 GEMM for prefill on int8 inputs, tiled: y[t, row_begin + r] = sum over 32-column blocks b of
// (sum_c q[r, c] * xq[t, c]) * scale[r, b] * xscale[t, b], where xq, xscale are quantize_q8's rows of the
// f32 input (as llama.cpp's CPU path and MMQ kernels quantise it). A workgroup takes 128 rows x 32 tokens, two
// blocks at a time through workgroup memory, each lane 8 rows x 4 tokens by int8 dot products
// (`tile_gemm_i8`, q8_tile_i8.wgsl, appended with q8_helpers.wgsl).
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
@group(0) @binding(1) var<storage, read> x: array<u32>;            // [T, 9 * cols / 32] quantize_q8 rows
@group(0) @binding(2) var<storage, read> q: array<vec4<u32>>;      // [rows, cols] int8 (this part)
@group(0) @binding(3) var<storage, read> scales: array<f16>;       // [rows, cols/32] f16 scales (this part)
@group(0) @binding(4) var<storage, read_write> y: array<f32>;      // [T, out_rows] f32

const BR: u32 = 128u; // rows per workgroup
const BT: u32 = 32u;  // tokens per workgroup

// workgroup_id.x = block of 128 rows, workgroup_id.y = block of 32 tokens.
@compute @workgroup_size(128)
fn q8_gemm_i8(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let r0 = wg.x * BR;
    let t0 = wg.y * BT;
    // Lane li loads row li and token li % 32 of the tile: rows and tokens past the end read the last ones /
    // zeros.
    let lrow = min(r0 + li, p.rows - 1u);
    let lt = li % 32u;
    let xrow = min(t0 + lt, p.tokens - 1u) * (9u * p.cols / 32u);
    let acc = tile_gemm_i8(li, lrow, xrow, t0 + lt < p.tokens);
    let rt = r0 + tile_rows(li);
    let tt = t0 + tile_tokens(li);
    for (var j = 0u; j < 4u; j++) {
        let t = tt + j;
        if (t >= p.tokens) {
            break;
        }
        for (var i = 0u; i < 8u; i++) {
            let r = rt + i;
            if (r < p.rows) {
                y[t * p.out_rows + p.row_begin + r] = acc[2u * j + i / 4u][i % 4u];
            }
        }
    }
}
