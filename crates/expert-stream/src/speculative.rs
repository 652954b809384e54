//! [`SpeculativeReads`]: records read from the store into host memory on a guess, before the pool asks for
//! them, so that the disk works while the GPU and the host do. A demand read of a guessed record becomes a
//! copy from memory; a demand read of anything else goes first, and a guess waits for it between pieces.
//!
//! Guesses never touch the pool's slots: nothing is evicted for them and no queued GPU work can read a slot
//! they changed, so they are safe while layers are queued ahead of the host's checks (route-ahead).

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use diskformer_store::{BUFFER_ALIGN, RecordBuf};

use crate::{BackendError, Error, ExpertKey, Result};

/// Reads bytes `start..start + dst.len()` of a record into `dst` (aligned as O_DIRECT needs).
pub type ReadPart = dyn Fn(ExpertKey, usize, &mut [u8]) -> Result<(), BackendError> + Send + Sync;

/// A fixed set of record buffers in host memory and one thread filling them with guessed records.
///
/// ```
/// use std::sync::Arc;
/// use diskformer_expert_stream::{ExpertKey, SpeculativeReads};
///
/// let record = |key: ExpertKey| vec![key.expert as u8; 8192];
/// let read = Arc::new(move |key: ExpertKey, start: usize, dst: &mut [u8]| {
///     dst.copy_from_slice(&record(key)[start..start + dst.len()]);
///     Ok(())
/// });
/// let spec = SpeculativeReads::new(read, 8192, 2, 4096)?;
/// spec.guess(&[ExpertKey::new(3, 7)]);
/// spec.drain(); // here, to be sure that its read started: a guess still queued is dropped by `take`
/// let held = spec.take(ExpertKey::new(3, 7)).expect("guessed and read");
/// assert!(held.bytes().iter().all(|&b| b == 7));
/// drop(held); // the buffer takes the next guess
/// assert!(spec.take(ExpertKey::new(3, 9)).is_none()); // never guessed: the caller reads it
/// assert_eq!(spec.stats().used, 1);
/// # Ok::<(), diskformer_expert_stream::Error>(())
/// ```
pub struct SpeculativeReads {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when a read finishes, a guess is queued, a demand read ends, a buffer comes back, or on stop.
    changed: Condvar,
    read: Arc<ReadPart>,
    record_bytes: usize,
    piece_bytes: usize,
}

struct State {
    buffers: Vec<Entry>,
    /// Buffers whose reads wait to start, nearest guess first.
    queue: VecDeque<usize>,
    /// Demand reads running now: a guess's read waits for them between its pieces.
    demand: usize,
    stats: SpeculativeStats,
    stop: bool,
}

struct Entry {
    key: Option<ExpertKey>,
    phase: Phase,
    /// The memory; `None` while the reader thread or a [`Held`] has it.
    data: Option<RecordBuf>,
    /// A demand waits for this read: it no longer yields to demand reads.
    wanted: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Free,
    Queued,
    Reading,
    Ready,
    Held,
}

/// What the speculative reads did since they started.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct SpeculativeStats {
    /// Guessed records whose reads started.
    pub started: u64,
    /// Reads that finished (the rest failed, or are running).
    pub read: u64,
    /// Bytes of the finished reads.
    pub bytes: u64,
    /// Guessed records that a demand then took (read already, or waited for).
    pub used: u64,
    /// Of `used`, those whose reads were still running when the demand came.
    pub waited: u64,
    /// Guesses dropped before their reads started (a newer guess list left them out, or a demand came first).
    pub dropped: u64,
    /// Records read and never taken: their buffers went to newer guesses.
    pub wasted: u64,
    /// Reads that failed (the demand then reads the record itself and reports any error).
    pub failed: u64,
    /// Time a guess's read waited for demand reads.
    pub yielded: Duration,
}

impl SpeculativeStats {
    /// `used / read`, or `None` before the first finished read.
    pub fn accuracy(&self) -> Option<f64> {
        (self.read > 0).then(|| self.used as f64 / self.read as f64)
    }
}

