// Q8_0 GEMM for prefill, tiled: y[t, row_begin + r] = sum_c (q[r, c] * scale[r, c/32]) * x[t, c]. A
// workgroup takes 64 rows x 32 tokens; per 32-column block it decodes the rows' weights (scaled) and copies
// the tokens' inputs into workgroup memory once, then each lane multiplies 4 rows by 2 tokens from there:
// a weight is read from memory once per 32 tokens, and an input once per 64 rows (q8_gemm reads each
// input value once per 8 rows and each weight once per 8 tokens). The tile (`tile_block`,
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
    let nblk = p.cols / 32u;
    // Loading: lane li decodes 8 weights of row li / 4 (columns 8 * (li % 4)..), and copies 4 inputs of
    // token li / 8 (columns 4 * (li % 8)..). Rows and tokens past the end read the last ones / zeros.
    let lr = li / 4u;
    let lrow = min(r0 + lr, p.rows - 1u);
    let lk = (li % 4u) * 8u;
    let lt = li / 8u;
    let lk4 = li % 8u;
    let live_t = t0 + lt < p.tokens;
    let xrow = min(t0 + lt, p.tokens - 1u) * (p.cols / 4u);
    // Computing: lane li takes rows 4 * (li % 16).. and tokens 2 * (li / 16)..
    let ri = li % 16u;
    let tj = li / 16u;
    var acc0 = vec4<f32>(0.0); // 4 rows, token 2 tj
    var acc1 = vec4<f32>(0.0); // 4 rows, token 2 tj + 1
    for (var b = 0u; b < nblk; b++) {
        let word = q[(lrow * p.cols + b * 32u + lk) / 8u];
        let s = f32(scales[lrow * nblk + b]);
        let xv = select(vec4<f32>(0.0), x[xrow + b * 8u + lk4], live_t);
        tile_block(li, word, s, xv, &acc0, &acc1);
    }
    for (var i = 0u; i < 4u; i++) {
        let r = r0 + ri * 4u + i;
        if (r >= p.rows) {
            break;
        }
        let t = t0 + tj * 2u;
        if (t < p.tokens) {
            y[t * p.out_rows + p.row_begin + r] = acc0[i];
        }
        if (t + 1u < p.tokens) {
            y[(t + 1u) * p.out_rows + p.row_begin + r] = acc1[i];
        }
    }
}
