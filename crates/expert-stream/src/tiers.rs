//! Where each of a layer's picks runs when experts may be computed on the host: a pick the pool holds
//! runs on the GPU; a miss is computed on the CPU from host memory (its record mapped from the page cache),
//! which reads its 5 MB at memory speed where an upload would move it over PCIe before the layer could
//! go on; and a miss seen again soon is also uploaded in the background, to be a hit next time.
//!
//! Reuse is the evidence: a trained router's picks repeat within a few tokens (ROUTING.md: 45 % at the
//! next token, 80 % within 8), a uniform one's rarely, so admitting only an expert that was already
//! picked within [`TierConfig::reuse_window`] tokens (a doorkeeper, as TinyLFU's) spends uploads where
//! they pay. [`TierConfig::max_admit`] caps a layer's admissions, and the engine admits only while the
//! upload path is idle, so background uploads never queue up behind each other.
//!
//! Where the pool has a host arena (every record in host memory the GPU's kernels read over the bus), a
//! miss may also run on the GPU straight from there ([`Tier::Arena`]): the bus and the host's own memory
//! are two paths out of host memory that can work at once, so a layer's misses are shared between them as
//! [`ArenaShare`] says, in proportion to each side's measured time a record, so that both finish together,
//! corrected by which side did finish first.

use std::time::Duration;

use crate::{Error, ExpertKey, Result};

/// Where a pick runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// The pool holds it: the GPU computes it.
    Gpu,
    /// The host computes it from its record in host memory.
    Cpu,
    /// The GPU computes it, reading its record from the pool's host arena over the bus.
    Arena,
}

/// The rules' knobs. The default admits a miss picked at the token before, one a layer: under uniform
/// routing on the H200 every admission slowed decode (BENCHMARKS.md), and a trained router repeats 45 %
/// of its picks at the next token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TierConfig {
    /// A CPU pick is admitted into the pool when the same expert was picked within this many tokens
    /// before (0: never admit).
    pub reuse_window: u32,
    /// At most this many admissions a layer a token.
    pub max_admit: usize,
}

impl Default for TierConfig {
    fn default() -> Self {
        TierConfig { reuse_window: 1, max_admit: 1 }
    }
}

/// One layer's decision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LayerPlan {
    /// Per pick, in pick order.
    pub tiers: Vec<Tier>,
    /// Experts to upload in the background, in pick order (a subset of the misses).
    pub admit: Vec<u32>,
}

impl LayerPlan {
    /// Indices of the picks the CPU computes.
    pub fn cpu_picks(&self) -> impl Iterator<Item = usize> + '_ {
        self.tiers.iter().enumerate().filter(|(_, t)| **t == Tier::Cpu).map(|(i, _)| i)
    }
}

/// The per-token state of the rules: when each expert was last picked.
#[derive(Clone, Debug)]
pub struct TierPolicy {
    config: TierConfig,
    experts: u32,
    layers: u32,
    /// Per (layer, expert): 1 + the token it was last picked at (0: never).
    last_seen: Vec<u64>,
    /// Tokens planned so far.
    token: u64,
    /// With a host arena: how the misses are shared between the CPU and the GPU reading the arena.
    arena: Option<ArenaShare>,
}

impl TierPolicy {
    /// Rules for a model of `layers` × `experts`.
    pub fn new(config: TierConfig, layers: u32, experts: u32) -> Self {
        TierPolicy {
            config,
            experts,
            layers,
            last_seen: vec![0; layers as usize * experts as usize],
            token: 0,
            arena: None,
        }
    }

    /// Shares the misses from now on with the GPU reading them from a host arena, as `share` says.
    pub fn share_with_arena(&mut self, share: ArenaShare) {
        self.arena = Some(share);
    }

    /// The arena's share, when there is one.
    pub fn arena(&self) -> Option<&ArenaShare> {
        self.arena.as_ref()
    }

    /// Counts a layer's CPU work: `records` computed in `took` (the arena's share follows it).
    pub fn observe_cpu(&mut self, records: usize, took: Duration) {
        if let Some(arena) = self.arena.as_mut() {
            arena.observe_cpu(records, took);
        }
    }

    /// Counts which side of a layer with both finished first (see [`ArenaShare::observe_finish`]).
    pub fn observe_finish(&mut self, gpu_first: bool) {
        if let Some(arena) = self.arena.as_mut() {
            arena.observe_finish(gpu_first);
        }
    }

    /// The knobs.
    pub fn config(&self) -> TierConfig {
        self.config
    }

    /// Starts the next token (picks of the same token are not reuse of each other).
    pub fn next_token(&mut self) {
        self.token += 1;
    }

