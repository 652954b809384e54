// Row sum of the 32 lanes of each row group, through workgroup memory (no subgroups).
// Appended to the GEMV kernels; `red` has one slot per invocation.

var<workgroup> red: array<f32, 256>;

// Returns the sum of `acc` over the 32 lanes of this invocation's row group (valid in lane 0).
fn row_sum(acc: f32, li: u32) -> f32 {
    red[li] = acc;
    workgroupBarrier();
    let lane = li % 32u;
    for (var off = 16u; off > 0u; off >>= 1u) {
        if (lane < off) {
            red[li] += red[li + off];
        }
        workgroupBarrier();
    }
    return red[li];
}

var<workgroup> red4: array<vec4<f32>, 256>;

// Four row sums at once (a lane holding partials of 4 rows): the sums over the 32 lanes of this
// invocation's row group (valid in lane 0).
fn row_sum4(acc: vec4<f32>, li: u32) -> vec4<f32> {
    red4[li] = acc;
    workgroupBarrier();
    let lane = li % 32u;
    for (var off = 16u; off > 0u; off >>= 1u) {
        if (lane < off) {
            red4[li] += red4[li + off];
        }
        workgroupBarrier();
    }
    return red4[li];
}
