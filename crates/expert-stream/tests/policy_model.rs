//! Protects the pool policy: random sequences of demand / prefetch / load completion (in any order, some
//! failing) / poll / release / clear drive `PoolCore` and a naive reference model side by side; they must
//! agree on hits, late hits, misses, evictions, prefetch counts, which records are resident or loading and
//! with how many pins, and the core's invariants (no slot held twice, every free slot listed once) must hold
//! throughout.

use std::collections::{HashMap, HashSet};

use diskformer_expert_stream::{
    Error, EvictionPolicy, ExpertKey, LoadId, LoadJob, LoadReport, Pinned, PoolConfig, PoolCore, Progress,
    SlotView, Ticket,
};
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------------------
// The reference model: a list of entries, linear scans, heat recomputed from the touch history.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ModelState {
    Loading(LoadId),
    Ready,
}

#[derive(Debug, Clone)]
struct Entry {
    key: ExpertKey,
    state: ModelState,
    pins: u32,
    stamp: u64,
    /// The demand count when it was last demanded (or its prefetch started).
    tick: u64,
    orphan: bool,
}

#[derive(Debug, Clone)]
struct ModelLoad {
    prefetch: bool,
    waiters: u32,
    failed: bool,
    pending: bool,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Counts {
    hits: u64,
    late_hits: u64,
    misses: u64,
    evictions: u64,
    failed_loads: u64,
    prefetch_issued: u64,
    prefetch_used: u64,
}

#[derive(Debug)]
struct Model {
    slots: usize,
    layers: u32,
    policy: EvictionPolicy,
    max_prefetch: usize,
    reserve: usize,
    entries: Vec<Entry>,
    loads: HashMap<LoadId, ModelLoad>,
    queue: Vec<ExpertKey>,
    prefetched: HashSet<ExpertKey>,
    touches: HashMap<ExpertKey, Vec<u64>>,
    tick: u64,
    layer: u32,
    stamp: u64,
    epoch: u64,
    counts: Counts,
}

/// What the model expects a demand to do.
#[derive(Debug, PartialEq, Eq)]
enum Expect {
    Exhausted,
    Started { misses: Vec<ExpertKey> },
}

impl Model {
    fn new(c: &PoolConfig) -> Self {
        Self {
            slots: c.slots,
            layers: c.layers,
            policy: c.policy,
            max_prefetch: c.max_prefetch_in_flight,
            reserve: c.prefetch_reserve,
            entries: Vec::new(),
            loads: HashMap::new(),
            queue: Vec::new(),
            prefetched: HashSet::new(),
            touches: HashMap::new(),
            tick: 0,
            layer: 0,
            stamp: 0,
            epoch: 0,
            counts: Counts::default(),
        }
    }

    fn live(&self, key: ExpertKey) -> Option<usize> {
        self.entries.iter().position(|e| e.key == key && !e.orphan)
    }

    fn free(&self) -> usize {
        self.slots - self.entries.len()
    }

    fn evictable(&self, e: &Entry) -> bool {
        e.state == ModelState::Ready && e.pins == 0 && !e.orphan
    }

    fn heat(&self, key: ExpertKey) -> f64 {
        let half_life = match self.policy {
            EvictionPolicy::Hot { half_life_tokens } => (half_life_tokens * f64::from(self.layers)).max(1.0),
            _ => f64::INFINITY,
        };
        let ticks = self.touches.get(&key).map_or(&[][..], Vec::as_slice);
        ticks.iter().map(|&t| 0.5f64.powf((self.tick - t) as f64 / half_life)).sum()
    }

    /// The entry eviction picks: lowest (heat, stamp) among evictable ones (heat ignored by LRU); for the
    /// cyclic policy, the largest (distance to its layer's turn + layers × whole tokens since use, age),
    /// oldest first.
    fn victim(&self) -> Option<usize> {
        if self.policy == EvictionPolicy::Cyclic {
            let l = u64::from(self.layers);
            return (0..self.entries.len()).filter(|&i| self.evictable(&self.entries[i])).max_by_key(|&i| {
                let e = &self.entries[i];
                let (m, c) = (u64::from(e.key.layer), u64::from(self.layer));
                let delta = if m == c { l } else { (m + l - c) % l };
                let age = self.tick - e.tick;
                (delta + l * (age / l), age, std::cmp::Reverse(e.stamp))
            });
        }
        let lru = matches!(self.policy, EvictionPolicy::Lru);
        (0..self.entries.len()).filter(|&i| self.evictable(&self.entries[i])).min_by(|&a, &b| {
            let (ea, eb) = (&self.entries[a], &self.entries[b]);
            let (ha, hb) = if lru { (0.0, 0.0) } else { (self.heat(ea.key), self.heat(eb.key)) };
            ha.total_cmp(&hb).then(ea.stamp.cmp(&eb.stamp))
        })
    }

