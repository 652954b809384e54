//! Protects the pool's single-threaded behaviour through `ExpertPool` and `MemoryBackend`: bytes land in the
//! right slot in id order, LRU, hot and cyclic order, prefetch into free slots only, exhaustion, range
//! checks, stats.

mod common;

use common::{RECORD, pool};
use diskformer_expert_stream::{Error, EvictionPolicy, ExpertKey, PoolConfig, SlotView};

#[test]
fn misses_then_hits_with_bytes_in_the_right_slots_in_id_order() {
    let pool = pool(8, 4, 8, |_| {});
    let pinned = pool.ensure(2, &[5, 1, 7]).unwrap();
    assert_eq!(pinned.len(), 3);
    for (slot, e) in pinned.iter().zip([5, 1, 7]) {
        let key = ExpertKey::new(2, e);
        assert_eq!(pool.backend().slot_bytes(*slot), pool.backend().record(key), "{key} in {slot}");
        assert_eq!(pool.slot_of(key), Some(*slot));
    }
    pool.release(pinned);
    let again = pool.ensure(2, &[7, 5]).unwrap();
    assert_eq!(
        again.slots(),
        [pool.slot_of(ExpertKey::new(2, 7)).unwrap(), pool.slot_of(ExpertKey::new(2, 5)).unwrap()]
    );
    pool.release(again);
    let s = pool.stats();
    assert_eq!((s.hits, s.late_hits, s.misses, s.evictions), (2, 0, 3, 0));
    assert_eq!(s.bytes_read, 3 * RECORD as u64);
    assert_eq!(s.hits_by_layer[2], 2);
    assert_eq!(s.misses_by_layer[2], 3);
    assert_eq!(s.layer_hit_rate(2), Some(0.4));
    assert_eq!(s.layer_hit_rate(0), None);
    assert_eq!(pool.backend().total_reads(), 3);
    assert_eq!(pool.resident(), 3);
}

#[test]
fn lru_evicts_the_least_recently_used_and_counts_evictions() {
    let pool = pool(3, 1, 8, |_| {});
    for ids in [[0], [1], [2], [0], [3], [4]] {
        let p = pool.ensure(0, &ids).unwrap();
        pool.release(p);
    }
    // [3] evicted 1 (0 was used again), [4] evicted 2.
    let resident: Vec<bool> = (0..5).map(|e| pool.slot_of(ExpertKey::new(0, e)).is_some()).collect();
    assert_eq!(resident, [true, false, false, true, true]);
    assert_eq!(pool.stats().evictions, 2);
}

#[test]
fn hot_keeps_the_hot_expert_where_lru_drops_it() {
    for (policy, keeps_hot) in
        [(EvictionPolicy::Lru, false), (EvictionPolicy::HOT, true), (EvictionPolicy::Lfu, true)]
    {
        let pool = pool(2, 1, 8, |c| c.policy = policy);
        for ids in [[0], [0], [0], [0], [1], [2]] {
            let p = pool.ensure(0, &ids).unwrap();
            pool.release(p);
        }
        assert_eq!(pool.slot_of(ExpertKey::new(0, 0)).is_some(), keeps_hot, "{policy:?}");
        assert_eq!(pool.slot_of(ExpertKey::new(0, 1)).is_some(), !keeps_hot, "{policy:?}");
    }
}

#[test]
fn hot_heat_decays_with_its_half_life() {
    // One layer, half-life one token: heat halves per ensure. After four uses expert 0 has heat
    // 1 + 1/2 + 1/4 + 1/8; two ensures later that is 0.47, below expert 1's single use one ensure ago (0.5),
    // so hot evicts 0 where LFU (no decay) keeps it.
    for (policy, keeps_0) in
        [(EvictionPolicy::Hot { half_life_tokens: 1.0 }, false), (EvictionPolicy::Lfu, true)]
    {
        let pool = pool(2, 1, 8, |c| c.policy = policy);
        for ids in [[0], [0], [0], [0], [1], [3]] {
            let p = pool.ensure(0, &ids).unwrap();
            pool.release(p);
        }
        assert_eq!(pool.slot_of(ExpertKey::new(0, 0)).is_some(), keeps_0, "{policy:?}");
    }
}

#[test]
fn cyclic_drops_the_layer_just_served_where_lru_drops_the_next_one() {
    // 4 layers, 3 slots: after layers 0, 1, 2 of a token, layer 3's miss must evict. LRU drops layer 0's
    // record, needed next; cyclic drops layer 2's, needed last.
    for (policy, hits_next) in [(EvictionPolicy::Lru, false), (EvictionPolicy::Cyclic, true)] {
        let pool = pool(3, 4, 8, |c| c.policy = policy);
        for layer in 0..4 {
            let p = pool.ensure(layer, &[1]).unwrap();
            pool.release(p);
        }
        assert_eq!(pool.slot_of(ExpertKey::new(2, 1)).is_none(), hits_next, "{policy:?}");
        let p = pool.ensure(0, &[1]).unwrap();
        pool.release(p);
        assert_eq!(pool.stats().hits, u64::from(hits_next), "{policy:?}");
    }
}

