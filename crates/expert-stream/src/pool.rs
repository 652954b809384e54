//! [`ExpertPool`]: the policy core behind a mutex, with reader threads running its loads.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use crate::core::{LoadJob, LoadReport, Progress};
use crate::{Backend, Error, ExpertKey, Pinned, PoolConfig, PoolCore, Result, Slot, Stats};

/// The expert slot pool: [`PoolCore`]'s policy with loads run on reader threads through a [`Backend`].
///
/// Every method takes `&self`; the pool can be shared between threads. Demand misses go to `readers` threads
/// and prefetch loads to `max_prefetch_in_flight` others, so guesses never hold up a demand read.
pub struct ExpertPool<B: Backend> {
    shared: Arc<Shared<B>>,
    demand_tx: Option<Sender<LoadJob>>,
    threads: Vec<JoinHandle<()>>,
}

struct Shared<B> {
    inner: Mutex<Inner>,
    /// Signalled whenever a load finishes or the pool is cleared.
    changed: Condvar,
    backend: B,
}

struct Inner {
    core: PoolCore,
    /// Taken on drop so the prefetch readers end.
    prefetch_tx: Option<Sender<LoadJob>>,
}

impl Inner {
    fn dispatch_prefetch(&self, jobs: Vec<LoadJob>) {
        for job in jobs {
            if let Some(tx) = &self.prefetch_tx {
                // The receivers live as long as the pool.
                let _ = tx.send(job);
            }
        }
    }
}

impl<B> Shared<B> {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The core is never left half-updated by a panic (backend calls run outside the lock), so a poisoned
        // lock still guards a consistent state.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, Inner>) -> MutexGuard<'a, Inner> {
        self.changed.wait(guard).unwrap_or_else(PoisonError::into_inner)
    }
}

impl<B: Backend> ExpertPool<B> {
    /// A pool over `backend` shaped by `config`, with its reader threads started.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a bad config, [`Error::Spawn`] when a thread cannot start.
    pub fn new(backend: B, config: PoolConfig) -> Result<Self> {
        let core = PoolCore::new(config.clone())?;
        let (demand_tx, demand_rx) = crossbeam_channel::unbounded();
        let (prefetch_tx, prefetch_rx) = crossbeam_channel::unbounded();
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner { core, prefetch_tx: Some(prefetch_tx) }),
            changed: Condvar::new(),
            backend,
        });
        let mut pool = Self { shared, demand_tx: Some(demand_tx), threads: Vec::new() };
        let readers = (0..config.readers).map(|i| (format!("expert-reader-{i}"), &demand_rx, false));
        let prefetchers =
            (0..config.max_prefetch_in_flight).map(|i| (format!("expert-prefetch-{i}"), &prefetch_rx, true));
        for (name, rx, prefetch) in readers.chain(prefetchers) {
            let (shared, rx) = (Arc::clone(&pool.shared), rx.clone());
            let thread = std::thread::Builder::new()
                .name(name)
                .spawn(move || reader(&shared, &rx, prefetch))
                .map_err(|e| Error::Spawn(Arc::new(e)))?;
            pool.threads.push(thread);
        }
        Ok(pool)
    }

    /// Returns pinned slots holding `ids` of `layer`, in the order of `ids`, once every one is loaded: hits
    /// at once, late hits (loads already running) waited for, misses read and uploaded in parallel. Queued
    /// guesses for this layer and earlier ones are dropped. [`release`](Self::release) the slots after the
    /// submit that reads them.
    ///
    /// # Errors
    ///
    /// - [`Error::OutOfRange`] for an id past the model; [`Error::PoolExhausted`] when the misses do not fit
    ///   even where the loads running landed (nothing is pinned or loaded then).
    /// - [`Error::Read`], [`Error::ShortRead`], [`Error::Upload`] or [`Error::BackendPanicked`] naming the
    ///   record when a load it needed failed; the failed slot is free and nothing stays pinned.
    /// - [`Error::Cleared`] when [`clear`](Self::clear) ran while it waited.
    pub fn ensure(&self, layer: u32, ids: &[u32]) -> Result<Pinned> {
        self.ensure_meanwhile(layer, ids, || false)
    }

    /// As [`ensure`](Self::ensure), and when it has loads to wait for, calls `meanwhile` once those are
    /// handed to the readers, without the pool's lock (it may call the pool), and again while they run
    /// until it returns `false` (it has nothing more to do); not once the loads are done. So work done in
    /// steps (one readback each) stops holding up the caller when the loads are.
    ///
    /// # Errors
    ///
    /// As [`ensure`](Self::ensure).
    pub fn ensure_meanwhile(
        &self,
        layer: u32,
        ids: &[u32],
        mut meanwhile: impl FnMut() -> bool,
    ) -> Result<Pinned> {
        let mut inner = self.shared.lock();
        let (mut ticket, jobs) = loop {
            match inner.core.demand(layer, ids) {
                // Loads still running (guesses, the CPU tier's admissions) take slots that turn evictable when
                // they land: where that would make room, wait for them before calling the pool too small.
                Err(Error::PoolExhausted { needed, loading, .. }) if needed <= loading => {
                    inner.core.add_room_wait();
                    inner = self.shared.wait(inner);
                }
                demanded => break demanded?,
            }
        };
        let demand_tx = self.demand_tx.as_ref().expect("senders live until drop");
        for job in jobs {
            let _ = demand_tx.send(job);
        }
        let mut more = true;
        let mut blocked = None;
        loop {
            match inner.core.poll(ticket) {
                Progress::Done(result) => {
                    if let Some(since) = blocked {
                        inner.core.add_wait_time(Instant::elapsed(&since));
                    }
                    return result;
                }
                Progress::Waiting(t) => {
                    ticket = t;
                    blocked.get_or_insert_with(Instant::now);
                    if more {
                        drop(inner);
                        more = meanwhile();
                        inner = self.shared.lock();
                        continue;
                    }
                    inner = self.shared.wait(inner);
                }
            }
        }
    }

    /// Unpins slots returned by [`ensure`](Self::ensure); call it after the submit that reads them.
    pub fn release(&self, pinned: Pinned) {
        self.shared.lock().core.release(pinned);
    }

    /// Starts loading guesses for `layer` that are not resident, loading or queued, at most
    /// `max_prefetch_in_flight` at once; the rest wait in a queue. Never blocks on a load. Returns the number
    /// of loads started now. Call it nearest layer first.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] for a guess past the model (nothing is queued then).
    pub fn prefetch(&self, layer: u32, guesses: &[u32]) -> Result<usize> {
        let mut inner = self.shared.lock();
        let jobs = inner.core.prefetch(layer, guesses)?;
        let started = jobs.len();
        inner.dispatch_prefetch(jobs);
        Ok(started)
    }

    /// Empties the pool: drops queued guesses, resident records and pins, waits for the loads still running,
    /// and returns with every slot free. `ensure`s waiting meanwhile fail with [`Error::Cleared`].
    pub fn clear(&self) {
        let mut inner = self.shared.lock();
        inner.core.clear();
        self.shared.changed.notify_all();
        while inner.core.in_flight() > 0 {
            inner = self.shared.wait(inner);
        }
    }

    /// Waits until no load runs and no guess is queued.
    pub fn drain(&self) {
        let mut inner = self.shared.lock();
        while inner.core.in_flight() > 0 || inner.core.queued() > 0 {
            inner = self.shared.wait(inner);
        }
    }

    /// Records resident (loads still running are not counted).
    pub fn resident(&self) -> usize {
        self.shared.lock().core.resident()
    }

    /// The slot holding `key`, if it is resident.
    pub fn slot_of(&self, key: crate::ExpertKey) -> Option<Slot> {
        self.shared.lock().core.slot_of(key)
    }

    /// A copy of the counters.
    pub fn stats(&self) -> Stats {
        self.shared.lock().core.stats().clone()
    }

    /// Zeroes the counters.
    pub fn reset_stats(&self) {
        self.shared.lock().core.reset_stats();
    }

    /// The configuration it was built with.
    pub fn config(&self) -> PoolConfig {
        self.shared.lock().core.config().clone()
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.shared.backend
    }

    /// Runs `f` on the policy core under the pool's lock (for snapshots and invariant checks).
    pub fn inspect<R>(&self, f: impl FnOnce(&PoolCore) -> R) -> R {
        f(&self.shared.lock().core)
    }
}