    /// Makes room for one record (free slot first, else evict).
    fn take(&mut self) {
        if self.free() > 0 {
            return;
        }
        let v = self.victim().expect("room was checked");
        let e = self.entries.remove(v);
        self.prefetched.remove(&e.key);
        self.counts.evictions += 1;
    }

    fn start(&mut self, key: ExpertKey, id: LoadId, prefetch: bool, pins: u32) {
        self.take();
        self.stamp += 1;
        self.entries.push(Entry {
            key,
            state: ModelState::Loading(id),
            pins,
            stamp: self.stamp,
            tick: self.tick,
            orphan: false,
        });
        self.loads.insert(id, ModelLoad { prefetch, waiters: 0, failed: false, pending: true });
    }

    /// Predicts a demand before the core runs it.
    fn expect_demand(&self, keys: &[ExpertKey]) -> Expect {
        let mut new = Vec::new();
        let mut hit_evictable = HashSet::new();
        for &k in keys {
            match self.live(k) {
                Some(i) if self.evictable(&self.entries[i]) => {
                    hit_evictable.insert(k);
                }
                Some(_) => {}
                None if !new.contains(&k) => new.push(k),
                None => {}
            }
        }
        let room =
            self.free() + self.entries.iter().filter(|e| self.evictable(e)).count() - hit_evictable.len();
        if new.len() > room { Expect::Exhausted } else { Expect::Started { misses: new } }
    }

    /// Applies a demand the core accepted, using the load ids of its jobs; returns the loads it waits for.
    fn demand(&mut self, layer: u32, keys: &[ExpertKey], jobs: &[LoadJob]) -> Vec<Option<LoadId>> {
        self.tick += 1;
        self.layer = layer;
        self.queue.retain(|k| k.layer > layer);
        let mut waits = vec![None; keys.len()];
        let mut misses = Vec::new();
        for (i, &k) in keys.iter().enumerate() {
            self.touches.entry(k).or_default().push(self.tick);
            if self.prefetched.remove(&k) {
                self.counts.prefetch_used += 1;
            }
            match self.live(k) {
                Some(e) => {
                    self.stamp += 1;
                    let entry = &mut self.entries[e];
                    entry.stamp = self.stamp;
                    entry.tick = self.tick;
                    entry.pins += 1;
                    match entry.state {
                        ModelState::Loading(id) => {
                            self.counts.late_hits += 1;
                            waits[i] = Some(id);
                        }
                        ModelState::Ready => self.counts.hits += 1,
                    }
                }
                None => misses.push(i),
            }
        }
        let mut jobs = jobs.iter();
        for i in misses {
            let k = keys[i];
            if let Some(e) = self.live(k) {
                let entry = &mut self.entries[e];
                entry.pins += 1;
                let ModelState::Loading(id) = entry.state else { panic!("a repeated miss is loading") };
                self.counts.late_hits += 1;
                waits[i] = Some(id);
                continue;
            }
            let job = jobs.next().expect("one job per miss");
            self.start(k, job.id, false, 1);
            self.counts.misses += 1;
            waits[i] = Some(job.id);
        }
        let distinct: HashSet<LoadId> = waits.iter().flatten().copied().collect();
        for id in distinct {
            self.loads.get_mut(&id).unwrap().waiters += 1;
        }
        waits
    }

    fn unpin(&mut self, key: ExpertKey) {
        let e = self.live(key).expect("a pinned key is live");
        assert!(self.entries[e].pins > 0);
        self.entries[e].pins -= 1;
    }

    /// `None`: still waiting; `Some(Ok)`: done; `Some(Err(is_cleared))`: failed.
    fn poll(&mut self, epoch: u64, keys: &[ExpertKey], waits: &[Option<LoadId>]) -> Option<Result<(), bool>> {
        if epoch != self.epoch {
            return Some(Err(true));
        }
        let distinct: HashSet<LoadId> = waits.iter().flatten().copied().collect();
        if distinct.iter().any(|id| self.loads.get(id).is_some_and(|l| l.pending)) {
            return None;
        }
        let failed: HashSet<LoadId> =
            distinct.iter().copied().filter(|id| self.loads.contains_key(id)).collect();
        for id in &failed {
            let l = self.loads.get_mut(id).unwrap();
            assert!(l.failed);
            l.waiters -= 1;
            if l.waiters == 0 {
                self.loads.remove(id);
            }
        }
        if failed.is_empty() {
            return Some(Ok(()));
        }
        for (k, w) in keys.iter().zip(waits) {
            if !w.is_some_and(|id| failed.contains(&id)) {
                self.unpin(*k);
            }
        }
        Some(Err(false))
    }

