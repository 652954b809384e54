// K-quant GEMM for prefill through workgroup-memory tiles, on GGUF blocks as they lie in the file:
// y[t, row_begin + r] = W[r] · x[t] for T tokens. A workgroup takes 128 rows x 32 tokens and each lane 8
// rows x 4 tokens of them (kquant_tile.wgsl's `tile_product`, then the block helper: kquant_q4_k.wgsl or
// kquant_q6_k.wgsl, whose `tile_load` decodes a row's 16 columns a step): a weight is read from memory once
// per 32 tokens, an input once per 128 rows. The Q6_K kernel is this file with its entry point renamed.
enable f16;

struct Params {
    rows: u32,      // rows in this part
    cols: u32,      // input length, a multiple of 256
    row_begin: u32, // first output row of this part
    out_rows: u32,  // length of a row of y
    tokens: u32,    // T
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
// binding 1: x, [T] input rows of x_row_len() elements, declared by the tile helper
@group(0) @binding(2) var<storage, read> w: array<u32>;            // [rows, cols/256] blocks (this part)
@group(0) @binding(3) var<storage, read_write> y: array<f32>;      // [T, out_rows] f32

const BR: u32 = 128u; // rows per workgroup
const BT: u32 = 32u;  // tokens per workgroup
const TILE_PAIRS: u32 = BT;

// workgroup_id.x = block of 128 rows, workgroup_id.y = block of 32 tokens.
@compute @workgroup_size(128)
fn q4_k_gemm(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let r0 = wg.x * BR;
    let t0 = wg.y * BT;
    // Lane li loads row li and token li % 32 of the tile: rows and tokens past the end read the last ones
    // / zeros.
    let row_bytes = (p.cols / 256u) * BLOCK_BYTES;
    let lrow = min(r0 + li, p.rows - 1u) * row_bytes;
    let lt = tile_pair(li);
    let xrow = min(t0 + lt, p.tokens - 1u) * x_row_len();
    let tt = t0 + tile_tokens(li);
    // No rows to read ahead: the dense weights lie in device memory, whose sectors come as fast.
    let tile = TileRows(0u, row_bytes, 0u);
    let acc = tile_product(li, lrow, tile, xrow, t0 + lt < p.tokens, tt < p.tokens);
    let rt = r0 + tile_rows(li);
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
