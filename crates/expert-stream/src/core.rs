//! The pool's policy as a plain state machine: no threads, no clocks, no device.
//!
//! [`PoolCore`] decides which slot each record goes to, who is pinned, what is evicted and which guesses are
//! loaded; it hands out [`LoadJob`]s and is told when each finishes ([`PoolCore::complete`]). [`ExpertPool`]
//! runs the jobs on reader threads; the simulator and the property tests drive it directly, choosing the
//! order in which loads finish.
//!
//! [`ExpertPool`]: crate::ExpertPool

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::ops::Deref;
use std::time::Duration;

use crate::heat::{HeatClock, Score};
use crate::{Error, EvictionPolicy, ExpertKey, LoadId, PoolConfig, Result, Slot, Stats};

/// One record to read and upload into one slot. Whoever runs it reports back with [`PoolCore::complete`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadJob {
    /// Pass this back to [`PoolCore::complete`].
    pub id: LoadId,
    /// The record to read.
    pub key: ExpertKey,
    /// The slot to upload it into.
    pub slot: Slot,
    /// Started by [`PoolCore::prefetch`] rather than by a demand miss.
    pub prefetch: bool,
}

/// What a finished load cost, for the stats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Bytes the backend read.
    pub bytes: u64,
    /// Time spent reading.
    pub read: Duration,
    /// Time spent uploading.
    pub upload: Duration,
}

/// Slots returned by `ensure`, in the order of the ids asked for, each pinned until
/// [`release`](PoolCore::release).
///
/// Release it after the submit that reads the slots. Slots pinned before a `clear` are unpinned by it;
/// releasing such a `Pinned` afterwards does nothing.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "release the slots after the submit that reads them, or they stay pinned"]
pub struct Pinned {
    slots: Vec<Slot>,
    epoch: u64,
}

impl Pinned {
    /// The slots, one per id asked for, in that order.
    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }
}

impl Deref for Pinned {
    type Target = [Slot];
    fn deref(&self) -> &[Slot] {
        &self.slots
    }
}

/// A demand in progress: its slots are chosen and pinned, some loads are still running.
#[derive(Debug)]
#[must_use = "poll the ticket until it is done, or its pins leak"]
pub struct Ticket {
    epoch: u64,
    slots: Vec<Slot>,
    /// The load each position waits for, if any (misses and late hits).
    loads: Vec<Option<LoadId>>,
    /// The distinct loads of `loads`.
    waits: Vec<LoadId>,
}

impl Ticket {
    /// The loads this demand waits for (its misses and late hits).
    pub fn waits(&self) -> &[LoadId] {
        &self.waits
    }
}

/// The answer of [`PoolCore::poll`].
#[derive(Debug)]
pub enum Progress {
    /// Every load the demand needed has finished.
    Done(Result<Pinned>),
    /// Some load is still running; poll again after the next [`PoolCore::complete`].
    Waiting(Ticket),
}

/// Where one slot stands, as [`PoolCore::snapshot`] shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotView {
    /// Holds nothing.
    Free,
    /// A record is being read into it (`orphan`: started before a `clear`; freed when it finishes).
    Loading {
        /// The record.
        key: ExpertKey,
        /// Pins held by `ensure`s waiting for it.
        pins: u32,
        /// Started before a `clear`.
        orphan: bool,
    },
    /// Holds a record.
    Ready {
        /// The record.
        key: ExpertKey,
        /// Pins held.
        pins: u32,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    Loading(LoadId),
    Ready,
}

#[derive(Debug, Clone, Copy)]
struct SlotInfo {
    state: State,
    key: Option<ExpertKey>,
    pins: u32,
    /// When it was last demanded (or when its prefetch started): the LRU order.
    stamp: u64,
    /// The `tick` (count of demands) of that moment, for the cyclic policy.
    tick: u64,
    /// Its entry in `order` while it is evictable.
    order: Option<(Score, u64)>,
}

#[derive(Debug)]
enum Outcome {
    Pending,
    Failed(Error),
}

#[derive(Debug)]
struct Load {
    key: ExpertKey,
    slot: u32,
    prefetch: bool,
    /// Tickets waiting for it that have not yet collected a failure.
    waiters: u32,
    orphan: bool,
    outcome: Outcome,
}