    fn prefetch(&mut self, layer: u32, guesses: &[u32]) {
        if self.max_prefetch == 0 {
            return;
        }
        for &g in guesses {
            let k = ExpertKey::new(layer, g);
            if self.live(k).is_none() && !self.queue.contains(&k) {
                self.queue.push(k);
            }
        }
    }

    fn in_flight_prefetch(&self) -> usize {
        self.loads.values().filter(|l| l.prefetch && l.pending).count()
    }

    /// Starts queued guesses, matching them to the jobs the core started.
    fn pump(&mut self, jobs: &[LoadJob]) {
        let mut jobs = jobs.iter();
        while self.in_flight_prefetch() < self.max_prefetch && !self.queue.is_empty() {
            let k = self.queue.remove(0);
            if self.live(k).is_some() {
                continue;
            }
            let room = self.free() + self.entries.iter().filter(|e| self.evictable(e)).count();
            if room <= self.reserve {
                self.queue.clear();
                break;
            }
            let job = jobs.next().expect("the core started this guess too");
            assert_eq!(job.key, k, "guesses start in queue order");
            assert!(job.prefetch);
            self.start(k, job.id, true, 0);
            self.counts.prefetch_issued += 1;
            self.prefetched.insert(k);
        }
        assert!(jobs.next().is_none(), "the core started more guesses than the model");
    }

    fn complete(&mut self, id: LoadId, ok: bool) {
        let e = self.entries.iter().position(|e| e.state == ModelState::Loading(id)).unwrap();
        let load = self.loads.get_mut(&id).unwrap();
        load.pending = false;
        if self.entries[e].orphan {
            self.loads.remove(&id);
            self.entries.remove(e);
        } else if ok {
            self.loads.remove(&id);
            self.entries[e].state = ModelState::Ready;
        } else {
            self.counts.failed_loads += 1;
            load.failed = true;
            if load.waiters == 0 {
                self.loads.remove(&id);
            }
            let entry = self.entries.remove(e);
            self.prefetched.remove(&entry.key);
        }
    }

    fn clear(&mut self) {
        self.epoch += 1;
        self.queue.clear();
        self.prefetched.clear();
        self.loads.retain(|_, l| l.pending);
        self.entries.retain(|e| matches!(e.state, ModelState::Loading(_)));
        for e in &mut self.entries {
            e.orphan = true;
            e.pins = 0;
        }
    }

