// What the F16, BF16 and F32 helpers share (appended after them, with kquant_runs32.wgsl): lane l of a step's
// 8 takes values 32l .. 32l + 31, 4 at a time through the type's `vec4_at`, VALUE_BYTES each.

// Lane `lane`'s run of the 256 values at byte `b` against its values of x (`block_x`).
fn block_dot(b: u32, lane: u32, xs: array<vec4<f32>, 8>) -> f32 {
    var s = 0.0;
    for (var i = 0u; i < 8u; i++) {
        s += dot(vec4_at(b + VALUE_BYTES * (32u * lane + 4u * i)), xs[i]);
    }
    return s;
}

// The tiled GEMMs' step `st` (columns 16 st .. 16 st + 15) of the row at byte `row` (kquant_tile.wgsl).
fn tile_load(row: u32, st: u32) -> array<vec4<f32>, 4> {
    let at = row + (st / 16u) * BLOCK_BYTES + VALUE_BYTES * 16u * (st % 16u);
    let v = 4u * VALUE_BYTES;
    return array<vec4<f32>, 4>(vec4_at(at), vec4_at(at + v), vec4_at(at + 2u * v), vec4_at(at + 3u * v));
}
