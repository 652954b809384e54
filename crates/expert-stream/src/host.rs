//! The host tier: expert records kept in host memory between the disk and the GPU, for stores larger than
//! the host's RAM (or read without the page cache). A store that fits in RAM is better served by the page
//! cache (the CPU tier maps it); past that, the page cache would evict and re-read records a page at a
//! time, so this tier reads whole records with O_DIRECT into a fixed budget of host memory and keeps the
//! most recently used ones ([`HostLru`]). The CPU tier computes from them.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use diskformer_store::{BUFFER_ALIGN, RecordBuf, RecordReader};

use crate::budget::gb;
use crate::{Error, ExpertKey, Result};

/// Which record each host slot holds, evicting the least recently used: the policy of [`HostRecords`],
/// with no memory of its own.
#[derive(Clone, Debug)]
pub struct HostLru {
    map: HashMap<ExpertKey, usize>,
    /// Per slot: the record it holds and when it was last used (a key of `order`).
    owner: Vec<Option<(ExpertKey, u64)>>,
    /// Occupied slots by last use, oldest first.
    order: BTreeMap<u64, usize>,
    free: Vec<usize>,
    clock: u64,
}

/// Where [`HostLru::plan`] puts a call's records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostPlan {
    /// Per key, in call order: its slot.
    pub slots: Vec<usize>,
    /// Indices (into the call's keys) of the records to read into their slots.
    pub reads: Vec<usize>,
    /// Records that left to make room, in eviction order.
    pub evicted: Vec<ExpertKey>,
}

impl HostLru {
    /// `slots` empty slots.
    pub fn new(slots: usize) -> Self {
        HostLru {
            map: HashMap::new(),
            owner: vec![None; slots],
            order: BTreeMap::new(),
            free: (0..slots).rev().collect(),
            clock: 0,
        }
    }

    /// Slots in all.
    pub fn capacity(&self) -> usize {
        self.owner.len()
    }

    /// The slot holding `key`, if any.
    pub fn slot_of(&self, key: ExpertKey) -> Option<usize> {
        self.map.get(&key).copied()
    }

    /// Slots for `keys` (distinct): the ones held are used again, the others take a free slot or the least
    /// recently used one not among `keys`, and must be read. Every key of the call is then the most
    /// recently used, in call order.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for more keys than slots or a key given twice (nothing changes then).
    pub fn plan(&mut self, keys: &[ExpertKey]) -> Result<HostPlan> {
        if keys.len() > self.capacity() {
            return Err(Error::InvalidConfig {
                field: "ram_budget",
                reason: format!(
                    "holds {} records and one call needs {}; raise the budget",
                    self.capacity(),
                    keys.len()
                ),
            });
        }
        if let Some(key) = keys.iter().enumerate().find_map(|(i, k)| keys[..i].contains(k).then_some(k)) {
            return Err(Error::InvalidConfig {
                field: "keys",
                reason: format!("{key} is asked for twice in one call"),
            });
        }
        let mut plan = HostPlan { slots: vec![0; keys.len()], ..HostPlan::default() };
        // Hits first: once they are the most recent, the oldest slot is never one of this call's.
        for (i, key) in keys.iter().enumerate() {
            if let Some(slot) = self.slot_of(*key) {
                self.touch(slot, *key);
                plan.slots[i] = slot;
            }
        }
        for (i, key) in keys.iter().enumerate() {
            if self.map.contains_key(key) {
                continue;
            }
            let slot = match self.free.pop() {
                Some(slot) => slot,
                None => {
                    let (_, slot) = self.order.pop_first().expect("a full tier has an oldest slot");
                    let (old, _) = self.owner[slot].take().expect("an ordered slot is occupied");
                    self.map.remove(&old);
                    plan.evicted.push(old);
                    slot
                }
            };
            self.map.insert(*key, slot);
            self.touch(slot, *key);
            plan.slots[i] = slot;
            plan.reads.push(i);
        }
        Ok(plan)
    }

    /// Empties `slot` (its read failed: the bytes there are not its record).
    pub fn forget(&mut self, slot: usize) {
        if let Some((key, stamp)) = self.owner.get_mut(slot).and_then(Option::take) {
            self.map.remove(&key);
            self.order.remove(&stamp);
            self.free.push(slot);
        }
    }