    /// (key, pins, loading, orphan) of every occupied slot, sorted.
    fn occupied(&self) -> Vec<(ExpertKey, u32, bool, bool)> {
        let mut v: Vec<_> = self
            .entries
            .iter()
            .map(|e| (e.key, e.pins, matches!(e.state, ModelState::Loading(_)), e.orphan))
            .collect();
        v.sort();
        v
    }
}

fn core_occupied(core: &PoolCore) -> Vec<(ExpertKey, u32, bool, bool)> {
    let mut v: Vec<_> = core
        .snapshot()
        .0
        .into_iter()
        .filter_map(|s| match s {
            SlotView::Free => None,
            SlotView::Loading { key, pins, orphan } => Some((key, pins, true, orphan)),
            SlotView::Ready { key, pins } => Some((key, pins, false, false)),
        })
        .collect();
    v.sort();
    v
}

fn core_counts(core: &PoolCore) -> Counts {
    let s = core.stats();
    Counts {
        hits: s.hits,
        late_hits: s.late_hits,
        misses: s.misses,
        evictions: s.evictions,
        failed_loads: s.failed_loads,
        prefetch_issued: s.prefetch_issued,
        prefetch_used: s.prefetch_used,
    }
}

// ---------------------------------------------------------------------------------------------------------
// The operations and the harness.

#[derive(Debug, Clone)]
enum Op {
    Demand(u32, Vec<u32>),
    Prefetch(u32, Vec<u32>),
    /// Finish the pending load at this index (mod the count); `true`: it fails.
    Complete(usize, bool),
    Poll(usize),
    Release(usize),
    Clear,
    /// The engine's steady state: demand, finish the demand's loads (failing none), poll, release.
    Cycle(u32, Vec<u32>),
}

fn arbitrary_config() -> impl Strategy<Value = PoolConfig> {
    let policy = prop_oneof![
        Just(EvictionPolicy::Lru),
        (0.25f64..4.0).prop_map(|h| EvictionPolicy::Hot { half_life_tokens: h }),
        Just(EvictionPolicy::Lfu),
        Just(EvictionPolicy::Cyclic),
    ];
    (1usize..=8, 1u32..=3, 2u32..=8, policy, 0usize..=3, 0usize..=2).prop_map(
        |(slots, layers, experts, policy, max_pf, reserve)| {
            let mut c = PoolConfig::new(slots, layers, experts);
            c.policy = policy;
            c.max_prefetch_in_flight = max_pf;
            c.prefetch_reserve = reserve;
            c
        },
    )
}

fn arbitrary_op(layers: u32, experts: u32) -> impl Strategy<Value = Op> {
    let ids = move || prop::collection::vec(0..experts, 1..=4);
    prop_oneof![
        4 => (0..layers, ids()).prop_map(|(l, ids)| Op::Demand(l, ids)),
        2 => (0..layers, ids()).prop_map(|(l, ids)| Op::Prefetch(l, ids)),
        5 => (any::<usize>(), prop::bool::weighted(0.15)).prop_map(|(i, f)| Op::Complete(i, f)),
        3 => any::<usize>().prop_map(Op::Poll),
        5 => any::<usize>().prop_map(Op::Release),
        1 => Just(Op::Clear),
        4 => (0..layers, ids()).prop_map(|(l, ids)| Op::Cycle(l, ids)),
    ]
}

fn arbitrary_case() -> impl Strategy<Value = (PoolConfig, Vec<Op>)> {
    arbitrary_config().prop_flat_map(|c| {
        let ops = prop::collection::vec(arbitrary_op(c.layers, c.experts), 1..100);
        (Just(c), ops)
    })
}

/// What the harness remembers of a demand beside its ticket or pins.
#[derive(Debug, Clone)]
struct Meta {
    keys: Vec<ExpertKey>,
    waits: Vec<Option<LoadId>>,
    epoch: u64,
}

struct Harness {
    core: PoolCore,
    model: Model,
    jobs: Vec<LoadJob>,
    waiting: Vec<(Ticket, Meta)>,
    held: Vec<(Pinned, Meta)>,
}

impl Harness {
    fn new(c: PoolConfig) -> Self {
        let model = Model::new(&c);
        Self {
            core: PoolCore::new(c).unwrap(),
            model,
            jobs: Vec::new(),
            waiting: Vec::new(),
            held: Vec::new(),
        }
    }

    fn check(&self, what: &str) {
        self.core.check_invariants().unwrap_or_else(|e| panic!("after {what}: {e}"));
        assert_eq!(core_counts(&self.core), self.model.counts, "counts after {what}");
        assert_eq!(core_occupied(&self.core), self.model.occupied(), "slots after {what}");
        assert_eq!(self.core.in_flight(), self.jobs.len(), "loads in flight after {what}");
        assert_eq!(self.core.queued(), self.model.queue.len(), "queued guesses after {what}");
        let (views, free) = self.core.snapshot();
        assert_eq!(free.len(), views.iter().filter(|v| **v == SlotView::Free).count());
        for (pinned, meta) in self.held.iter().filter(|(_, m)| m.epoch == self.model.epoch) {
            for (slot, key) in pinned.iter().zip(&meta.keys) {
                assert!(
                    matches!(views[slot.index()], SlotView::Ready { key: k, pins } if k == *key && pins > 0),
                    "{slot} should hold {key} pinned after {what}, holds {:?}",
                    views[slot.index()]
                );
            }
        }
    }

