//! The experts' tiers as a step driver holds them, whatever the model: the GPU pool, the CPU tier, the slots
//! a layer keeps pinned between its `ensure` and the submit that reads them, and what the stream's setup
//! chose (O_DIRECT, the read split, the disk probe). A one-token layer's picks split between the GPU's
//! hits and the CPU's misses ([`Tiers::split_layer`]), the misses computed on the host while the GPU runs
//! what the driver gives it ([`Tiers::compute_misses_while`]); a chunk's picks made resident, with the next
//! layer's loads queued beside them ([`Tiers::ensure_chunk`]). Their counters join a driver's own in
//! [`Tiers::stats`]. The arena's share of a layer's misses reaches the GPU through stage-slot copies
//! ([`Tiers::record_stage_copies`]); which side finished first feeds the share back ([`FinishRace`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use diskformer_expert_stream::{ExpertKey, ExpertPool, GpuBackend, Pinned, Slot, SpeculativeReads, Tier};
use diskformer_store::ReaderProbe;

use crate::load::chunk_bound;
use crate::{CpuTier, EngineStats, Error, GpuBytes, PoolShape, Result, Stats, StreamSetup};

/// The slot of a pick no pool slot serves (the CPU computes it, or the pool lacks it): the expert kernels
/// skip it.
pub const ABSENT_SLOT: u32 = u32::MAX;

/// Rewrites a one-token layer's router `weights` for a combine that adds every pick's down row, where the
/// host's sum over its picks `cpu_picks` comes in as the first one's row: weight 1 there, 0 on its other
/// picks (whose rows hold an earlier step's finite values). Returns that row, or `None` (nothing rewritten)
/// where the host has no picks.
pub fn sum_as_pick(cpu_picks: &[usize], weights: &mut [f32]) -> Option<usize> {
    let first = *cpu_picks.first()?;
    cpu_picks.iter().for_each(|&i| weights[i] = 0.0);
    weights[first] = 1.0;
    Some(first)
}

/// Which side of a CPU layer finished first, the GPU's picks or the host's, where the tier's arena share
/// follows outcomes (`diskformer_expert_stream::ArenaShare::observe_finish`); nothing elsewhere.
pub struct FinishRace(Option<Arc<AtomicBool>>);

impl FinishRace {
    /// The race of a layer split into `split`: where the arena took every miss, the host, with none, has
    /// finished first (told the tier now).
    pub fn new(tiers: &mut Tiers, split: &LayerSplit) -> FinishRace {
        let Some(tier) = tiers.cpu.as_mut() else { return FinishRace(None) };
        if split.cpu_picks.is_empty() && split.arena_picks > 0 {
            tier.observe_finish(false);
        }
        let follows = tier.arena_share().is_some_and(|a| a.follows_outcomes());
        FinishRace(follows.then(|| Arc::new(AtomicBool::new(false))))
    }

    /// After the GPU's picks are submitted to `queue`: the GPU's side is done once they have run.
    pub fn submitted(&self, queue: &wgpu::Queue) {
        if let Some(done) = self.0.as_ref().map(Arc::clone) {
            queue.on_submitted_work_done(move || done.store(true, Ordering::Release));
        }
    }

    /// After the host's sum: tells the tier whether the GPU's side was done first.
    ///
    /// # Errors
    /// [`Error::Gpu`] where the device cannot be polled.
    pub fn settle(self, device: &wgpu::Device, tiers: &mut Tiers) -> Result<()> {
        if let Some((done, tier)) = self.0.zip(tiers.cpu.as_mut()) {
            device.poll(wgpu::PollType::Poll).map_err(|e| Error::Gpu(e.to_string()))?;
            tier.observe_finish(done.load(Ordering::Acquire));
        }
        Ok(())
    }
}

/// A layer's picks split between the tiers ([`Tiers::split_layer`]).
pub struct LayerSplit {
    /// The GPU's hits, pinned until the driver has submitted what reads them.
    pub pinned: Pinned,
    /// Each pick's pool slot (the device's, or the arena's for a miss the GPU reads from there over the
    /// bus), [`ABSENT_SLOT`] for the CPU's.
    pub slots: Vec<u32>,
    /// The copies (arena slot, stage slot) that bring the GPU's misses into device slots of their own, to
    /// be recorded before what reads `slots` ([`GpuPool::copy_from_arena`]); empty where the kernels read
    /// them over the bus.
    ///
    /// [`GpuPool::copy_from_arena`]: diskformer_expert_stream::GpuPool::copy_from_arena
    pub staged: Vec<(Slot, Slot)>,
    /// Indices of the picks the CPU computes, in pick order.
    pub cpu_picks: Vec<usize>,
    /// Their experts (the host tier has started reading those it lacks).
    pub cpu_experts: Vec<u32>,
    /// How many misses the GPU takes from the arena (copied into stage slots, or read over the bus).
    pub arena_picks: usize,
}

