//! Protects the pool under concurrency, with reads held open by gates (no sleeps): late hits are read once,
//! demand is never held up by guesses and drops queued ones, `clear()` during reads leaves every slot free
//! exactly once, a failed load frees its slot and names the record to every caller that waited for it, a
//! demand waits for running guesses before it calls the pool exhausted, and `ensure_meanwhile` calls its
//! closure while loads run, until it has nothing more to do or they are done.

mod common;

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::{pool, wait_until};
use diskformer_expert_stream::{Error, Event, ExpertKey, Fault, Slot, SlotView};

fn key(layer: u32, expert: u32) -> ExpertKey {
    ExpertKey::new(layer, expert)
}

#[test]
fn a_late_hit_on_a_prefetch_waits_and_is_not_read_again() {
    let pool = pool(8, 2, 8, |c| c.prefetch_reserve = 0);
    let events = pool.backend().events();
    let gate = pool.backend().hold(key(1, 3));
    assert_eq!(pool.prefetch(1, &[3]).unwrap(), 1);
    assert_eq!(events.recv().unwrap(), Event::ReadStarted(key(1, 3)));
    thread::scope(|s| {
        let demand = s.spawn(|| pool.ensure(1, &[3]).unwrap());
        wait_until(|| pool.stats().late_hits == 1);
        assert!(!demand.is_finished());
        gate.open();
        let pinned = demand.join().unwrap();
        assert_eq!(pool.backend().slot_bytes(pinned[0]), pool.backend().record(key(1, 3)));
        assert!(matches!(
            pool.inspect(|c| c.snapshot().0[pinned[0].index()]),
            SlotView::Ready { pins: 1, .. }
        ));
        pool.release(pinned);
    });
    assert_eq!(pool.backend().reads(key(1, 3)), 1);
    let s = pool.stats();
    assert_eq!((s.hits, s.late_hits, s.misses, s.prefetch_used), (0, 1, 0, 1));
    assert!(s.wait_time > Duration::ZERO);
}

/// A demand that fits only once a running guess lands waits for it (the guess's slot then turns evictable)
/// instead of failing; one that would not fit even then fails at once.
#[test]
fn a_demand_waits_for_running_guesses_before_calling_the_pool_exhausted() {
    let pool = pool(2, 2, 8, |c| c.prefetch_reserve = 0);
    let events = pool.backend().events();
    let gate = pool.backend().hold(key(1, 3));
    assert_eq!(pool.prefetch(1, &[3]).unwrap(), 1);
    assert_eq!(events.recv().unwrap(), Event::ReadStarted(key(1, 3)));
    let err = pool.ensure(0, &[0, 1, 2]).unwrap_err();
    assert!(matches!(err, Error::PoolExhausted { slots: 2, loading: 1, .. }), "{err}");
    thread::scope(|s| {
        let demand = s.spawn(|| pool.ensure(0, &[0, 1]));
        wait_until(|| pool.stats().room_waits > 0 || demand.is_finished());
        assert_eq!(pool.stats().room_waits, 1, "blocked on the guess, not failed");
        gate.open();
        let pinned = demand.join().unwrap().unwrap();
        assert_eq!(pool.backend().slot_bytes(pinned[1]), pool.backend().record(key(0, 1)));
        pool.release(pinned);
    });
    assert_eq!(pool.stats().evictions, 1, "the guess gave its slot up");
    pool.inspect(|c| c.check_invariants()).unwrap();
}

#[test]
fn ensure_meanwhile_runs_once_when_it_says_so_and_not_for_hits() {
    let pool = pool(8, 1, 8, |_| {});
    let events = pool.backend().events();
    let mut gate = Some(pool.backend().hold(key(0, 4)));
    let mut ran = 0;
    let pinned = pool
        .ensure_meanwhile(0, &[4, 5], || {
            // The pool's lock is free: it can be asked about, and the held read is still running.
            assert_eq!(recv_read(&events, key(0, 4)), key(0, 4));
            assert_eq!(pool.slot_of(key(0, 4)), None);
            ran += 1;
            gate.take().expect("called once").open();
            false
        })
        .unwrap();
    assert_eq!(ran, 1);
    assert_eq!(pool.backend().slot_bytes(pinned[0]), pool.backend().record(key(0, 4)));
    pool.release(pinned);
    let hits = pool.ensure_meanwhile(0, &[5, 4], || panic!("nothing to wait for")).unwrap();
    pool.release(hits);
}

