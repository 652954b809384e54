// Expert K-quant GEMM for prefill through workgroup-memory tiles, on a slot pool of records of GGUF blocks:
// (token, pick) pairs grouped by pool slot, up to 64 pairs a group; a workgroup of 256 lanes takes 128 rows
// of the group's slot x its pairs, each lane 8 rows x 4 pairs (kquant_tile.wgsl, then the block helper:
// kquant_q4_k.wgsl or kquant_q6_k.wgsl). 64 pairs, not 32: a 512-token chunk gives a layer's expert ~32
// pairs (more for hot ones), so groups of 32 read most records twice. Group g names a slot and a run of
// `order`: y[pair, y_offset + r] = W[slot, r] ·
// x[pair / x_div] for pair = order[first + j], j < count, slot s's matrix `rows` rows of blocks from byte
// (s - slot_begin) * slot_bytes + part_bytes. Groups with count 0 (padding up to the dispatch size) and
// slots outside this part leave at once. The Q6_K kernel is this file with its entry point renamed.
enable f16;

struct Params {
    rows: u32,        // rows of one slot's matrix
    cols: u32,        // input length, a multiple of 256
    pairs: u32,       // P
    x_div: u32,       // input row = pair / x_div
    slot_begin: u32,  // first slot bound in this part
    slot_end: u32,    // one past the last slot bound in this part
    slot_bytes: u32,  // bytes a slot takes in w
    part_bytes: u32,  // where the matrix starts in a slot
    y_stride: u32,    // length of a row of y
    y_offset: u32,    // first column of y written
    _pad0: u32,       // (expert_kquant_gemv's grouped, swiglu, up_bytes: unused here)
    _pad1: u32,
    _pad2: u32,
    host_reads: u32,  // 1: the pool part lies in host memory: read each run of the tile's rows whole first
    _pad4: u32,
    _pad5: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
// binding 1: x, [P / x_div] input rows of x_row_len() elements, declared by the tile helper
@group(0) @binding(2) var<storage, read> groups: array<vec4<u32>>; // [G] (slot, first, count <= 64, 0)
@group(0) @binding(3) var<storage, read> order: array<u32>;        // [P] pair ids, grouped by slot
@group(0) @binding(4) var<storage, read> w: array<u32>;            // slots slot_begin..slot_end of the plane
@group(0) @binding(5) var<storage, read_write> y: array<f32>;      // [P, y_stride] f32

const BR: u32 = 128u; // rows per workgroup
const BT: u32 = 64u;  // pairs per group at most
const TILE_PAIRS: u32 = BT;

// workgroup_id.x = block of 128 rows, workgroup_id.y = group.
@compute @workgroup_size(256)
fn expert_q4_k_gemm(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let grp = groups[wg.y];
    let slot = grp.x;
    let nt = min(grp.z, BT);
    if (nt == 0u || slot < p.slot_begin || slot >= p.slot_end) {
        return;
    }
    let r0 = wg.x * BR;
    // Lane li < 128 loads row li of the tile, every lane the group's pair li % 64: rows and pairs past the
    // end read the last ones / zeros.
    let row_bytes = (p.cols / 256u) * BLOCK_BYTES;
    let slot_row0 = (slot - p.slot_begin) * p.slot_bytes + p.part_bytes;
    let lrow = slot_row0 + min(r0 + li % 128u, p.rows - 1u) * row_bytes;
    let lt = tile_pair(li);
    let xrow = (order[grp.y + min(lt, nt - 1u)] / p.x_div) * x_row_len();
    let tt = tile_tokens(li);
    // Rows read whole a run ahead: an arena part's (over the bus), none in device memory.
    let ahead = select(0u, min(BR, p.rows - r0), p.host_reads != 0u);
    let tile = TileRows(slot_row0 + r0 * row_bytes, row_bytes, ahead);
    let acc = tile_product(li, lrow, tile, xrow, lt < nt, tt < nt);
    let rt = r0 + tile_rows(li);
    for (var j = 0u; j < 4u; j++) {
        if (tt + j >= nt) {
            break;
        }
        let out = order[grp.y + tt + j] * p.y_stride + p.y_offset;
        for (var i = 0u; i < 8u; i++) {
            let r = rt + i;
            if (r < p.rows) {
                y[out + r] = acc[2u * j + i / 4u][i % 4u];
            }
        }
    }
}