    fn touch(&mut self, slot: usize, key: ExpertKey) {
        if let Some((_, stamp)) = self.owner[slot] {
            self.order.remove(&stamp);
        }
        self.clock += 1;
        self.owner[slot] = Some((key, self.clock));
        self.order.insert(self.clock, slot);
    }
}

/// What the host tier did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostStats {
    /// Records asked for that were in host memory.
    pub hits: u64,
    /// Records read from the disk.
    pub reads: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Time the calls that read spent reading (the reads of one call run in parallel).
    pub read_time: Duration,
}

/// Expert records in a fixed budget of host memory, read whole from the store (O_DIRECT where the reader
/// has it) by up to `readers` threads at once.
pub struct HostRecords {
    reader: Arc<RecordReader>,
    lru: HostLru,
    /// Per slot, its buffer once first used (host memory grows with the records read, up to the budget).
    /// Shared with the GPU's loads of records handed off ([`HostHandoff`]): a slot whose buffer a load still
    /// holds is read into a new one.
    buffers: Vec<Option<Arc<RecordBuf>>>,
    fresh: FreshBuffers,
    record_bytes: usize,
    readers: usize,
    stats: HostStats,
}

/// New record buffers made ahead on a thread of their own: a new buffer's first touch (1,224 page faults
/// and 5 MB zeroed at the Qwen3-30B-A3B shape) cost more than reading a record into it, so reads take
/// buffers already touched. The thread makes one buffer a slot, a few ahead of use.
struct FreshBuffers {
    ready: crossbeam_channel::Receiver<RecordBuf>,
    len: usize,
}

/// Buffers the thread keeps made ahead of use.
const FRESH_AHEAD: usize = 16;

impl FreshBuffers {
    /// Up to `total` buffers of `len` bytes; the thread stops when it made them or the receiver is gone.
    fn new(len: usize, total: usize) -> Self {
        let (tx, ready) = crossbeam_channel::bounded(FRESH_AHEAD);
        // Without the thread, buffers are made as they are needed.
        let _ = std::thread::Builder::new().name("host-tier-buffers".into()).spawn(move || {
            for _ in 0..total {
                if tx.send(RecordBuf::new(len)).is_err() {
                    return;
                }
            }
        });
        FreshBuffers { ready, len }
    }

    /// A buffer made ahead, or a new one when none waits.
    fn take(&self) -> RecordBuf {
        self.ready.try_recv().unwrap_or_else(|_| RecordBuf::new(self.len))
    }
}

/// Records the host tier holds that the GPU pool is about to load: its loads copy them from host memory
/// instead of reading the disk again ([`GpuBackend::with_handoff`](crate::GpuBackend::with_handoff)).
#[derive(Debug, Default)]
pub struct HostHandoff {
    records: Mutex<HashMap<ExpertKey, Arc<RecordBuf>>>,
}

/// Records a handoff holds at most: one not taken (its load was dropped) leaves when this many wait. A
/// prompt chunk offers a layer's misses at once (up to its experts: 128 for Qwen3-30B-A3B).
const HANDOFF_MAX: usize = 512;

impl HostHandoff {
    /// Offers `record` (the bytes of `key`, in a buffer of at least one record) to the next load of `key`.
    pub fn put(&self, key: ExpertKey, record: Arc<RecordBuf>) {
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        if records.len() >= HANDOFF_MAX {
            records.clear();
        }
        records.insert(key, record);
    }

    /// The record offered for `key`, if any (taken: a later load reads the disk).
    pub fn take(&self, key: ExpertKey) -> Option<Arc<RecordBuf>> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner).remove(&key)
    }
}

impl std::fmt::Debug for HostRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostRecords")
            .field("capacity", &self.capacity())
            .field("record_bytes", &self.record_bytes)
            .field("readers", &self.readers)
            .finish()
    }
}

/// The number of records `budget` bytes of host memory hold, `stride` bytes each, checked against the
/// fewest a step needs (`min_records`) and what the host has available (`available`, `None` where unknown).
///
/// # Errors
/// [`Error::HostBudget`] with the numbers when the budget holds too few records or exceeds `available`.
pub fn host_slots(budget: u64, stride: u64, min_records: usize, available: Option<u64>) -> Result<usize> {
    let slots = budget / stride.max(1);
    if slots < min_records as u64 {
        let need = min_records as u64 * stride;
        return Err(Error::HostBudget {
            budget,
            what: format!(
                "holds {slots} records of {:.2} MB, and a layer's picks need {min_records} ({}); raise it to \
                 at least {}",
                stride as f64 / 1e6,
                gb(need),
                gb(need)
            ),
        });
    }
    if let Some(available) = available.filter(|&a| budget > a) {
        return Err(Error::HostBudget {
            budget,
            what: format!(
                "the host has {} available (MemAvailable); lower the budget below that",
                gb(available)
            ),
        });
    }
    Ok(usize::try_from(slots).unwrap_or(usize::MAX))
}

