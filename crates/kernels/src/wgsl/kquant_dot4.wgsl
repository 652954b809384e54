// What the K-quant GEMVs of 4 rows a lane group share (appended after kquant_gemv.wgsl,
// expert_kquant_gemv.wgsl and expert_kquant_gemv_combine.wgsl, before the block helper): a lane's share of
// 4 rows' dot products with one input row, each load of x serving the 4 rows. Reads `p.cols`, `x` and,
// through the block helper, `w`.

// Lane `lane`'s share of the dot products of 4 rows (byte offsets `rows` in w) with the input row whose
// first vec4 is `xrow`: LANES_PER_BLOCK lanes a super-block, 32 / LANES_PER_BLOCK super-blocks a step.
fn lane_dot4(rows: vec4<u32>, lane: u32, xrow: u32) -> vec4<f32> {
    let blocks = p.cols / 256u;
    let per_step = 32u / LANES_PER_BLOCK;
    let part = lane % LANES_PER_BLOCK;
    var acc = vec4<f32>(0.0);
    for (var sb = lane / LANES_PER_BLOCK; sb < blocks; sb += per_step) {
        let xs = block_x(part, xrow + sb * 64u);
        let at = sb * BLOCK_BYTES;
        acc += vec4<f32>(
            block_dot(rows.x + at, part, xs),
            block_dot(rows.y + at, part, xs),
            block_dot(rows.z + at, part, xs),
            block_dot(rows.w + at, part, xs),
        );
    }
    return acc;
}
