// The RMSNorm scale shared by the norm kernels (appended to each): every lane holds the sum of squares of
// its share of a row in `ss`; the lanes' sums are added by a 4-ary tree in workgroup memory and every lane gets
// 1 / sqrt(sum / n + eps). `lanes` is the workgroup size, a power of two of at most 256, the same in every
// lane; every lane of the workgroup calls it.

var<workgroup> rms_red: array<f32, 256>;

fn rms_scale(ss: f32, li: u32, lanes: u32, n: u32, eps: f32) -> f32 {
    return 1.0 / sqrt(workgroup_sum(ss, li, lanes) / f32(n) + eps);
}

// The sum of every lane's `v` (the same tree as rms_scale's). A caller that sums again after it waits at a
// barrier first: every lane reads the total from `rms_red`.
fn workgroup_sum(v: f32, li: u32, lanes: u32) -> f32 {
    rms_red[li] = v;
    workgroupBarrier();
    // Four entries a lane a step (half as many barriers as pairs: a decode norm waits on each), then a
    // last pair where the count is not a power of four.
    var live = lanes;
    for (; live >= 4u; live /= 4u) {
        let off = live / 4u;
        if (li < off) {
            rms_red[li] = (rms_red[li] + rms_red[li + off]) + (rms_red[li + 2u * off] + rms_red[li + 3u * off]);
        }
        workgroupBarrier();
    }
    if (live == 2u) {
        if (li == 0u) {
            rms_red[0] += rms_red[1];
        }
        workgroupBarrier();
    }
    return rms_red[0];
}
