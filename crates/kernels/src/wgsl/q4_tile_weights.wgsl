// Q4_0 weights for q8_tile.wgsl (appended after it): a 32-value block is 16 bytes in ggml order, the low
// nibble of byte j value j and the high nibble value j + 16 (value = (nibble - 8) * scale), so step st (16
// columns) of plane row `row` is the low (st even) or high (st odd) nibbles of its block st / 2, whose scale
// the tile reads as for Q8_0.

fn tile_word(row: u32, st: u32) -> vec4<u32> {
    return q[row * (p.cols / 32u) + st / 2u];
}

// The 16 values of a step's word, unscaled: vec4 k = columns 4k..4k+3 of the step.
fn tile_values(w: vec4<u32>, st: u32) -> array<vec4<f32>, 4> {
    if (st % 2u == 0u) {
        return array<vec4<f32>, 4>(lo4x4(w.x), lo4x4(w.y), lo4x4(w.z), lo4x4(w.w));
    }
    return array<vec4<f32>, 4>(hi4x4(w.x), hi4x4(w.y), hi4x4(w.z), hi4x4(w.w));
}
