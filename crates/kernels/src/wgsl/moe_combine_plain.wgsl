// moe_combine_norm's picks go onto the residual alone.

fn begin_row(li: u32, t: u32, h4: u32) {}

fn residual_term(t: u32, i: u32, h4: u32) -> vec4<f32> {
    return residual[t * h4 + i];
}
