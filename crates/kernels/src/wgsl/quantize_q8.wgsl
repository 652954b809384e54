// Q8_0 quantisation of f32 rows, the input of the int8 GEMMs (q8_gemm_i8, expert_q8_gemm_i8), as llama.cpp's
// quantize_row_q8_0 does it: per 32-value block d = max|x| / 127 and q = round(x / d) (halves away from
// zero), d kept as its f16 rounding (what a Q8_0 block stores; a block past 127 × 65504 overflows it there
// as here). Output row r, 9 · cols / 32 words: the block quants packed 4 int8 a word (cols / 4 words), then
// the cols / 32 scales as f32 bits. One lane per block. The step (`q8_step`) and the rounding (`quant4_i8`)
// are in q8_helpers.wgsl.
enable f16;

struct Params {
    rows: u32, // rows of x
    cols: u32, // values a row, a multiple of 32
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;    // [rows, cols] f32
@group(0) @binding(2) var<storage, read_write> out: array<u32>;  // [rows, 9 * cols / 32] words

// global_invocation_id.x = block (row-major over rows x cols / 32).
@compute @workgroup_size(256)
fn quantize_q8(@builtin(global_invocation_id) gid: vec3<u32>) {
    let nblk = p.cols / 32u;
    let blk = gid.x;
    if (blk >= p.rows * nblk) {
        return;
    }
    var v: array<vec4<f32>, 8>;
    var amax = 0.0;
    for (var i = 0u; i < 8u; i++) {
        v[i] = x[blk * 8u + i];
        let a = abs(v[i]);
        amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
    }
    let step = q8_step(amax);
    let row = (blk / nblk) * (9u * nblk);
    let b = blk % nblk;
    for (var i = 0u; i < 8u; i++) {
        out[row + b * 8u + i] = quant4_i8(v[i] * step.inv);
    }
    out[row + 8u * nblk + b] = bitcast<u32>(step.d);
}
