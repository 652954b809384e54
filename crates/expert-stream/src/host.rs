//! The host tier: expert records kept in host memory between the disk and the GPU, for stores larger than
//! the host's RAM (or read without the page cache). A store that fits in RAM is better served by the page
//! cache (the CPU tier maps it); past that, the page cache would evict and re-read records a page at a
//! time, so this tier reads whole records with O_DIRECT into a fixed budget of host memory and keeps the
//! most recently used ones ([`HostLru`]). The CPU tier computes from them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use diskformer_store::{BUFFER_ALIGN, RecordReader};

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
    /// `capacity × stride` bytes, page-aligned (anonymous memory: a page costs RAM once it is written).
    arena: memmap2::MmapMut,
    record_bytes: usize,
    /// A slot's bytes: the record rounded up to whole O_DIRECT blocks.
    stride: usize,
    readers: usize,
    stats: HostStats,
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
    /// [`Error::HostBudget`] (see [`host_slots`]), also when the host refuses the memory.
    pub fn new(reader: Arc<RecordReader>, budget: u64, min_records: usize, readers: usize) -> Result<Self> {
        let record_bytes = reader.layout().record_bytes as usize;
        let stride = record_bytes.next_multiple_of(BUFFER_ALIGN);
        let capacity = host_slots(budget, stride as u64, min_records.max(1), available_memory())?;
        // Never more slots than records.
        let capacity = capacity.min(reader.layout().n_records());
        let bytes = capacity * stride;
        let arena = memmap2::MmapMut::map_anon(bytes).map_err(|e| Error::HostBudget {
            budget,
            what: format!("the host could not map {} for it: {e}", gb(bytes as u64)),
        })?;
        Ok(HostRecords {
            reader,
            lru: HostLru::new(capacity),
            arena,
            record_bytes,
            stride,
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

    /// The slots holding `keys` (distinct), reading the ones not in host memory, in parallel.
    ///
    /// # Errors
    /// [`Error::Read`] naming the first record that failed (every failed slot is emptied);
    /// [`Error::InvalidConfig`] as [`HostLru::plan`].
    pub fn ensure(&mut self, keys: &[ExpertKey]) -> Result<Vec<usize>> {
        let plan = self.lru.plan(keys)?;
        self.stats.hits += (keys.len() - plan.reads.len()) as u64;
        if plan.reads.is_empty() {
            return Ok(plan.slots);
        }
        let started = Instant::now();
        let jobs: Vec<(ExpertKey, usize)> = plan.reads.iter().map(|&i| (keys[i], plan.slots[i])).collect();
        let failed = self.read_all(&jobs);
        self.stats.read_time += started.elapsed();
        let mut first = None;
        for ((key, slot), result) in jobs.iter().zip(failed) {
            match result {
                Ok(()) => {
                    self.stats.reads += 1;
                    self.stats.bytes += self.record_bytes as u64;
                }
                Err(e) => {
                    self.lru.forget(*slot);
                    first.get_or_insert(Error::Read { key: *key, source: Arc::new(e) });
                }
            }
        }
        first.map_or(Ok(plan.slots), Err)
    }

    /// The record in `slot` (as [`ensure`](Self::ensure) returned it).
    pub fn record(&self, slot: usize) -> &[u8] {
        &self.arena[slot * self.stride..][..self.record_bytes]
    }

    /// Reads each `(key, slot)`, spread over up to `readers` threads; one result a job.
    fn read_all(&mut self, jobs: &[(ExpertKey, usize)]) -> Vec<diskformer_store::Result<()>> {
        let (reader, stride) = (&self.reader, self.stride);
        // Each job's slot as its own slice: the slots of one call are distinct.
        let mut slices: Vec<Option<&mut [u8]>> = self.arena.chunks_exact_mut(stride).map(Some).collect();
        let mut work: Vec<(ExpertKey, &mut [u8])> =
            jobs.iter().map(|&(key, slot)| (key, slices[slot].take().expect("distinct slots"))).collect();
        let threads = self.readers.min(work.len());
        if threads <= 1 {
            return work.iter_mut().map(|(key, dst)| reader.read_into(*key, dst)).collect();
        }
        let per = work.len().div_ceil(threads);
        std::thread::scope(|scope| {
            let handles: Vec<_> = work
                .chunks_mut(per)
                .map(|chunk| {
                    scope.spawn(move || {
                        chunk.iter_mut().map(|(key, dst)| reader.read_into(*key, dst)).collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().flat_map(|h| h.join().expect("a record read does not panic")).collect()
        })
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
