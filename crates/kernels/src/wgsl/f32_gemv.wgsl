// F32 GEMV over T inputs (the router): y[t, r] = sum_c w[r, c] * x[t, c].
// 2 rows per workgroup, 32 lanes per row, one vec4 per lane per step: the router has only 128 rows, and
// small workgroups spread them over 64 SMs. Plain workgroup reduction (the router is 1 MiB; subgroups
// would not show).

struct Params {
    rows: u32, // output length
    cols: u32, // input length, a multiple of 4
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;      // [T, cols] f32
@group(0) @binding(2) var<storage, read> w: array<vec4<f32>>;      // [rows, cols] f32
@group(0) @binding(3) var<storage, read_write> y: array<f32>;      // [T, rows] f32

var<workgroup> red: array<f32, 64>;

// workgroup_id.x = pair of rows, workgroup_id.y = token.
@compute @workgroup_size(64)
fn f32_gemv(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let lane = li % 32u;
    let r = wg.x * 2u + li / 32u;
    let t = wg.y;
    let nvec = p.cols / 4u;
    var acc = 0.0;
    if (r < p.rows) {
        for (var i = lane; i < nvec; i += 32u) {
            acc += dot(w[r * nvec + i], x[t * nvec + i]);
        }
    }
    red[li] = acc;
    workgroupBarrier();
    for (var off = 16u; off > 0u; off >>= 1u) {
        if (lane < off) {
            red[li] += red[li + off];
        }
        workgroupBarrier();
    }
    if (lane == 0u && r < p.rows) {
        y[t * p.rows + r] = red[li];
    }
}