/// The expert pool's policy: slots, pins, eviction order, late hits, the prefetch queue and the stats.
///
/// Invariants (checked by [`check_invariants`](Self::check_invariants)): every slot is free, loading or
/// ready; a key is in at most one live slot; only ready, unpinned slots are evicted; the free list holds
/// every free slot exactly once.
#[derive(Debug)]
pub struct PoolCore {
    config: PoolConfig,
    clock: HeatClock,
    slots: Vec<SlotInfo>,
    /// Free slots; the last pops first (slot 0 first in a new pool).
    free: Vec<u32>,
    /// Key → slot of every loading (not orphaned) or ready record.
    index: HashMap<ExpertKey, u32>,
    /// Evictable slots (ready, unpinned).
    order: Order,
    heat: HashMap<ExpertKey, Score>,
    loads: HashMap<LoadId, Load>,
    queue: VecDeque<ExpertKey>,
    /// Keys loaded by prefetch and not demanded since.
    prefetched: HashSet<ExpertKey>,
    prefetch_in_flight: usize,
    tick: u64,
    /// The layer of the last demand (the cyclic policy measures distances from it).
    current_layer: u32,
    stamp: u64,
    next_load: u64,
    epoch: u64,
    stats: Stats,
}

impl PoolCore {
    /// An empty pool.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when [`PoolConfig::validate`] refuses `config`.
    pub fn new(config: PoolConfig) -> Result<Self> {
        config.validate()?;
        let half_life_ticks = match config.policy {
            EvictionPolicy::Lru | EvictionPolicy::Lfu | EvictionPolicy::Cyclic => f64::INFINITY,
            EvictionPolicy::Hot { half_life_tokens } => {
                (half_life_tokens * f64::from(config.layers)).max(1.0)
            }
        };
        let empty = SlotInfo { state: State::Free, key: None, pins: 0, stamp: 0, tick: 0, order: None };
        Ok(Self {
            clock: HeatClock::new(half_life_ticks),
            slots: vec![empty; config.slots],
            free: (0..config.slots as u32).rev().collect(),
            index: HashMap::new(),
            order: Order::new(config.layers),
            heat: HashMap::new(),
            loads: HashMap::new(),
            queue: VecDeque::new(),
            prefetched: HashSet::new(),
            prefetch_in_flight: 0,
            tick: 0,
            current_layer: 0,
            stamp: 0,
            next_load: 0,
            epoch: 0,
            stats: Stats::new(config.layers),
            config,
        })
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// Starts a demand for `ids` of `layer`: pins hits (moving them to most recent), joins loads already
    /// running (late hits), and picks slots for misses, evicting as needed. Queued guesses for this layer and
    /// earlier ones are dropped first. The returned jobs must be run (demand first), then
    /// [`poll`](Self::poll) the ticket.
    ///
    /// Nothing changes when it fails.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] for an id past the model; [`Error::PoolExhausted`] when the misses need more
    /// slots than are free or evictable.
    pub fn demand(&mut self, layer: u32, ids: &[u32]) -> Result<(Ticket, Vec<LoadJob>)> {
        let keys = ids.iter().map(|&e| self.key(layer, e)).collect::<Result<Vec<_>>>()?;
        self.check_room(&keys)?;

        self.tick += 1;
        self.current_layer = layer;
        self.queue.retain(|k| k.layer > layer);

        let mut slots = vec![Slot(0); keys.len()];
        let mut loads = vec![None; keys.len()];
        let mut misses = Vec::new();
        // Pass 1: pin everything resident or loading, so no miss below can evict it.
        for (i, &key) in keys.iter().enumerate() {
            let score = self.clock.touch(self.heat.get(&key).copied(), self.tick);
            self.heat.insert(key, score);
            if self.prefetched.remove(&key) {
                self.stats.prefetch_used += 1;
            }
            match self.index.get(&key).copied() {
                Some(s) => {
                    self.stamp += 1;
                    (self.slots[s as usize].stamp, self.slots[s as usize].tick) = (self.stamp, self.tick);
                    self.pin(s);
                    slots[i] = Slot(s);
                    if let State::Loading(id) = self.slots[s as usize].state {
                        self.stats.late_hits += 1;
                        loads[i] = Some(id);
                    } else {
                        self.stats.hits += 1;
                    }
                    self.stats.hits_by_layer[layer as usize] += 1;
                }
                None => misses.push(i),
            }
        }
        // Pass 2: misses; a key asked for twice is a miss once and a late hit once.
        let mut jobs = Vec::new();
        for i in misses {
            let key = keys[i];
            if let Some(&s) = self.index.get(&key) {
                let State::Loading(id) = self.slots[s as usize].state else { unreachable!("loads only") };
                self.pin(s);
                self.stats.late_hits += 1;
                self.stats.hits_by_layer[layer as usize] += 1;
                (slots[i], loads[i]) = (Slot(s), Some(id));
                continue;
            }
            let s = self.take_slot().expect("room was checked");
            let job = self.start_load(key, s, false, 1);
            self.stats.misses += 1;
            self.stats.misses_by_layer[layer as usize] += 1;
            (slots[i], loads[i]) = (Slot(s), Some(job.id));
            jobs.push(job);
        }

        let mut waits: Vec<LoadId> = loads.iter().flatten().copied().collect();
        waits.sort_unstable();
        waits.dedup();
        for id in &waits {
            self.loads.get_mut(id).expect("waited loads exist").waiters += 1;
        }
        Ok((Ticket { epoch: self.epoch, slots, loads, waits }, jobs))
    }

    /// Finishes a demand once every load it waits for has finished.
    ///
    /// If a load failed, the demand's other pins are dropped and the first failure is returned (the failed
    /// slot is already free). If the pool was cleared meanwhile, [`Error::Cleared`].
    pub fn poll(&mut self, ticket: Ticket) -> Progress {
        if ticket.epoch != self.epoch {
            return Progress::Done(Err(Error::Cleared));
        }
        let pending = |id| matches!(self.loads.get(id), Some(Load { outcome: Outcome::Pending, .. }));
        if ticket.waits.iter().any(pending) {
            return Progress::Waiting(ticket);
        }
        // A load no longer in `loads` succeeded; one still there failed and keeps its error for its waiters.
        let mut error = None;
        let mut failed = Vec::new();
        for id in &ticket.waits {
            if let Some(load) = self.loads.get_mut(id) {
                if let Outcome::Failed(e) = &load.outcome {
                    error.get_or_insert_with(|| e.clone());
                }
                failed.push(*id);
                load.waiters -= 1;
                if load.waiters == 0 {
                    self.loads.remove(id);
                }
            }
        }
        match error {
            None => Progress::Done(Ok(Pinned { slots: ticket.slots, epoch: ticket.epoch })),
            Some(e) => {
                for (slot, load) in ticket.slots.iter().zip(&ticket.loads) {
                    if !load.is_some_and(|id| failed.contains(&id)) {
                        self.unpin(slot.0);
                    }
                }
                Progress::Done(Err(e))
            }
        }
    }

    /// Unpins `pinned`'s slots (after the submit that reads them); they become evictable when no other pin
    /// holds them. Slots pinned before the last `clear` are ignored.
    pub fn release(&mut self, pinned: Pinned) {
        if pinned.epoch != self.epoch {
            return;
        }
        for slot in pinned.slots {
            self.unpin(slot.0);
        }
    }

    /// Queues guesses for `layer` that are not resident, loading or queued, and starts as many as
    /// `max_prefetch_in_flight` allows. Call it nearest layer first. Returns the loads to start now.
    ///
    /// A guess that finds no slot to spare (beyond `prefetch_reserve` free or evictable ones) clears the
    /// queue: prefetch gives up quietly rather than evict what demand is using.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] for a guess past the model (nothing is queued then).
    pub fn prefetch(&mut self, layer: u32, guesses: &[u32]) -> Result<Vec<LoadJob>> {
        let keys = guesses.iter().map(|&e| self.key(layer, e)).collect::<Result<Vec<_>>>()?;
        if self.config.max_prefetch_in_flight == 0 {
            return Ok(Vec::new());
        }
        for key in keys {
            if !self.index.contains_key(&key) && !self.queue.contains(&key) {
                self.queue.push_back(key);
            }
        }
        Ok(self.pump())
    }

    /// Records that load `id` finished: with `result` `Ok`, the record is in its slot and becomes resident
    /// (evictable once unpinned); with `Err`, the slot is freed and every demand waiting for it gets the
    /// error. Returns queued prefetch loads that may start now.
    ///
    /// Unknown ids are ignored.
    pub fn complete(&mut self, id: LoadId, report: LoadReport, result: Result<()>) -> Vec<LoadJob> {
        let Some(load) = self.loads.get_mut(&id) else { return Vec::new() };
        if !matches!(load.outcome, Outcome::Pending) {
            return Vec::new();
        }
        self.stats.bytes_read += report.bytes;
        self.stats.read_time += report.read;
        self.stats.upload_time += report.upload;
        if load.prefetch {
            self.prefetch_in_flight -= 1;
        }
        let (key, s) = (load.key, load.slot);
        if load.orphan {
            self.loads.remove(&id);
            self.free_slot(s);
        } else {
            match result {
                Ok(()) => {
                    self.loads.remove(&id);
                    self.slots[s as usize].state = State::Ready;
                    if self.slots[s as usize].pins == 0 {
                        self.make_evictable(s);
                    }
                }
                Err(e) => {
                    self.stats.failed_loads += 1;
                    if load.waiters > 0 {
                        load.outcome = Outcome::Failed(e);
                    } else {
                        self.loads.remove(&id);
                    }
                    self.index.remove(&key);
                    self.prefetched.remove(&key);
                    self.free_slot(s);
                }
            }
        }
        self.pump()
    }

    /// Empties the pool: drops the prefetch queue, every resident record and every pin. Loads still running
    /// become orphans: their slots are freed when they finish. Demands still waiting get [`Error::Cleared`].
    /// Heat and stats are kept.
    pub fn clear(&mut self) {
        self.epoch += 1;
        self.queue.clear();
        self.prefetched.clear();
        self.index.clear();
        self.order = Order::new(self.config.layers);
        self.loads.retain(|_, load| matches!(load.outcome, Outcome::Pending));
        for load in self.loads.values_mut() {
            load.orphan = true;
        }
        self.free.clear();
        for (s, slot) in self.slots.iter_mut().enumerate().rev() {
            slot.pins = 0;
            slot.order = None;
            if !matches!(slot.state, State::Loading(_)) {
                (slot.state, slot.key) = (State::Free, None);
                self.free.push(s as u32);
            }
        }
    }

    /// Records that a demand waited for running loads to land before it had room.
    pub fn add_room_wait(&mut self) {
        self.stats.room_waits += 1;
    }

    /// Records that an `ensure` caller was blocked for `wait`.
    pub fn add_wait_time(&mut self, wait: Duration) {
        self.stats.wait_time += wait;
    }

    /// The counters so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Zeroes the counters (and forgets which resident records came from prefetch).
    pub fn reset_stats(&mut self) {
        self.stats = Stats::new(self.config.layers);
        self.prefetched.clear();
    }

    /// Records resident (loaded; loads still running are not counted).
    pub fn resident(&self) -> usize {
        self.slots.iter().filter(|s| s.state == State::Ready).count()
    }

    /// Whether `key` is resident, and in which slot.
    pub fn slot_of(&self, key: ExpertKey) -> Option<Slot> {
        let s = *self.index.get(&key)?;
        (self.slots[s as usize].state == State::Ready).then_some(Slot(s))
    }

    /// Loads started and not yet completed (demand, prefetch and orphans).
    pub fn in_flight(&self) -> usize {
        self.loads.values().filter(|l| matches!(l.outcome, Outcome::Pending)).count()
    }

    /// Guesses queued, not yet started.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Every slot's state, in slot order, and the free list (next to pop last).
    pub fn snapshot(&self) -> (Vec<SlotView>, Vec<Slot>) {
        let views = self
            .slots
            .iter()
            .map(|s| match (s.state, s.key) {
                (State::Ready, Some(key)) => SlotView::Ready { key, pins: s.pins },
                (State::Loading(id), Some(key)) => {
                    SlotView::Loading { key, pins: s.pins, orphan: self.loads[&id].orphan }
                }
                _ => SlotView::Free,
            })
            .collect();
        (views, self.free.iter().map(|&s| Slot(s)).collect())
    }

    /// Checks the internal invariants; for tests and debugging.
    ///
    /// # Errors
    ///
    /// A description of the first broken invariant.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut in_free = vec![false; self.slots.len()];
        for &s in &self.free {
            let slot = self.slots.get(s as usize).ok_or(format!("free list holds slot {s} past the pool"))?;
            if std::mem::replace(&mut in_free[s as usize], true) {
                return Err(format!("slot {s} is on the free list twice"));
            }
            if slot.state != State::Free {
                return Err(format!("slot {s} is on the free list but {:?}", slot.state));
            }
        }
        let mut prefetching = 0;
        for (s, slot) in self.slots.iter().enumerate() {
            let evictable = slot.state == State::Ready && slot.pins == 0;
            let listed = slot
                .order
                .zip(slot.key)
                .is_some_and(|(o, k)| self.order.sets[k.layer as usize].contains(&(o, s as u32)));
            if evictable != listed {
                return Err(format!("slot {s} evictable={evictable} disagrees with the eviction order"));
            }
            match slot.state {
                State::Free if !in_free[s] => {
                    return Err(format!("slot {s} is free but not on the free list"));
                }
                State::Free if slot.pins > 0 || slot.key.is_some() => {
                    return Err(format!("free slot {s} is held"));
                }
                State::Free => {}
                State::Loading(id) => {
                    let load = self.loads.get(&id).ok_or(format!("slot {s} loads unknown {id:?}"))?;
                    if load.slot != s as u32 || Some(load.key) != slot.key {
                        return Err(format!("slot {s} and its load disagree"));
                    }
                    prefetching += usize::from(load.prefetch);
                    if load.orphan && (slot.pins > 0 || self.index.get(&load.key) == Some(&(s as u32))) {
                        return Err(format!("orphan load in slot {s} is pinned or indexed"));
                    }
                    if !load.orphan && self.index.get(&load.key) != Some(&(s as u32)) {
                        return Err(format!("loading slot {s} is not indexed"));
                    }
                }
                State::Ready => {
                    let key = slot.key.ok_or(format!("ready slot {s} has no key"))?;
                    if self.index.get(&key) != Some(&(s as u32)) {
                        return Err(format!("ready slot {s} ({key}) is not indexed"));
                    }
                }
            }
        }
        if self.index.len() != self.slots.iter().filter(|s| s.state != State::Free).count() - self.orphans() {
            return Err("a key is indexed to a slot that does not hold it".to_owned());
        }
        let listed: usize = self.order.sets.iter().map(BTreeSet::len).sum();
        if self.order.len != listed || listed != self.slots.iter().filter(|s| s.order.is_some()).count() {
            return Err("the eviction order holds stale entries".to_owned());
        }
        if prefetching != self.prefetch_in_flight {
            return Err(format!(
                "{prefetching} prefetch loads but prefetch_in_flight {}",
                self.prefetch_in_flight
            ));
        }
        Ok(())
    }

