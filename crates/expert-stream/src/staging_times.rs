//! Where staged uploads spend the reader threads' time ([`StagingTimes`]): waiting for a ring buffer whose
//! last copy the device has not finished, filling it (the read, the check and the host copy), and submitting
//! its copy. A load bound by the first waits on the GPU's queue (its copies run after the work submitted
//! before them); by the second, on the host's copy rate; by the third, on wgpu's queue.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Staged pieces and their time, summed over the threads that staged them (since the pool was made or
/// the times were last reset).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StagingTimes {
    /// Pieces staged (a record is one or more).
    pub pieces: u64,
    /// Waiting for a ring buffer to be mapped again: its previous copy done on the device.
    pub ring_wait: Duration,
    /// Filling mapped staging memory: the read (and check) and the host copy.
    pub fill: Duration,
    /// Recording and submitting the copies into the slot.
    pub submit: Duration,
}

/// The counters behind [`StagingTimes`], added to by many threads.
#[derive(Debug, Default)]
pub(crate) struct StagingClock {
    pieces: AtomicU64,
    ring_wait_ns: AtomicU64,
    fill_ns: AtomicU64,
    submit_ns: AtomicU64,
}

impl StagingClock {
    /// Counts one staged piece and its three times.
    pub(crate) fn add(&self, ring_wait: Duration, fill: Duration, submit: Duration) {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.pieces.fetch_add(1, Ordering::Relaxed);
        self.ring_wait_ns.fetch_add(ns(ring_wait), Ordering::Relaxed);
        self.fill_ns.fetch_add(ns(fill), Ordering::Relaxed);
        self.submit_ns.fetch_add(ns(submit), Ordering::Relaxed);
    }

    pub(crate) fn times(&self) -> StagingTimes {
        let d = |a: &AtomicU64| Duration::from_nanos(a.load(Ordering::Relaxed));
        StagingTimes {
            pieces: self.pieces.load(Ordering::Relaxed),
            ring_wait: d(&self.ring_wait_ns),
            fill: d(&self.fill_ns),
            submit: d(&self.submit_ns),
        }
    }

    pub(crate) fn reset(&self) {
        for a in [&self.pieces, &self.ring_wait_ns, &self.fill_ns, &self.submit_ns] {
            a.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_add_up_from_many_threads_and_reset_to_zero() {
        let clock = StagingClock::default();
        let ms = Duration::from_millis;
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| (0..10).for_each(|_| clock.add(ms(1), ms(2), ms(3))));
            }
        });
        let t = clock.times();
        assert_eq!((t.pieces, t.ring_wait, t.fill, t.submit), (40, ms(40), ms(80), ms(120)));
        clock.reset();
        assert_eq!(clock.times(), StagingTimes::default());
    }
}
