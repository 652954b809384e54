// IQ4_NL's codebook (ggml's kvalues_iq4nl), for the IQ4_NL and IQ4_XS block helpers (appended after them,
// with kquant_runs32.wgsl and kquant_byte_word.wgsl): a nibble q stands for IQ4_VALUES[q].

var<private> IQ4_VALUES: array<f32, 16> = array<f32, 16>(-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
    1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);

// The sum of codebook[nibble] * x over a run whose nibble bytes are `q`.
fn codebook_dot(q: vec4<u32>, xs: array<vec4<f32>, 8>) -> f32 {
    let bytes = vec4<u32>(0u, 8u, 16u, 24u);
    var s = 0.0;
    for (var i = 0u; i < 4u; i++) {
        let v = vec4<u32>(q[i]) >> bytes;
        let lo = v & vec4<u32>(15u);
        let hi = (v >> vec4<u32>(4u)) & vec4<u32>(15u);
        s += dot(vec4<f32>(IQ4_VALUES[lo.x], IQ4_VALUES[lo.y], IQ4_VALUES[lo.z], IQ4_VALUES[lo.w]), xs[i]);
        s += dot(vec4<f32>(IQ4_VALUES[hi.x], IQ4_VALUES[hi.y], IQ4_VALUES[hi.z], IQ4_VALUES[hi.w]), xs[4u + i]);
    }
    return s;
}

// The tiled GEMMs' 16 values of half `half` of the run whose nibble bytes start at `at`, times `d`.
fn tile_codebook(at: u32, half: u32, d: f32) -> array<vec4<f32>, 4> {
    let q = tile_nibbles(at, half);
    var out: array<vec4<f32>, 4>;
    for (var i = 0u; i < 4u; i++) {
        out[i] = vec4<f32>(IQ4_VALUES[q[i].x], IQ4_VALUES[q[i].y], IQ4_VALUES[q[i].z], IQ4_VALUES[q[i].w]) * d;
    }
    return out;
}