    fn orphans(&self) -> usize {
        self.loads.values().filter(|l| l.orphan).count()
    }

    fn key(&self, layer: u32, expert: u32) -> Result<ExpertKey> {
        let key = ExpertKey { layer, expert };
        if layer >= self.config.layers || expert >= self.config.experts {
            return Err(Error::OutOfRange { key, layers: self.config.layers, experts: self.config.experts });
        }
        Ok(key)
    }

    /// Fails with [`Error::PoolExhausted`] unless the distinct new keys fit in free plus evictable slots, not
    /// counting evictable slots that this demand hits (it pins them first).
    fn check_room(&self, keys: &[ExpertKey]) -> Result<()> {
        let mut new = Vec::new();
        let mut hit = Vec::new();
        for key in keys {
            match self.index.get(key) {
                Some(&s) if self.slots[s as usize].order.is_some() && !hit.contains(&s) => hit.push(s),
                Some(_) => {}
                None if !new.contains(key) => new.push(*key),
                None => {}
            }
        }
        let room = self.free.len() + self.order.len - hit.len();
        if new.len() <= room {
            return Ok(());
        }
        let pinned = self.slots.iter().filter(|s| s.pins > 0).count();
        let loading = self.slots.iter().filter(|s| matches!(s.state, State::Loading(_))).count();
        Err(Error::PoolExhausted {
            slots: self.slots.len(),
            pinned,
            loading,
            needed: new.len() - room,
            wanted: self.slots.len() + new.len() - room,
        })
    }

