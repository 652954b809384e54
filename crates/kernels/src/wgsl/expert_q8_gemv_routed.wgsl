// gate||up with SwiGLU on its output (expert_q8_gemv with silu_output = 1, x_div = k) for decode while
// every expert is resident, routing included: each workgroup finds its token's top-k picks from the router
// logits itself (router_topk_core.wgsl, 128 logits: cheap against the workgroup's 70 KB of weights) and
// takes its pair's slot from the resident table, so no router_topk_slots dispatch runs before it (one
// dependent dispatch a layer fewer). The first row block of each token's first pick also writes the
// token's pick weights and slots for the down GEMV and the combine. Appended: the row sums, the q8
// helpers, the GEMV's body (expert_q8_gemv_core.wgsl) and the router core.
enable f16;

struct Params {
    rows: u32,        // rows of one slot's matrix, 2F
    cols: u32,        // input length, a multiple of 32
    pairs: u32,       // P = T * k
    x_div: u32,       // k: a token's picks share its input row
    slot_begin: u32,  // first slot bound in this part
    slot_end: u32,    // one past the last slot bound in this part
    silu_input: u32,  // 0
    silu_output: u32, // 1
    experts: u32,     // E, at most 256
    k: u32,           // picks, at most 32
    slot_base: u32,   // the layer's first entry of the slot table (layer * experts)
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;           // [P / k, cols] f32
@group(0) @binding(2) var<storage, read> router: array<f32>;            // [T, E] router logits
@group(0) @binding(3) var<storage, read> table: array<u32>;             // [entries] slot of (layer, expert)
@group(0) @binding(4) var<storage, read> q: array<vec4<u32>>;           // [slot_end - slot_begin, rows, cols] int8
@group(0) @binding(5) var<storage, read> scales: array<f16>;            // [slot_end - slot_begin, rows, cols/32] f16
@group(0) @binding(6) var<storage, read_write> y: array<f32>;           // [P, rows / 2] silu(gate) * up
@group(0) @binding(7) var<storage, read_write> pick_weights: array<f32>; // [T, k] f32
@group(0) @binding(8) var<storage, read_write> pick_slots: array<u32>;   // [T, k] pool slots of the picks

var<workgroup> wslot: u32;

fn router_logit(i: u32) -> f32 {
    return router[i];
}

// workgroup_id.y = pair (token pair / k, pick pair % k).
@compute @workgroup_size(256)
fn expert_q8_gemv_routed(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>/*SG_ARGS*/) {
    let pair = wg.y;
    let t = pair / p.k;
    let r = pair % p.k;
    pick(li, t, p.experts, p.k);
    if (wg.x == 0u && r == 0u && li < p.k) {
        pick_weights[t * p.k + li] = pick_weight(li, p.k);
        pick_slots[t * p.k + li] = table[p.slot_base + picked_i[li]];
    }
    if (li == 0u) {
        wslot = table[p.slot_base + picked_i[r]];
    }
    let slot = workgroupUniformLoad(&wslot);
    if (slot < p.slot_begin || slot >= p.slot_end) {
        return;
    }
    gemv_rows(li, wg, pair, slot/*SG_CALL*/);
}
