//! Counters of one pool: cheap, honest, and printable.

use std::fmt;
use std::time::Duration;

/// What the pool did since it was built (or since [`reset_stats`](crate::ExpertPool::reset_stats)).
///
/// `hits` and `late_hits` are disjoint; `hits_by_layer` counts both (as diskformer.js does), so a layer's hit
/// rate is `hits_by_layer / (hits_by_layer + misses_by_layer)`.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Stats {
    /// Demanded experts already resident.
    pub hits: u64,
    /// Demanded experts already loading (by a prefetch or another `ensure`): waited for, not read again.
    pub late_hits: u64,
    /// Demanded experts neither resident nor loading: read and uploaded.
    pub misses: u64,
    /// Resident experts dropped to make room.
    pub evictions: u64,
    /// Loads that failed (read, short read, upload or backend panic); their slots were freed.
    pub failed_loads: u64,
    /// Demands that waited for running loads (guesses, admissions) to land before they had room.
    pub room_waits: u64,
    /// Bytes the backend loaded into slots (successful loads), whether it read them from the store or
    /// copied them from host memory it already held.
    pub bytes_read: u64,
    /// Time in [`Backend::read`](crate::Backend::read), summed over reader threads.
    pub read_time: Duration,
    /// Time in [`Backend::upload`](crate::Backend::upload), summed over reader threads.
    pub upload_time: Duration,
    /// Time `ensure` callers spent blocked on loads.
    pub wait_time: Duration,
    /// Prefetch loads started.
    pub prefetch_issued: u64,
    /// Prefetched experts later demanded (resident or still loading) before being evicted.
    pub prefetch_used: u64,
    /// Hits plus late hits, per layer.
    pub hits_by_layer: Vec<u64>,
    /// Misses per layer.
    pub misses_by_layer: Vec<u64>,
}

impl Stats {
    pub(crate) fn new(layers: u32) -> Self {
        Self {
            hits_by_layer: vec![0; layers as usize],
            misses_by_layer: vec![0; layers as usize],
            ..Self::default()
        }
    }

    /// Demanded experts in all: `hits + late_hits + misses`.
    pub fn demanded(&self) -> u64 {
        self.hits + self.late_hits + self.misses
    }

    /// `(hits + late_hits) / demanded`, or `None` before the first `ensure`.
    pub fn hit_rate(&self) -> Option<f64> {
        ratio(self.hits + self.late_hits, self.demanded())
    }

    /// The hit rate (late hits included) of one layer, or `None` if it was never demanded.
    pub fn layer_hit_rate(&self, layer: usize) -> Option<f64> {
        let hits = *self.hits_by_layer.get(layer)?;
        ratio(hits, hits + self.misses_by_layer[layer])
    }

    /// `prefetch_used / prefetch_issued`, or `None` before the first prefetch.
    pub fn prefetch_accuracy(&self) -> Option<f64> {
        ratio(self.prefetch_used, self.prefetch_issued)
    }
}

fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

fn percent(r: Option<f64>) -> String {
    r.map_or_else(|| "-".to_owned(), |r| format!("{:.1}%", 100.0 * r))
}

impl fmt::Display for Stats {
    /// A few lines: totals, bytes and times, prefetch, and the per-layer hit rates.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "hit rate {}: {} hits, {} late hits, {} misses, {} evictions, {} failed loads, {} waits for room",
            percent(self.hit_rate()),
            self.hits,
            self.late_hits,
            self.misses,
            self.evictions,
            self.failed_loads,
            self.room_waits
        )?;
        writeln!(
            f,
            "read {:.3} GB in {:.3} s of reader time, upload {:.3} s, ensure waited {:.3} s",
            self.bytes_read as f64 / 1e9,
            self.read_time.as_secs_f64(),
            self.upload_time.as_secs_f64(),
            self.wait_time.as_secs_f64()
        )?;
        writeln!(
            f,
            "prefetch: {} issued, {} used ({})",
            self.prefetch_issued,
            self.prefetch_used,
            percent(self.prefetch_accuracy())
        )?;
        write!(f, "hit rate by layer:")?;
        for layer in 0..self.hits_by_layer.len() {
            write!(f, " {}", percent(self.layer_hit_rate(layer)))?;
        }
        Ok(())
    }
}
