// What the expert GEMV-combine kernels share (appended after expert_q8_gemv_combine.wgsl and
// expert_kquant_gemv_combine.wgsl): each pick's 4 row sums kept in workgroup memory, then their weighted sum
// added onto 4 rows of the residual stream and, with p.finish, the next norm's inputs. Reads p.rows, p.k,
// p.finish and the bindings weights, next_norm, y, scaled and squares.

const MAX_PICKS: u32 = 64u;
var<workgroup> pick_sums: array<vec4<f32>, MAX_PICKS>; // the 4 rows' sums of each pick
var<workgroup> row_squares: array<f32, 4>;

// Token t's rows r .. r + 3 (row block `block`), once pick_sums is complete: the k weighted terms added in
// pick order and then to y (as moe_combine adds the residual last), and with p.finish scaled and the
// block's sum of squares. Every invocation of the workgroup calls it.
fn combine_rows(li: u32, t: u32, r: u32, block: u32) {
    if (li < 4u) {
        var v = 0.0;
        if (r + li < p.rows) {
            var sum = 0.0;
            for (var j = 0u; j < p.k; j++) {
                sum += pick_sums[j][li] * weights[t * p.k + j];
            }
            let at = t * p.rows + r + li;
            v = y[at] + sum;
            y[at] = v;
            if (p.finish != 0u) {
                scaled[at] = v * next_norm[r + li];
            }
        }
        row_squares[li] = v * v;
    }
    if (p.finish != 0u) {
        workgroupBarrier();
        if (li == 0u) {
            let blocks = (p.rows + 3u) / 4u;
            squares[t * blocks + block] = (row_squares[0] + row_squares[1]) + (row_squares[2] + row_squares[3]);
        }
    }
}
