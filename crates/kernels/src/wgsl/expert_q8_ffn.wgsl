// A Q8_0 expert's whole FFN for P (token, pick) pairs in one dispatch, each pair's expert indexed by pool
// slot: workgroup (b, pair) makes the 16 activations a_j = silu(g_j) * u_j, j = 16b..16b+15, where g and u
// are the gate rows j and up rows F + j of the slot's gate||up matrix against x[pair / x_div] (as
// expert_q8_gemv with silu_output), and then the down projection's share of them for every down row r:
// partials[pair, b, r] = sum_j down[slot, r, j] * a_j (the 16 int8 of one chunk of the row, times their
// block's scale). expert_ffn_combine adds the F/16 shares of each pick and combines the picks.
// Why: down as a dispatch of its own waits for gate||up to drain and then ramps up again (about 2 us on
// the H200, a bare read of down's 13.4 MB takes 5.3); here its reads start wherever a workgroup's
// activations are ready.
// A pool larger than a binding is split by slot range (the same slots bound in all four planes): one
// dispatch per part, pairs whose slot lies elsewhere leave at once (that part writes their shares).
// The row walk (`rows4`) is appended from expert_q8_rows.wgsl, the row sums (`row_sum4`), `i8x4` and
// `dot16` as in q8_gemv.
enable f16;

struct Params {
    hidden: u32,     // H: gate||up's input length and down's rows, a multiple of 32
    ffn: u32,        // F: the expert's features, a multiple of 32
    pairs: u32,      // P
    x_div: u32,      // input row = pair / x_div
    slot_begin: u32, // first slot bound in this part
    slot_end: u32,   // one past the last slot bound in this part
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;         // [P / x_div, H] f32
@group(0) @binding(2) var<storage, read> slots: array<u32>;           // [P] pool slot per pair
@group(0) @binding(3) var<storage, read> q: array<vec4<u32>>;         // gate||up [slots, 2F, H] int8
@group(0) @binding(4) var<storage, read> scales: array<f16>;          // gate||up [slots, 2F, H/32] f16
@group(0) @binding(5) var<storage, read> down_q: array<vec4<u32>>;    // down [slots, H, F] int8
@group(0) @binding(6) var<storage, read> down_scales: array<f16>;     // down [slots, H, F/32] f16
@group(0) @binding(7) var<storage, read_write> partials: array<f32>;  // [P, F/16, H] f32

var<workgroup> wslot: u32;
var<workgroup> wsum: array<f32, 32>; // the 16 gate rows' sums, then the 16 up rows'

fn input4(base: u32, j: u32) -> vec4<f32> {
    return x[base + j];
}

// Four down rows' shares of the 16 activations `a` (chunk `chunk` of each row, `rows` their indices in
// the bound planes).
fn down4(rows: vec4<u32>, chunk: u32, a: array<vec4<f32>, 4>) -> vec4<f32> {
    let dvec = p.ffn / 16u;
    let dblk = p.ffn / 32u;
    let w0 = down_q[rows.x * dvec + chunk];
    let w1 = down_q[rows.y * dvec + chunk];
    let w2 = down_q[rows.z * dvec + chunk];
    let w3 = down_q[rows.w * dvec + chunk];
    let s = vec4<f32>(
        f32(down_scales[rows.x * dblk + chunk / 2u]),
        f32(down_scales[rows.y * dblk + chunk / 2u]),
        f32(down_scales[rows.z * dblk + chunk / 2u]),
        f32(down_scales[rows.w * dblk + chunk / 2u]),
    );
    return s * vec4<f32>(
        dot16(w0, a[0], a[1], a[2], a[3]),
        dot16(w1, a[0], a[1], a[2], a[3]),
        dot16(w2, a[0], a[1], a[2], a[3]),
        dot16(w3, a[0], a[1], a[2], a[3]),
    );
}

// workgroup_id.x = block b of 16 features, workgroup_id.y = pair. gate||up: lane groups 0-3 take 4 gate
// rows each, 4-7 the matching up rows (`rows4`); down: lane li takes rows li + 256 i, four a step.
@compute @workgroup_size(256)
fn expert_q8_ffn(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>/*SG_ARGS*/) {
    let pair = wg.y;
    if (li == 0u) {
        wslot = slots[pair];
    }
    let slot = workgroupUniformLoad(&wslot);
    if (slot < p.slot_begin || slot >= p.slot_end) {
        return;
    }
    let local_slot = slot - p.slot_begin;
    let lane = li % 32u;
    let group = li / 32u;
    let r = wg.x * 16u + (group % 4u) * 4u + select(0u, p.ffn, group >= 4u);
    let rows = vec4<u32>(local_slot * 2u * p.ffn + r) + vec4<u32>(0u, 1u, 2u, 3u);
    let base = (pair / p.x_div) * (p.hidden / 4u);
    let total = row_sum4(rows4(rows, p.hidden / 16u, p.hidden / 32u, base, lane), li/*SG_CALL*/);
    if (lane == 0u) {
        for (var j = 0u; j < 4u; j++) {
            wsum[group * 4u + j] = total[j];
        }
    }
    workgroupBarrier();
    // Every lane forms the 16 activations itself: no second barrier.
    var a: array<vec4<f32>, 4>;
    for (var i = 0u; i < 4u; i++) {
        let g = vec4<f32>(wsum[4u * i], wsum[4u * i + 1u], wsum[4u * i + 2u], wsum[4u * i + 3u]);
        let u = vec4<f32>(wsum[16u + 4u * i], wsum[17u + 4u * i], wsum[18u + 4u * i], wsum[19u + 4u * i]);
        a[i] = (g / (1.0 + exp(-g))) * u;
    }
    let first = local_slot * p.hidden;
    let last = p.hidden - 1u;
    let out = (pair * (p.ffn / 16u) + wg.x) * p.hidden;
    for (var r0 = li; r0 < p.hidden; r0 += 1024u) {
        // Rows past the matrix read the last row and are not written.
        let at = vec4<u32>(r0) + vec4<u32>(0u, 256u, 512u, 768u);
        let v = down4(vec4<u32>(first) + min(at, vec4<u32>(last)), wg.x, a);
        for (var j = 0u; j < 4u; j++) {
            if (at[j] < p.hidden) {
                partials[out + at[j]] = v[j];
            }
        }
    }
}
