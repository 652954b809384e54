// Q8_0 GEMM for prefill, tiled: y[t, row_begin + r] = sum_c (q[r, c] * scale[r, c/32]) * x[t, c]. A
// workgroup takes 64 rows x 32 tokens; per 32-column block it decodes the rows' weights (scaled) and copies
// the tokens' inputs into workgroup memory once, then each lane multiplies 4 rows by 2 tokens from there:
// a weight is read from memory once per 32 tokens, and an input once per 64 rows (q8_gemm reads each
// input value once per 8 rows and each weight once per 8 tokens). The product (`tile_gemm`,
// q8_tile.wgsl) and `i8x4` are appended.
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
@group(0) @binding(2) var<storage, read> q: array<vec2<u32>>;      // [rows, cols] int8 (this part)
@group(0) @binding(3) var<storage, read> scales: array<f16>;       // [rows, cols/32] f16 scales (this part)
@group(0) @binding(4) var<storage, read_write> y: array<f32>;      // [T, out_rows] f32

const BR: u32 = 64u; // rows per workgroup
const BT: u32 = 32u; // tokens per workgroup

// workgroup_id.x = block of 64 rows, workgroup_id.y = block of 32 tokens.
@compute @workgroup_size(256)
fn q8_gemm_tiled(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let r0 = wg.x * BR;
    let t0 = wg.y * BT;
    // Lane li loads row li / 4 and token li / 8 of the tile (tile_gemm): rows and tokens past the end read
    // the last ones / zeros.
    let lrow = min(r0 + li / 4u, p.rows - 1u);
    let lt = li / 8u;
    let xrow = min(t0 + lt, p.tokens - 1u) * (p.cols / 4u);
    let acc = tile_gemm(li, lrow, xrow, t0 + lt < p.tokens);
    // Lane li holds rows 4 * (li % 16).. for tokens 2 * (li / 16) and the next.
    let ri = li % 16u;
    let tj = li / 16u;
    for (var i = 0u; i < 4u; i++) {
        let r = r0 + ri * 4u + i;
        if (r >= p.rows) {
            break;
        }
        let t = t0 + tj * 2u;
        if (t < p.tokens) {
            y[t * p.out_rows + p.row_begin + r] = acc[0][i];
        }
        if (t + 1u < p.tokens) {
            y[(t + 1u) * p.out_rows + p.row_begin + r] = acc[1][i];
        }
    }
}
