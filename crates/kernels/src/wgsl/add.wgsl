// Residual add: out = a + b.

struct Params {
    n: u32, // elements
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;            // [n] f32
@group(0) @binding(2) var<storage, read> b: array<f32>;            // [n] f32
@group(0) @binding(3) var<storage, read_write> out: array<f32>;    // [n] f32

// One invocation per element; rows of 65,535 workgroups along y for large n.
@compute @workgroup_size(256)
fn add(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.y * (65535u * 256u) + gid.x;
    if (i < p.n) {
        out[i] = a[i] + b[i];
    }
}