impl fmt::Display for SpeculativeStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pct = self.accuracy().map_or_else(|| "-".into(), |a| format!("{:.1} %", 100.0 * a));
        write!(
            f,
            "speculative reads: {} started, {} read ({:.1} MB), {} used ({} waited for, {pct}), {} dropped, \
             {} wasted, {} failed, {:.1} ms yielded to demand",
            self.started,
            self.read,
            self.bytes as f64 / 1e6,
            self.used,
            self.waited,
            self.dropped,
            self.wasted,
            self.failed,
            self.yielded.as_secs_f64() * 1e3
        )
    }
}

/// A guessed record lent to a demand read; its buffer goes back on drop.
pub struct Held {
    shared: Arc<Shared>,
    index: usize,
    data: Option<RecordBuf>,
}

impl Held {
    /// The record's bytes.
    pub fn bytes(&self) -> &[u8] {
        let data = self.data.as_ref().expect("held until drop");
        &data.as_slice()[..self.shared.record_bytes]
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        let entry = &mut state.buffers[self.index];
        entry.data = self.data.take();
        entry.key = None;
        entry.phase = Phase::Free;
        self.shared.changed.notify_all();
    }
}

/// A demand read in progress (see [`SpeculativeReads::demand`]); guesses go on when it drops.
pub struct DemandRead {
    shared: Arc<Shared>,
}

impl Drop for DemandRead {
    fn drop(&mut self) {
        self.shared.lock().demand -= 1;
        self.shared.changed.notify_all();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update is a few assignments under the lock, so a panic elsewhere leaves it consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed.wait(guard).unwrap_or_else(PoisonError::into_inner)
    }
}

