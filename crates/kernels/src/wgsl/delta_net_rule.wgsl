// The gated delta rule of DeltaNet over T tokens (llama.cpp's gated_delta_net, tokens in order), one
// workgroup a block of 32 rows of a v head h's state (rows are independent given the token's q̂, k̂, β, γ),
// whose q and k are head j = h mod H_k (the GGUF's tiled v-head order). Per token: q and k of head j
// L2-normalised (x / sqrt(Σx² + ε)), β = σ(b_h), γ = A_h · softplus(α_h + dt_bias_h); the head's state M
// (S × S, row vi by value index) decays by e^γ, takes δ = β (v − M k̂) along k̂ (M += δ k̂ᵀ), and gives
// o = M q̂ / √S from the updated M. Four lanes a row: lane `part` keeps columns part, part + 4, … of its row
// in private memory across the chunk (at most 32 values: a fixed loop, so they can live in registers), and
// the row's dot products are summed over its four lanes through workgroup memory. S is at most 128. (One
// workgroup a head with a lane a whole row, as this kernel first was, gave the H100 32 workgroups and a
// 256-step dependent chain a lane: 55 µs a layer for one token of Qwen3.6's shape.)

struct Params {
    state: u32,   // S
    k_heads: u32, // H_k
    v_heads: u32, // H_v, a multiple of H_k
    tokens: u32,  // T
    eps: f32,     // ε of the L2 norms
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> u: array<f32>;             // [T, 2·H_k·S + H_v·S]: q ‖ k ‖ v after the conv
@group(0) @binding(2) var<storage, read> ba: array<f32>;            // [T, 2·H_v]: β logits, then α
@group(0) @binding(3) var<storage, read> dt_bias: array<f32>;       // [H_v]
@group(0) @binding(4) var<storage, read> a: array<f32>;             // [H_v]: A = −exp(A_log)
@group(0) @binding(5) var<storage, read_write> state: array<f32>;   // [H_v, S, S]: M[vi][ki]
@group(0) @binding(6) var<storage, read_write> out: array<f32>;     // [T, H_v·S]

const LANES: u32 = 128u;
const ROWS: u32 = 32u;  // rows of M a workgroup
const PARTS: u32 = 4u;  // lanes a row
const COLS: u32 = 32u;  // columns a lane at most: S / PARTS rounded up

var<workgroup> qk: array<f32, 256>;  // q̂ then k̂ of this token
var<workgroup> red: array<f32, 256>; // Σq² then Σk², reduced
var<workgroup> mk_part: array<f32, 128>; // each lane's share of its row's M k̂
var<workgroup> o_part: array<f32, 128>;  // and of its row's M q̂

@compute @workgroup_size(128)
fn delta_net_rule(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let h = wg.x;
    let s = p.state;
    let j = h % p.k_heads;
    let key_dim = p.k_heads * s;
    let width = 2u * key_dim + p.v_heads * s;
    let base = h * s * s;
    let r = li / PARTS;
    let part = li % PARTS;
    let vi = wg.y * ROWS + r;
    let live = vi < s; // the last block of a head may be short
    // Uniform over the workgroup: the row sums below need every lane.
    var row: array<f32, 32>;
    if (live) {
        for (var c = 0u; c < COLS; c++) {
            let ki = part + PARTS * c;
            if (ki < s) {
                row[c] = state[base + vi * s + ki];
            }
        }
    }
    for (var t = 0u; t < p.tokens; t++) {
        let ut = t * width;
        var qv = 0.0;
        var kv = 0.0;
        if (li < s) {
            qv = u[ut + j * s + li];
            kv = u[ut + key_dim + j * s + li];
        }
        red[li] = qv * qv;
        red[li + LANES] = kv * kv;
        workgroupBarrier();
        for (var off = LANES / 2u; off > 0u; off /= 2u) {
            if (li < off) {
                red[li] += red[li + off];
                red[li + LANES] += red[li + LANES + off];
            }
            workgroupBarrier();
        }
        let qn = 1.0 / sqrt(red[0] + p.eps);
        let kn = 1.0 / sqrt(red[LANES] + p.eps);
        if (li < s) {
            qk[li] = qv * qn;
            qk[s + li] = kv * kn;
        }
        workgroupBarrier();
        let g = t * 2u * p.v_heads;
        let beta = 1.0 / (1.0 + exp(-ba[g + h]));
        let al = ba[g + p.v_heads + h] + dt_bias[h];
        let softplus = select(log(1.0 + exp(al)), al, al > 20.0);
        let decay = exp(a[h] * softplus);
        var mk = 0.0;
        if (live) {
            for (var c = 0u; c < COLS; c++) {
                let ki = part + PARTS * c;
                if (ki < s) {
                    row[c] *= decay;
                    mk += row[c] * qk[s + ki];
                }
            }
        }
        mk_part[li] = mk;
        workgroupBarrier();
        let r0 = r * PARTS;
        mk = (mk_part[r0] + mk_part[r0 + 1u]) + (mk_part[r0 + 2u] + mk_part[r0 + 3u]);
        var o = 0.0;
        if (live) {
            let delta = beta * (u[ut + 2u * key_dim + h * s + vi] - mk);
            for (var c = 0u; c < COLS; c++) {
                let ki = part + PARTS * c;
                if (ki < s) {
                    row[c] += delta * qk[s + ki];
                    o += row[c] * qk[ki];
                }
            }
        }
        o_part[li] = o;
        workgroupBarrier();
        if (live && part == 0u) {
            o = (o_part[r0] + o_part[r0 + 1u]) + (o_part[r0 + 2u] + o_part[r0 + 3u]);
            out[t * p.v_heads * s + h * s + vi] = o / sqrt(f32(s));
        }
        // This token's q̂, k̂, sums and row shares are read before the next token's overwrite them.
        workgroupBarrier();
    }
    if (live) {
        for (var c = 0u; c < COLS; c++) {
            let ki = part + PARTS * c;
            if (ki < s) {
                state[base + vi * s + ki] = row[c];
            }
        }
    }
}