#[test]
fn ensure_meanwhile_calls_again_while_its_loads_run_and_stops_once_they_are_done() {
    let pool = pool(8, 1, 8, |_| {});
    let gate = Mutex::new(Some(pool.backend().hold(key(0, 2))));
    let finished = AtomicBool::new(false);
    let mut calls = 0;
    thread::scope(|s| {
        // Only a pool that stops calling too early needs this: it lets the held read go, so the test fails
        // on the count below instead of hanging.
        s.spawn(|| {
            let started = Instant::now();
            while !finished.load(Ordering::Relaxed) {
                if started.elapsed() > Duration::from_secs(30) {
                    drop(gate.lock().unwrap().take());
                    break;
                }
                thread::yield_now();
            }
        });
        let pinned = pool
            .ensure_meanwhile(0, &[2], || {
                calls += 1;
                if calls == 3 {
                    drop(gate.lock().unwrap().take());
                    wait_until(|| pool.slot_of(key(0, 2)).is_some());
                }
                true // always more to do: only the finished load stops the calls
            })
            .unwrap();
        finished.store(true, Ordering::Relaxed);
        assert_eq!(calls, 3, "called until the load was done, and not after");
        assert_eq!(pool.backend().slot_bytes(pinned[0]), pool.backend().record(key(0, 2)));
        pool.release(pinned);
    });
}

#[test]
fn two_demands_for_one_missing_expert_read_it_once() {
    let pool = pool(8, 1, 8, |_| {});
    let events = pool.backend().events();
    let gate = pool.backend().hold(key(0, 6));
    thread::scope(|s| {
        let first = s.spawn(|| pool.ensure(0, &[6, 1]).unwrap());
        assert_eq!(recv_read(&events, key(0, 6)), key(0, 6));
        let second = s.spawn(|| pool.ensure(0, &[6]).unwrap());
        wait_until(|| pool.stats().late_hits == 1);
        gate.open();
        let (a, b) = (first.join().unwrap(), second.join().unwrap());
        assert_eq!(a[0], b[0]);
        assert!(matches!(pool.inspect(|c| c.snapshot().0[a[0].index()]), SlotView::Ready { pins: 2, .. }));
        pool.release(a);
        pool.release(b);
    });
    assert_eq!(pool.backend().reads(key(0, 6)), 1);
    assert_eq!(pool.backend().total_reads(), 2);
}

/// Waits for the read of `want` to start, skipping other events.
fn recv_read(events: &crossbeam_channel::Receiver<Event>, want: ExpertKey) -> ExpertKey {
    loop {
        if let Event::ReadStarted(k) = events.recv().unwrap()
            && k == want
        {
            return k;
        }
    }
}

/// Waits until the reads of all of `want` have started (in any order), skipping other events.
fn recv_reads(events: &crossbeam_channel::Receiver<Event>, want: &[ExpertKey]) {
    let mut left: HashSet<ExpertKey> = want.iter().copied().collect();
    while !left.is_empty() {
        if let Event::ReadStarted(k) = events.recv().unwrap() {
            left.remove(&k);
        }
    }
}

#[test]
fn demand_is_not_held_up_by_guesses_and_drops_queued_ones_even_out_of_layer_order() {
    let pool = pool(16, 4, 8, |c| c.max_prefetch_in_flight = 2);
    let events = pool.backend().events();
    let gates = [pool.backend().hold(key(2, 0)), pool.backend().hold(key(2, 1))];
    assert_eq!(pool.prefetch(2, &[0, 1]).unwrap(), 2);
    assert_eq!(pool.prefetch(2, &[2]).unwrap(), 0);
    assert_eq!(pool.prefetch(1, &[3, 4]).unwrap(), 0);
    assert_eq!(pool.prefetch(3, &[5]).unwrap(), 0);
    assert_eq!(pool.inspect(|c| c.queued()), 4);
    recv_reads(&events, &[key(2, 0), key(2, 1)]);

    // Both guesses are still held, yet the demand miss is read at once; its arrival drops the queued guesses
    // for layers up to 2 (L2 E2, L1 E3, L1 E4) but keeps L3 E5.
    let p = pool.ensure(2, &[7]).unwrap();
    assert_eq!(pool.inspect(|c| c.queued()), 1);
    pool.release(p);
    drop(gates);
    pool.drain();
    let read: HashSet<ExpertKey> = (0..8)
        .flat_map(|e| (0..4).map(move |l| key(l, e)))
        .filter(|&k| pool.backend().reads(k) > 0)
        .collect();
    assert_eq!(read, HashSet::from([key(2, 0), key(2, 1), key(2, 7), key(3, 5)]));
    assert_eq!(pool.stats().prefetch_issued, 3);
}

