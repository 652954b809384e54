// The gated delta rule of DeltaNet over T tokens (llama.cpp's gated_delta_net, tokens in order), one
// workgroup a v head h, whose q and k are head j = h mod H_k (the GGUF's tiled v-head order). Per token:
// q and k of head j L2-normalised (x / sqrt(Σx² + ε)), β = σ(b_h), γ = A_h · softplus(α_h + dt_bias_h);
// the head's state M (S × S, row vi by value index) decays by e^γ, takes δ = β (v − M k̂) along k̂
// (M += δ k̂ᵀ), and gives o = M q̂ / √S from the updated M. Lane vi keeps row vi of M in private memory
// across the chunk; S is at most 128.

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

var<workgroup> qk: array<f32, 256>;  // q̂ then k̂ of this token
var<workgroup> red: array<f32, 256>; // Σq² then Σk², reduced

@compute @workgroup_size(128)
fn delta_net_rule(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let h = wg.x;
    let s = p.state;
    let j = h % p.k_heads;
    let key_dim = p.k_heads * s;
    let width = 2u * key_dim + p.v_heads * s;
    let base = h * s * s;
    var row: array<f32, 128>;
    if (li < s) {
        for (var i = 0u; i < s; i++) {
            row[i] = state[base + li * s + i];
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
        if (li < s) {
            let g = t * 2u * p.v_heads;
            let beta = 1.0 / (1.0 + exp(-ba[g + h]));
            let al = ba[g + p.v_heads + h] + dt_bias[h];
            let softplus = select(log(1.0 + exp(al)), al, al > 20.0);
            let decay = exp(a[h] * softplus);
            var mk = 0.0;
            for (var i = 0u; i < s; i++) {
                row[i] *= decay;
                mk += row[i] * qk[s + i];
            }
            let delta = beta * (u[ut + 2u * key_dim + h * s + li] - mk);
            var o = 0.0;
            for (var i = 0u; i < s; i++) {
                row[i] += delta * qk[s + i];
                o += row[i] * qk[i];
            }
            out[t * p.v_heads * s + h * s + li] = o / sqrt(f32(s));
        }
        // This token's q̂, k̂ and sums are read before the next token's overwrite them.
        workgroupBarrier();
    }
    if (li < s) {
        for (var i = 0u; i < s; i++) {
            state[base + li * s + i] = row[i];
        }
    }
}
