// What the host writes before each sampled step (SampleStep), read by sample_top_k and apply_penalties
// (appended to both).

struct Step {
    k: u32, // 1..=SAMPLE_MAX_K
    temperature: f32,
    top_p: f32,
    min_p: f32,
    u: f32, // uniform in [0, 1)
    repetition_penalty: f32, // the penalties (apply_penalties), before the draw
    presence_penalty: f32,
    last_n: u32,
    frequency_penalty: f32,
}
