// SwiGLU of the experts: out[r, i] = silu(gate[r, i]) * up[r, i], silu(g) = g / (1 + exp(-g)) (ggml).

struct Params {
    ffn: u32,  // F
    rows: u32, // pairs P
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> gate_up: array<f32>;      // [P, 2F] f32, gate then up
@group(0) @binding(2) var<storage, read_write> out: array<f32>;    // [P, F] f32

// One invocation per output; workgroup_id.y = row.
@compute @workgroup_size(256)
fn silu_mul(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    let r = gid.y;
    if (i >= p.ffn) {
        return;
    }
    let g = gate_up[r * 2u * p.ffn + i];
    let u = gate_up[r * 2u * p.ffn + p.ffn + i];
    out[r * p.ffn + i] = (g / (1.0 + exp(-g))) * u;
}
