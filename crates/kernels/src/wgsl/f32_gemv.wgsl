// F32 GEMV over T inputs (the router): y[t, r] = sum_c w[r, c] * in[t, c], where in = x, or with norm = 1
// in = rms_norm(x[t]) * g (the RMSNorm folded in as in q8_gemv: each workgroup reads the whole input row,
// sums its squares, and scales its dot product with x * g by 1 / sqrt(mean(x^2) + eps)). With norm = 1 the
// workgroups also write the normed row itself, each a share of it, to `normed`: what the expert GEMVs
// read next. Decode's FFN norm then needs no dispatch of its own.
// One row per workgroup of 128 lanes, each lane four vec4 a step (512 floats apart, loads issued before
// any is used): the router has only 128 rows, so a lane's loop is bound by its memory round trips, and a
// row of 2048 takes one step. Plain workgroup reduction (the router is 1 MiB; subgroups would not show).

struct Params {
    rows: u32, // output length
    cols: u32, // input length, a multiple of 4
    norm: u32, // 1: the input is rms_norm(x) * g, also written to normed
    eps: f32,  // RMSNorm epsilon (norm = 1)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;           // [T, cols] f32
@group(0) @binding(2) var<storage, read> w: array<vec4<f32>>;           // [rows, cols] f32
@group(0) @binding(3) var<storage, read> g: array<vec4<f32>>;           // [cols] f32 norm weight (norm = 1)
@group(0) @binding(4) var<storage, read_write> y: array<f32>;           // [T, rows] f32
@group(0) @binding(5) var<storage, read_write> normed: array<vec4<f32>>; // [T, cols] f32 (norm = 1)

const WG: u32 = 128u;
var<workgroup> red: array<vec2<f32>, WG>;

// (w[r, i] · in[t, i], x[t, i] · x[t, i]) for vec4 index i of the row, or 0 where i is past its end (read
// clamped).
fn part(wr: u32, xt: u32, nvec: u32, i: u32) -> vec2<f32> {
    let j = min(i, nvec - 1u);
    let xv = x[xt + j];
    var inv = xv;
    if (p.norm != 0u) {
        inv = xv * g[j];
    }
    return select(vec2<f32>(0.0), vec2<f32>(dot(w[wr + j], inv), dot(xv, xv)), i < nvec);
}

// workgroup_id.x = row, workgroup_id.y = token.
@compute @workgroup_size(128)
fn f32_gemv(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let r = wg.x;
    let t = wg.y;
    let nvec = p.cols / 4u;
    let wr = r * nvec;
    let xt = t * nvec;
    var acc = vec2<f32>(0.0);
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
    if (p.norm == 0u) {
        if (li == 0u) {
            y[t * p.rows + r] = red[0].x;
        }
        return;
    }
    let scale = 1.0 / sqrt(red[0].y / f32(p.cols) + p.eps);
    if (li == 0u) {
        y[t * p.rows + r] = red[0].x * scale;
    }
    // Row r's workgroup writes vec4 r * WG + li of the normed row, and every rows * WG-th after it.
    for (var i = r * WG + li; i < nvec; i += p.rows * WG) {
        normed[xt + i] = (x[xt + i] * scale) * g[i];
    }
}
