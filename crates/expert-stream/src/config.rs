//! How a pool is sized and which eviction policy it uses.

use crate::{Error, Result};

/// Which resident, unpinned expert makes room for a new one.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub enum EvictionPolicy {
    /// Least recently used: the expert whose last `ensure` is oldest.
    #[default]
    Lru,
    /// Lowest decayed heat, oldest first on ties (the policy of llama.cpp PR #25294 and of diskformer.js
    /// `evict: 'hot'`).
    ///
    /// Every `ensure` of a key adds 1 to its heat; heat halves every `half_life_tokens` tokens (one token is
    /// `layers` calls to `ensure`). Keys prefetched and never demanded have heat 0 and go first.
    Hot {
        /// Tokens for the heat to halve (diskformer.js default 8).
        half_life_tokens: f64,
    },
    /// Least frequently used: [`Hot`](Self::Hot) with no decay (heat is the count of `ensure`s so far).
    Lfu,
    /// LRU that knows decode visits layers in a cycle (one `ensure` per layer per token). A record of layer
    /// `m` cannot be used before that layer's next turn, `δ` demands away (`layers` for the layer just
    /// demanded), and the whole tokens since its last use, `τ`, stand in for how many more cycles it will
    /// wait: it evicts the largest `δ + layers·τ`, the oldest first on ties. Among records last used in the
    /// same token it drops the layer just served first, where LRU drops it last; in `examples/trace-sim` it
    /// beats LRU by up to 9 points of hit rate at 800 of 6,144 slots (see the crate README).
    Cyclic,
}

impl EvictionPolicy {
    /// [`Hot`](Self::Hot) with diskformer.js's default half-life of 8 tokens.
    pub const HOT: Self = Self::Hot { half_life_tokens: 8.0 };
}

/// The shape and knobs of an expert pool. Build one with [`PoolConfig::new`] and adjust the public fields.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PoolConfig {
    /// Slots in the pool (records that fit in it at once). At least `2 × expert_used_count` for decode.
    pub slots: usize,
    /// `block_count`: layers of the model (keys are checked against it; the hot policy's clock uses it).
    pub layers: u32,
    /// `expert_count`: routed experts per layer.
    pub experts: u32,
    /// Eviction policy (default LRU).
    pub policy: EvictionPolicy,
    /// Prefetch loads in flight at once (default 8); more guesses wait in a queue.
    pub max_prefetch_in_flight: usize,
    /// Free or evictable slots a prefetch leaves for demand (default 8; set it to `expert_used_count`, the
    /// most misses one `ensure` has). A prefetch that would dip below it gives up quietly.
    pub prefetch_reserve: usize,
    /// Reader threads for demand misses (default 8, so one layer's top-8 misses all read in parallel).
    /// Prefetch loads have their own `max_prefetch_in_flight` threads, so they never occupy a demand reader.
    pub readers: usize,
}

impl PoolConfig {
    /// A pool of `slots` records for a model of `layers × experts` routed experts, with the defaults.
    pub fn new(slots: usize, layers: u32, experts: u32) -> Self {
        Self {
            slots,
            layers,
            experts,
            policy: EvictionPolicy::Lru,
            max_prefetch_in_flight: 8,
            prefetch_reserve: 8,
            readers: 8,
        }
    }

    /// Checks the fields.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the first bad field.
    pub fn validate(&self) -> Result<()> {
        let bad = |field, reason: &str| Err(Error::InvalidConfig { field, reason: reason.to_owned() });
        if self.slots == 0 {
            return bad("slots", "is 0; give the pool at least 2 × expert_used_count slots");
        }
        if self.slots > u32::MAX as usize {
            return bad("slots", "exceeds u32::MAX");
        }
        if self.layers == 0 {
            return bad("layers", "is 0; use the model's block_count");
        }
        if self.experts == 0 {
            return bad("experts", "is 0; use the model's expert_count");
        }
        if self.readers == 0 {
            return bad("readers", "is 0; demand misses need at least one reader thread");
        }
        if let EvictionPolicy::Hot { half_life_tokens } = self.policy
            && !(half_life_tokens.is_finite() && half_life_tokens > 0.0)
        {
            return bad("policy", "has a hot half-life that is not a positive number of tokens");
        }
        Ok(())
    }
}
