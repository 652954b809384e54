// Embedding lookup: out[t] = dequantised row ids[t] of a Q8_0 table (one dispatch per row part of the table).
enable f16;

struct Params {
    rows: u32,      // rows of the whole table (vocabulary)
    cols: u32,      // row length (hidden), a multiple of 32
    tokens: u32,    // T
    row_begin: u32, // first table row bound in this part
    row_end: u32,   // one past the last row bound in this part
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;          // [T] token ids
@group(0) @binding(2) var<storage, read> q: array<u32>;            // [row_end - row_begin, cols] int8, 4 per u32
@group(0) @binding(3) var<storage, read> scales: array<f16>;       // [row_end - row_begin, cols/32] f16 scales
@group(0) @binding(4) var<storage, read_write> out: array<f32>;    // [T, cols] f32

// One invocation per 4 values (one u32 of the int8 plane); workgroup_id.y = token.
@compute @workgroup_size(64)
fn embed_q8(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.y;
    let i = gid.x; // u32 index within the row
    let words = p.cols / 4u;
    if (i >= words || t >= p.tokens) {
        return;
    }
    let id = ids[t];
    let o = t * p.cols + i * 4u;
    if (id >= p.rows) {
        // Ids outside the table give zeros, written by the part that ends the table.
        if (p.row_end == p.rows) {
            out[o] = 0.0;
            out[o + 1u] = 0.0;
            out[o + 2u] = 0.0;
            out[o + 3u] = 0.0;
        }
        return;
    }
    if (id < p.row_begin || id >= p.row_end) {
        return;
    }
    let r = id - p.row_begin;
    let v = vec4<f32>(unpack4xI8(q[r * words + i]));
    let s = f32(scales[r * (p.cols / 32u) + (i * 4u) / 32u]);
    out[o] = v.x * s;
    out[o + 1u] = v.y * s;
    out[o + 2u] = v.z * s;
    out[o + 3u] = v.w * s;
}
