// What the Q4_K and Q5_K block helpers share (appended after them): the 6-bit (scale, min) pairs of a
// block's 8 sub-blocks (ggml's get_scale_min_k4) and their use on a lane's sums and a tile, and the walk of x over the chunks of 64 values whose byte
// j holds value j in its low nibble and value 32 + j in its high one (8 lanes a block: lane l takes chunk
// l / 2, positions 16 (l % 2) .. + 16).

// Byte k (0..12) of the scales, given as their three words.
fn scale_byte(s: vec3<u32>, k: u32) -> u32 {
    return (s[k / 4u] >> ((k % 4u) * 8u)) & 255u;
}

// (scale, min) of sub-block j.
fn scale_min(s: vec3<u32>, j: u32) -> vec2<f32> {
    if (j < 4u) {
        return vec2<f32>(f32(scale_byte(s, j) & 63u), f32(scale_byte(s, j + 4u) & 63u));
    }
    let hi = scale_byte(s, j + 4u);
    let sc = (hi & 15u) | ((scale_byte(s, j - 4u) >> 6u) << 4u);
    let m = (hi >> 4u) | ((scale_byte(s, j) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(m));
}

// Lane `lane`'s values of x for a block whose first value is vec4 `x4`: its 16 low-nibble values, then
// its 16 high-nibble ones.
fn block_x(lane: u32, x4: u32) -> array<vec4<f32>, 8> {
    let xl = x4 + (lane / 2u) * 16u + (lane % 2u) * 4u;
    return array<vec4<f32>, 8>(x[xl], x[xl + 1u], x[xl + 2u], x[xl + 3u], x[xl + 8u], x[xl + 9u], x[xl + 10u],
        x[xl + 11u]);
}


// Lane `lane`'s part of the block at word `bw` from its sums over chunk lane / 2, `s` = (low nibbles · x,
// high nibbles · x, the sum of x under each): d * sc * q - dmin * m summed, with the (sc, m) of the chunk's
// two sub-blocks.
fn chunk_total(bw: u32, lane: u32, s: vec4<f32>) -> f32 {
    let dm = unpack2x16float(w[bw]);
    let scales = vec3<u32>(w[bw + 1u], w[bw + 2u], w[bw + 3u]);
    let c = lane / 2u;
    let a = scale_min(scales, 2u * c);
    let h = scale_min(scales, 2u * c + 1u);
    return dm.x * (a.x * s.x + h.x * s.y) - dm.y * (a.y * s.z + h.y * s.w);
}

// The tiled GEMMs' (d * sc, dmin * m) of sub-block `sb` of the block at word `bw`.
fn tile_scale_min(bw: u32, sb: u32) -> vec2<f32> {
    let dm = unpack2x16float(w[bw]);
    let sm = scale_min(vec3<u32>(w[bw + 1u], w[bw + 2u], w[bw + 3u]), sb);
    return vec2<f32>(dm.x * sm.x, dm.y * sm.y);
}
