//! The experts' tiers as a step driver holds them, whatever the model: the GPU pool, the CPU tier, the slots
//! a layer keeps pinned between its `ensure` and the submit that reads them, and what the stream's setup
//! chose (O_DIRECT, the read split, the disk probe). Their counters join a driver's own in [`Tiers::stats`].

use diskformer_expert_stream::{ExpertPool, GpuBackend, Pinned, SpeculativeReads};
use diskformer_store::ReaderProbe;

use crate::{CpuTier, EngineStats, GpuBytes, Stats, StreamSetup};

/// The GPU pool and the CPU tier a model's experts stream through.
pub struct Tiers {
    /// The GPU pool (every expert, loaded at start, when all fit).
    pub pool: ExpertPool<GpuBackend>,
    /// The CPU tier, while experts stream with it on.
    pub cpu: Option<CpuTier>,
    /// Slots pinned for the layer whose experts are recorded but not yet submitted.
    pub held: Option<Pinned>,
    direct_io: bool,
    read_split: usize,
    reader_probe: Option<ReaderProbe>,
}

impl Tiers {
    /// The tiers of a pool and CPU tier built from `setup` (whose disk probe it keeps).
    pub fn new(pool: ExpertPool<GpuBackend>, cpu: Option<CpuTier>, setup: StreamSetup) -> Self {
        Tiers {
            pool,
            cpu,
            held: None,
            direct_io: setup.direct_io,
            read_split: setup.read_split,
            reader_probe: setup.reader_probe,
        }
    }

    /// Expert slots in the pool.
    pub fn slots(&self) -> usize {
        self.pool.backend().pool().slots()
    }

    /// Threads reading demand misses.
    pub fn readers(&self) -> usize {
        self.pool.config().readers
    }

    /// Whether records are read with O_DIRECT.
    pub fn direct_io(&self) -> bool {
        self.direct_io
    }

    /// Pieces a demand miss's record is read in.
    pub fn read_split(&self) -> usize {
        self.read_split
    }

    /// The disk probe's rates, when it chose the readers.
    pub fn reader_probe(&self) -> Option<&ReaderProbe> {
        self.reader_probe.as_ref()
    }

    /// Unpins the slots a layer held, if any (a step that failed between a layer's `ensure` and its
    /// submit, or the layer after it starting).
    pub fn release_held(&mut self) {
        if let Some(p) = self.held.take() {
            self.pool.release(p);
        }
    }

    /// A driver's counters `engine` with the pool's, the speculative reads', the disk's, the staging rings'
    /// and the CPU and host tiers', and the GPU memory `gpu_bytes`.
    pub fn stats(&self, engine: &EngineStats, gpu_bytes: GpuBytes) -> Stats {
        let backend = self.pool.backend();
        let speculative = backend.speculation().map(SpeculativeReads::stats);
        let disk = backend.reader().activity();
        let mut stats = Stats::new(engine, self.pool.stats(), speculative, disk, gpu_bytes, self.slots());
        stats.cpu_isa = self.cpu.as_ref().map(|t| (t.isa(), t.threads()));
        stats.cpu_math = self.cpu.as_ref().map(CpuTier::math);
        stats.host = self.cpu.as_ref().and_then(CpuTier::host_stats);
        stats.staging = backend.pool().staging_times();
        stats
    }

    /// Zeroes the tiers' counters (the driver zeroes its own).
    pub fn reset_stats(&mut self) {
        self.pool.reset_stats();
        if let Some(tier) = self.cpu.as_mut() {
            tier.reset_host_stats();
            tier.take_pool_times();
        }
        let backend = self.pool.backend();
        backend.reader().reset_activity();
        backend.pool().reset_staging_times();
        if let Some(spec) = backend.speculation() {
            spec.reset_stats();
        }
    }
}