    /// Plans `layer`'s `picks` of this token: `resident(id)` says whether the pool holds expert `id` ready,
    /// `may_admit` whether the upload path is idle enough to take admissions now.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for a layer or expert past the model (nothing is recorded then).
    pub fn plan(
        &mut self,
        layer: u32,
        picks: &[u32],
        may_admit: bool,
        resident: impl Fn(u32) -> bool,
    ) -> Result<LayerPlan> {
        if let Some(&id) =
            picks.iter().find(|&&id| id >= self.experts).or((layer >= self.layers).then_some(&0))
        {
            let key = ExpertKey::new(layer, id);
            return Err(Error::OutOfRange { key, layers: self.layers, experts: self.experts });
        }
        let base = (layer * self.experts) as usize;
        let mut plan = LayerPlan::default();
        for &id in picks {
            let seen = &mut self.last_seen[base + id as usize];
            let tier = if resident(id) { Tier::Gpu } else { Tier::Cpu };
            let ago = (self.token + 1).wrapping_sub(*seen);
            let reused = *seen != 0 && (1..=u64::from(self.config.reuse_window)).contains(&ago);
            if tier == Tier::Cpu && reused && may_admit && plan.admit.len() < self.config.max_admit {
                plan.admit.push(id);
            }
            *seen = self.token + 1;
            plan.tiers.push(tier);
        }
        if let Some(arena) = self.arena.as_mut() {
            let misses = plan.tiers.iter().filter(|&&t| t == Tier::Cpu).count();
            let to_arena = arena.count(misses);
            plan.tiers.iter_mut().filter(|t| **t == Tier::Cpu).take(to_arena).for_each(|t| *t = Tier::Arena);
        }
        Ok(plan)
    }
}

/// How many of a layer's misses the GPU takes from the host arena, the rest computed on the CPU: the
/// fraction that ends both sides together. The rates give a first estimate, `cpu / (cpu + bus)` of them for
/// times a record `cpu` (the CPU tier's, a running mean of its layers; the bus's until one is measured)
/// and `bus` (measured once); but the GPU also runs the layer's hits, and each side has costs a record's
/// time leaves out, so each layer's outcome moves a correction a step toward the side that finished last
/// ([`ArenaShare::observe_finish`]): the fraction settles where each finishes first half the time. A
/// layer's count is rounded down with the remainder carried to the next, so that over many layers the
/// counts add up to the fraction.
#[derive(Clone, Debug)]
pub struct ArenaShare {
    bus: f64,
    cpu: Option<f64>,
    /// Added to the rates' fraction: the outcomes' correction, kept within 0..=1 of the sum.
    correction: f64,
    carry: f64,
    /// A fraction asked for instead of the rates' ([`ArenaShare::fixed`]).
    fixed: Option<f64>,
}

/// The weight of a layer's newest time in the running mean of the CPU's.
const CPU_MEAN_WEIGHT: f64 = 1.0 / 16.0;

/// How far one layer's outcome moves the fraction: across half its range in a 48-layer token.
const FINISH_STEP: f64 = 0.01;

impl ArenaShare {
    /// The share for a bus that carries a record in `bus`.
    pub fn new(bus: Duration) -> Self {
        ArenaShare { bus: bus.as_secs_f64().max(1e-9), cpu: None, correction: 0.0, carry: 0.0, fixed: None }
    }

    /// A share of `fraction` (clamped to 0..=1) whatever the rates: to measure the rule against.
    pub fn fixed(fraction: f64) -> Self {
        ArenaShare { fixed: Some(fraction.clamp(0.0, 1.0)), ..Self::new(Duration::from_secs(1)) }
    }

    /// The fraction of the misses the GPU takes from the arena.
    pub fn fraction(&self) -> f64 {
        if let Some(fixed) = self.fixed {
            return fixed;
        }
        (self.rates_fraction() + self.correction).clamp(0.0, 1.0)
    }

    /// The fraction the rates alone give.
    fn rates_fraction(&self) -> f64 {
        let cpu = self.cpu.unwrap_or(self.bus);
        cpu / (cpu + self.bus)
    }

    /// The times a record the rates' fraction comes from: the bus's (as probed) and the CPU's (its running
    /// mean, once measured); none for a fixed share.
    pub fn times_per_record(&self) -> Option<(Duration, Option<Duration>)> {
        let cpu = self.cpu.map(Duration::from_secs_f64);
        self.fixed.is_none().then(|| (Duration::from_secs_f64(self.bus), cpu))
    }

    /// Whether [`observe_finish`](Self::observe_finish) moves the fraction (not for a fixed share).
    pub fn follows_outcomes(&self) -> bool {
        self.fixed.is_none()
    }

