// What the block helpers of the types read in runs of 32 values share (appended after them, with
// kquant_byte_word.wgsl): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and IQ4_NL (8 GGUF blocks of 32 a 256-value step),
// IQ4_XS (8 sub-blocks of 32 a super-block), F16, BF16 and F32. 8 lanes a step, lane l taking values
// 32l .. 32l + 31; the nibble types hold a run as 16 bytes, value j the low nibble of byte j and value
// 16 + j its high nibble (the 5-bit types' fifth bits in a u32, bit j for value j).

// Lane `lane`'s values of x for a step whose first value is vec4 `x4`: its run, in order.
fn block_x(lane: u32, x4: u32) -> array<vec4<f32>, 8> {
    let xv = x4 + 8u * lane;
    return array<vec4<f32>, 8>(x[xv], x[xv + 1u], x[xv + 2u], x[xv + 3u], x[xv + 4u], x[xv + 5u], x[xv + 6u],
        x[xv + 7u]);
}

// The 16 nibble bytes at byte `at`, as 4 words.
fn nibble_words(at: u32) -> vec4<u32> {
    return vec4<u32>(byte_word(at), byte_word(at + 4u), byte_word(at + 8u), byte_word(at + 12u));
}

// (sum of low nibble * x over the run's first 16 values, of high nibble * x over its last 16, the sums of
// x over each).
fn nibble_dot(q: vec4<u32>, xs: array<vec4<f32>, 8>) -> vec4<f32> {
    let bytes = vec4<u32>(0u, 8u, 16u, 24u);
    let ones = vec4<f32>(1.0);
    var s = vec4<f32>(0.0);
    for (var i = 0u; i < 4u; i++) {
        let v = vec4<u32>(q[i]) >> bytes;
        s.x += dot(vec4<f32>(v & vec4<u32>(15u)), xs[i]);
        s.y += dot(vec4<f32>((v >> vec4<u32>(4u)) & vec4<u32>(15u)), xs[4u + i]);
        s.z += dot(ones, xs[i]);
        s.w += dot(ones, xs[4u + i]);
    }
    return s;
}

// The sum of fifth bit * x over the run's values (bit j of `qh` for value j).
fn fifth_dot(qh: u32, xs: array<vec4<f32>, 8>) -> f32 {
    let bits = vec4<u32>(0u, 1u, 2u, 3u);
    var s = 0.0;
    for (var i = 0u; i < 8u; i++) {
        s += dot(vec4<f32>((vec4<u32>(qh >> (4u * i)) >> bits) & vec4<u32>(1u)), xs[i]);
    }
    return s;
}

// The tiled GEMMs' 16 values of half `half` of a run (0: its first 16, the low nibbles; 1: its last 16) of
// the nibble bytes at `at`, in order.
fn tile_nibbles(at: u32, half: u32) -> array<vec4<u32>, 4> {
    let shifts = vec4<u32>(0u, 8u, 16u, 24u) + vec4<u32>(4u * half);
    var out: array<vec4<u32>, 4>;
    for (var i = 0u; i < 4u; i++) {
        out[i] = (vec4<u32>(byte_word(at + 4u * i)) >> shifts) & vec4<u32>(15u);
    }
    return out;
}

// Their fifth bits.
fn tile_fifth(qh: u32, half: u32) -> array<vec4<u32>, 4> {
    let bits = vec4<u32>(0u, 1u, 2u, 3u);
    var out: array<vec4<u32>, 4>;
    for (var i = 0u; i < 4u; i++) {
        out[i] = (vec4<u32>(qh >> (16u * half + 4u * i)) >> bits) & vec4<u32>(1u);
    }
    return out;
}