impl SpeculativeReads {
    /// `buffers` record buffers of `record_bytes` each, filled by one thread through `read`, which it calls
    /// a piece of `piece_bytes` (whole [`BUFFER_ALIGN`] pages) at a time.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for no buffers, an empty record or a piece that is not whole pages;
    /// [`Error::Spawn`] when the thread cannot start.
    pub fn new(read: Arc<ReadPart>, record_bytes: usize, buffers: usize, piece_bytes: usize) -> Result<Self> {
        let invalid = |field, reason: String| Err(Error::InvalidConfig { field, reason });
        if buffers == 0 {
            return invalid("speculative buffers", "is 0; use at least 1, or no speculative reads".into());
        }
        if record_bytes == 0 {
            return invalid("record_bytes", "is 0".into());
        }
        if piece_bytes == 0 || !piece_bytes.is_multiple_of(BUFFER_ALIGN) {
            return invalid(
                "piece_bytes",
                format!("is {piece_bytes}; use a non-zero multiple of {BUFFER_ALIGN}"),
            );
        }
        let buffers = (0..buffers)
            .map(|_| Entry {
                key: None,
                phase: Phase::Free,
                data: Some(RecordBuf::new(record_bytes)),
                wanted: false,
            })
            .collect();
        let state = State {
            buffers,
            queue: VecDeque::new(),
            demand: 0,
            stats: SpeculativeStats::default(),
            stop: false,
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            changed: Condvar::new(),
            read,
            record_bytes,
            piece_bytes,
        });
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("expert-speculative".into())
                .spawn(move || reader(&shared))
                .map_err(|e| Error::Spawn(Arc::new(e)))?
        };
        Ok(Self { shared, thread: Some(thread) })
    }

    /// The record buffers.
    pub fn buffers(&self) -> usize {
        self.shared.lock().buffers.len()
    }

    /// Replaces the guesses: `keys`, nearest first, are the records likely needed next. Queued reads of
    /// records left out are dropped; records held already stay; the others take free buffers, then those
    /// of records read and not in `keys` (oldest first), while any are left. Reads running go on.
    pub fn guess(&self, keys: &[ExpertKey]) {
        let mut state = self.shared.lock();
        let state = &mut *state;
        let queue = std::mem::take(&mut state.queue);
        for i in queue {
            let entry = &mut state.buffers[i];
            if entry.key.is_some_and(|k| keys.contains(&k)) {
                state.queue.push_back(i);
            } else {
                *entry = Entry { key: None, phase: Phase::Free, data: entry.data.take(), wanted: false };
                state.stats.dropped += 1;
            }
        }
        for (n, &key) in keys.iter().enumerate() {
            if keys[..n].contains(&key) || state.buffers.iter().any(|e| e.key == Some(key)) {
                continue;
            }
            let free = state.buffers.iter().position(|e| e.phase == Phase::Free);
            // Ready buffers sit in the order their reads finished only roughly; any not guessed now will do.
            let stale = || {
                state
                    .buffers
                    .iter()
                    .position(|e| e.phase == Phase::Ready && e.key.is_some_and(|k| !keys.contains(&k)))
            };
            let Some(i) = free.or_else(stale) else { break };
            if state.buffers[i].phase == Phase::Ready {
                state.stats.wasted += 1;
            }
            let entry = &mut state.buffers[i];
            entry.key = Some(key);
            entry.phase = Phase::Queued;
            entry.wanted = false;
            state.queue.push_back(i);
        }
        self.shared.changed.notify_all();
    }

    /// The guessed record `key`: read already, or waited for while its read runs. `None` when it was not
    /// guessed, its read had not started (the guess is dropped: the caller reads it) or failed.
    pub fn take(&self, key: ExpertKey) -> Option<Held> {
        let mut state = self.shared.lock();
        let i = state.buffers.iter().position(|e| e.key == Some(key) && e.phase != Phase::Held)?;
        let mut waited = false;
        loop {
            let entry = &mut state.buffers[i];
            match entry.phase {
                Phase::Ready => {
                    entry.phase = Phase::Held;
                    let data = entry.data.take();
                    state.stats.used += 1;
                    state.stats.waited += u64::from(waited);
                    return Some(Held { shared: Arc::clone(&self.shared), index: i, data });
                }
                Phase::Reading => {
                    entry.wanted = true;
                    waited = true;
                    self.shared.changed.notify_all();
                    state = self.shared.wait(state);
                }
                Phase::Queued => {
                    state.queue.retain(|&q| q != i);
                    let entry = &mut state.buffers[i];
                    entry.key = None;
                    entry.phase = Phase::Free;
                    state.stats.dropped += 1;
                    return None;
                }
                // The read failed (its buffer was freed) or the buffer went elsewhere meanwhile.
                Phase::Free | Phase::Held => return None,
            }
            if state.buffers[i].key != Some(key) {
                return None;
            }
        }
    }

    /// Marks a demand read running until the guard drops: guesses wait for it between their pieces (a
    /// guess a demand waits for in [`take`](Self::take) does not).
    pub fn demand(&self) -> DemandRead {
        self.shared.lock().demand += 1;
        DemandRead { shared: Arc::clone(&self.shared) }
    }

    /// A copy of the counters.
    pub fn stats(&self) -> SpeculativeStats {
        self.shared.lock().stats.clone()
    }

    /// Zeroes the counters.
    pub fn reset_stats(&self) {
        self.shared.lock().stats = SpeculativeStats::default();
    }

    /// Waits until no guess is queued or being read (for tests and for a clean stop of a measurement).
    pub fn drain(&self) {
        let mut state = self.shared.lock();
        while !state.queue.is_empty() || state.buffers.iter().any(|e| e.phase == Phase::Reading) {
            state = self.shared.wait(state);
        }
    }
}

impl Drop for SpeculativeReads {
    /// Stops the thread after the piece it is reading.
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.changed.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl fmt::Debug for SpeculativeReads {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("SpeculativeReads")
            .field("buffers", &state.buffers.len())
            .field("queued", &state.queue.len())
            .field("stats", &state.stats)
            .finish_non_exhaustive()
    }
}