#[test]
fn at_most_max_prefetch_in_flight_guesses_read_at_once() {
    let pool = pool(16, 2, 8, |c| c.max_prefetch_in_flight = 3);
    let events = pool.backend().events();
    let gates: Vec<_> = (0..6).map(|e| pool.backend().hold(key(1, e))).collect();
    assert_eq!(pool.prefetch(1, &[0, 1, 2, 3, 4, 5]).unwrap(), 3);
    let mut started = HashSet::new();
    for _ in 0..3 {
        let Event::ReadStarted(k) = events.recv().unwrap() else { panic!("no upload can happen yet") };
        started.insert(k);
    }
    assert_eq!(started, HashSet::from([key(1, 0), key(1, 1), key(1, 2)]));
    assert_eq!(pool.inspect(|c| (c.in_flight(), c.queued())), (3, 3));
    // Opening one guess lets exactly one more start.
    let mut gates = gates.into_iter();
    gates.next().unwrap().open();
    let next = loop {
        if let Event::ReadStarted(k) = events.recv().unwrap() {
            break k;
        }
    };
    assert_eq!(next, key(1, 3));
    assert_eq!(pool.inspect(|c| (c.in_flight(), c.queued())), (3, 2));
    drop(gates);
    pool.drain();
    assert_eq!(pool.stats().prefetch_issued, 6);
    assert_eq!(pool.resident(), 6);
}

#[test]
fn clear_during_reads_leaves_every_slot_free_exactly_once() {
    let pool = pool(6, 2, 8, |c| c.prefetch_reserve = 0);
    let events = pool.backend().events();
    let p = pool.ensure(0, &[0]).unwrap(); // resident and pinned at clear time
    let gates: Vec<_> = [key(0, 1), key(1, 2), key(1, 3)].map(|k| pool.backend().hold(k)).into();
    assert_eq!(pool.prefetch(1, &[2, 3]).unwrap(), 2);
    thread::scope(|s| {
        let demand = s.spawn(|| pool.ensure(0, &[1]));
        recv_reads(&events, &[key(0, 1), key(1, 2), key(1, 3)]);
        let clear = s.spawn(|| pool.clear());
        // Wait until clear has orphaned the running loads; it then blocks until they finish.
        wait_until(|| {
            pool.inspect(|c| {
                c.snapshot().0.iter().any(|v| matches!(v, SlotView::Loading { orphan: true, .. }))
            })
        });
        assert!(!clear.is_finished());
        drop(gates);
        clear.join().unwrap();
        assert!(matches!(demand.join().unwrap(), Err(Error::Cleared)));
    });
    let (views, mut free) = pool.inspect(|c| c.snapshot());
    assert!(views.iter().all(|v| *v == SlotView::Free), "{views:?}");
    free.sort();
    assert_eq!(free, (0..6).map(Slot).collect::<Vec<_>>());
    assert_eq!(pool.resident(), 0);
    pool.inspect(|c| c.check_invariants()).unwrap();

    // The pins from before the clear are gone; releasing them later does not touch new pins.
    let q = pool.ensure(0, &[0, 4]).unwrap();
    pool.release(p);
    assert!(
        q.iter()
            .all(|s| matches!(pool.inspect(|c| c.snapshot().0[s.index()]), SlotView::Ready { pins: 1, .. }))
    );
    pool.release(q);
    pool.inspect(|c| c.check_invariants()).unwrap();
}