#[test]
fn a_prefetch_while_slots_are_held_uses_only_free_slots_and_later_counts_as_used() {
    let pool = pool(4, 2, 8, |c| c.prefetch_reserve = 0);
    let held = pool.ensure(0, &[0, 1, 2]).unwrap();
    assert_eq!(pool.prefetch(1, &[4, 5]).unwrap(), 1, "one free slot, nothing evictable");
    pool.drain();
    assert_eq!(pool.resident(), 4);
    let p = pool.ensure(1, &[4]).unwrap();
    let s = pool.stats();
    assert_eq!((s.hits, s.prefetch_issued, s.prefetch_used), (1, 1, 1));
    assert_eq!(s.prefetch_accuracy(), Some(1.0));
    pool.release(p);
    pool.release(held);
}

#[test]
fn prefetch_leaves_the_reserve_for_demand() {
    let pool = pool(4, 2, 8, |c| c.prefetch_reserve = 2);
    assert_eq!(pool.prefetch(1, &[0, 1, 2, 3]).unwrap(), 2);
    pool.drain();
    assert_eq!(pool.resident(), 2);
    assert_eq!(pool.inspect(|c| c.queued()), 0, "the rest were given up quietly");
}

#[test]
fn prefetch_skips_resident_loading_and_queued_guesses() {
    let pool = pool(8, 2, 8, |c| c.prefetch_reserve = 0);
    let p = pool.ensure(1, &[0]).unwrap();
    pool.release(p);
    assert_eq!(pool.prefetch(1, &[0, 1, 1]).unwrap(), 1);
    pool.drain();
    assert_eq!(pool.backend().total_reads(), 2);
}

#[test]
fn more_misses_than_slots_is_pool_exhausted_and_changes_nothing() {
    let pool = pool(2, 1, 8, |_| {});
    let err = pool.ensure(0, &[0, 1, 2]).unwrap_err();
    assert!(matches!(err, Error::PoolExhausted { slots: 2, needed: 1, wanted: 3, .. }), "{err}");
    assert!(err.to_string().contains("raise the pool size"));
    assert_eq!(pool.backend().total_reads(), 0);
    assert_eq!(pool.stats().demanded(), 0);

    let held = pool.ensure(0, &[0, 1]).unwrap();
    let err = pool.ensure(0, &[2]).unwrap_err();
    assert!(matches!(err, Error::PoolExhausted { slots: 2, pinned: 2, loading: 0, .. }), "{err}");
    // Hits on pinned slots need no room.
    let both = pool.ensure(0, &[1, 0]).unwrap();
    pool.release(both);
    pool.release(held);
    let p = pool.ensure(0, &[2]).unwrap();
    pool.release(p);
    pool.inspect(|c| c.check_invariants()).unwrap();
}

#[test]
fn a_repeated_id_is_one_miss_and_one_late_hit_pinned_twice() {
    let pool = pool(4, 1, 8, |_| {});
    let p = pool.ensure(0, &[3, 3]).unwrap();
    assert_eq!(p[0], p[1]);
    let s = pool.stats();
    assert_eq!((s.misses, s.late_hits), (1, 1));
    assert!(matches!(pool.inspect(|c| c.snapshot().0[p[0].index()]), SlotView::Ready { pins: 2, .. }));
    pool.release(p);
    assert_eq!(pool.backend().total_reads(), 1);
}

#[test]
fn ids_past_the_model_are_refused() {
    let pool = pool(4, 2, 8, |_| {});
    assert!(matches!(pool.ensure(2, &[0]), Err(Error::OutOfRange { layers: 2, experts: 8, .. })));
    assert!(
        matches!(pool.ensure(0, &[1, 8]), Err(Error::OutOfRange { key, .. }) if key == ExpertKey::new(0, 8))
    );
    assert!(matches!(pool.prefetch(0, &[9]), Err(Error::OutOfRange { .. })));
    assert_eq!(pool.backend().total_reads(), 0);
}

#[test]
fn bad_configs_are_refused() {
    let bad = |tweak: fn(&mut PoolConfig)| {
        let mut c = PoolConfig::new(4, 2, 8);
        tweak(&mut c);
        diskformer_expert_stream::PoolCore::new(c).unwrap_err()
    };
    assert!(matches!(bad(|c| c.slots = 0), Error::InvalidConfig { field: "slots", .. }));
    assert!(matches!(bad(|c| c.layers = 0), Error::InvalidConfig { field: "layers", .. }));
    assert!(matches!(bad(|c| c.readers = 0), Error::InvalidConfig { field: "readers", .. }));
    assert!(matches!(
        bad(|c| c.policy = EvictionPolicy::Hot { half_life_tokens: 0.0 }),
        Error::InvalidConfig { field: "policy", .. }
    ));
}

#[test]
fn stats_display_prints_every_counter() {
    let pool = pool(4, 2, 8, |_| {});
    let p = pool.ensure(0, &[1, 2]).unwrap();
    pool.release(p);
    let p = pool.ensure(0, &[1]).unwrap();
    pool.release(p);
    let text = pool.stats().to_string();
    for needle in [
        "hit rate 33.3%",
        "1 hits",
        "0 late hits",
        "2 misses",
        "0 evictions",
        "0 failed loads",
        "0 waits for room",
        "prefetch: 0 issued",
        "by layer: 33.3% -",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
    pool.reset_stats();
    assert_eq!(pool.stats().demanded(), 0);
}
