// F32 GEMV over T inputs (the router): y[t, r] = sum_c w[r, c] * x[t, c].
// One row per workgroup of 128 lanes, each lane four vec4 a step (512 floats apart, loads issued before
// any is used): the router has only 128 rows, so a lane's loop is bound by its memory round trips, and a
// row of 2048 takes one step. Plain workgroup reduction (the router is 1 MiB; subgroups would not show).

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

const WG: u32 = 128u;
var<workgroup> red: array<f32, WG>;

// w[r, i] · x[t, i] for vec4 index i of the row, or 0 where i is past its end (read clamped).
fn part(wr: u32, xt: u32, nvec: u32, i: u32) -> f32 {
    let j = min(i, nvec - 1u);
    return select(0.0, dot(w[wr + j], x[xt + j]), i < nvec);
}

// workgroup_id.x = row, workgroup_id.y = token.
@compute @workgroup_size(128)
fn f32_gemv(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let r = wg.x;
    let t = wg.y;
    let nvec = p.cols / 4u;
    let wr = r * nvec;
    let xt = t * nvec;
    var acc = 0.0;
    for (var i = li; i < nvec; i += 4u * WG) {
        let a = part(wr, xt, nvec, i);
        let b = part(wr, xt, nvec, i + WG);
        let c = part(wr, xt, nvec, i + 2u * WG);
        let d = part(wr, xt, nvec, i + 3u * WG);
        acc += a;
        acc += b;
        acc += c;
        acc += d;
    }
    red[li] = acc;
    workgroupBarrier();
    for (var off = WG / 2u; off > 0u; off >>= 1u) {
        if (li < off) {
            red[li] += red[li + off];
        }
        workgroupBarrier();
    }
    if (li == 0u) {
        y[t * p.rows + r] = red[0];
    }
}