/// The host's available memory (`MemAvailable` of `/proc/meminfo`), where the system says.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

impl HostRecords {
    /// A host tier of `budget` bytes over `reader`'s records, holding at least `min_records`.
    ///
    /// # Errors
    /// [`Error::HostBudget`] (see [`host_slots`]).
    pub fn new(reader: Arc<RecordReader>, budget: u64, min_records: usize, readers: usize) -> Result<Self> {
        let record_bytes = reader.layout().record_bytes as usize;
        let stride = record_bytes.next_multiple_of(BUFFER_ALIGN);
        let capacity = host_slots(budget, stride as u64, min_records.max(1), available_memory())?;
        // Never more slots than records.
        let capacity = capacity.min(reader.layout().n_records());
        Ok(HostRecords {
            reader,
            lru: HostLru::new(capacity),
            buffers: vec![None; capacity],
            fresh: FreshBuffers::new(record_bytes, capacity),
            record_bytes,
            readers: readers.max(1),
            stats: HostStats::default(),
        })
    }

    /// Records it holds at most.
    pub fn capacity(&self) -> usize {
        self.lru.capacity()
    }

    /// What it did so far.
    pub fn stats(&self) -> HostStats {
        self.stats
    }

    /// Zeroes the counters (the records stay).
    pub fn reset_stats(&mut self) {
        self.stats = HostStats::default();
    }

    /// The slots holding `keys` (distinct), reading the ones not in host memory, in parallel: [`begin`],
    /// [`HostFetch::read`] and [`finish`] in one.
    ///
    /// # Errors
    /// As [`begin`] and [`finish`].
    ///
    /// [`begin`]: Self::begin
    /// [`finish`]: Self::finish
    pub fn ensure(&mut self, keys: &[ExpertKey]) -> Result<Vec<usize>> {
        let mut fetch = self.begin(keys)?;
        fetch.read();
        let slots = fetch.slots.clone();
        self.finish(fetch)?;
        Ok(slots)
    }

    /// Starts a call for `keys` (distinct): the records held are shared at once, and each of the others
    /// gets its slot and a buffer (taken out of the slot) for [`HostFetch::read`], which may run on
    /// another thread while the held ones are used; [`finish`](Self::finish) puts the buffers back.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] as [`HostLru::plan`].
    pub fn begin(&mut self, keys: &[ExpertKey]) -> Result<HostFetch> {
        let plan = self.lru.plan(keys)?;
        let mut records: Vec<Option<Arc<RecordBuf>>> = vec![None; keys.len()];
        let mut reads = Vec::with_capacity(plan.reads.len());
        let mut next_read = plan.reads.iter().peekable();
        for (i, (&key, &slot)) in keys.iter().zip(&plan.slots).enumerate() {
            // A slot without its buffer (a call never finished) is read again.
            if next_read.next_if_eq(&&i).is_some() || self.buffers[slot].is_none() {
                // A buffer a handed-off load still holds stays with it; the slot gets a new one.
                let buffer = match self.buffers[slot].take().map(Arc::try_unwrap) {
                    Some(Ok(buffer)) => buffer,
                    _ => self.fresh.take(),
                };
                reads.push(PendingRead { index: i, key, slot, buffer, result: None });
            } else {
                records[i] = self.buffers[slot].clone();
            }
        }
        self.stats.hits += (keys.len() - reads.len()) as u64;
        Ok(HostFetch {
            reader: Arc::clone(&self.reader),
            readers: self.readers,
            slots: plan.slots,
            records,
            reads,
            read_time: Duration::ZERO,
        })
    }

