// The CPU tier's sum joined to the residual stream after the fused decode layer's combine:
// y[t, r] += sum[t, r]; with finish = 1 also the next RMSNorm's inputs from the new row, as
// expert_q8_gemv_combine writes them (scaled[t, r] = y[t, r] * next_norm[r], and the sum of the squares of
// each 4 rows in squares[t, block], added in the same order), replacing the combine's, which lacked the sum.
// In place, so the combine can run on the GPU while the host computes its experts.

struct Params {
    rows: u32,   // row length (H)
    finish: u32, // 1: write scaled and squares
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> sum: array<f32>;          // [T, rows] f32 the host's sum
@group(0) @binding(2) var<storage, read> next_norm: array<f32>;    // [rows] f32 the next RMSNorm's weight
@group(0) @binding(3) var<storage, read_write> y: array<f32>;      // [T, rows] f32, added to
@group(0) @binding(4) var<storage, read_write> scaled: array<f32>; // [T, rows] f32 y * next_norm (finish)
@group(0) @binding(5) var<storage, read_write> squares: array<f32>; // [T, ceil(rows / 4)] f32 (finish)

// One invocation per block of 4 rows, workgroup_id.y = token.
@compute @workgroup_size(64)
fn residual_join(@builtin(global_invocation_id) gid: vec3<u32>) {
    let block = gid.x;
    let t = gid.y;
    let blocks = (p.rows + 3u) / 4u;
    if (block >= blocks) {
        return;
    }
    var v = vec4<f32>(0.0);
    for (var i = 0u; i < 4u; i++) {
        let r = 4u * block + i;
        if (r < p.rows) {
            let at = t * p.rows + r;
            let value = y[at] + sum[at];
            y[at] = value;
            if (p.finish != 0u) {
                scaled[at] = value * next_norm[r];
            }
            v[i] = value;
        }
    }
    if (p.finish != 0u) {
        squares[t * blocks + block] = (v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w);
    }
}
