// KV-cache store: dst[positions[t], i] = f16(src[t, i]) (round to nearest even on the devices we test).
enable f16;

struct Params {
    n: u32,      // values per position (kv_heads * head_dim)
    tokens: u32, // T
    ctx: u32,    // positions the cache holds
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;          // [T, n] f32
@group(0) @binding(2) var<storage, read> positions: array<u32>;    // [T] position of each token
@group(0) @binding(3) var<storage, read_write> dst: array<f16>;    // [ctx, n] f16

// One invocation per value; workgroup_id.y = token. Positions at or past ctx are skipped.
@compute @workgroup_size(256)
fn kv_store(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    let t = gid.y;
    if (i >= p.n) {
        return;
    }
    let pos = positions[t];
    if (pos >= p.ctx) {
        return;
    }
    dst[pos * p.n + i] = f16(src[t * p.n + i]);
}