    /// Ends a call: each read buffer goes back to its slot, and the call's records come back in key order.
    ///
    /// # Errors
    /// [`Error::Read`] naming the first record that failed or was not read (every such slot is emptied).
    pub fn finish(&mut self, fetch: HostFetch) -> Result<Vec<Arc<RecordBuf>>> {
        let HostFetch { mut records, reads, read_time, .. } = fetch;
        self.stats.read_time += read_time;
        let mut first = None;
        for read in reads {
            match read.result {
                Some(Ok(())) => {
                    self.stats.reads += 1;
                    self.stats.bytes += self.record_bytes as u64;
                    let buffer = Arc::new(read.buffer);
                    self.buffers[read.slot] = Some(Arc::clone(&buffer));
                    records[read.index] = Some(buffer);
                }
                failed => {
                    self.lru.forget(read.slot);
                    self.buffers[read.slot] = Some(Arc::new(read.buffer));
                    let source: Arc<dyn std::error::Error + Send + Sync> = match failed {
                        Some(Err(e)) => Arc::new(e),
                        _ => Arc::from(Box::<dyn std::error::Error + Send + Sync>::from("it was never read")),
                    };
                    first.get_or_insert(Error::Read { key: read.key, source });
                }
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(records.into_iter().map(|r| r.expect("every record held or read")).collect()),
        }
    }

    /// The record in `slot` (as [`ensure`](Self::ensure) returned it).
    pub fn record(&self, slot: usize) -> &[u8] {
        &self.shared(slot).as_slice()[..self.record_bytes]
    }

    /// The buffer of `slot` (as [`ensure`](Self::ensure) returned it): a slot whose buffer is shared when
    /// its next record is read gets a new one.
    pub fn shared(&self, slot: usize) -> &Arc<RecordBuf> {
        self.buffers[slot].as_ref().expect("a slot ensure returned holds a record")
    }
}

/// One call of the host tier between [`HostRecords::begin`] and [`HostRecords::finish`]: the records it
/// holds already, and the ones to read, each into a buffer of its own.
pub struct HostFetch {
    reader: Arc<RecordReader>,
    readers: usize,
    /// Per key, its slot.
    slots: Vec<usize>,
    /// Per key, its record's buffer when held (the read ones join at `finish`).
    records: Vec<Option<Arc<RecordBuf>>>,
    reads: Vec<PendingRead>,
    read_time: Duration,
}

struct PendingRead {
    /// The key's index in the call.
    index: usize,
    key: ExpertKey,
    slot: usize,
    buffer: RecordBuf,
    result: Option<diskformer_store::Result<()>>,
}

impl std::fmt::Debug for HostFetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostFetch").field("slots", &self.slots).field("reads", &self.reads.len()).finish()
    }
}

impl HostFetch {
    /// The records held already: (key index, buffer), shared for as long as the caller keeps them.
    pub fn held_records(&self) -> Vec<(usize, Arc<RecordBuf>)> {
        let held = self.records.iter().enumerate();
        held.filter_map(|(i, r)| r.as_ref().map(|r| (i, Arc::clone(r)))).collect()
    }

    /// The buffer of key `index` when held already (to hand off).
    pub fn held_buffer(&self, index: usize) -> Option<&Arc<RecordBuf>> {
        self.records.get(index).and_then(Option::as_ref)
    }

    /// Whether any record must be read.
    pub fn needs_reads(&self) -> bool {
        self.reads.iter().any(|r| r.result.is_none())
    }