/// The GPU pool and the CPU tier a model's experts stream through.
pub struct Tiers {
    /// The GPU pool (every expert, loaded at start, when all fit).
    pub pool: ExpertPool<GpuBackend>,
    /// The CPU tier, while experts stream with it on.
    pub cpu: Option<CpuTier>,
    /// Slots pinned for the layer whose experts are recorded but not yet submitted.
    pub held: Option<Pinned>,
    shape: PoolShape,
    early_chunk_prefetch: bool,
    chunk_arena_copies: bool,
    direct_io: bool,
    read_split: usize,
    reader_probe: Option<ReaderProbe>,
}

impl Tiers {
    /// The tiers of a pool of `shape` and a CPU tier built from `setup` (whose disk probe it keeps), a
    /// chunk's next layer queued and a chunk's arena records reached as `stream` says
    /// ([`StreamOptions::early_chunk_prefetch`](crate::StreamOptions::early_chunk_prefetch),
    /// [`StreamOptions::chunk_arena_copies`](crate::StreamOptions::chunk_arena_copies)).
    pub fn new(
        pool: ExpertPool<GpuBackend>,
        cpu: Option<CpuTier>,
        setup: StreamSetup,
        shape: PoolShape,
        stream: &crate::StreamOptions,
    ) -> Self {
        Tiers {
            pool,
            cpu,
            held: None,
            shape,
            early_chunk_prefetch: stream.early_chunk_prefetch,
            chunk_arena_copies: stream.chunk_arena_copies,
            direct_io: setup.direct_io,
            read_split: setup.read_split,
            reader_probe: setup.reader_probe,
        }
    }

    /// Expert slots on the device: the pool's own and the stage slots after them.
    pub fn slots(&self) -> usize {
        self.pool.backend().pool().slots()
    }

    /// Device slots the CPU tier's arena picks are copied into (0: none, the kernels read them over the
    /// bus), after the cache's.
    pub fn stage_slots(&self) -> usize {
        self.shape.stage_slots
    }