    fn order_key(&self, s: u32) -> (Score, u64) {
        let slot = &self.slots[s as usize];
        let score = match self.config.policy {
            EvictionPolicy::Lru | EvictionPolicy::Cyclic => Score(0.0),
            _ => slot.key.and_then(|k| self.heat.get(&k).copied()).unwrap_or(Score::COLD),
        };
        (score, slot.stamp)
    }

    fn make_evictable(&mut self, s: u32) {
        let key = self.order_key(s);
        let slot = &mut self.slots[s as usize];
        slot.order = Some(key);
        self.order.insert(slot.key.expect("ready slots hold a key").layer, key, s);
    }

    /// Takes slot `s` out of the eviction order, if it is there.
    fn unlist(&mut self, s: u32) {
        let slot = &mut self.slots[s as usize];
        if let (Some(key), Some(k)) = (slot.order.take(), slot.key) {
            self.order.remove(k.layer, key, s);
        }
    }

    fn pin(&mut self, s: u32) {
        self.unlist(s);
        self.slots[s as usize].pins += 1;
    }

    fn unpin(&mut self, s: u32) {
        let slot = &mut self.slots[s as usize];
        debug_assert!(slot.pins > 0, "unpinning slot {s} with no pins");
        slot.pins = slot.pins.saturating_sub(1);
        if slot.pins == 0 && slot.state == State::Ready {
            self.make_evictable(s);
        }
    }

