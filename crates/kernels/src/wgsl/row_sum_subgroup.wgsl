// Row sum of the 32 lanes of each row group with subgroupAdd, for subgroups of 4..32 lanes.
// Assumes subgroups are consecutive local invocation indices (true on the Vulkan drivers we met:
// NVIDIA, lavapipe); the GPU tests check it on the CI device.

var<workgroup> red: array<f32, 64>;

// Returns the sum of `acc` over the 32 lanes of this invocation's row group (valid in lane 0).
fn row_sum(acc: f32, li: u32, sg_lane: u32, sg_size: u32) -> f32 {
    let s = subgroupAdd(acc);
    if (sg_lane == 0u) {
        red[li / sg_size] = s;
    }
    workgroupBarrier();
    var total = 0.0;
    if (li % 32u == 0u) {
        let first = li / sg_size;
        for (var j = 0u; j < 32u / sg_size; j++) {
            total += red[first + j];
        }
    }
    return total;
}

var<workgroup> red4: array<vec4<f32>, 64>;

// Four row sums at once (a lane holding partials of 4 rows): the sums over the 32 lanes of this
// invocation's row group (valid in lane 0).
fn row_sum4(acc: vec4<f32>, li: u32, sg_lane: u32, sg_size: u32) -> vec4<f32> {
    let s = subgroupAdd(acc);
    if (sg_lane == 0u) {
        red4[li / sg_size] = s;
    }
    workgroupBarrier();
    var total = vec4<f32>(0.0);
    if (li % 32u == 0u) {
        let first = li / sg_size;
        for (var j = 0u; j < 32u / sg_size; j++) {
            total += red4[first + j];
        }
    }
    return total;
}