    /// Slots the pool's cache holds records in (the device's, less the stage slots).
    pub fn cache_slots(&self) -> usize {
        self.slots() - self.shape.stage_slots
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

    /// Records into `enc` the copies that bring a layer's arena picks into their stage slots
    /// ([`LayerSplit::staged`]), to run before what reads them.
    ///
    /// # Errors
    /// [`Error::Gpu`] where a copy cannot be recorded.
    pub fn record_stage_copies(&self, enc: &mut wgpu::CommandEncoder, staged: &[(Slot, Slot)]) -> Result<()> {
        let gpu = self.pool.backend().pool();
        (staged.iter().try_for_each(|&(from, to)| gpu.copy_from_arena(enc, from, to)))
            .map_err(|e| Error::Gpu(format!("a copy from the arena into a stage slot: {e}")))
    }

    /// Splits layer `l`'s `picks` (one token's) by the CPU tier's plan: the hits pinned in the pool, the
    /// misses the GPU takes from the arena given stage slots and the copies that fill them (or, without
    /// stage slots, their arena slots), the host tier's reads and the pool's admissions started (counted
    /// in `stats`).
    ///
    /// # Panics
    /// Without the CPU tier.
    pub fn split_layer(&mut self, l: u32, picks: &[u32], stats: &mut EngineStats) -> Result<LayerSplit> {
        // The GPU's misses copied into the stage slots, one each, where there are stage slots.
        let mut stage = (self.shape.stage_slots > 0).then(|| self.cache_slots() as u32..self.slots() as u32);
        let tier = self.cpu.as_mut().expect("a CPU layer runs with the tier");
        // One look under the pool's lock: which picks it holds ready, and whether loads are queued.
        let (may_admit, ready) = self.pool.inspect(|core| {
            let ready: Vec<bool> =
                picks.iter().map(|&e| core.slot_of(ExpertKey::new(l, e)).is_some()).collect();
            (core.queued() == 0, ready)
        });
        let resident = |e: u32| picks.iter().zip(&ready).any(|(&p, &r)| p == e && r);
        let plan = tier.plan(l, picks, may_admit, resident)?;
        let hits: Vec<u32> =
            picks.iter().zip(&plan.tiers).filter(|(_, t)| **t == Tier::Gpu).map(|(&e, _)| e).collect();
        let pinned = self.pool.ensure(l, &hits)?;
        let mut hit_slots = pinned.slots().iter();
        let backend = self.pool.backend();
        let mut staged = Vec::new();
        let slots: Vec<u32> = (plan.tiers.iter().zip(picks))
            .map(|(t, &e)| match t {
                Tier::Gpu => hit_slots.next().expect("a slot for every hit").0,
                // The tier shares its misses only where the pool's arena holds every record.
                Tier::Arena => {
                    let from =
                        backend.arena_slot(ExpertKey::new(l, e)).expect("the arena holds every record");
                    match stage.as_mut() {
                        Some(stage) => {
                            let to = Slot(stage.next().expect("a stage slot for every pick"));
                            staged.push((from, to));
                            to.0
                        }
                        None => from.0,
                    }
                }
                Tier::Cpu => ABSENT_SLOT,
            })
            .collect();
        let arena_picks = plan.tiers.iter().filter(|&&t| t == Tier::Arena).count();
        stats.cpu_arena_picks += arena_picks as u64;
        let cpu_picks: Vec<usize> = plan.cpu_picks().collect();
        let cpu_experts: Vec<u32> = cpu_picks.iter().map(|&i| picks[i]).collect();
        // The host tier reads what it lacks first, so that the admissions load from host memory.
        let pool = &self.pool;
        let started = tier
            .fetch(l, &cpu_experts, &plan.admit)
            .and_then(|()| if plan.admit.is_empty() { Ok(0) } else { Ok(pool.prefetch(l, &plan.admit)?) });
        match started {
            Ok(admitted) => stats.cpu_admitted += admitted as u64,
            // The hits stay pinned only for a split the driver gets.
            Err(e) => {
                self.pool.release(pinned);
                return Err(e);
            }
        }
        Ok(LayerSplit { pinned, slots, staged, cpu_picks, cpu_experts, arena_picks })
    }

    /// Computes layer `l`'s experts `ids` on the CPU, weighted by `weights`, on the layer's normed state
    /// `xn`, while this thread runs `meanwhile`; returns their weighted sum and what `meanwhile` returned,
    /// the time taken counted in `stats`.
    ///
    /// # Panics
    /// Without the CPU tier.
    pub fn compute_misses_while<R>(
        &mut self,
        l: u32,
        ids: &[u32],
        weights: &[f32],
        xn: &[f32],
        stats: &mut EngineStats,
        meanwhile: impl FnOnce() -> R,
    ) -> Result<(Vec<f32>, R)> {
        let tier = self.cpu.as_mut().expect("CPU work comes from the tier");
        let (sum, took, (r, recording)) = tier.compute_while(l, ids, weights, xn, meanwhile)?;
        tier.observe(ids.len(), took);
        stats.cpu_experts += ids.len() as u64;
        stats.cpu_time += took;
        stats.cpu_recording_time += recording;
        stats.cpu_pool += tier.take_pool_times();
        let (first_uses, first_use_time) = tier.take_first_uses();
        stats.cpu_first_uses += first_uses;
        stats.cpu_first_use_time += first_use_time;
        Ok((sum, r))
    }

    /// Makes the experts of a chunk's `picks` at layer `l` resident (their union loaded once: through the
    /// host tier where there is one, copied from the arena with `chunk_arena_copies`) and returns them pinned
    /// with each pick's slot; with the arena and without `chunk_arena_copies`, only the device's hits (the
    /// rest read from the arena over the bus, `chunk_from_arena`). The next layer's
    /// experts are queued as guesses ([`Tiers::chunk_guesses`]): before this layer's wait where the pool
    /// holds three layers' experts and `early_chunk_prefetch` is on (the prefetch threads then load beside
    /// the demand readers), else after it.
    pub fn ensure_chunk(&mut self, l: u32, picks: &[u32]) -> Result<(Pinned, Vec<u32>)> {
        let mut union = picks.to_vec();
        union.sort_unstable();
        union.dedup();
        if !self.chunk_arena_copies && self.pool.backend().pool().arena_slots() > 0 {
            return self.chunk_from_arena(l, picks, &union);
        }
        if let Some(tier) = self.cpu.as_mut() {
            // Through the host tier, a chunk's misses are read into host memory once and loaded from
            // there: the steps after the prompt find them held instead of reading them again.
            let pool = &self.pool;
            let missing: Vec<u32> =
                union.iter().copied().filter(|&e| pool.slot_of(ExpertKey::new(l, e)).is_none()).collect();
            tier.stage_for_pool(l, &missing)?;
        }
        let tokens = (picks.len() / self.shape.top_k.max(1) as usize) as u32;
        let next = self.chunk_guesses(l, tokens);
        let early = self.early_chunk_prefetch && self.cache_slots() >= 3 * self.shape.experts as usize;
        if let Some(next) = next.as_ref().filter(|_| early) {
            self.pool.prefetch(l + 1, next)?;
        }
        let pinned = self.pool.ensure(l, &union)?;
        if let Some(next) = next.as_ref().filter(|_| !early) {
            self.pool.prefetch(l + 1, next)?;
        }
        let slots = (picks.iter())
            .map(|id| pinned.slots()[union.binary_search(id).expect("every pick is in the union")].0)
            .collect();
        Ok((pinned, slots))
    }

    /// [`Tiers::ensure_chunk`] with the arena: the experts of `union` (a chunk's `picks` at layer `l`, sorted
    /// and unique) that the device slots hold pinned there, the rest read by the kernels from the arena.
    /// Nothing is loaded: the pool keeps what decode made resident.
    fn chunk_from_arena(&mut self, l: u32, picks: &[u32], union: &[u32]) -> Result<(Pinned, Vec<u32>)> {
        let held: Vec<u32> = self.pool.inspect(|core| {
            union.iter().copied().filter(|&e| core.slot_of(ExpertKey::new(l, e)).is_some()).collect()
        });
        // A hit evicted since the look above is loaded again: rare, and still correct.
        let pinned = self.pool.ensure(l, &held)?;
        let backend = self.pool.backend();
        let slots = (picks.iter())
            .map(|&id| match held.binary_search(&id) {
                Ok(i) => pinned.slots()[i].0,
                Err(_) => backend.arena_slot(ExpertKey::new(l, id)).expect("the arena holds every record").0,
            })
            .collect();
        Ok((pinned, slots))
    }

    /// What a chunk of `tokens` tokens streaming through the pool loads of layer `l + 1` while layer `l`
    /// runs: every expert of it when the chunk's picks are at least as many as the layer's experts (a chunk
    /// of 16 tokens at 128 experts and top-8 touches ~64 % of them under uniform routing, a 512-token
    /// chunk all), so that the loads of one layer overlap the GPU's work on the one before instead of
    /// following it; none for smaller chunks, for the last layer, through the host tier (whose reads a
    /// chunk's misses go through), and for a pool of less than two layers' experts (the union of a chunk's
    /// picks may need every slot that loads of guesses would hold).
    pub fn chunk_guesses(&self, l: u32, tokens: u32) -> Option<Vec<u32>> {
        let PoolShape { layers, experts, top_k, .. } = self.shape;
        let through_host = self.cpu.as_ref().is_some_and(|t| t.host_stats().is_some());
        let fits = chunk_bound(self.cache_slots(), experts, top_k) == u32::MAX;
        (l + 1 < layers && tokens * top_k >= experts && fits && !through_host).then(|| (0..experts).collect())
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
        let share = self.cpu.as_ref().and_then(|t| t.arena_share());
        stats.cpu_arena_fraction = share.map(|a| a.fraction());
        stats.cpu_arena_times = share.and_then(|a| a.times_per_record());
        stats.stage_slots = self.shape.stage_slots;
        stats.host = self.cpu.as_ref().and_then(CpuTier::host_stats);
        stats.staging = backend.pool().staging_times();
        stats.arena_bytes = backend.pool().arena_bytes();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The host's sum rides on its first pick's row at weight 1, its other picks count nothing, the GPU's
    /// keep their weights; with no host picks nothing changes.
    #[test]
    fn the_hosts_sum_joins_as_its_first_pick() {
        let mut weights = [0.4, 0.3, 0.2, 0.1];
        assert_eq!(sum_as_pick(&[1, 3], &mut weights), Some(1));
        assert_eq!(weights, [0.4, 1.0, 0.2, 0.0]);
        assert_eq!(sum_as_pick(&[], &mut weights), None);
        assert_eq!(weights, [0.4, 1.0, 0.2, 0.0]);
    }
}
