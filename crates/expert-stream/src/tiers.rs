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

use crate::{Error, ExpertKey, Result};

/// Where a pick runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// The pool holds it: the GPU computes it.
    Gpu,
    /// The host computes it from its record in host memory.
    Cpu,
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
    /// Experts to upload in the background, in pick order (a subset of the CPU picks).
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
        Ok(plan)
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
