// Expert Q8_0 GEMM for prefill through workgroup-memory tiles: (token, pick) pairs grouped by pool slot, up
// to 32 pairs a group; a workgroup takes 128 rows of the group's slot x its pairs, each lane 8 rows x 4 pairs
// (`tile_product`, as q8_gemm_tiled with the rows of one slot and the inputs of the group's pairs). Group g
// names a slot and a run of `order`: y[pair] = W[slot] x[pair / x_div] for pair = order[first + j], j <
// count. Groups with count 0 (padding up to the dispatch size) and slots outside this part leave at once.
// Three kernels share this file (as q8_gemm_tiled and q8_gemm_i8 share theirs), the last two with this entry
// point renamed: expert_q8_gemm_tiled (q8_tile.wgsl and q8_tile_weights.wgsl, f32 inputs), expert_q4_gemm
// (q8_tile.wgsl and q4_tile_weights.wgsl: `q` holds 16-byte Q4_0 blocks, [slots, rows, cols/32]) and
// expert_q8_gemm_i8 (q8_tile_i8.wgsl, quantize_q8 rows, int8 dot products).
enable f16;

struct Params {
    rows: u32,       // rows of one slot's matrix
    cols: u32,       // input length, a multiple of 32
    pairs: u32,      // P
    x_div: u32,      // input row = pair / x_div
    slot_begin: u32, // first slot bound in this part
    slot_end: u32,   // one past the last slot bound in this part
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
// binding 1: x, [P / x_div] input rows of x_row_len() elements, declared by the tile helper
@group(0) @binding(2) var<storage, read> groups: array<vec4<u32>>; // [G] (slot, first, count <= 32, 0)
@group(0) @binding(3) var<storage, read> order: array<u32>;        // [P] pair ids, grouped by slot
@group(0) @binding(4) var<storage, read> q: array<vec4<u32>>;      // [slot_end - slot_begin, rows, cols] int8
@group(0) @binding(5) var<storage, read> scales: array<f16>;       // [slot_end - slot_begin, rows, cols/32] f16
@group(0) @binding(6) var<storage, read_write> y: array<f32>;      // [P, rows] f32

const BR: u32 = 128u; // rows per workgroup
const BT: u32 = 32u;  // pairs per group at most

// workgroup_id.x = block of 128 rows, workgroup_id.y = group.
@compute @workgroup_size(128)
fn expert_q8_gemm_tiled(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let grp = groups[wg.y];
    let slot = grp.x;
    let nt = min(grp.z, BT);
    if (nt == 0u || slot < p.slot_begin || slot >= p.slot_end) {
        return;
    }
    let r0 = wg.x * BR;
    // Lane li loads row li of the tile and the group's pair li % 32 (tile_product): rows and pairs past the
    // end read the last ones / zeros.
    let lrow = (slot - p.slot_begin) * p.rows + min(r0 + li, p.rows - 1u);
    let lt = li % 32u;
    let xrow = (order[grp.y + min(lt, nt - 1u)] / p.x_div) * x_row_len();
    let acc = tile_product(li, lrow, xrow, lt < nt);
    let rt = r0 + tile_rows(li);
    let tt = tile_tokens(li);
    for (var j = 0u; j < 4u; j++) {
        if (tt + j >= nt) {
            break;
        }
        let out = order[grp.y + tt + j] * p.rows;
        for (var i = 0u; i < 8u; i++) {
            let r = rt + i;
            if (r < p.rows) {
                y[out + r] = acc[2u * j + i / 4u][i % 4u];
            }
        }
    }
}