    /// Counts a layer whose GPU work (its hits and arena picks) finished before the CPU's (`gpu_first`),
    /// or after it: the next layers give the arena a step more of the misses, or a step less. Nothing for a
    /// fixed share.
    pub fn observe_finish(&mut self, gpu_first: bool) {
        if !self.follows_outcomes() {
            return;
        }
        let rates = self.rates_fraction();
        let step = if gpu_first { FINISH_STEP } else { -FINISH_STEP };
        self.correction = (self.correction + step).clamp(-rates, 1.0 - rates);
    }

    /// How many of a layer's `misses` go to the arena.
    pub fn count(&mut self, misses: usize) -> usize {
        let want = misses as f64 * self.fraction() + self.carry;
        let n = (want.floor().max(0.0) as usize).min(misses);
        self.carry = (want - n as f64).clamp(0.0, 1.0);
        n
    }

    /// Counts `records` computed on the CPU in `took`.
    pub fn observe_cpu(&mut self, records: usize, took: Duration) {
        if records == 0 {
            return;
        }
        let per = took.as_secs_f64() / records as f64;
        self.cpu = Some(self.cpu.map_or(per, |c| c + (per - c) * CPU_MEAN_WEIGHT));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    /// The rules as written down: a map of last sightings, checked pick by pick.
    fn model(config: TierConfig, steps: &[(u32, Vec<u32>, bool, Vec<u32>)]) -> Vec<LayerPlan> {
        let mut last: HashMap<(u32, u32), u64> = HashMap::new();
        let mut token = 0u64;
        let mut plans = Vec::new();
        for (layer, picks, may_admit, resident) in steps {
            if *layer == 0 && !plans.is_empty() {
                token += 1;
            }
            let mut plan = LayerPlan::default();
            for &id in picks {
                let gpu = resident.contains(&id);
                let reused = last
                    .get(&(*layer, id))
                    .is_some_and(|&t| (1..=u64::from(config.reuse_window)).contains(&(token - t)));
                if !gpu && reused && *may_admit && plan.admit.len() < config.max_admit {
                    plan.admit.push(id);
                }
                last.insert((*layer, id), token);
                plan.tiers.push(if gpu { Tier::Gpu } else { Tier::Cpu });
            }
            plans.push(plan);
        }
        plans
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn plans_follow_the_rules(
            window in 0u32..6,
            max_admit in 0usize..4,
            tokens in proptest::collection::vec(
                proptest::collection::vec(
                    (proptest::collection::btree_set(0u32..12, 1..5), any::<bool>(), proptest::collection::vec(0u32..12, 0..6)),
                    2,
                ),
                1..30,
            ),
        ) {
            let config = TierConfig { reuse_window: window, max_admit };
            let steps: Vec<(u32, Vec<u32>, bool, Vec<u32>)> = tokens
                .iter()
                .flat_map(|layers| {
                    layers.iter().enumerate().map(|(l, (picks, may, res))| (l as u32, picks.iter().copied().collect(), *may, res.clone()))
                })
                .collect();
            let mut policy = TierPolicy::new(config, 2, 12);
            let mut got = Vec::new();
            for (i, (layer, picks, may, resident)) in steps.iter().enumerate() {
                if *layer == 0 && i > 0 {
                    policy.next_token();
                }
                got.push(policy.plan(*layer, picks, *may, |id| resident.contains(&id)).unwrap());
            }
            prop_assert_eq!(got, model(config, &steps));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Each layer's count is at most its misses, and over the layers the counts add up to the fraction
        /// of all misses (within the one record a carry holds), whatever the layers' miss counts.
        #[test]
        fn the_arena_takes_its_fraction_of_the_misses(
            bus_us in 1u64..10_000,
            cpu_us in proptest::option::of(1u64..10_000),
            misses in proptest::collection::vec(0usize..9, 1..200),
        ) {
            let mut share = ArenaShare::new(Duration::from_micros(bus_us));
            if let Some(cpu_us) = cpu_us {
                share.observe_cpu(3, Duration::from_micros(3 * cpu_us));
            }
            let f = share.fraction();
            let cpu = cpu_us.unwrap_or(bus_us) as f64;
            prop_assert!((f - cpu / (cpu + bus_us as f64)).abs() < 1e-9);
            let mut taken = 0usize;
            for &m in &misses {
                let n = share.count(m);
                prop_assert!(n <= m);
                taken += n;
            }
            let wanted = f * misses.iter().sum::<usize>() as f64;
            prop_assert!((taken as f64 - wanted).abs() < 1.0 + 1e-6, "took {taken}, wanted {wanted}");
        }

        /// On a model machine (the CPU `cpu` a record; the GPU `hits` for the layer's hits and `arena` a
        /// record it reads, both starting together), the outcomes move the fraction to where both finish
        /// together, whatever the rates' first guess: past the first tokens, the mean fraction is the
        /// balance within a few steps and what rounding a layer's misses to records costs.
        #[test]
        fn the_outcomes_move_the_share_to_where_both_sides_finish_together(
            bus_us in 1u64..1_000,
            cpu_us in 1u64..1_000,
            arena_us in 1u64..1_000,
            hits_us in 0u64..1_000,
            misses in 1usize..9,
        ) {
            let mut share = ArenaShare::new(Duration::from_micros(bus_us));
            let (cpu, arena, hits, m) = (cpu_us as f64, arena_us as f64, hits_us as f64, misses as f64);
            let mut fractions = Vec::new();
            for layer in 0..48 * 40 {
                let n = share.count(misses);
                share.observe_cpu(misses - n, Duration::from_secs_f64(cpu * (misses - n) as f64 * 1e-6));
                share.observe_finish(hits + arena * n as f64 <= cpu * (misses - n) as f64);
                if layer >= 48 * 20 {
                    fractions.push(share.fraction());
                }
            }
            let mean = fractions.iter().sum::<f64>() / fractions.len() as f64;
            let balance = ((cpu * m - hits) / (m * (arena + cpu))).clamp(0.0, 1.0);
            // One record either way moves a side's time by a record's: the fraction between the records'
            // counts on either side of the balance.
            prop_assert!((mean - balance).abs() <= 1.0 / m + 5.0 * FINISH_STEP,
                "mean {mean}, balance {balance}");
        }
    }

    #[test]
    fn the_arena_takes_misses_in_pick_order_as_the_cpu_s_measured_time_says() {
        let mut p = TierPolicy::new(TierConfig { reuse_window: 0, max_admit: 0 }, 1, 8);
        p.share_with_arena(ArenaShare::new(Duration::from_micros(60)));
        // No CPU time measured yet: the bus's stands for it, half the misses each.
        let plan = p.plan(0, &[1, 2, 3, 4, 5], false, |id| id == 2).unwrap();
        assert_eq!(plan.tiers, [Tier::Arena, Tier::Gpu, Tier::Arena, Tier::Cpu, Tier::Cpu]);
        assert_eq!(plan.cpu_picks().collect::<Vec<_>>(), [3, 4]);
        // The CPU three times as slow a record as the bus: three quarters go to the arena.
        p.observe_cpu(2, Duration::from_micros(360));
        for _ in 0..64 {
            p.observe_cpu(4, Duration::from_micros(720));
        }
        assert!((p.arena().unwrap().fraction() - 0.75).abs() < 0.01);
        p.next_token();
        let plan = p.plan(0, &[0, 1, 2, 3], false, |_| false).unwrap();
        assert_eq!(plan.tiers[..3], [Tier::Arena; 3]);
        assert_eq!(plan.tiers[3], Tier::Cpu);
        // A fixed share holds whatever the CPU's time: a quarter of 4 misses is one.
        p.share_with_arena(ArenaShare::fixed(0.25));
        p.observe_cpu(1, Duration::from_secs(1));
        p.next_token();
        let plan = p.plan(0, &[0, 1, 2, 3], false, |_| false).unwrap();
        assert_eq!(plan.tiers, [Tier::Arena, Tier::Cpu, Tier::Cpu, Tier::Cpu]);
        // No arena: every miss on the CPU.
        let mut q = TierPolicy::new(TierConfig::default(), 1, 8);
        assert!(q.plan(0, &[0, 1], false, |_| false).unwrap().tiers.iter().all(|&t| t == Tier::Cpu));
    }

    #[test]
    fn a_miss_seen_again_within_the_window_is_admitted_once_the_path_is_idle() {
        let mut p = TierPolicy::new(TierConfig { reuse_window: 2, max_admit: 1 }, 1, 8);
        assert_eq!(p.plan(0, &[3, 4], true, |_| false).unwrap().admit, Vec::<u32>::new());
        p.next_token();
        let plan = p.plan(0, &[4, 3, 5], true, |id| id == 5).unwrap();
        assert_eq!(plan.tiers, [Tier::Cpu, Tier::Cpu, Tier::Gpu]);
        assert_eq!(plan.admit, [4], "capped at one, in pick order");
        assert_eq!(plan.cpu_picks().collect::<Vec<_>>(), [0, 1]);
        p.next_token();
        assert!(p.plan(0, &[3], false, |_| false).unwrap().admit.is_empty(), "the upload path is busy");
        p.next_token();
        p.next_token();
        p.next_token();
        assert!(p.plan(0, &[3], true, |_| false).unwrap().admit.is_empty(), "seen 3 tokens ago, window 2");
        assert!(matches!(
            p.plan(0, &[8], true, |_| false),
            Err(Error::OutOfRange { key: ExpertKey { expert: 8, .. }, .. })
        ));
        assert!(matches!(
            p.plan(1, &[0], true, |_| false),
            Err(Error::OutOfRange { key: ExpertKey { layer: 1, .. }, .. })
        ));
    }
}