#[test]
fn a_failed_load_frees_its_slot_and_names_the_record() {
    for fault in [Fault::ReadError, Fault::Short(5), Fault::UploadError, Fault::Panic] {
        let pool = pool(4, 2, 8, |_| {});
        pool.backend().fail_next(key(1, 4), fault);
        let err = pool.ensure(1, &[2, 4, 6]).unwrap_err();
        match (fault, &err) {
            (Fault::ReadError, Error::Read { key: k, .. })
            | (Fault::Short(_), Error::ShortRead { key: k, got: 5, expected: 16 })
            | (Fault::UploadError, Error::Upload { key: k, .. })
            | (Fault::Panic, Error::BackendPanicked { key: k }) => assert_eq!(*k, key(1, 4)),
            _ => panic!("{fault:?} gave {err:?}"),
        }
        assert!(err.to_string().contains("L1 E4"), "{err}");
        // The failed slot is free; the others loaded and are unpinned.
        let (views, free) = pool.inspect(|c| c.snapshot());
        assert_eq!(free.len(), 2, "{fault:?}: {views:?}");
        assert!(views.iter().all(|v| matches!(v, SlotView::Free | SlotView::Ready { pins: 0, .. })));
        assert_eq!(pool.slot_of(key(1, 4)), None);
        assert_eq!(pool.stats().failed_loads, 1);
        pool.inspect(|c| c.check_invariants()).unwrap();
        // Asking again reads it again, and works.
        let p = pool.ensure(1, &[4]).unwrap();
        assert_eq!(pool.backend().slot_bytes(p[0]), pool.backend().record(key(1, 4)));
        pool.release(p);
        assert_eq!(pool.backend().reads(key(1, 4)), 2);
    }
}

#[test]
fn every_caller_waiting_on_a_failed_load_gets_the_error() {
    let pool = pool(4, 1, 8, |_| {});
    let events = pool.backend().events();
    pool.backend().fail_next(key(0, 2), Fault::ReadError);
    let gate = pool.backend().hold(key(0, 2));
    thread::scope(|s| {
        let first = s.spawn(|| pool.ensure(0, &[2]));
        recv_read(&events, key(0, 2));
        let second = s.spawn(|| pool.ensure(0, &[1, 2]));
        wait_until(|| pool.stats().late_hits == 1);
        gate.open();
        for r in [first.join().unwrap(), second.join().unwrap()] {
            assert!(matches!(r, Err(Error::Read { key: k, .. }) if k == key(0, 2)));
        }
    });
    let (views, free) = pool.inspect(|c| c.snapshot());
    assert_eq!(free.len(), 3);
    assert!(views.iter().all(|v| matches!(v, SlotView::Free | SlotView::Ready { pins: 0, .. })));
    pool.inspect(|c| c.check_invariants()).unwrap();
}

#[test]
fn a_failed_prefetch_frees_its_slot_quietly() {
    let pool = pool(4, 2, 8, |c| c.prefetch_reserve = 0);
    pool.backend().fail_next(key(1, 1), Fault::ReadError);
    assert_eq!(pool.prefetch(1, &[1]).unwrap(), 1);
    pool.drain();
    assert_eq!(pool.resident(), 0);
    assert_eq!(pool.inspect(|c| c.snapshot().1.len()), 4);
    let p = pool.ensure(1, &[1]).unwrap();
    assert_eq!(pool.stats().misses, 1);
    pool.release(p);
}

#[test]
fn many_threads_hammering_one_pool_keep_it_consistent() {
    let pool = pool(24, 4, 16, |c| c.prefetch_reserve = 8);
    thread::scope(|s| {
        for t in 0..4u32 {
            let pool = &pool;
            s.spawn(move || {
                for i in 0..200u32 {
                    let layer = (i + t) % 4;
                    let ids: Vec<u32> = (0..4).map(|j| (i * 7 + j * 5 + t) % 16).collect();
                    let _ = pool.prefetch((layer + 1) % 4, &ids[..2]);
                    let p = pool.ensure(layer, &ids).unwrap();
                    for (slot, &e) in p.iter().zip(&ids) {
                        assert_eq!(pool.backend().slot_bytes(*slot)[..4], (layer * 16 + e).to_le_bytes());
                    }
                    pool.release(p);
                }
            });
        }
    });
    pool.drain();
    pool.inspect(|c| c.check_invariants()).unwrap();
    let s = pool.stats();
    assert_eq!(s.demanded(), 4 * 200 * 4);
    assert!(pool.inspect(|c| {
        c.snapshot().0.iter().all(|v| matches!(v, SlotView::Free | SlotView::Ready { pins: 0, .. }))
    }));
}
