//! GPU budget → expert slots: what is left of the budget after the dense weights, the KV cache and the scratch
//! buffers, in whole records.

use crate::{Error, Result};

/// How a GPU memory budget is spent before the expert pool: every size in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuBudget {
    /// The whole budget the engine may use on the device.
    pub budget: u64,
    /// Dense weights (embeddings, attention, norms, routers, lm head) as uploaded.
    pub dense: u64,
    /// The KV cache at the context length asked for.
    pub kv_cache: u64,
    /// Activations and other working buffers, allocated once for the largest step.
    pub scratch: u64,
}

impl GpuBudget {
    /// Bytes left for the expert pool (zero when the rest already exceeds the budget).
    pub fn left(&self) -> u64 {
        self.budget.saturating_sub(self.dense.saturating_add(self.kv_cache).saturating_add(self.scratch))
    }

    /// The number of expert slots of `record_bytes` each that fit in what is left of the budget.
    ///
    /// One token step of one layer pins `top_k` records while the next layer's prefetch loads up to as many,
    /// so the pool needs at least `2 × top_k` slots.
    ///
    /// # Errors
    ///
    /// [`Error::BudgetTooSmall`] (with every number) when fewer than `2 × top_k` records fit;
    /// [`Error::InvalidConfig`] for a zero record size or top-k.
    pub fn expert_slots(&self, record_bytes: u64, top_k: u32) -> Result<usize> {
        if record_bytes == 0 {
            return Err(Error::InvalidConfig { field: "record_bytes", reason: "must be > 0".into() });
        }
        if top_k == 0 {
            return Err(Error::InvalidConfig {
                field: "top_k",
                reason: "must be > 0 (expert_used_count)".into(),
            });
        }
        let left = self.left();
        let min_slots = 2 * u64::from(top_k);
        let slots = left / record_bytes;
        if slots < min_slots {
            return Err(Error::BudgetTooSmall {
                budget: self.budget,
                dense: self.dense,
                kv_cache: self.kv_cache,
                scratch: self.scratch,
                left,
                record_bytes,
                min_slots,
            });
        }
        Ok(usize::try_from(slots).unwrap_or(usize::MAX))
    }
}

/// Bytes as decimal gigabytes with two decimals, as budgets are quoted (`4.00 GB`).
pub(crate) fn gb(bytes: u64) -> String {
    format!("{:.2} GB", bytes as f64 / 1e9)
}

/// The smallest budget that holds the dense weights, the KV cache, the scratch and `min_slots` records.
pub(crate) fn needed(dense: u64, kv_cache: u64, scratch: u64, min_slots: u64, record_bytes: u64) -> u64 {
    [kv_cache, scratch, min_slots.saturating_mul(record_bytes)].into_iter().fold(dense, u64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Qwen3-30B-A3B's Q8_0 record.
    const RECORD: u64 = 5_013_504;

    #[test]
    fn slots_are_whole_records_of_what_is_left() {
        let b = GpuBudget {
            budget: 8_000_000_000,
            dense: 1_200_000_000,
            kv_cache: 400_000_000,
            scratch: 50_000_000,
        };
        assert_eq!(b.left(), 6_350_000_000);
        assert_eq!(b.expert_slots(RECORD, 8).unwrap(), (6_350_000_000 / RECORD) as usize);
        assert_eq!(b.expert_slots(RECORD, 8).unwrap(), 1266);
    }

    #[test]
    fn exactly_two_top_k_records_is_enough() {
        let b = GpuBudget { budget: 1000 + 16 * RECORD, dense: 600, kv_cache: 300, scratch: 100 };
        assert_eq!(b.expert_slots(RECORD, 8).unwrap(), 16);
        let short = GpuBudget { budget: b.budget - 1, ..b };
        let err = short.expert_slots(RECORD, 8).unwrap_err();
        assert!(matches!(
            err,
            Error::BudgetTooSmall { left, min_slots: 16, record_bytes: RECORD, .. } if left == 16 * RECORD - 1
        ));
    }

    #[test]
    fn refusal_carries_the_numbers() {
        let b = GpuBudget {
            budget: 2_000_000_000,
            dense: 1_500_000_000,
            kv_cache: 400_000_000,
            scratch: 50_000_000,
        };
        let err = b.expert_slots(RECORD, 8).unwrap_err();
        let Error::BudgetTooSmall { budget, dense, kv_cache, scratch, left, record_bytes, min_slots } =
            err.clone()
        else {
            panic!("expected BudgetTooSmall, got {err:?}");
        };
        assert_eq!((budget, dense, kv_cache, scratch), (b.budget, b.dense, b.kv_cache, b.scratch));
        assert_eq!((left, record_bytes, min_slots), (50_000_000, RECORD, 16));
        let msg = err.to_string();
        for part in
            ["2.00 GB", "1.50 GB", "0.40 GB", "0.05 GB leave", "0.08 GB", "0.03 GB short", "16 records"]
        {
            assert!(msg.contains(part), "{part:?} missing from {msg:?}");
        }
    }

    #[test]
    fn a_budget_under_the_fixed_costs_is_told_what_it_needs_in_all() {
        // Dense weights, KV cache and scratch past the budget: the budget it names holds them and the
        // records, whatever the budget asked for.
        for budget in [300_000_000, 450_000_000] {
            let b = GpuBudget { budget, dense: 350_000_000, kv_cache: 70_000_000, scratch: 230_000_000 };
            let msg = b.expert_slots(RECORD, 8).unwrap_err().to_string();
            let needed = 650_000_000 + 16 * RECORD;
            assert!(msg.contains(&format!("at least {}", gb(needed))), "{msg}");
            assert!(msg.contains(&format!("{} short", gb(needed - budget))), "{msg}");
        }
    }

    #[test]
    fn overspent_budget_leaves_nothing_without_overflow() {
        let b = GpuBudget { budget: 1_000, dense: u64::MAX, kv_cache: u64::MAX, scratch: 1 };
        assert_eq!(b.left(), 0);
        assert!(matches!(b.expert_slots(RECORD, 8), Err(Error::BudgetTooSmall { left: 0, .. })));
    }

    #[test]
    fn zero_sizes_are_config_errors() {
        let b = GpuBudget { budget: u64::MAX, dense: 0, kv_cache: 0, scratch: 0 };
        assert!(matches!(b.expert_slots(0, 8), Err(Error::InvalidConfig { field: "record_bytes", .. })));
        assert!(matches!(b.expert_slots(RECORD, 0), Err(Error::InvalidConfig { field: "top_k", .. })));
    }
}