/// The thread: reads queued guesses nearest first, a piece at a time, each piece after any demand read.
fn reader(shared: &Shared) {
    let mut state = shared.lock();
    loop {
        if state.stop {
            return;
        }
        let Some(i) = state.queue.pop_front() else {
            state = shared.wait(state);
            continue;
        };
        let entry = &mut state.buffers[i];
        entry.phase = Phase::Reading;
        let key = entry.key.expect("a queued buffer has a key");
        let mut data = entry.data.take().expect("a queued buffer has its memory");
        state.stats.started += 1;
        let mut result = Ok(());
        let mut start = 0;
        while start < shared.record_bytes && result.is_ok() {
            let since = Instant::now();
            while state.demand > 0 && !state.buffers[i].wanted && !state.stop {
                state = shared.wait(state);
            }
            state.stats.yielded += since.elapsed();
            if state.stop {
                result = Err("stopped".into());
                break;
            }
            drop(state);
            let len = shared.piece_bytes.min(shared.record_bytes - start);
            result = (shared.read)(key, start, &mut data.as_mut_slice()[start..start + len]);
            start += len;
            state = shared.lock();
        }
        let entry = &mut state.buffers[i];
        entry.data = Some(data);
        entry.wanted = false;
        if result.is_ok() {
            entry.phase = Phase::Ready;
            state.stats.read += 1;
            state.stats.bytes += shared.record_bytes as u64;
        } else {
            entry.phase = Phase::Free;
            entry.key = None;
            state.stats.failed += u64::from(!state.stop);
        }
        shared.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    const RECORD: usize = 3 * 4096 + 100;

    fn fill(key: ExpertKey, start: usize, dst: &mut [u8]) {
        for (j, b) in dst.iter_mut().enumerate() {
            *b = (key.layer as usize * 31 + key.expert as usize * 7 + start + j) as u8;
        }
    }

    fn record(key: ExpertKey) -> Vec<u8> {
        let mut r = vec![0; RECORD];
        fill(key, 0, &mut r);
        r
    }

    /// Reads that block until `gate` lets a piece through (a count of pieces allowed), counting pieces.
    fn gated(gate: Arc<(Mutex<usize>, Condvar)>, pieces: Arc<AtomicUsize>) -> Arc<ReadPart> {
        Arc::new(move |key, start, dst| {
            let (lock, cv) = &*gate;
            let mut left = lock.lock().unwrap();
            while *left == 0 {
                left = cv.wait(left).unwrap();
            }
            *left -= 1;
            pieces.fetch_add(1, Ordering::SeqCst);
            fill(key, start, dst);
            Ok(())
        })
    }

    fn open(gate: &(Mutex<usize>, Condvar), n: usize) {
        *gate.0.lock().unwrap() += n;
        gate.1.notify_all();
    }

    fn free_read() -> Arc<ReadPart> {
        Arc::new(|key, start, dst| {
            fill(key, start, dst);
            Ok(())
        })
    }

    #[test]
    fn guessed_records_come_back_whole_and_others_do_not() {
        let spec = SpeculativeReads::new(free_read(), RECORD, 3, 4096).unwrap();
        let keys = [ExpertKey::new(0, 1), ExpertKey::new(2, 5)];
        spec.guess(&keys);
        spec.drain();
        for key in keys {
            assert_eq!(spec.take(key).unwrap().bytes(), &record(key)[..]);
        }
        assert!(spec.take(ExpertKey::new(0, 2)).is_none());
        let s = spec.stats();
        assert_eq!((s.started, s.read, s.used, s.bytes), (2, 2, 2, 2 * RECORD as u64));
        // Taken records are gone: a second demand reads them itself.
        assert!(spec.take(keys[0]).is_none());
    }

    #[test]
    fn a_newer_guess_list_drops_queued_reads_and_reuses_stale_buffers() {
        let gate = Arc::new((Mutex::new(0), Condvar::new()));
        let pieces = Arc::new(AtomicUsize::new(0));
        let spec = SpeculativeReads::new(gated(gate.clone(), pieces.clone()), RECORD, 2, 4096).unwrap();
        let (a, b, c, d) =
            (ExpertKey::new(1, 0), ExpertKey::new(1, 1), ExpertKey::new(1, 2), ExpertKey::new(1, 3));
        spec.guess(&[a, b]);
        open(&gate, 5); // a's 4 pieces and b's first
        while pieces.load(Ordering::SeqCst) < 5 {
            std::thread::yield_now();
        }
        // a is read, b is reading: c takes a's buffer (a wasted), d finds none left.
        spec.guess(&[c, d]);
        open(&gate, 100);
        spec.drain();
        assert!(spec.take(a).is_none());
        assert!(spec.take(d).is_none());
        assert_eq!(spec.take(c).unwrap().bytes(), &record(c)[..]);
        // A running read goes on although the newer list left it out.
        assert_eq!(spec.take(b).unwrap().bytes(), &record(b)[..]);
        let s = spec.stats();
        assert_eq!((s.started, s.read, s.wasted, s.dropped, s.used), (3, 3, 1, 0, 2), "{s}");

        // Queued reads a newer list leaves out are dropped.
        let (e, f, g) = (ExpertKey::new(2, 0), ExpertKey::new(2, 1), ExpertKey::new(2, 2));
        *gate.0.lock().unwrap() = 0;
        spec.guess(&[e, f]);
        while spec.stats().started < 4 {
            std::thread::yield_now(); // e is reading (blocked), f queued
        }
        spec.guess(&[e, g]);
        open(&gate, 100);
        spec.drain();
        assert!(spec.take(f).is_none());
        assert!(spec.take(g).is_some() && spec.take(e).is_some());
        assert_eq!(spec.stats().dropped, 1);
    }

    #[test]
    fn a_guess_waits_for_demand_reads_between_pieces() {
        let gate = Arc::new((Mutex::new(100), Condvar::new()));
        let pieces = Arc::new(AtomicUsize::new(0));
        let spec = SpeculativeReads::new(gated(gate, pieces.clone()), RECORD, 1, 4096).unwrap();
        let key = ExpertKey::new(0, 3);
        let demand = spec.demand();
        spec.guess(&[key]);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(pieces.load(Ordering::SeqCst), 0, "no piece is read while a demand read runs");
        drop(demand);
        spec.drain();
        assert_eq!(pieces.load(Ordering::SeqCst), 4);
        assert!(spec.stats().yielded >= Duration::from_millis(40));
    }

    #[test]
    fn a_demand_waits_for_a_running_read_and_gets_the_whole_record() {
        let gate = Arc::new((Mutex::new(0), Condvar::new()));
        let pieces = Arc::new(AtomicUsize::new(0));
        let spec =
            Arc::new(SpeculativeReads::new(gated(gate.clone(), pieces.clone()), RECORD, 1, 4096).unwrap());
        let key = ExpertKey::new(3, 3);
        spec.guess(&[key]);
        open(&gate, 1);
        while pieces.load(Ordering::SeqCst) < 1 {
            std::thread::yield_now();
        }
        let _busy = spec.demand(); // another demand read runs: the wanted guess goes on regardless
        let waiter = {
            let spec = Arc::clone(&spec);
            std::thread::spawn(move || spec.take(key).map(|h| h.bytes().to_vec()))
        };
        std::thread::sleep(Duration::from_millis(20));
        open(&gate, 3);
        assert_eq!(waiter.join().unwrap().unwrap(), record(key));
        let s = spec.stats();
        assert_eq!((s.used, s.waited), (1, 1), "{s}");
    }

    #[test]
    fn a_failed_read_is_counted_and_leaves_the_record_to_the_demand() {
        let read: Arc<ReadPart> = Arc::new(|key, start, dst| {
            if start > 0 {
                return Err(format!("disk gone at {key}").into());
            }
            fill(key, start, dst);
            Ok(())
        });
        let spec = SpeculativeReads::new(read, RECORD, 2, 4096).unwrap();
        let key = ExpertKey::new(0, 0);
        spec.guess(&[key]);
        spec.drain();
        assert!(spec.take(key).is_none());
        assert_eq!(spec.stats().failed, 1);
        // The buffer is free again.
        spec.guess(&[ExpertKey::new(0, 1)]);
        spec.drain();
        assert_eq!(spec.stats().started, 2);
    }

    #[test]
    fn bad_configs_are_refused() {
        assert!(matches!(
            SpeculativeReads::new(free_read(), RECORD, 0, 4096),
            Err(Error::InvalidConfig { .. })
        ));
        assert!(matches!(SpeculativeReads::new(free_read(), 0, 1, 4096), Err(Error::InvalidConfig { .. })));
        assert!(matches!(
            SpeculativeReads::new(free_read(), RECORD, 1, 1000),
            Err(Error::InvalidConfig { .. })
        ));
    }

    #[test]
    fn more_guesses_than_buffers_read_the_nearest() {
        let spec = SpeculativeReads::new(free_read(), RECORD, 2, 4096).unwrap();
        let keys: Vec<_> = (0..5).map(|e| ExpertKey::new(4, e)).collect();
        spec.guess(&keys);
        spec.drain();
        assert!(spec.take(keys[0]).is_some());
        assert!(spec.take(keys[1]).is_some());
        assert!(spec.take(keys[2]).is_none());
        assert_eq!(spec.stats().started, 2);
    }
}
