// Weighted sum of the k expert outputs, then the residual (llama.cpp order: each expert output is
// scaled by its weight, the k are summed in pick order, then the residual is added).

struct Params {
    hidden: u32, // H
    k: u32,      // picks per token
    tokens: u32, // T
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> experts: array<f32>;      // [T, k, H] f32
@group(0) @binding(2) var<storage, read> weights: array<f32>;      // [T, k] f32
@group(0) @binding(3) var<storage, read> residual: array<f32>;     // [T, H] f32
@group(0) @binding(4) var<storage, read_write> out: array<f32>;    // [T, H] f32

// One invocation per output; workgroup_id.y = token.
@compute @workgroup_size(256)
fn moe_combine(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    let t = gid.y;
    if (i >= p.hidden) {
        return;
    }
    var sum = 0.0;
    for (var j = 0u; j < p.k; j++) {
        sum += experts[(t * p.k + j) * p.hidden + i] * weights[t * p.k + j];
    }
    out[t * p.hidden + i] = sum + residual[t * p.hidden + i];
}
