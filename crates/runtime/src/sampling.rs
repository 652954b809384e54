//! Picking the next token from the model's logits, on the CPU: repetition, presence and frequency penalties, then greedy
//! argmax or top-k → temperature → top-p → min-p → a draw from a seeded RNG. Pure Rust with no crate beyond
//! the kernels' CPU references, so a run is reproducible from its seed. Penalties follow llama.cpp's
//! `llama_sampler_penalties_apply` (`cpu::apply_penalties`).
//!
//! The pipeline works on a candidate list of `(id, logit)` pairs and never sorts the vocabulary: top-k keeps
//! its candidates in one pass over the logits (a buffer of 2k cut back to the best k whenever it fills), and
//! top-p finds its nucleus by halving selections (`select_nth_unstable` on ever smaller ranges), sorting only
//! the last few dozen candidates. A 151,936-token vocabulary sampled with top-p alone took 8.3 ms a token
//! with a full sort on the H200's host (BENCHMARKS.md, sixth session).
//!
//! Temperature comes before top-p and min-p (as in Hugging Face transformers); llama.cpp's default chain
//! applies it after them, so at a temperature other than 1 the same `top_p` can keep a different set.
//!
//! Every sampled token takes one uniform from the RNG, drawn or not. With top-k on, the candidates are
//! walked in rank order (the highest logit first) and the uniform has 24 bits, as the GPU draws: with top-k
//! up to [`SAMPLE_MAX_K`] and a penalty window up to [`PENALTY_MAX_N`] the GPU can draw instead
//! ([`Sampler::gpu_step`], the engine's `Engine::step_sampled`), and a seed gives the same
//! tokens either way (but where the GPU's f32 sums, exponentials and penalty divisions, which may differ
//! from the CPU's by an ulp or two, and the CPU's f64 sums round a draw to either side of a boundary).

use std::cmp::Ordering;

use diskformer_expert_stream::SeededRng;
use diskformer_kernels::cpu;
pub use diskformer_kernels::{PENALTY_MAX_N, SAMPLE_MAX_K, SampleStep};

