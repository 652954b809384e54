// Q8_0 weights for q8_tile.wgsl (appended after it): step st (16 columns) of plane row `row` is 16 int8,
// one vec4<u32>; its scale is the row's block st / 2.

fn tile_word(row: u32, st: u32) -> vec4<u32> {
    return q[row * (p.cols / 16u) + st];
}

// The 16 values of a step's word, unscaled: vec4 k = columns 4k..4k+3.
fn tile_values(w: vec4<u32>, st: u32) -> array<vec4<f32>, 4> {
    return array<vec4<f32>, 4>(i8x4(w.x), i8x4(w.y), i8x4(w.z), i8x4(w.w));
}
