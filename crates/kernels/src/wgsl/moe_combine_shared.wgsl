// moe_combine_shared_norm: qwen35moe's shared expert joins with the routed ones, as shared_expert_gate.wgsl
// then moe_combine_norm: the picks go onto residual[t] + σ(w · u[t]) · s[t], u the FFN's normed input (read
// from `normed` before this dispatch overwrites it with the next norm's), s the shared expert's output.

@group(0) @binding(5) var<storage, read> shared_gate: array<vec4<f32>>; // [H] ffn_gate_inp_shexp
@group(0) @binding(6) var<storage, read> shared_out: array<vec4<f32>>;  // [T, H] the shared expert's output
@group(0) @binding(7) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(8) var<storage, read_write> normed: array<vec4<f32>>;

var<workgroup> shared_weight: f32;

// σ(w · u[t]) into `shared_weight`, every lane of the workgroup calling it before any writes `normed`.
fn begin_row(li: u32, t: u32, h4: u32) {
    var acc = 0.0;
    for (var i = li; i < h4; i += WG) {
        acc += dot(shared_gate[i], normed[t * h4 + i]);
    }
    let g = workgroup_sum(acc, li, WG);
    if (li == 0u) {
        shared_weight = 1.0 / (1.0 + exp(-g));
    }
    // Every lane has read the sum (the norm's reduction reuses its memory) and `shared_weight` is written.
    workgroupBarrier();
}

fn residual_term(t: u32, i: u32, h4: u32) -> vec4<f32> {
    return residual[t * h4 + i] + shared_weight * shared_out[t * h4 + i];
}
