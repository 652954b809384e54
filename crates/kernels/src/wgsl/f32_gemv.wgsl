// F32 GEMV over T inputs (the router): y[t, r] = sum_c w[r, c] * in[t, c], where in = x, or with norm = 1
// in = rms_norm(x[t]) * g (the RMSNorm folded in as in q8_gemv: each workgroup reads the whole input row,
// sums its squares, and scales its dot product with x * g by 1 / sqrt(mean(x^2) + eps)). With norm = 1 the
// workgroups also write the normed row itself, each a share of it, to `normed`: what the expert GEMVs
// read next. Decode's FFN norm then needs no dispatch of its own. With norm = 2 they also write their share
// Q8_0-quantised to `normed_q` (a quantize_q8 row: the int8, then the f32 block scales; 8 lanes a block,
// their max through workgroup memory), what expert_q8_gemv_xq reads. With bias = 1, y[t, r] also adds
// bias[t, r] (the forced routing's mask: no add of its own a layer).
// One row per workgroup of 128 lanes, each lane four vec4 a step (512 floats apart, loads issued before
// any is used): the router has only 128 rows, so a lane's loop is bound by its memory round trips, and a
// row of 2048 takes one step. Plain workgroup reduction (the router is 1 MiB; subgroups would not show).

struct Params {
    rows: u32, // output length
    cols: u32, // input length, a multiple of 4
    norm: u32, // 1: the input is rms_norm(x) * g, also written to normed; 2: and Q8_0 to normed_q
    eps: f32,  // RMSNorm epsilon (norm >= 1)
    bias: u32, // 1: y += bias
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;           // [T, cols] f32
@group(0) @binding(2) var<storage, read> w: array<vec4<f32>>;           // [rows, cols] f32
@group(0) @binding(3) var<storage, read> g: array<vec4<f32>>;           // [cols] f32 norm weight (norm >= 1)
@group(0) @binding(4) var<storage, read> bias: array<f32>;              // [T, rows] f32 (bias = 1)
@group(0) @binding(5) var<storage, read_write> y: array<f32>;           // [T, rows] f32
@group(0) @binding(6) var<storage, read_write> normed: array<vec4<f32>>; // [T, cols] f32 (norm >= 1)
// [T, 9 * cols / 32] words: quantize_q8's rows (norm = 2)
@group(0) @binding(7) var<storage, read_write> normed_q: array<u32>;

const WG: u32 = 128u;
var<workgroup> red: array<vec2<f32>, WG>;
var<workgroup> amax: array<f32, WG>; // norm = 2: each lane's max |normed| of its vec4

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

// `v` plus bias[at] with bias = 1.
fn biased(v: f32, at: u32) -> f32 {
    if (p.bias != 0u) {
        return v + bias[at];
    }
    return v;
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
            y[t * p.rows + r] = biased(red[0].x, t * p.rows + r);
        }
        return;
    }
    let scale = 1.0 / sqrt(red[0].y / f32(p.cols) + p.eps);
    if (li == 0u) {
        y[t * p.rows + r] = biased(red[0].x * scale, t * p.rows + r);
    }
    // Row r's workgroup writes vec4 r * WG + li of the normed row, and every rows * WG-th after it (a step
    // for the whole workgroup, so that norm = 2 may meet at barriers).
    for (var first = r * WG; first < nvec; first += p.rows * WG) {
        let i = first + li;
        var v = vec4<f32>(0.0);
        if (i < nvec) {
            v = (x[xt + i] * scale) * g[i];
            normed[xt + i] = v;
        }
        if (p.norm == 2u) {
            // A block is 8 vec4s: lanes 8b..8b+7 of the step (cols a multiple of 32, steps of WG = 128).
            let a = abs(v);
            amax[li] = max(max(a.x, a.y), max(a.z, a.w));
            workgroupBarrier();
            let lead = li & ~7u;
            var m = 0.0;
            for (var j = 0u; j < 8u; j++) {
                m = max(m, amax[lead + j]);
            }
            let step = q8_step(m);
            if (i < nvec) {
                let row = t * (9u * p.cols / 32u);
                normed_q[row + i] = quant4_i8(v * step.inv);
                if (li == lead) {
                    normed_q[row + p.cols / 4u + i / 8u] = bitcast<u32>(step.d);
                }
            }
            workgroupBarrier();
        }
    }
}