impl<B: Backend> Drop for ExpertPool<B> {
    /// Stops the reader threads after the loads already handed to them.
    fn drop(&mut self) {
        self.demand_tx = None;
        self.shared.lock().prefetch_tx = None;
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl<B: Backend> std::fmt::Debug for ExpertPool<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExpertPool").field("core", &*self.shared.lock()).finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.core.fmt(f)
    }
}

/// A reader thread: runs loads until its channel closes, reporting each to the core; `prefetch` for the
/// threads of prefetch loads.
fn reader<B: Backend>(shared: &Shared<B>, jobs: &Receiver<LoadJob>, prefetch: bool) {
    let mut staging = shared.backend.staging(prefetch);
    for job in jobs {
        let (report, result) = load(&shared.backend, job.key, job.slot, &mut staging);
        if matches!(result, Err(Error::BackendPanicked { .. })) {
            staging = shared.backend.staging(prefetch);
        }
        let mut inner = shared.lock();
        let more = inner.core.complete(job.id, report, result);
        inner.dispatch_prefetch(more);
        shared.changed.notify_all();
    }
}

/// Reads record `key` through `staging` and uploads it into `slot`, as the pool's reader threads load
/// each record: for slots the pool's core does not manage (a `GpuPool` arena's). A record read short, or a
/// backend that panicked, is an error naming the record.
///
/// # Errors
/// [`Error::Read`], [`Error::ShortRead`], [`Error::Upload`] or [`Error::BackendPanicked`].
pub fn load_record<B: Backend>(
    backend: &B,
    key: ExpertKey,
    slot: Slot,
    staging: &mut B::Staging,
) -> Result<()> {
    load(backend, key, slot, staging).1
}

/// Reads and uploads one record, timing both.
fn load<B: Backend>(
    backend: &B,
    key: ExpertKey,
    slot: Slot,
    staging: &mut B::Staging,
) -> (LoadReport, Result<()>) {
    let mut report = LoadReport::default();
    let start = Instant::now();
    let read = catch_unwind(AssertUnwindSafe(|| backend.read(key, slot, staging)));
    report.read = start.elapsed();
    let got = match read {
        Err(_) => return (report, Err(Error::BackendPanicked { key })),
        Ok(Err(e)) => return (report, Err(Error::Read { key, source: e.into() })),
        Ok(Ok(got)) => got,
    };
    report.bytes = got as u64;
    let expected = backend.record_bytes();
    if got != expected {
        return (report, Err(Error::ShortRead { key, got, expected }));
    }
    let start = Instant::now();
    let upload = catch_unwind(AssertUnwindSafe(|| backend.upload(slot, staging)));
    report.upload = start.elapsed();
    let result = match upload {
        Err(_) => Err(Error::BackendPanicked { key }),
        Ok(Err(e)) => Err(Error::Upload { key, slot, source: e.into() }),
        Ok(Ok(())) => Ok(()),
    };
    (report, result)
}