    /// Reads the records not held, spread over up to `readers` threads (the call's own included).
    pub fn read(&mut self) {
        let started = Instant::now();
        let reader = &self.reader;
        let mut work: Vec<&mut PendingRead> = self.reads.iter_mut().filter(|r| r.result.is_none()).collect();
        if work.is_empty() {
            return;
        }
        let read = |r: &mut &mut PendingRead| r.result = Some(reader.read(r.key, &mut r.buffer));
        let threads = self.readers.min(work.len());
        if threads <= 1 {
            work.iter_mut().for_each(read);
        } else {
            let per = work.len().div_ceil(threads);
            std::thread::scope(|scope| {
                for chunk in work.chunks_mut(per) {
                    scope.spawn(move || chunk.iter_mut().for_each(read));
                }
            });
        }
        self.read_time += started.elapsed();
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// LRU as written down: records by last use, oldest first.
    #[derive(Default)]
    struct Model {
        order: Vec<ExpertKey>,
    }

    impl Model {
        /// The records read and evicted for `keys` with `capacity` slots.
        fn plan(&mut self, capacity: usize, keys: &[ExpertKey]) -> (Vec<usize>, Vec<ExpertKey>) {
            let hits: Vec<ExpertKey> = keys.iter().copied().filter(|k| self.order.contains(k)).collect();
            self.order.retain(|k| !hits.contains(k));
            self.order.extend(&hits);
            let (mut reads, mut evicted) = (Vec::new(), Vec::new());
            for (i, key) in keys.iter().enumerate() {
                if hits.contains(key) {
                    continue;
                }
                if self.order.len() == capacity {
                    evicted.push(self.order.remove(0));
                }
                self.order.push(*key);
                reads.push(i);
            }
            (reads, evicted)
        }
    }

    fn key(layer: u32, expert: u32) -> ExpertKey {
        ExpertKey::new(layer, expert)
    }

    proptest! {
        #[test]
        fn plans_match_the_written_down_lru(
            capacity in 1usize..12,
            calls in prop::collection::vec(prop::collection::btree_set((0u32..3, 0u32..10), 1..6), 1..40),
        ) {
            let mut lru = HostLru::new(capacity);
            let mut model = Model::default();
            for call in calls {
                let keys: Vec<ExpertKey> = call.iter().map(|&(l, e)| key(l, e)).collect();
                if keys.len() > capacity {
                    prop_assert!(lru.plan(&keys).is_err());
                    continue;
                }
                let plan = lru.plan(&keys).unwrap();
                let (reads, evicted) = model.plan(capacity, &keys);
                prop_assert_eq!(&plan.reads, &reads);
                prop_assert_eq!(&plan.evicted, &evicted);
                // Every key holds its own slot, and no two share one.
                for (k, s) in keys.iter().zip(&plan.slots) {
                    prop_assert_eq!(lru.slot_of(*k), Some(*s));
                }
                let mut slots = plan.slots.clone();
                slots.sort_unstable();
                slots.dedup();
                prop_assert_eq!(slots.len(), keys.len());
                prop_assert!(slots.iter().all(|&s| s < capacity));
            }
        }
    }

    #[test]
    fn a_forgotten_slot_is_read_again_and_reused_first() {
        let mut lru = HostLru::new(2);
        let first = lru.plan(&[key(0, 1), key(0, 2)]).unwrap();
        lru.forget(first.slots[0]);
        assert_eq!(lru.slot_of(key(0, 1)), None);
        let again = lru.plan(&[key(0, 1)]).unwrap();
        assert_eq!((again.reads.clone(), again.evicted.clone()), (vec![0], vec![]));
        assert_eq!(again.slots, vec![first.slots[0]]);
        assert_eq!(lru.slot_of(key(0, 2)), Some(first.slots[1]));
    }

    #[test]
    fn too_many_or_repeated_keys_are_refused_and_change_nothing() {
        let mut lru = HostLru::new(2);
        lru.plan(&[key(0, 1)]).unwrap();
        let err = lru.plan(&[key(0, 1), key(0, 2), key(0, 3)]).unwrap_err().to_string();
        assert!(err.contains("holds 2 records and one call needs 3"), "{err}");
        let err = lru.plan(&[key(0, 2), key(0, 2)]).unwrap_err().to_string();
        assert!(err.contains("asked for twice"), "{err}");
        assert_eq!(lru.slot_of(key(0, 2)), None);
        assert_eq!(lru.plan(&[key(0, 1)]).unwrap().reads, Vec::<usize>::new());
    }

    #[test]
    fn budgets_are_refused_with_the_numbers() {
        const STRIDE: u64 = 5_013_504;
        assert_eq!(host_slots(10 * STRIDE + 7, STRIDE, 8, Some(u64::MAX)).unwrap(), 10);
        assert_eq!(host_slots(8 * STRIDE, STRIDE, 8, None).unwrap(), 8);
        let err = host_slots(7 * STRIDE, STRIDE, 8, None).unwrap_err().to_string();
        for part in ["holds 7 records of 5.01 MB", "need 8 (0.04 GB)", "at least 0.04 GB"] {
            assert!(err.contains(part), "{part:?} missing from {err:?}");
        }
        let err = host_slots(64_000_000_000, STRIDE, 8, Some(31_500_000_000)).unwrap_err().to_string();
        for part in ["64.00 GB", "31.50 GB available"] {
            assert!(err.contains(part), "{part:?} missing from {err:?}");
        }
    }
}
