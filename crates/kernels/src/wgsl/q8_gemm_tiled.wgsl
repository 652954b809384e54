// Q8_0 GEMM for prefill through workgroup-memory tiles: y[t, row_begin + r] = W[r] · x[t] for T tokens. A
// workgroup takes 128 rows x 32 tokens and each lane 8 rows x 4 tokens of them (`tile_product`): a weight is
// read from memory once per 32 tokens, an input once per 128 rows. Two kernels share this file and differ in
// the tile helper appended before q8_helpers.wgsl, which declares the input `x` (binding 1) and multiplies:
//   q8_gemm_tiled: q8_tile.wgsl with q8_tile_weights.wgsl, f32 inputs, the weights decoded to f32 in
//   workgroup memory;
//   q8_gemm_i8 (this entry point renamed): q8_tile_i8.wgsl, inputs as quantize_q8 rows, int8 dot products
//   summed exactly a Q8_0 block at a time and scaled by the row's and the token's scales (llama.cpp's
//   arithmetic for Q8_0 weights).
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
// binding 1: x, [T] input rows of x_row_len() elements, declared by the tile helper
@group(0) @binding(2) var<storage, read> q: array<vec4<u32>>;      // [rows, cols] int8 (this part)
@group(0) @binding(3) var<storage, read> scales: array<f16>;       // [rows, cols/32] f16 scales (this part)
@group(0) @binding(4) var<storage, read_write> y: array<f32>;      // [T, out_rows] f32

const BR: u32 = 128u; // rows per workgroup
const BT: u32 = 32u;  // tokens per workgroup

// workgroup_id.x = block of 128 rows, workgroup_id.y = block of 32 tokens.
@compute @workgroup_size(128)
fn q8_gemm_tiled(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let r0 = wg.x * BR;
    let t0 = wg.y * BT;
    // Lane li loads row li and token li % 32 of the tile (tile_product): rows and tokens past the end read
    // the last ones / zeros.
    let lrow = min(r0 + li, p.rows - 1u);
    let lt = li % 32u;
    let xrow = min(t0 + lt, p.tokens - 1u) * x_row_len();
    let acc = tile_product(li, lrow, xrow, t0 + lt < p.tokens);
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
