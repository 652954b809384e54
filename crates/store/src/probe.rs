//! How many reader threads a disk serves fastest: a short burst of random record reads at each candidate
//! count. Disks differ here: a local NVMe drive wants many reads in flight, while others serve one
//! outstanding read fastest (the H200 machine's disk read 5 MB records at 1.6 GB/s from 1 thread and
//! 1.25 GB/s from 8, and cold decode ran 37 % faster with 1 reader than with 8; BENCHMARKS.md).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crate::error::{Error, Result};
use crate::layout::ExpertKey;
use crate::store::{RecordBuf, RecordReader, part_bytes};

/// A count within this fraction of the fastest counts as fast: fewer threads win such near-ties (less
/// staging memory, less contention with the engine's own threads).
const NEAR_TIE: f64 = 0.95;

/// The read rate of one thread count.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ThreadsRate {
    /// Reader threads.
    pub threads: usize,
    /// Record bytes read per second, all threads together.
    pub bytes_per_sec: f64,
}

/// What [`RecordReader::probe_readers`] measured.
#[derive(Clone, Debug, PartialEq)]
pub struct ReaderProbe {
    /// Each candidate's rate, in the order measured.
    pub rates: Vec<ThreadsRate>,
    /// The fewest threads within 5 % of the fastest rate.
    pub best: usize,
}

impl RecordReader {
    /// Reads `records` records, the `i`th that of `key(i)`, from `threads` threads at once, each record in
    /// `pieces` reads one after another (parts of [`part_bytes`] bytes, as the engine's demand loads read
    /// them), and returns the record bytes read per second.
    ///
    /// # Errors
    /// [`Error::BadProbe`] for zero threads, records or pieces; read errors as [`RecordReader::read`].
    pub fn read_rate(
        &self,
        threads: usize,
        records: usize,
        pieces: usize,
        key: impl Fn(usize) -> ExpertKey + Sync,
    ) -> Result<f64> {
        if threads == 0 || records == 0 || pieces == 0 {
            return Err(Error::BadProbe {
                what: format!(
                    "{threads} threads, {records} records, {pieces} pieces; each must be at least 1"
                ),
            });
        }
        let record = self.layout().record_bytes as usize;
        let part = part_bytes(record, pieces);
        let next = AtomicUsize::new(0);
        let started = Instant::now();
        std::thread::scope(|s| -> Result<()> {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| -> Result<()> {
                        let mut buf = RecordBuf::new(record);
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            if i >= records {
                                return Ok(());
                            }
                            for (at, dst) in
                                (0..record).step_by(part).zip(buf.as_mut_slice().chunks_mut(part))
                            {
                                self.read_part_into(key(i), at, dst, part.min(record - at))?;
                            }
                        }
                    })
                })
                .collect();
            workers.into_iter().try_for_each(|w| w.join().expect("a reader thread panicked"))
        })?;
        let secs = started.elapsed().as_secs_f64().max(1e-9);
        Ok((records * record) as f64 / secs)
    }

    /// Reads `records` random records at each thread count of `candidates` (after a warm-up read, so that
    /// the first count does not pay for a disk waking up) and returns the rates and the count to use.
    /// Through the page cache this measures memory, not the disk: meant for O_DIRECT readers.
    ///
    /// # Errors
    /// [`Error::BadProbe`] for no candidates, a zero count or `records` fewer than the largest count; read
    /// errors as [`RecordReader::read`].
    pub fn probe_readers(&self, candidates: &[usize], records: usize) -> Result<ReaderProbe> {
        let most = candidates.iter().copied().max().unwrap_or(0);
        if candidates.contains(&0) || most == 0 || records < most {
            return Err(Error::BadProbe {
                what: format!(
                    "thread counts {candidates:?} with {records} records; each count must be at least 1 \
                     and records at least the largest count"
                ),
            });
        }
        let layout = self.layout();
        let n = layout.n_records();
        // Records picked by an LCG over record numbers, a different run of them per measurement.
        let key = |i: usize| layout.key((i.wrapping_mul(2_654_435_761) + 12_345) % n);
        let mut buf = RecordBuf::new(layout.record_bytes as usize);
        self.read(key(0), &mut buf)?;
        let mut rates = Vec::with_capacity(candidates.len());
        for (m, &threads) in candidates.iter().enumerate() {
            let first = 1 + m * records;
            let bytes_per_sec = self.read_rate(threads, records, 1, |i| key(first + i))?;
            rates.push(ThreadsRate { threads, bytes_per_sec });
        }
        let fastest = rates.iter().map(|r| r.bytes_per_sec).fold(0.0, f64::max);
        let best = rates
            .iter()
            .filter(|r| r.bytes_per_sec >= NEAR_TIE * fastest)
            .map(|r| r.threads)
            .min()
            .expect("the fastest rate is among the rates");
        Ok(ReaderProbe { rates, best })
    }
}