    fn free_slot(&mut self, s: u32) {
        self.unlist(s);
        let slot = &mut self.slots[s as usize];
        (slot.state, slot.key, slot.pins) = (State::Free, None, 0);
        self.free.push(s);
    }

    /// The evictable slot the policy gives up first.
    fn victim(&self) -> Option<u32> {
        // Within a layer every policy's order is a plain ordered set; across layers it is the least of the
        // firsts, except for the cyclic policy, which weighs each layer's oldest by its distance in the
        // cycle.
        let firsts = self.order.sets.iter().filter_map(|set| set.first().copied());
        let best = match self.config.policy {
            EvictionPolicy::Cyclic => firsts.max_by_key(|&(_, s)| {
                let slot = &self.slots[s as usize];
                let (layers, now) = (u64::from(self.config.layers), u64::from(self.current_layer));
                let layer = u64::from(slot.key.expect("ready slots hold a key").layer);
                let delta = if layer == now { layers } else { (layer + layers - now) % layers };
                let age = self.tick - slot.tick;
                (delta + layers * (age / layers), age, Reverse(slot.stamp))
            }),
            _ => firsts.min(),
        };
        best.map(|(_, s)| s)
    }

    /// A free slot, else the first evictable one (evicting its record).
    fn take_slot(&mut self) -> Option<u32> {
        if let Some(s) = self.free.pop() {
            return Some(s);
        }
        let s = self.victim()?;
        self.unlist(s);
        let slot = &mut self.slots[s as usize];
        let key = slot.key.take().expect("ready slots hold a key");
        slot.state = State::Free;
        self.index.remove(&key);
        self.prefetched.remove(&key);
        self.stats.evictions += 1;
        Some(s)
    }

