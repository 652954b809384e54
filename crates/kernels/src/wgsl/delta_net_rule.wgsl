// The gated delta rule of DeltaNet over T tokens (llama.cpp's gated_delta_net, tokens in order), one
// workgroup a block of 32 rows of a v head h's state (rows are independent given the token's q̂, k̂, β, γ),
// whose q and k are head j = h mod H_k (the GGUF's tiled v-head order). Per token: q and k of head j
// L2-normalised (x / sqrt(Σx² + ε)), β = σ(b_h), γ = A_h · softplus(α_h + dt_bias_h); the head's state M
// (S × S, row vi by value index) decays by e^γ, takes δ = β (v − M k̂) along k̂ (M += δ k̂ᵀ), and gives
// o = M q̂ / √S from the updated M. Four lanes a row: lane `part` keeps columns part, part + 4, … of its row
// in private memory across the chunk (at most 32 values: a fixed loop, so they can live in registers), and
// the row's dot products are summed over its four lanes (`quad_sum`: quad_sum_subgroup.wgsl's shuffles, or
// quad_sum_plain.wgsl's workgroup memory). The norms and gates of 32 tokens at a time are found first, a
// quad of lanes a token, so that a token's step has no reduction over the head and, with subgroups, no
// barrier. S is at most 128. (One workgroup a head with a lane a whole row, as this kernel first was, gave
// the H100 32 workgroups and a 256-step dependent chain a lane: 55 µs a layer for one token of Qwen3.6's
// shape.)

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
const BLOCK: u32 = 32u; // tokens whose norms and gates are found at once, a quad of lanes each

var<workgroup> q_scale: array<f32, 32>; // 1 / ‖q‖ of the block's tokens
var<workgroup> k_scale: array<f32, 32>; // 1 / ‖k‖
var<workgroup> betas: array<f32, 32>;   // β
var<workgroup> decays: array<f32, 32>;  // e^γ

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
    // Uniform over the workgroup: the quad sums below need every lane.
    var row: array<f32, 32>;
    if (live) {
        for (var c = 0u; c < COLS; c++) {
            let ki = part + PARTS * c;
            if (ki < s) {
                row[c] = state[base + vi * s + ki];
            }
        }
    }
    for (var t0 = 0u; t0 < p.tokens; t0 += BLOCK) {
        // The block's norms and gates, token t0 + li / 4 by its quad of lanes (parallel over the tokens: only
        // the state's update below runs token after token).
        let tb = li / PARTS;
        let tn = t0 + tb;
        var qq = 0.0;
        var kk = 0.0;
        if (tn < p.tokens) {
            let ut = tn * width;
            for (var c = 0u; c < COLS; c++) {
                let ki = part + PARTS * c;
                if (ki < s) {
                    let qv = u[ut + j * s + ki];
                    let kv = u[ut + key_dim + j * s + ki];
                    qq += qv * qv;
                    kk += kv * kv;
                }
            }
        }
        qq = quad_sum(qq, li);
        kk = quad_sum(kk, li);
        if (part == 0u && tn < p.tokens) {
            q_scale[tb] = 1.0 / sqrt(qq + p.eps);
            k_scale[tb] = 1.0 / sqrt(kk + p.eps);
            let g = tn * 2u * p.v_heads;
            betas[tb] = 1.0 / (1.0 + exp(-ba[g + h]));
            let al = ba[g + p.v_heads + h] + dt_bias[h];
            let softplus = select(log(1.0 + exp(al)), al, al > 20.0);
            decays[tb] = exp(a[h] * softplus);
        }
        workgroupBarrier();
        let n = min(BLOCK, p.tokens - t0);
        for (var i = 0u; i < n; i++) {
            let ut = (t0 + i) * width;
            let kn = k_scale[i];
            let decay = decays[i];
            var kh: array<f32, 32>; // this lane's columns of k̂
            var mk = 0.0;
            if (live) {
                for (var c = 0u; c < COLS; c++) {
                    let ki = part + PARTS * c;
                    if (ki < s) {
                        kh[c] = u[ut + key_dim + j * s + ki] * kn;
                        row[c] *= decay;
                        mk += row[c] * kh[c];
                    }
                }
            }
            mk = quad_sum(mk, li);
            var o = 0.0;
            if (live) {
                let qn = q_scale[i];
                let delta = betas[i] * (u[ut + 2u * key_dim + h * s + vi] - mk);
                for (var c = 0u; c < COLS; c++) {
                    let ki = part + PARTS * c;
                    if (ki < s) {
                        row[c] += delta * kh[c];
                        o += row[c] * (u[ut + j * s + ki] * qn);
                    }
                }
            }
            o = quad_sum(o, li);
            if (live && part == 0u) {
                out[(t0 + i) * p.v_heads * s + h * s + vi] = o / sqrt(f32(s));
            }
        }
        // The block's scales and gates are read before the next block's overwrite them.
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