/// How to pick the next token. The default is greedy decoding with every filter and penalty off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplingOptions {
    /// Softmax temperature; `0` means greedy argmax, which ignores the filters below.
    pub temperature: f32,
    /// Keep only the `top_k` highest logits; `0` turns it off.
    pub top_k: usize,
    /// Keep the smallest most-likely prefix whose mass reaches `top_p` (nucleus); `1` turns it off.
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` × the most likely one's probability; `0` turns it off.
    pub min_p: f32,
    /// Divides a positive logit (multiplies a non-positive one) of each recent token; `1` turns it off.
    pub repetition_penalty: f32,
    /// Subtracted once from the logit of each distinct recent token; `0` turns it off.
    pub presence_penalty: f32,
    /// Subtracted from the logit of each recent token once for each time it occurs among them; `0` turns
    /// it off.
    pub frequency_penalty: f32,
    /// How many of the most recent tokens the penalties look at; `0` turns them off.
    pub penalty_last_n: usize,
    /// Seed of the sampler's RNG: the same seed and inputs give the same tokens.
    pub seed: u64,
}

impl Default for SamplingOptions {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_last_n: 64,
            seed: 0,
        }
    }
}

impl SamplingOptions {
    /// Greedy decoding, no penalties: the reproducible baseline to compare against llama.cpp.
    pub fn greedy() -> Self {
        Self::default()
    }

    /// Greedy with no penalty: the pick is the logits' argmax, which the GPU can take itself
    /// (the engine's `Engine::step_greedy`, 4 bytes read back instead of the logits; the
    /// two differ only on NaN logits, which the sampler skips).
    pub fn is_plain_greedy(&self) -> bool {
        self.temperature == 0.0
            && self.repetition_penalty == 1.0
            && self.presence_penalty == 0.0
            && self.frequency_penalty == 0.0
    }

    /// Whether the GPU can draw with these options ([`Sampler::gpu_step`]): a temperature above 0, top-k
    /// between 1 and [`SAMPLE_MAX_K`], and a penalty window of at most [`PENALTY_MAX_N`] tokens (the GPU
    /// keeps that many of the recent ones).
    pub fn samples_on_gpu(&self) -> bool {
        self.temperature > 0.0
            && (1..=SAMPLE_MAX_K as usize).contains(&self.top_k)
            && (!self.penalised() || self.penalty_last_n <= PENALTY_MAX_N as usize)
    }

    /// Whether the penalties do anything.
    fn penalised(&self) -> bool {
        self.penalty_last_n > 0
            && (self.repetition_penalty != 1.0
                || self.presence_penalty != 0.0
                || self.frequency_penalty != 0.0)
    }

    /// Checks every field is in range, so a bad request is refused before decoding starts.
    ///
    /// # Errors
    /// A message naming the first bad field and its allowed range.
    pub fn validate(&self) -> Result<(), String> {
        let bad =
            |field: &str, range: &str, value: f32| Err(format!("{field} is {value}; it must be {range}"));
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return bad("temperature", "finite and >= 0 (0 = greedy)", self.temperature);
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p", "in (0, 1] (1 = off)", self.top_p);
        }
        if !(self.min_p >= 0.0 && self.min_p <= 1.0) {
            return bad("min_p", "in [0, 1] (0 = off)", self.min_p);
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return bad("repetition_penalty", "finite and > 0 (1 = off)", self.repetition_penalty);
        }
        if !self.presence_penalty.is_finite() {
            return bad("presence_penalty", "finite (0 = off)", self.presence_penalty);
        }
        if !self.frequency_penalty.is_finite() {
            return bad("frequency_penalty", "finite (0 = off)", self.frequency_penalty);
        }
        Ok(())
    }
}

/// A token sampler with its own RNG and scratch buffers, one per sequence so runs stay reproducible.
#[derive(Clone, Debug)]
pub struct Sampler {
    opts: SamplingOptions,
    rng: SplitMix64,
    logits: Vec<f32>,
    candidates: Vec<(u32, f32)>,
}

impl Sampler {
    /// A sampler for `opts`, which should have passed [`SamplingOptions::validate`].
    pub fn new(opts: SamplingOptions) -> Self {
        debug_assert!(opts.validate().is_ok(), "{:?}", opts.validate());
        Self { opts, rng: SplitMix64::new(opts.seed), logits: vec![], candidates: vec![] }
    }

    /// Picks the next token from `logits` given the recent tokens the penalties look at (`recent`, oldest
    /// first, ending with the token whose step gave `logits`; ids outside the vocabulary are ignored). The
    /// GPU's draw penalises the sequence in the engine's cache (prompt included) and that token: pass the
    /// same to draw the same tokens. NaN logits are never picked.
    ///
    /// # Panics
    /// If `logits` is empty.
    pub fn sample(&mut self, logits: &[f32], recent: &[u32]) -> u32 {
        assert!(!logits.is_empty(), "Sampler::sample: empty logits");
        let o = self.opts;
        let penalised = o.penalised();
        if penalised {
            // One copy of the vocabulary (~600 KB) so penalties never touch the caller's logits.
            self.logits.clear();
            self.logits.extend_from_slice(logits);
            let window = &recent[recent.len().saturating_sub(o.penalty_last_n)..];
            // The GPU's penalty kernel is tested against the same reference.
            let (repetition, presence, frequency) =
                (o.repetition_penalty, o.presence_penalty, o.frequency_penalty);
            cpu::apply_penalties(&mut self.logits, window, repetition, presence, frequency);
        }
        let logits = if penalised { &self.logits[..] } else { logits };
        if o.temperature == 0.0 {
            return argmax(logits);
        }

        // Top-k's candidates are walked in rank order with a 24-bit uniform, as the GPU draws; the uniform
        // is taken before filtering so that every sampled token advances the RNG by one, drawn or not.
        let u = if o.top_k > 0 { f64::from(self.rng.next_f32()) } else { self.rng.next_f64() };
        let c = &mut self.candidates;
        if let Some(id) = filtered(&o, logits, c) {
            return id;
        }
        let total: f64 = c.iter().map(|&(_, w)| f64::from(w)).sum();
        let r = u * total;
        let mut mass = 0.0;
        for &(id, w) in c.iter() {
            mass += f64::from(w);
            if r < mass {
                return id;
            }
        }
        // Only reached when rounding puts `r` at `total`: the last token with any weight.
        c.iter().rev().find(|&&(_, w)| w > 0.0).map_or(c[0].0, |&(id, _)| id)
    }

    /// The options this sampler draws with.
    pub fn options(&self) -> &SamplingOptions {
        &self.opts
    }

    /// The next token's draw for the GPU (the engine's `Engine::step_sampled`), taking
    /// the uniform [`Sampler::sample`] would take; `None` (and nothing taken) where the options need the CPU
    /// ([`SamplingOptions::samples_on_gpu`]).
    pub fn gpu_step(&mut self) -> Option<SampleStep> {
        let step = self.peek_gpu_step()?;
        self.rng.next_u64();
        Some(step)
    }

    /// The draw [`Sampler::gpu_step`] would return now, taking nothing (for a step queued ahead, which may
    /// go unused).
    pub fn peek_gpu_step(&self) -> Option<SampleStep> {
        let o = self.opts;
        o.samples_on_gpu().then(|| SampleStep {
            k: o.top_k as u32,
            temperature: o.temperature,
            top_p: o.top_p,
            min_p: o.min_p,
            u: self.rng.clone().next_f32(),
            repetition_penalty: o.repetition_penalty,
            presence_penalty: o.presence_penalty,
            last_n: if o.penalised() { o.penalty_last_n as u32 } else { 0 },
            frequency_penalty: o.frequency_penalty,
        })
    }
}

/// The candidates a draw picks from, into `c` as `(id, weight)`: top-k, then the temperature's unnormalised
/// probabilities (the most likely token weighs exactly 1), top-p and min-p. With top-k they are in rank order
/// (the highest logit first, ties to the lower id), as the GPU's draw walks them; without, in no particular
/// order. Returns the pick instead where no draw is needed (one candidate, or no finite logit).
fn filtered(o: &SamplingOptions, logits: &[f32], c: &mut Vec<(u32, f32)>) -> Option<u32> {
    let ranked = o.top_k > 0;
    if ranked {
        top_k_candidates(logits, o.top_k, c);
        // Ranked by logit before the weights: two logits can round to one weight.
        c.sort_unstable_by(by_logit_desc);
    } else {
        c.clear();
        c.extend(logits.iter().enumerate().filter(|(_, l)| !l.is_nan()).map(|(i, &l)| (i as u32, l)));
    }
    let max = c.iter().map(|&(_, l)| l).fold(f32::NEG_INFINITY, f32::max);
    if c.len() <= 1 || !max.is_finite() {
        return Some(c.iter().min_by(|a, b| by_logit_desc(a, b)).map_or(0, |&(id, _)| id));
    }
    for (_, l) in c.iter_mut() {
        *l = ((*l - max) / o.temperature).exp();
    }
    if o.top_p < 1.0 {
        let total: f64 = c.iter().map(|&(_, w)| f64::from(w)).sum();
        let target = f64::from(o.top_p) * total;
        let keep = if ranked {
            // Top-k's few candidates in rank order: the nucleus is their shortest prefix reaching it.
            let mut mass = 0.0;
            c.iter()
                .position(|&(_, w)| {
                    mass += f64::from(w);
                    mass >= target
                })
                .map_or(c.len(), |i| i + 1)
        } else {
            // Candidates lighter than (1 - top_p) · total / n cannot be in the nucleus: they rank after
            // every heavier one and together weigh less than the (1 - top_p) · total it leaves out.
            let light = (1.0 - f64::from(o.top_p)) * total / c.len() as f64;
            c.retain(|&(_, w)| f64::from(w) >= light);
            nucleus(c, target)
        };
        c.truncate(keep);
    }
    if o.min_p > 0.0 {
        // The top token is still in `c` with weight 1, so the threshold is `min_p` itself (order kept).
        c.retain(|&(_, w)| w >= o.min_p);
    }
    None
}

/// The `k` best candidates of `logits` by [`by_logit_desc`] (NaN skipped) into `out`, in no particular
/// order, in one pass: candidates collect in a buffer of `2k` (at least `k + 64`) that is cut back to the best
/// `k` whenever it fills; after a cut a logit at or below the `k`-th best cannot make the set (a later tie
/// has a higher id), so it is skipped with one comparison. The same set as a selection over all of them.
fn top_k_candidates(logits: &[f32], k: usize, out: &mut Vec<(u32, f32)>) {
    out.clear();
    let cap = (2 * k).max(k + 64);
    let mut floor: Option<f32> = None;
    for (i, &l) in logits.iter().enumerate() {
        // total_cmp, as the ranking: +0.0 ranks above a floor of -0.0, which `<=` would call equal.
        if l.is_nan() || floor.is_some_and(|f| l.total_cmp(&f).is_le()) {
            continue;
        }
        out.push((i as u32, l));
        if out.len() == cap {
            out.select_nth_unstable_by(k - 1, by_logit_desc);
            out.truncate(k);
            floor = Some(out[k - 1].1);
        }
    }
    if out.len() > k {
        out.select_nth_unstable_by(k - 1, by_logit_desc);
        out.truncate(k);
    }
}

/// Reorders `c` (weights in `.1`) so that its first `n` entries, the returned count, are the nucleus: the
/// smallest run of the highest-ranked candidates ([`by_logit_desc`]) whose weight reaches `target` (all of
/// `c` if none does). Each round selects the better half of the undecided range and keeps it whole (its
/// weight is below what is still needed) or looks only inside it; the last 32 are sorted and walked. About
/// two selections over `c` in all, against a sort of it.
fn nucleus(c: &mut [(u32, f32)], target: f64) -> usize {
    let (mut lo, mut hi, mut need) = (0, c.len(), target);
    while hi - lo > 32 {
        let mid = (hi - lo) / 2;
        c[lo..hi].select_nth_unstable_by(mid, by_logit_desc);
        let upper: f64 = c[lo..=lo + mid].iter().map(|&(_, w)| f64::from(w)).sum();
        if upper >= need {
            hi = lo + mid + 1;
        } else {
            need -= upper;
            lo += mid + 1;
        }
    }
    c[lo..hi].sort_unstable_by(by_logit_desc);
    let mut mass = 0.0;
    for (i, &(_, w)) in c[lo..hi].iter().enumerate() {
        mass += f64::from(w);
        if mass >= need {
            return lo + i + 1;
        }
    }
    hi
}

/// Natural-log probabilities of `logits`, computed as `x - max - ln Σ exp(x - max)` with an f64 sum so
/// logits of 1e4 neither overflow nor lose the small terms. Used to report log-probabilities.
pub fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let max = f64::from(logits.iter().copied().filter(|l| !l.is_nan()).fold(f32::NEG_INFINITY, f32::max));
    let sum: f64 = logits.iter().filter(|l| !l.is_nan()).map(|&l| (f64::from(l) - max).exp()).sum();
    let lse = max + sum.ln();
    logits.iter().map(|&l| (f64::from(l) - lse) as f32).collect()
}

/// The `n` highest `(id, logit)` pairs, highest first with ties to the lower id, NaN skipped: what the
/// engine reports as the top-n alternatives of a step (feed it [`log_softmax`] output for log-probs).
pub fn top_n(logits: &[f32], n: usize) -> Vec<(u32, f32)> {
    let mut c = Vec::new();
    if n > 0 {
        top_k_candidates(logits, n, &mut c);
        c.sort_unstable_by(by_logit_desc);
    }
    c
}

/// Highest logit first, ties to the lower id: a total order on NaN-free candidates, so results never depend
/// on the unstable sort's choices.
fn by_logit_desc(a: &(u32, f32), b: &(u32, f32)) -> Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// Index of the highest non-NaN logit, the lowest index on ties (0 when every logit is NaN).
fn argmax(logits: &[f32]) -> u32 {
    let mut best = (0, f32::NEG_INFINITY);
    for (i, &l) in logits.iter().enumerate() {
        if l > best.1 {
            best = (i, l);
        }
    }
    best.0 as u32
}

/// SplitMix64 (Steele, Lea & Flood 2014; constants from <https://prng.di.unimi.it/splitmix64.c>): one u64 of
/// state, passes BigCrush, plenty for drawing tokens, and reproducible without a crate.
/// The expert-stream crate's [`SeededRng`] is that generator; this adds the draws sampling makes.
#[derive(Clone, Debug)]
struct SplitMix64(SeededRng);

impl SplitMix64 {
    fn new(seed: u64) -> Self {
        SplitMix64(SeededRng::new(seed))
    }

    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in [0, 1) from the top 53 bits.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, 1) from the top 24 bits: exact in an f32 (so never rounded up to 1), as the GPU's
    /// draw takes it.
    fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u32 << 24) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(temperature: f32, seed: u64) -> SamplingOptions {
        SamplingOptions { temperature, seed, ..SamplingOptions::default() }
    }

    /// Seeded logits in [-4, 4), never zeros.
    fn random_logits(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = SplitMix64::new(seed);
        (0..n).map(|_| (rng.next_f64() * 8.0 - 4.0) as f32).collect()
    }

    fn draws(o: SamplingOptions, logits: &[f32], n: usize) -> Vec<u32> {
        let mut s = Sampler::new(o);
        (0..n).map(|_| s.sample(logits, &[])).collect()
    }

    #[test]
    fn greedy_picks_argmax_lowest_index_on_ties_and_skips_nan() {
        let mut s = Sampler::new(SamplingOptions::greedy());
        assert_eq!(s.sample(&[0.1, 3.0, -2.0, 1.0], &[]), 1);
        assert_eq!(s.sample(&[1.0, 5.0, 2.0, 5.0, 5.0], &[]), 1);
        assert_eq!(s.sample(&[f32::NAN, -1.0, f32::NAN, 0.5], &[]), 3);
    }

    #[test]
    fn plain_greedy_is_temperature_zero_without_penalties() {
        assert!(SamplingOptions::greedy().is_plain_greedy());
        // Filters do not matter at temperature 0; penalties and a temperature do.
        assert!(SamplingOptions { top_k: 5, top_p: 0.5, ..SamplingOptions::greedy() }.is_plain_greedy());
        assert!(!SamplingOptions { temperature: 0.6, ..SamplingOptions::greedy() }.is_plain_greedy());
        assert!(!SamplingOptions { repetition_penalty: 1.1, ..SamplingOptions::greedy() }.is_plain_greedy());
        assert!(!SamplingOptions { presence_penalty: 0.5, ..SamplingOptions::greedy() }.is_plain_greedy());
    }

    #[test]
    fn top_k_one_equals_greedy_at_any_temperature() {
        for seed in 0..20 {
            let mut logits = random_logits(1000, seed);
            logits[700] = logits.iter().copied().fold(f32::MIN, f32::max); // a tie with a lower index
            let greedy = Sampler::new(SamplingOptions::greedy()).sample(&logits, &[]);
            for t in [0.01, 0.7, 1.0, 5.0, 100.0] {
                let o = SamplingOptions { top_k: 1, ..opts(t, seed) };
                assert_eq!(Sampler::new(o).sample(&logits, &[]), greedy, "seed {seed} temperature {t}");
            }
        }
    }

    #[test]
    fn same_seed_same_sequence_different_seeds_differ() {
        let logits = random_logits(500, 1);
        let o = SamplingOptions { top_k: 100, top_p: 0.95, min_p: 0.01, ..opts(1.0, 42) };
        let a = draws(o, &logits, 500);
        assert_eq!(a, draws(o, &logits, 500));
        let b = draws(SamplingOptions { seed: 43, ..o }, &logits, 500);
        assert!(a.iter().zip(&b).filter(|(x, y)| x != y).count() > 250);
    }

    #[test]
    fn temperature_sampling_matches_softmax() {
        let logits = [1.0f32, 0.5, 0.0, -1.0, 2.0];
        let t = 0.7;
        let n = 20_000;
        let mut counts = [0usize; 5];
        for id in draws(opts(t, 7), &logits, n) {
            counts[id as usize] += 1;
        }
        let z: f64 = logits.iter().map(|&l| (f64::from(l) / f64::from(t)).exp()).sum();
        let chi2: f64 = logits
            .iter()
            .zip(counts)
            .map(|(&l, c)| {
                let expected = n as f64 * (f64::from(l) / f64::from(t)).exp() / z;
                (c as f64 - expected).powi(2) / expected
            })
            .sum();
        // 4 degrees of freedom: a fair sampler exceeds 18.47 with probability 0.001 (the seed is fixed, so
        // the test is deterministic); a wrong temperature or off-by-one bucket gives chi² in the hundreds.
        assert!(chi2 < 18.47, "chi² {chi2}, counts {counts:?}");
    }

    #[test]
    fn top_p_and_min_p_never_return_excluded_tokens() {
        // Softmax at T=1 of {3, 2, 1, 0} = {0.644, 0.237, 0.087, 0.032}, ids scattered among -inf-like logits.
        let mut logits = vec![-30.0f32; 64];
        for (id, l) in [(40, 3.0), (5, 2.0), (17, 1.0), (60, 0.0)] {
            logits[id] = l;
        }
        // top_p 0.8: 0.644 < 0.8 <= 0.881, so {40, 5}. min_p 0.3: e^-1 = 0.37 stays, e^-2 = 0.14 goes.
        for o in
            [SamplingOptions { top_p: 0.8, ..opts(1.0, 3) }, SamplingOptions { min_p: 0.3, ..opts(1.0, 3) }]
        {
            let got = draws(o, &logits, 4000);
            assert!(got.iter().all(|&id| id == 40 || id == 5), "{o:?}");
            assert!(got.contains(&40) && got.contains(&5), "{o:?}");
        }
    }

    #[test]
    fn penalties_change_greedy_choice() {
        let o = SamplingOptions { repetition_penalty: 1.2, ..SamplingOptions::greedy() };
        // Positive logit divided: 2.0 / 1.2 = 1.67 < 1.9.
        assert_eq!(Sampler::new(o).sample(&[2.0, 1.9, -0.5], &[0]), 1);
        // Negative logit multiplied: -1.0 * 1.2 = -1.2 < -1.1.
        assert_eq!(Sampler::new(o).sample(&[-1.0, -1.1], &[0]), 1);
        // Token 0 is outside the window of the last 1 token, so it keeps its lead.
        let o = SamplingOptions { penalty_last_n: 1, ..o };
        assert_eq!(Sampler::new(o).sample(&[2.0, 1.9, -0.5], &[0, 2]), 0);
        // Presence subtracts once per distinct token, not once per occurrence.
        let o = SamplingOptions { presence_penalty: 0.6, ..SamplingOptions::greedy() };
        assert_eq!(Sampler::new(o).sample(&[2.0, 1.5], &[0, 0, 0]), 1); // 1.4 < 1.5
        assert_eq!(Sampler::new(o).sample(&[2.0, 0.9], &[0, 0, 0]), 0); // 1.4, not 2.0 - 3 × 0.6
        // Frequency subtracts once per occurrence, after presence.
        let o =
            SamplingOptions { frequency_penalty: 0.3, presence_penalty: 0.1, ..SamplingOptions::greedy() };
        assert_eq!(Sampler::new(o).sample(&[2.0, 1.05], &[0, 0, 0]), 1); // 2.0 - 0.1 - 0.9 = 1.0
        assert_eq!(Sampler::new(o).sample(&[2.0, 1.05], &[0, 1, 0]), 0); // 1.3 against 1.05 - 0.4
        assert!(!o.is_plain_greedy());
    }

    #[test]
    fn validate_rejects_each_bad_field() {
        assert!(SamplingOptions::default().validate().is_ok());
        let d = SamplingOptions::default;
        let cases = [
            ("temperature", SamplingOptions { temperature: -0.1, ..d() }),
            ("temperature", SamplingOptions { temperature: f32::INFINITY, ..d() }),
            ("top_p", SamplingOptions { top_p: 0.0, ..d() }),
            ("top_p", SamplingOptions { top_p: 1.5, ..d() }),
            ("top_p", SamplingOptions { top_p: f32::NAN, ..d() }),
            ("min_p", SamplingOptions { min_p: -0.1, ..d() }),
            ("min_p", SamplingOptions { min_p: 1.1, ..d() }),
            ("repetition_penalty", SamplingOptions { repetition_penalty: 0.0, ..d() }),
            ("repetition_penalty", SamplingOptions { repetition_penalty: f32::NAN, ..d() }),
            ("presence_penalty", SamplingOptions { presence_penalty: f32::NEG_INFINITY, ..d() }),
            ("frequency_penalty", SamplingOptions { frequency_penalty: f32::NAN, ..d() }),
        ];
        for (field, o) in cases {
            let err = o.validate().unwrap_err();
            assert!(err.starts_with(field), "{field}: {err}");
        }
    }

    #[test]
    fn log_softmax_normalises_and_is_stable() {
        let lp = log_softmax(&random_logits(1000, 9));
        let sum: f64 = lp.iter().map(|&l| f64::from(l).exp()).sum();
        assert!((sum - 1.0).abs() < 1e-5, "{sum}");
        let lp = log_softmax(&[1e4, 1e4 - 1.0, 0.0]);
        let expected = -(1.0 + (-1.0f64).exp()).ln(); // -0.3133
        assert!((f64::from(lp[0]) - expected).abs() < 1e-6, "{lp:?}");
        assert!((f64::from(lp[1]) - (expected - 1.0)).abs() < 1e-6, "{lp:?}");
        assert!(lp[2].is_finite() && lp[2] < -9000.0, "{lp:?}");
    }

    /// Seeded logits with many ties (a few dozen distinct values), NaN and -inf among them.
    fn tied_logits(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = SplitMix64::new(seed);
        (0..n)
            .map(|_| match rng.next_u64() % 50 {
                0 => f32::NAN,
                1 => f32::NEG_INFINITY,
                v => (v as f32 - 25.0) / 4.0,
            })
            .collect()
    }

    /// The definitions the fast paths must meet: every non-NaN candidate sorted best first.
    fn sorted_candidates(logits: &[f32]) -> Vec<(u32, f32)> {
        let mut c: Vec<(u32, f32)> =
            logits.iter().enumerate().filter(|(_, l)| !l.is_nan()).map(|(i, &l)| (i as u32, l)).collect();
        c.sort_unstable_by(by_logit_desc);
        c
    }

    #[test]
    fn top_k_candidates_is_the_best_k_of_a_sort() {
        for (seed, n) in [(1, 10), (2, 500), (3, 5000), (4, 151_936)] {
            let logits = tied_logits(n, seed);
            let sorted = sorted_candidates(&logits);
            for k in [1, 2, 20, 64, 100, 1000, n + 5] {
                let mut got = Vec::new();
                top_k_candidates(&logits, k, &mut got);
                got.sort_unstable_by(by_logit_desc);
                let want = &sorted[..k.min(sorted.len())];
                let same = got.len() == want.len()
                    && got.iter().zip(want).all(|(a, b)| a.0 == b.0 && a.1.to_bits() == b.1.to_bits());
                assert!(same, "n {n} k {k}");
            }
        }
        // Signed zeros rank as total_cmp ranks them: after a cut at -0.0, a +0.0 still enters.
        let mut zeros = vec![-0.0f32; 200];
        zeros[150] = 0.0;
        let mut got = Vec::new();
        top_k_candidates(&zeros, 1, &mut got);
        assert_eq!(got, vec![(150, 0.0)]);
        // Only -inf and NaN: the -inf ones are still candidates (greedy on them picks the lowest id).
        let mut got = Vec::new();
        top_k_candidates(&[f32::NAN, f32::NEG_INFINITY, f32::NEG_INFINITY], 1, &mut got);
        assert_eq!(got, vec![(1, f32::NEG_INFINITY)]);
    }

    #[test]
    fn nucleus_is_the_shortest_sorted_prefix_reaching_the_target() {
        for (seed, n) in [(5, 3), (6, 40), (7, 1000), (8, 151_936)] {
            // Weights as the sampler makes them (the best weighs 1), with ties and zeros.
            let mut c: Vec<(u32, f32)> = tied_logits(n, seed)
                .iter()
                .enumerate()
                .filter(|(_, l)| !l.is_nan())
                .map(|(i, &l)| (i as u32, ((l - 6.0) / 0.7).exp()))
                .collect();
            let mut sorted = c.clone();
            sorted.sort_unstable_by(by_logit_desc);
            let total: f64 = sorted.iter().map(|&(_, w)| f64::from(w)).sum();
            // The sampler's top_p lies in (0, 1).
            for p in [1e-9, 0.1, 0.5, 0.9, 0.95, 0.999] {
                let target = p * total;
                let mut mass = 0.0;
                let want = sorted
                    .iter()
                    .position(|&(_, w)| {
                        mass += f64::from(w);
                        mass >= target
                    })
                    .map_or(sorted.len(), |i| i + 1);
                let keep = nucleus(&mut c, target);
                // What is kept is a best-first prefix, of the shortest length reaching the target; a target
                // within rounding of a prefix sum may move it by one (the sums run in another order).
                let ids = |c: &[(u32, f32)]| {
                    let mut v: Vec<u32> = c.iter().map(|&(id, _)| id).collect();
                    v.sort_unstable();
                    v
                };
                assert_eq!(ids(&c[..keep]), ids(&sorted[..keep]), "n {n} p {p}: not a best-first prefix");
                let at_boundary = keep.abs_diff(want) == 1
                    && (sorted[..keep.min(want)].iter().map(|&(_, w)| f64::from(w)).sum::<f64>() - target)
                        .abs()
                        < 1e-9 * total;
                assert!(keep == want || at_boundary, "n {n} p {p}: kept {keep}, want {want}");
            }
        }
    }

    /// The filters as written down: sort every candidate, cut to top-k, weigh, keep the shortest prefix
    /// reaching top_p of the mass, drop what min_p drops.
    fn filtered_by_sorting(o: &SamplingOptions, logits: &[f32]) -> (Vec<(u32, f32)>, f64, f64) {
        let mut c = sorted_candidates(logits);
        if o.top_k > 0 {
            c.truncate(o.top_k);
        }
        let max = c[0].1;
        for (_, l) in c.iter_mut() {
            *l = ((*l - max) / o.temperature).exp();
        }
        let total: f64 = c.iter().map(|&(_, w)| f64::from(w)).sum();
        let target = f64::from(o.top_p) * total;
        if o.top_p < 1.0 {
            let mut mass = 0.0;
            let keep = c.iter().position(|&(_, w)| {
                mass += f64::from(w);
                mass >= target
            });
            c.truncate(keep.map_or(c.len(), |i| i + 1));
        }
        c.retain(|&(_, w)| w >= o.min_p);
        (c, target, total)
    }

    #[test]
    fn filtered_keeps_what_sorting_keeps() {
        // And one heavy token before 10,000 light ones that weigh as much together: at top_p 0.9 the nucleus
        // takes 8,000 of the light ones, each within 5x of the lightness bound top-p prunes below.
        let mut head_tail = vec![-(1e4f32).ln(); 10_001];
        head_tail[5_000] = 0.0;
        let cases = [tied_logits(50, 21), tied_logits(3000, 22), tied_logits(151_936, 23), head_tail];
        for logits in cases {
            let n = logits.len();
            for (top_k, top_p, min_p, t) in [
                (0, 0.9, 0.0, 0.6),
                (0, 0.9, 0.0, 1.0),
                (0, 0.5, 0.0, 1.0),
                (20, 0.95, 0.0, 0.6),
                (0, 0.99, 0.05, 2.0),
                (7, 1.0, 0.2, 0.3),
            ] {
                let o = SamplingOptions { temperature: t, top_k, top_p, min_p, ..SamplingOptions::default() };
                let mut c = Vec::new();
                assert_eq!(filtered(&o, &logits, &mut c), None);
                let (want, target, total) = filtered_by_sorting(&o, &logits);
                let ids = |c: &[(u32, f32)]| {
                    let mut v: Vec<u32> = c.iter().map(|&(id, _)| id).collect();
                    v.sort_unstable();
                    v
                };
                // A target within rounding of a prefix sum may move the nucleus's end by one.
                let prefix: f64 = want.iter().map(|&(_, w)| f64::from(w)).sum();
                let at_boundary = c.len().abs_diff(want.len()) == 1 && (prefix - target).abs() < 1e-9 * total;
                assert!(
                    ids(&c) == ids(&want) || at_boundary,
                    "n {n} {o:?}: kept {}, want {}",
                    c.len(),
                    want.len()
                );
            }
        }
    }

    #[test]
    fn top_n_is_highest_first_ties_to_lower_id() {
        let logits = [0.5, 2.0, f32::NAN, 2.0, -1.0, 1.0];
        assert_eq!(top_n(&logits, 3), vec![(1, 2.0), (3, 2.0), (5, 1.0)]);
        assert_eq!(top_n(&logits, 10).len(), 5);
        assert!(top_n(&logits, 0).is_empty());
    }

    #[test]
    fn top_k_draws_are_the_gpu_samplers() {
        // Sampler::sample against gpu_step + the CPU reference the GPU kernel is tested against: the same
        // uniforms, the same candidates walked in the same order, token for token (one candidate or top-k 1
        // included: the uniform is taken all the same).
        let cases = [
            SamplingOptions { temperature: 0.6, top_k: 20, top_p: 0.95, ..opts(0.6, 7) },
            SamplingOptions { temperature: 1.0, top_k: 64, ..opts(1.0, 8) },
            SamplingOptions { temperature: 1.5, top_k: 40, top_p: 0.5, ..opts(1.5, 9) },
            SamplingOptions { temperature: 0.8, top_k: 30, min_p: 0.2, ..opts(0.8, 10) },
            SamplingOptions { temperature: 0.7, top_k: 1, ..opts(0.7, 11) },
        ];
        for o in cases {
            assert!(o.samples_on_gpu(), "{o:?}");
            let (mut on_cpu, mut for_gpu) = (Sampler::new(o), Sampler::new(o));
            for t in 0..40 {
                let logits = random_logits(3000, o.seed * 100 + t);
                let step = for_gpu.gpu_step().expect("options the GPU takes");
                let want = cpu::sample_top_k(&logits, &step);
                assert_eq!(on_cpu.sample(&logits, &[]), want, "{o:?} token {t}");
            }
        }
    }

    #[test]
    fn top_k_ranks_by_logit_where_weights_tie() {
        // 0.3 and the next float up weigh the same after exp((l - 4) / 1) in f32: ranked by weight then id,
        // 0 would come before 1; the GPU (and its reference) rank by logit, 1 first. About 1 uniform in 40
        // falls between the two orders.
        let logits = [0.3f32, f32::from_bits(0.3f32.to_bits() + 1), 4.0];
        assert_eq!(((logits[0] - 4.0) / 1.0).exp(), ((logits[1] - 4.0) / 1.0).exp());
        for seed in 0..400 {
            let o = SamplingOptions { temperature: 1.0, top_k: 3, ..opts(1.0, seed) };
            let step = Sampler::new(o).gpu_step().unwrap();
            let want = cpu::sample_top_k(&logits, &step);
            assert_eq!(Sampler::new(o).sample(&logits, &[]), want, "seed {seed}, u {}", step.u);
        }
    }

    #[test]
    fn the_gpu_draws_only_with_a_small_top_k_and_penalty_window() {
        let base = SamplingOptions { temperature: 0.6, top_k: 20, ..opts(0.6, 1) };
        assert!(base.samples_on_gpu());
        let window = PENALTY_MAX_N as usize;
        assert!(SamplingOptions { repetition_penalty: 1.1, penalty_last_n: window, ..base }.samples_on_gpu());
        // A long window with no penalty is no window.
        assert!(SamplingOptions { penalty_last_n: window + 1, ..base }.samples_on_gpu());
        for o in [
            SamplingOptions { temperature: 0.0, ..base },
            SamplingOptions { top_k: 0, ..base },
            SamplingOptions { top_k: SAMPLE_MAX_K as usize + 1, ..base },
            SamplingOptions { repetition_penalty: 1.1, penalty_last_n: window + 1, ..base },
        ] {
            assert!(!o.samples_on_gpu(), "{o:?}");
            // Nothing taken from the RNG: the CPU's draws are as if gpu_step was never called.
            let mut s = Sampler::new(o);
            assert_eq!(s.gpu_step(), None);
            let logits = random_logits(500, 3);
            assert_eq!(s.sample(&logits, &[]), Sampler::new(o).sample(&logits, &[]), "{o:?}");
        }
    }

    #[test]
    fn penalised_draws_are_the_gpu_samplers() {
        // The GPU applies the penalties to the window (the last penalty_last_n tokens), then draws: the CPU
        // sampler given the same recent tokens picks the same, token for token.
        let o = SamplingOptions {
            temperature: 0.9,
            top_k: 30,
            top_p: 0.9,
            repetition_penalty: 1.4,
            presence_penalty: 0.7,
            frequency_penalty: 0.2,
            penalty_last_n: 48,
            ..opts(0.9, 21)
        };
        let (mut on_cpu, mut for_gpu) = (Sampler::new(o), Sampler::new(o));
        let mut rng = SplitMix64::new(5);
        for t in 0..40 {
            let logits = random_logits(300, 500 + t);
            // Recent tokens drawn from the likeliest ids, so that the penalties change the draw.
            let recent: Vec<u32> = (0..90).map(|_| (rng.next_u64() % 40) as u32).collect();
            let step = for_gpu.gpu_step().expect("options the GPU takes");
            assert_eq!(step.last_n, 48);
            let mut penalised = logits.clone();
            let window = &recent[recent.len() - 48..];
            cpu::apply_penalties(&mut penalised, window, 1.4, 0.7, 0.2);
            let want = cpu::sample_top_k(&penalised, &step);
            assert_eq!(on_cpu.sample(&logits, &recent), want, "token {t}");
        }
    }
}