    fn start_load(&mut self, key: ExpertKey, s: u32, prefetch: bool, pins: u32) -> LoadJob {
        let id = LoadId(self.next_load);
        self.next_load += 1;
        self.stamp += 1;
        self.slots[s as usize] = SlotInfo {
            state: State::Loading(id),
            key: Some(key),
            pins,
            stamp: self.stamp,
            tick: self.tick,
            order: None,
        };
        self.index.insert(key, s);
        self.loads.insert(
            id,
            Load { key, slot: s, prefetch, waiters: 0, orphan: false, outcome: Outcome::Pending },
        );
        LoadJob { id, key, slot: Slot(s), prefetch }
    }

    /// Starts queued guesses while fewer than `max_prefetch_in_flight` run.
    fn pump(&mut self) -> Vec<LoadJob> {
        let mut jobs = Vec::new();
        while self.prefetch_in_flight < self.config.max_prefetch_in_flight {
            let Some(key) = self.queue.pop_front() else { break };
            if self.index.contains_key(&key) {
                continue;
            }
            if self.free.len() + self.order.len <= self.config.prefetch_reserve {
                self.queue.clear();
                break;
            }
            let s = self.take_slot().expect("room was checked");
            jobs.push(self.start_load(key, s, true, 0));
            self.prefetch_in_flight += 1;
            self.stats.prefetch_issued += 1;
            self.prefetched.insert(key);
        }
        jobs
    }
}

/// Evictable slots (ready, unpinned): one ordered set per layer, keyed by (heat score, stamp), first out
/// first.
#[derive(Debug)]
struct Order {
    sets: Vec<BTreeSet<((Score, u64), u32)>>,
    len: usize,
}

impl Order {
    fn new(layers: u32) -> Self {
        Self { sets: vec![BTreeSet::new(); layers as usize], len: 0 }
    }

    fn insert(&mut self, layer: u32, key: (Score, u64), s: u32) {
        if self.sets[layer as usize].insert((key, s)) {
            self.len += 1;
        }
    }

    fn remove(&mut self, layer: u32, key: (Score, u64), s: u32) {
        if self.sets[layer as usize].remove(&(key, s)) {
            self.len -= 1;
        }
    }
}
