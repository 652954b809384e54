// moe_combine_norm's picks go onto the residual alone.

@group(0) @binding(5) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> normed: array<vec4<f32>>;

fn begin_row(li: u32, t: u32, h4: u32) {}

fn residual_term(t: u32, i: u32, h4: u32) -> vec4<f32> {
    return residual[t * h4 + i];
}