    fn finish(&mut self, meta: Meta, progress: Progress) {
        let expected = self.model.poll(meta.epoch, &meta.keys, &meta.waits);
        match (progress, expected) {
            (Progress::Waiting(ticket), None) => self.waiting.push((ticket, meta)),
            (Progress::Done(Ok(pinned)), Some(Ok(()))) => {
                assert_eq!(pinned.len(), meta.keys.len());
                self.held.push((pinned, meta));
            }
            (Progress::Done(Err(Error::Cleared)), Some(Err(true))) => {}
            (Progress::Done(Err(Error::Read { key, .. })), Some(Err(false))) => {
                assert!(meta.keys.contains(&key))
            }
            (got, want) => panic!("poll: core {got:?}, model {want:?}"),
        }
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Demand(layer, ids) => {
                let keys: Vec<_> = ids.iter().map(|&e| ExpertKey::new(*layer, e)).collect();
                let expect = self.model.expect_demand(&keys);
                match (self.core.demand(*layer, ids), expect) {
                    (Err(Error::PoolExhausted { .. }), Expect::Exhausted) => {}
                    (Ok((ticket, jobs)), Expect::Started { misses }) => {
                        assert_eq!(jobs.iter().map(|j| j.key).collect::<Vec<_>>(), misses);
                        assert!(jobs.iter().all(|j| !j.prefetch));
                        let waits = self.model.demand(*layer, &keys, &jobs);
                        assert_eq!(
                            ticket.waits().len(),
                            waits.iter().flatten().collect::<HashSet<_>>().len()
                        );
                        self.jobs.extend(jobs);
                        let meta = Meta { keys, waits, epoch: self.model.epoch };
                        // Poll at once: a demand of hits only is done.
                        let progress = self.core.poll(ticket);
                        self.finish(meta, progress);
                    }
                    (got, want) => panic!("demand {ids:?} of layer {layer}: core {got:?}, model {want:?}"),
                }
            }
            Op::Prefetch(layer, guesses) => {
                let jobs = self.core.prefetch(*layer, guesses).unwrap();
                self.model.prefetch(*layer, guesses);
                self.model.pump(&jobs);
                self.jobs.extend(jobs);
            }
            Op::Complete(i, fail) => {
                if self.jobs.is_empty() {
                    return;
                }
                let job = self.jobs.remove(i % self.jobs.len());
                let result = if *fail {
                    Err(Error::Read {
                        key: job.key,
                        source: std::sync::Arc::new(std::io::Error::other("injected")),
                    })
                } else {
                    Ok(())
                };
                let more = self.core.complete(job.id, LoadReport::default(), result);
                self.model.complete(job.id, !fail);
                self.model.pump(&more);
                self.jobs.extend(more);
            }
            Op::Poll(i) => {
                if self.waiting.is_empty() {
                    return;
                }
                let (ticket, meta) = self.waiting.remove(i % self.waiting.len());
                let progress = self.core.poll(ticket);
                self.finish(meta, progress);
            }
            Op::Release(i) => {
                if self.held.is_empty() {
                    return;
                }
                let (pinned, meta) = self.held.remove(i % self.held.len());
                // Pins from before a clear are gone; releasing them does nothing.
                if meta.epoch == self.model.epoch {
                    for k in &meta.keys {
                        self.model.unpin(*k);
                    }
                }
                self.core.release(pinned);
            }
            Op::Clear => {
                self.core.clear();
                self.model.clear();
            }
            Op::Cycle(layer, ids) => {
                let (jobs, waiting, held) = (self.jobs.len(), self.waiting.len(), self.held.len());
                self.apply(&Op::Demand(*layer, ids.clone()));
                if self.waiting.len() > waiting {
                    // Finish this demand's loads, newest first, then poll it.
                    while self.jobs.len() > jobs && self.waiting.len() > waiting {
                        self.apply(&Op::Complete(self.jobs.len() - 1, false));
                        let (ticket, meta) = self.waiting.pop().unwrap();
                        let progress = self.core.poll(ticket);
                        self.finish(meta, progress);
                    }
                }
                if self.held.len() > held {
                    self.apply(&Op::Release(self.held.len() - 1));
                }
            }
        }
    }

    /// Finishes every load, collects every demand, releases every pin and clears: every slot must end free,
    /// listed once.
    fn wind_down(&mut self) {
        while !self.jobs.is_empty() {
            self.apply(&Op::Complete(0, false));
            self.check("winding down loads");
        }
        while !self.waiting.is_empty() {
            self.apply(&Op::Poll(0));
        }
        assert!(self.waiting.is_empty(), "every demand finishes once its loads do");
        while !self.held.is_empty() {
            self.apply(&Op::Release(0));
        }
        self.check("releasing everything");
        let (views, _) = self.core.snapshot();
        assert!(views.iter().all(|v| matches!(v, SlotView::Free | SlotView::Ready { pins: 0, .. })));
        self.apply(&Op::Clear);
        self.check("the final clear");
        let (views, mut free) = self.core.snapshot();
        free.sort();
        assert_eq!(free, (0..views.len() as u32).map(diskformer_expert_stream::Slot).collect::<Vec<_>>());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn core_agrees_with_the_reference_model((config, ops) in arbitrary_case()) {
        let mut h = Harness::new(config);
        for (i, op) in ops.iter().enumerate() {
            h.apply(op);
            h.check(&format!("op {i} {op:?}"));
        }
        h.wind_down();
    }
}
