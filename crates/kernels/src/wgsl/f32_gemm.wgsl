// F32 GEMM for prefill chunks (the router): y[t, r] = sum_c w[r, c] * x[t, c] for T tokens. f32_gemv reads
// the whole matrix once per token (a workgroup per row and token); here a workgroup of 128 lanes takes 16
// rows x 32 tokens, 32 columns at a time through workgroup memory, so the matrix is read once per 32 tokens.
// Lane li takes token li % 32 and rows 4 * (li / 32)..+3: per column one vec4 load of the rows' weights (the
// same for a 32-lane group) and one of its token's input, for 4 multiply-adds.

struct Params {
    rows: u32,   // output length
    cols: u32,   // input length, a multiple of 32
    tokens: u32, // T
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;     // [T, cols] f32
@group(0) @binding(2) var<storage, read> w: array<vec4<f32>>;     // [rows, cols] f32
@group(0) @binding(3) var<storage, read_write> y: array<f32>;     // [T, rows] f32

const BR: u32 = 16u; // rows per workgroup
const BT: u32 = 32u; // tokens per workgroup

var<workgroup> tile_w: array<vec4<f32>, 128>; // [32 columns][4]: rows 4i..4i+3
var<workgroup> tile_x: array<f32, 1024>;      // [32 columns][32 tokens]

// workgroup_id.x = block of 16 rows, workgroup_id.y = block of 32 tokens.
@compute @workgroup_size(128)
fn f32_gemm(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let r0 = wg.x * BR;
    let t0 = wg.y * BT;
    let nvec = p.cols / 4u;
    // Staging: lane li brings 4 weights of row li / 8 (columns 4 * (li % 8)..) and 2 x 4 inputs of token
    // li % 32 (columns 4 * (li / 32).. and 16 further); rows and tokens past the end read the last / zeros.
    let wrow = min(r0 + li / 8u, p.rows - 1u);
    let wc = li % 8u;
    let xt = li % 32u;
    let xrow = min(t0 + xt, p.tokens - 1u);
    let live = t0 + xt < p.tokens;
    let xc = li / 32u;
    let rows4 = li / 32u;
    var acc = vec4<f32>(0.0);
    for (var c0 = 0u; c0 < nvec; c0 += 8u) {
        let wv = w[wrow * nvec + c0 + wc];
        let xa = select(vec4<f32>(0.0), x[xrow * nvec + c0 + xc], live);
        let xb = select(vec4<f32>(0.0), x[xrow * nvec + c0 + xc + 4u], live);
        workgroupBarrier(); // the last step's reads are done
        for (var j = 0u; j < 4u; j++) {
            tile_w[(wc * 4u + j) * 4u + (li / 8u) / 4u][(li / 8u) % 4u] = wv[j];
            tile_x[(xc * 4u + j) * 32u + xt] = xa[j];
            tile_x[(xc * 4u + 16u + j) * 32u + xt] = xb[j];
        }
        workgroupBarrier();
        for (var c = 0u; c < 32u; c++) {
            acc += tile_w[c * 4u + rows4] * tile_x[c * 32u + xt];
        }
    }
    let t = t0 + xt;
    if (t < p.tokens) {
        for (var i = 0u; i < 4u; i++) {
            let r = r0 + rows4 * 4u + i;
            if (r < p.rows) {
                y[t * p.rows + r] = acc[i];
            }
        }
    }
}
