// Q8_0 GEMM for prefill on tensor cores: y[t, row_begin + r] = W[r] · x[t] for T tokens, as q8_gemm_tiled
// computes it but with f16 products summed in f32 (cpu::q8_gemv_f16: each weight q * d rounded once to f16,
// each input rounded to f16). A workgroup of 128 lanes (four 32-lane subgroups, which the launcher checks)
// takes 128 rows x 64 tokens, twice the tokens of expert_q8_gemm_coop's tiles (q8_tile_coop.wgsl), so each
// weight is decoded into workgroup memory once per 64 tokens. A stage is two Q8_0 blocks (64 columns), staged
// as q8_tile_coop.wgsl stages them (columns contiguous, 4 halves a write, rows padded by 8 halves, tile
// offsets and strides in vec4<f16>): lane li decodes row li's 64 weights (coop_w, B column-major) and brings
// 8 vec4s of inputs (coop_x, A row-major; x_load says which); subgroup s then multiplies its rows
// 32s..32s + 31 by the 64 tokens as eight 16 x 16 x 16 products a 16-column step. The products go out
// through coop_c, one 16 x 16 a subgroup at a time. 31 KB of workgroup memory (Kernel::workgroup_storage:
// 32 KiB).
enable f16;

struct Params {
    rows: u32,      // rows in this part
    cols: u32,      // input length, a multiple of 32
    row_begin: u32, // first output row of this part
    out_rows: u32,  // rows of the whole matrix (stride of y)
    tokens: u32,    // T
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;      // [T, cols] f32
@group(0) @binding(2) var<storage, read> q: array<vec4<u32>>;      // [rows, cols] int8 (this part)
@group(0) @binding(3) var<storage, read> scales: array<f16>;       // [rows, cols/32] f16 scales (this part)
@group(0) @binding(4) var<storage, read_write> y: array<f32>;      // [T, out_rows] f32

const BR: u32 = 128u; // rows per workgroup
const BT: u32 = 64u;  // tokens per workgroup
const S: u32 = 18u; // vec4<f16> a staged row: 64 halves + 8

var<workgroup> coop_w: array<vec4<f16>, 2304>; // [128 rows][S]
var<workgroup> coop_x: array<vec4<f16>, 1152>; // [64 tokens][S]
var<workgroup> coop_c: array<f32, 1024>;       // [4 subgroups][16 rows][16 tokens]

// A block's 32 weights (words w0, w1, scale s) into the staged row at vec4 `at`.
fn put_block(at: u32, w0: vec4<u32>, w1: vec4<u32>, s: f32) {
    coop_w[at] = vec4<f16>(i8x4(w0.x) * s);
    coop_w[at + 1u] = vec4<f16>(i8x4(w0.y) * s);
    coop_w[at + 2u] = vec4<f16>(i8x4(w0.z) * s);
    coop_w[at + 3u] = vec4<f16>(i8x4(w0.w) * s);
    coop_w[at + 4u] = vec4<f16>(i8x4(w1.x) * s);
    coop_w[at + 5u] = vec4<f16>(i8x4(w1.y) * s);
    coop_w[at + 6u] = vec4<f16>(i8x4(w1.z) * s);
    coop_w[at + 7u] = vec4<f16>(i8x4(w1.w) * s);
}

// Input vec4 m (0..7) of lane li for the stage of blocks kb, kb + 1: vec4 li % 8 of block kb + m / 4 of
// token 16 (m % 4) + li / 8, so 8 lanes read a token's block (128 contiguous bytes) and a subgroup load
// touches 4 token rows (a lane walking one token's 32 inputs made it touch 32). Zeros past the tokens and
// past an odd block count.
fn x_load(t0: u32, kb: u32, m: u32, li: u32) -> vec4<f32> {
    let nblk = p.cols / 32u;
    let t = t0 + 16u * (m % 4u) + li / 8u;
    let b = kb + m / 4u;
    let i = min(t, p.tokens - 1u) * (p.cols / 4u) + 8u * min(b, nblk - 1u) + li % 8u;
    return select(vec4<f32>(0.0), x[i], t < p.tokens && b < nblk);
}

// Where x_load's vec4 m goes in coop_x.
fn x_at(m: u32, li: u32) -> u32 {
    return (16u * (m % 4u) + li / 8u) * S + 8u * (m / 4u) + li % 8u;
}

// Subgroup sg's product `c` (tokens 16i.., rows 32sg + 16j..) out to y: lane l of the subgroup writes row
// l / 2, tokens 8 (l % 2).. of it. Call from uniform control flow.
fn put_out(c: coop_mat16x16<f32, C>, li: u32, r0: u32, t0: u32, i: u32, j: u32) {
    let sg = li / 32u;
    let base = 256u * sg;
    coopStore(c, &coop_c[base], 16u);
    workgroupBarrier();
    let l = li % 32u;
    let r = r0 + 32u * sg + 16u * j + l / 2u;
    for (var m = 8u * (l % 2u); m < 8u * (l % 2u) + 8u; m++) {
        let t = t0 + 16u * i + m;
        if (r < p.rows && t < p.tokens) {
            y[t * p.out_rows + p.row_begin + r] = coop_c[base + (l / 2u) * 16u + m];
        }
    }
    workgroupBarrier();
}

// workgroup_id.x = block of 128 rows, workgroup_id.y = block of 64 tokens.
@compute @workgroup_size(128)
fn q8_gemm_coop(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let r0 = wg.x * BR;
    let t0 = wg.y * BT;
    let nblk = p.cols / 32u;
    let nstage = (nblk + 1u) / 2u;
    let sg = li / 32u;
    // Lane li stages row li (clamped: rows past the end are decoded but never written out; the block past
    // an odd count gets scale 0) and x_load's inputs.
    let lrow = min(r0 + li, p.rows - 1u);
    let wrow = lrow * nblk * 2u;
    var c00 = coop_mat16x16<f32, C>(); // tokens 16i.. x rows 32sg + 16j..: c{i}{j}
    var c01 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    var c20 = coop_mat16x16<f32, C>();
    var c21 = coop_mat16x16<f32, C>();
    var c30 = coop_mat16x16<f32, C>();
    var c31 = coop_mat16x16<f32, C>();
    var kb1 = min(1u, nblk - 1u);
    var w0 = q[wrow];
    var w1 = q[wrow + 1u];
    var w2 = q[wrow + 2u * kb1];
    var w3 = q[wrow + 2u * kb1 + 1u];
    var s0 = f32(scales[lrow * nblk]);
    var s1 = select(0.0, f32(scales[lrow * nblk + kb1]), 1u < nblk);
    var x0 = x_load(t0, 0u, 0u, li);
    var x1 = x_load(t0, 0u, 1u, li);
    var x2 = x_load(t0, 0u, 2u, li);
    var x3 = x_load(t0, 0u, 3u, li);
    var x4 = x_load(t0, 0u, 4u, li);
    var x5 = x_load(t0, 0u, 5u, li);
    var x6 = x_load(t0, 0u, 6u, li);
    var x7 = x_load(t0, 0u, 7u, li);
    for (var st = 0u; st < nstage; st++) {
        workgroupBarrier(); // the last stage's products have read the tiles
        put_block(li * S, w0, w1, s0);
        put_block(li * S + 8u, w2, w3, s1);
        coop_x[x_at(0u, li)] = vec4<f16>(x0);
        coop_x[x_at(1u, li)] = vec4<f16>(x1);
        coop_x[x_at(2u, li)] = vec4<f16>(x2);
        coop_x[x_at(3u, li)] = vec4<f16>(x3);
        coop_x[x_at(4u, li)] = vec4<f16>(x4);
        coop_x[x_at(5u, li)] = vec4<f16>(x5);
        coop_x[x_at(6u, li)] = vec4<f16>(x6);
        coop_x[x_at(7u, li)] = vec4<f16>(x7);
        workgroupBarrier();
        // The next stage's loads, issued before this one's products (the last stage loads itself again).
        let kb0 = 2u * min(st + 1u, nstage - 1u);
        kb1 = min(kb0 + 1u, nblk - 1u);
        w0 = q[wrow + 2u * kb0];
        w1 = q[wrow + 2u * kb0 + 1u];
        w2 = q[wrow + 2u * kb1];
        w3 = q[wrow + 2u * kb1 + 1u];
        s0 = f32(scales[lrow * nblk + kb0]);
        s1 = select(0.0, f32(scales[lrow * nblk + kb1]), kb0 + 1u < nblk);
        x0 = x_load(t0, kb0, 0u, li);
        x1 = x_load(t0, kb0, 1u, li);
        x2 = x_load(t0, kb0, 2u, li);
        x3 = x_load(t0, kb0, 3u, li);
        x4 = x_load(t0, kb0, 4u, li);
        x5 = x_load(t0, kb0, 5u, li);
        x6 = x_load(t0, kb0, 6u, li);
        x7 = x_load(t0, kb0, 7u, li);
        for (var h = 0u; h < 4u; h++) {
            // A (token m, column k) at coop_x[m * S + k / 4]: row-major; B (column k, row n) at
            // coop_w[n * S + k / 4]: column-major.
            let xa = 4u * h;
            let wa = 32u * sg * S + 4u * h;
            let b0 = coopLoad<coop_mat16x16<f16, B>>(&coop_w[wa], S);
            let b1 = coopLoad<coop_mat16x16<f16, B>>(&coop_w[wa + 16u * S], S);
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&coop_x[xa], S);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&coop_x[xa + 16u * S], S);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            let a2 = coopLoadT<coop_mat16x16<f16, A>>(&coop_x[xa + 32u * S], S);
            c20 = coopMultiplyAdd(a2, b0, c20);
            c21 = coopMultiplyAdd(a2, b1, c21);
            let a3 = coopLoadT<coop_mat16x16<f16, A>>(&coop_x[xa + 48u * S], S);
            c30 = coopMultiplyAdd(a3, b0, c30);
            c31 = coopMultiplyAdd(a3, b1, c31);
        }
    }
    put_out(c00, li, r0, t0, 0u, 0u);
    put_out(c01, li, r0, t0, 0u, 1u);
    put_out(c10, li, r0, t0, 1u, 0u);
    put_out(c11, li, r0, t0, 1u, 1u);
    put_out(c20, li, r0, t0, 2u, 0u);
    put_out(c21, li, r0, t0, 2u, 1u);
    put_out(c30, li, r0, t0, 3u, 0u);
    put_out(c31, li, r0, t0, 3u, 1u);
}
