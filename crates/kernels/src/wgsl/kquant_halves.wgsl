// What the Q2_K, Q3_K and Q6_K block helpers share (appended after them, with kquant_byte_word.wgsl): the
// walk of x over two halves of 128 values, each four quarters of 32 (value 128h + 32k + l), whose quants
// for one l share bytes: 8 lanes a block, lane l takes half l / 4 and l = 8 (l % 4) .. + 8 (in two runs of
// 4), one scale a quarter.

// Lane `lane`'s values of x for a block whose first value is vec4 `x4`: for each of its two runs of 4
// l's, the 4 quarters' vec4s (run i, quarter k at 4i + k).
fn block_x(lane: u32, x4: u32) -> array<vec4<f32>, 8> {
    let xv = x4 + 32u * (lane / 4u) + 2u * (lane % 4u);
    return array<vec4<f32>, 8>(x[xv], x[xv + 8u], x[xv + 16u], x[xv + 24u], x[xv + 1u], x[xv + 9u], x[xv + 17u],
        x[xv + 25u]);
}

