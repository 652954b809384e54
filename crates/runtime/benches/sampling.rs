//! The CPU sampler on a Qwen3-sized vocabulary (151,936 logits): what a sampled decode step adds to the
//! engine's own time (the chat example samples at temperature 0.6, top-k 20, top-p 0.95 by default).
//! Two logit shapes: `zipf` (probabilities falling as a power of the rank, as a trained model's do; the
//! ranks shuffled over the ids) and `flat` (uniform in [-4, 4), every token in play).
//!
//! `cargo bench -p diskformer-runtime --bench sampling`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use diskformer_runtime::{Sampler, SamplingOptions};
use diskformer_testkit::Rng;

const VOCAB: usize = 151_936;

/// A seeded stream for the inputs.
fn stream(seed: u64) -> impl FnMut() -> u64 {
    let mut rng = Rng::new(seed);
    move || rng.next_u64()
}

/// Logit of rank r (from 1) = -1.1 ln r, ranks shuffled over the ids.
fn zipf_logits() -> Vec<f32> {
    let mut next = stream(11);
    let mut ranks: Vec<u32> = (1..=VOCAB as u32).collect();
    for i in (1..ranks.len()).rev() {
        ranks.swap(i, (next() % (i as u64 + 1)) as usize);
    }
    ranks.iter().map(|&r| -1.1 * (r as f32).ln()).collect()
}

fn flat_logits() -> Vec<f32> {
    let mut next = stream(12);
    (0..VOCAB).map(|_| ((next() >> 11) as f64 / (1u64 << 53) as f64 * 8.0 - 4.0) as f32).collect()
}

fn sampling(c: &mut Criterion) {
    let chat =
        SamplingOptions { temperature: 0.6, top_k: 20, top_p: 0.95, seed: 7, ..SamplingOptions::default() };
    let cases = [
        ("chat_defaults_t0.6_k20_p0.95", chat),
        ("top_p_only_t0.6_p0.95", SamplingOptions { top_k: 0, ..chat }),
        ("temperature_only_t0.6", SamplingOptions { top_k: 0, top_p: 1.0, ..chat }),
        ("top_k_only_k40", SamplingOptions { top_k: 40, top_p: 1.0, ..chat }),
        ("chat_defaults_repetition_1.1", SamplingOptions { repetition_penalty: 1.1, ..chat }),
    ];
    let recent: Vec<u32> = (0..64).map(|i| i * 997).collect();
    let mut g = c.benchmark_group("sample");
    for (shape, logits) in [("zipf", zipf_logits()), ("flat", flat_logits())] {
        for (name, o) in cases {
            let mut s = Sampler::new(o);
            g.bench_function(format!("{shape}/{name}"), |b| b.iter(|| s.sample(black_box(&logits), &recent)));
        }
    }
    g.finish();
}

criterion_group!(benches, sampling);
criterion_main!(benches);
