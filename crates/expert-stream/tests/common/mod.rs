//! Helpers shared by the pool tests.

#![allow(dead_code)]

pub mod gpu;

use diskformer_expert_stream::{ExpertPool, MemoryBackend, PoolConfig};

/// Bytes of one test record.
pub const RECORD: usize = 16;

/// A pool of `slots` slots over a [`MemoryBackend`] of `layers × experts` records, after `tweak`.
pub fn pool(
    slots: usize,
    layers: u32,
    experts: u32,
    tweak: impl FnOnce(&mut PoolConfig),
) -> ExpertPool<MemoryBackend> {
    let mut config = PoolConfig::new(slots, layers, experts);
    tweak(&mut config);
    ExpertPool::new(MemoryBackend::new(experts, RECORD, slots), config).unwrap()
}

/// Waits (yielding, no sleeps or timeouts) until `cond` holds: for states another thread reaches without a
/// way to signal us, such as an `ensure` that has registered and is blocked.
pub fn wait_until(mut cond: impl FnMut() -> bool) {
    while !cond() {
        std::thread::yield_now();
    }
}
