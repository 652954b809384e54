// Expert K-quant GEMV on a slot pool of records of GGUF blocks: y[pair, y_offset + r] = sum_c W[slot, r, c] *
// x[pair / x_div, c], where slot s's matrix is `rows` rows of cols / 256 super-blocks of BLOCK_BYTES from
// byte (s - slot_begin) * slot_bytes + part_bytes of w (a record holds gate, up and down, each of its own
// type, at offsets of their own). With `grouped` = 0, workgroup_id.y is a pair and `index` its slot; with 1,
// a group (slot, first, count, 0) of pairs sharing a slot, taken from `order` (the prefill chunks' grouping
// of the grouped expert GEMMs): the group's pairs read the slot's rows while they are in cache. Pairs whose
// slot lies outside this part are left to the other parts' dispatches. 32 rows a workgroup, 4 a lane group
// of 32 lanes, LANES_PER_BLOCK lanes a super-block, as kquant_gemv_rows4 (`lane_dot4`, from
// kquant_dot4.wgsl: with one row a lane group the loads of x outweighed the weights' 7 to 1).
// With `swiglu` = 1 (one-token decode) the matrix is gate (at part_bytes) and up (at up_bytes, the same type)
// and the output is the activation, y[pair, y_offset + r] = silu(gate_r · x) * (up_r · x) for r < rows: a
// lane group takes 2 gate rows and their 2 up rows (16 rows of y a workgroup), so no SwiGLU dispatch and no
// [P, 2F] round trip follow. The dot helper, the block helper (kquant_q4_k.wgsl, kquant_q6_k.wgsl, …) and
// the row sums (row_sum_plain.wgsl or row_sum_subgroup.wgsl) are appended; the other types' kernels are
// this file with its entry point renamed.
enable f16;

struct Params {
    rows: u32,        // rows of one slot's matrix (swiglu: of gate, and of up)
    cols: u32,        // input length, a multiple of 256
    pairs: u32,       // P
    x_div: u32,       // input row = pair / x_div
    slot_begin: u32,  // first slot bound in this part
    slot_end: u32,    // one past the last slot bound in this part
    slot_bytes: u32,  // bytes a slot takes in w
    part_bytes: u32,  // where the matrix (swiglu: gate) starts in a slot
    y_stride: u32,    // length of a row of y
    y_offset: u32,    // first column of y written
    grouped: u32,     // 1: workgroup_id.y is a group of `order`
    swiglu: u32,      // 1: y = silu(gate · x) * (up · x)
    up_bytes: u32,    // swiglu: where up starts in a slot
    _host_reads: u32, // (the grouped GEMM's)
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;     // [P / x_div, cols] f32
@group(0) @binding(2) var<storage, read> index: array<u32>;       // [P] slots, or [G] (slot, first, count, 0)
@group(0) @binding(3) var<storage, read> order: array<u32>;       // grouped: [P] pair ids, grouped by slot
@group(0) @binding(4) var<storage, read> w: array<u32>;           // slots slot_begin..slot_end of the plane
@group(0) @binding(5) var<storage, read_write> y: array<f32>;     // [P, y_stride] f32

// workgroup_id.x = block of 32 rows (4 a lane group; swiglu: 16 rows of y, 2 a lane group),
// workgroup_id.y = pair (or group).
@compute @workgroup_size(256)
fn expert_q4_k_gemv(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>/*SG_ARGS*/) {
    let lane = li % 32u;
    var slot = index[wg.y];
    var first = wg.y;
    var count = 1u;
    if (p.grouped != 0u) {
        slot = index[4u * wg.y];
        first = index[4u * wg.y + 1u];
        count = index[4u * wg.y + 2u];
    }
    // Uniform over the workgroup: the row sums below need every lane.
    if (slot < p.slot_begin || slot >= p.slot_end) {
        return;
    }
    // Rows past the matrix read its last row; their sums are not stored.
    let base = (slot - p.slot_begin) * p.slot_bytes;
    let row_bytes = (p.cols / 256u) * BLOCK_BYTES;
    let last = vec4<u32>(p.rows - 1u);
    var r0 = wg.x * 32u + (li / 32u) * 4u;
    var rows = base + p.part_bytes + min(vec4<u32>(r0) + vec4<u32>(0u, 1u, 2u, 3u), last) * row_bytes;
    if (p.swiglu != 0u) {
        r0 = wg.x * 16u + (li / 32u) * 2u;
        let gate = base + p.part_bytes + min(vec2<u32>(r0) + vec2<u32>(0u, 1u), last.xy) * row_bytes;
        let up = base + p.up_bytes + min(vec2<u32>(r0) + vec2<u32>(0u, 1u), last.xy) * row_bytes;
        rows = vec4<u32>(gate, up);
    }
    for (var j = 0u; j < count; j++) {
        var pair = first;
        if (p.grouped != 0u) {
            pair = order[first + j];
        }
        let xrow = (pair / p.x_div) * (p.cols / 4u);
        let total = row_sum4(lane_dot4(rows, lane, xrow), li/*SG_CALL*/);
        if (lane == 0u) {
            let at = pair * p.y_stride + p.y_offset + r0;
            if (p.swiglu != 0u) {
                // silu(g) = g / (1 + exp(-g)), as silu_mul (ggml).
                for (var i = 0u; i < 2u; i++) {
                    if (r0 + i < p.rows) {
                        let g = total[i];
                        y[at + i] = (g / (1.0 + exp(-g))) * total[2u + i];
                    }
                }
            } else {
                for (var i = 0u; i < 4u; i++) {
                    if (r0 + i < p.rows) {
                        y[at + i] = total[i];
                    }
                }
            }
        }
        // The row sums' workgroup memory is read to the end before the next pair writes it.
        workgroupBarrier();
    }
}
