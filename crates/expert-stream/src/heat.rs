//! Decayed heat kept as a time-invariant score, so eviction order can live in an ordered set.
//!
//! A key's heat at tick `t` is `Σ dᵗ⁻ᵗⁱ` over the ticks `tᵢ` it was touched, with `d = 0.5^(1/h)` for a
//! half-life of `h` ticks. Every heat decays by the same factor per tick, so the order of two keys never
//! changes between touches. Storing `score = ln(heat at its last touch) + last × λ` with `λ = −ln d` makes
//! that order a plain number comparison: `score_a < score_b` exactly when `heat_a(t) < heat_b(t)` for every
//! `t`.

use std::cmp::Ordering;

/// The decay clock of one pool.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeatClock {
    /// `−ln d` per tick; 0 for LFU (no decay).
    lambda: f64,
}

impl HeatClock {
    /// A clock whose heat halves every `half_life_ticks` ticks (`f64::INFINITY`: never).
    pub(crate) fn new(half_life_ticks: f64) -> Self {
        let lambda = if half_life_ticks.is_finite() { std::f64::consts::LN_2 / half_life_ticks } else { 0.0 };
        Self { lambda }
    }

    /// The score after touching a key with score `score` (`None`: never touched) at tick `now`.
    pub(crate) fn touch(self, score: Option<Score>, now: u64) -> Score {
        let shift = now as f64 * self.lambda;
        // Heat now = exp(score − now·λ) ≤ 1/(1 − d), so the exponent never overflows.
        let heat = score.map_or(0.0, |s| (s.0 - shift).exp());
        Score((heat + 1.0).ln() + shift)
    }
}

/// A time-invariant heat score; `Score::COLD` for keys never touched.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Score(pub(crate) f64);

impl Score {
    /// The score of a key never touched (heat 0).
    pub(crate) const COLD: Self = Self(f64::NEG_INFINITY);
}

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_touch_halves_after_one_half_life() {
        let clock = HeatClock::new(10.0);
        let a = clock.touch(None, 0);
        let b = clock.touch(None, 10);
        // a touched once at 0 is worth half of b touched once at 10; a touched twice at 0 equals b.
        let a2 = clock.touch(Some(a), 0);
        assert!(a < b);
        assert!((a2.0 - b.0).abs() < 1e-12, "{a2:?} vs {b:?}");
    }

    #[test]
    fn lfu_counts() {
        let clock = HeatClock::new(f64::INFINITY);
        let mut s = None;
        for t in 0..5 {
            s = Some(clock.touch(s, t * 1000));
        }
        assert!((s.unwrap().0.exp() - 5.0).abs() < 1e-12);
        assert!(Score::COLD < s.unwrap());
    }
}
