//! The host tier of a streaming step: the misses of a layer's picks computed on the CPU from their store
//! records, mapped from the page cache where they lie (or, for stores larger than RAM, read whole into a
//! budget of host memory: [`HostRecords`]), while the GPU computes the hits
//! ([`CpuTierOptions::enabled`](crate::stream::CpuTierOptions::enabled)). Which pick runs where, and which
//! misses are also uploaded for next time, is [`TierPolicy`]'s to say.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use diskformer_cpu_kernels::{
    Assignment, CpuExperts, ExpertWeights, Isa, Math, PoolTimes, QuantMatrix, takes_quantised_input,
};
use diskformer_expert_stream::{
    ArenaShare, ExpertKey, HostFetch, HostHandoff, HostRecords, HostStats, LayerPlan, TierConfig, TierPolicy,
};
use diskformer_gguf::TensorType;
use diskformer_store::{ExpertLayout, ExpertMap, ExpertPart, RecordBytes, RecordChecks, Region, Store};

use crate::{Error, Result};

/// The host's expert kernels over the store's records, and the tier rules' state.
pub struct CpuTier {
    kernels: CpuExperts,
    records: Records,
    layout: ExpertLayout,
    /// The planes' type (Q8_0 or Q4_0); `None` for records of blocks, each part of its own type.
    ty: Option<TensorType>,
    policy: TierPolicy,
    math: Math,
    /// The host tier's call [`CpuTier::fetch`] began for (layer, ids), which the next compute finishes.
    pending: Option<(u32, Vec<u32>, HostFetch)>,
    /// Mapped records first used in a step (not mapped in ahead by the mapper thread), and the time it took.
    first_uses: (u64, Duration),
    /// The host's cores, asked once: `available_parallelism` reads the cgroup's files on every call (tens of
    /// microseconds, where a layer's whole CPU work takes a few hundred).
    cores: usize,
}

/// Where the tier's records lie.
enum Records {
    /// The records mapped from the page cache (`experts.bin`, or the GGUF when they were not copied).
    Mapped {
        map: Arc<ExpertMap>,
        /// Per record: whether its pages are mapped in yet, and checked (see [`CpuTier::map_in`]).
        ready: Arc<[AtomicBool]>,
        /// The records' checksums, when reads are checked.
        checks: Option<RecordChecks>,
        /// The thread mapping in the records already in the page cache, and its stop flag.
        mapper: Option<(JoinHandle<()>, Arc<AtomicBool>)>,
    },
    /// The host tier: whole records read with O_DIRECT into a budget of host memory, and where it offers
    /// the records it admits to the GPU pool's loads.
    Host(HostRecords, Arc<HostHandoff>),
}

/// The host tier's knobs ([`CpuTierOptions::ram_budget`](crate::stream::CpuTierOptions::ram_budget)).
#[derive(Clone, Debug)]
pub struct HostTier {
    /// Bytes of host memory for records.
    pub budget: u64,
    /// The fewest records it must hold: a layer's picks.
    pub min_records: usize,
    /// Threads reading one layer's records at once.
    pub readers: usize,
    /// Where admitted records are offered to the GPU pool's loads (its backend takes them from there).
    pub handoff: Arc<HostHandoff>,
}

impl Drop for CpuTier {
    fn drop(&mut self) {
        if let Records::Mapped { mapper, .. } = &mut self.records
            && let Some((thread, stop)) = mapper.take()
        {
            stop.store(true, Ordering::Relaxed);
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for CpuTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuTier")
            .field("isa", &self.kernels.isa())
            .field("threads", &self.kernels.threads())
            .finish()
    }
}

/// The tier's threads where none are given: every core but a quarter of them, at least two left, at least
/// one thread. The cores left run the stepping thread (it records the GPU's next commands while the others
/// compute, then joins them), the thread recording layers ahead and the GPU pool's loaders, each hashing
/// the records it checks: on 16-core hosts 14 threads decoded faster than 15 and 16 (H200), 12 than 14
/// under a trained model's routing with checked reads (H100; BENCHMARKS.md).
pub fn default_threads(cores: usize) -> usize {
    cores.saturating_sub((cores / 4).max(2)).max(1)
}

impl CpuTier {
    /// Maps the store's `experts.bin` (or, with `host`, sets up the host tier over it) and starts `threads`
    /// CPU threads (`None`: [`default_threads`]) on the best SIMD path the CPU has, multiplying on inputs as
    /// `math` asks where the records take quantised ones (Q8_0, Q4_0, or Q4_K, Q5_K and Q6_K blocks with
    /// SIMD kernels; else f32), and by default ([`CpuTierOptions::math`](crate::stream::CpuTierOptions::math))
    /// Q16 on such blocks. With `checks`, every record is checked before it is first computed on.
    pub fn open(
        store: &Store,
        layout: &ExpertLayout,
        threads: Option<usize>,
        config: TierConfig,
        math: Option<Math>,
        host: Option<HostTier>,
        checks: Option<RecordChecks>,
    ) -> Result<Self> {
        let ty = match layout.quant_type.as_str() {
            "q8_0" => Some(TensorType::Q8_0),
            "q4_0" => Some(TensorType::Q4_0),
            _ if layout.blocks.is_some() => None,
            other => {
                return Err(Error::BadOption {
                    option: "cpu_experts",
                    what: format!("the store's experts are {other}; the CPU tier computes planes or blocks"),
                });
            }
        };
        let records = match host {
            Some(host) => {
                let mut reader = store.record_reader(true)?;
                if let Some(checks) = checks {
                    reader = reader.with_checks(checks);
                }
                let reader = Arc::new(reader);
                let records = HostRecords::new(reader, host.budget, host.min_records, host.readers)?;
                Records::Host(records, host.handoff)
            }
            None => map_records(store, layout, checks)?,
        };
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = threads.unwrap_or_else(|| default_threads(cores));
        let isa = Isa::detect();
        Ok(CpuTier {
            kernels: CpuExperts::new(threads, isa)?,
            records,
            layout: layout.clone(),
            ty,
            policy: TierPolicy::new(config, layout.n_layers, layout.n_experts),
            math: tier_math(
                math,
                ty.is_some() || blocks_take_q8(layout) && isa != Isa::Scalar,
                blocks_fuse_q16(layout) && isa != Isa::Scalar,
            ),
            pending: None,
            first_uses: (0, Duration::ZERO),
            cores,
        })
    }

    /// Mapped records a step used for the first time (mapped in, and checked, on its path), and the time
    /// that took; zeroed by the call.
    pub fn take_first_uses(&mut self) -> (u64, Duration) {
        std::mem::take(&mut self.first_uses)
    }

    /// Where the kernels' pool spent its jobs' time since the last call.
    pub fn take_pool_times(&self) -> PoolTimes {
        self.kernels.take_pool_times()
    }

    /// The host tier's counters, when it runs.
    pub fn host_stats(&self) -> Option<HostStats> {
        match &self.records {
            Records::Host(host, _) => Some(host.stats()),
            Records::Mapped { .. } => None,
        }
    }

    /// Zeroes the host tier's counters.
    pub fn reset_host_stats(&mut self) {
        if let Records::Host(host, _) = &mut self.records {
            host.reset_stats();
        }
    }

    /// The SIMD path the kernels run.
    pub fn isa(&self) -> Isa {
        self.kernels.isa()
    }

    /// Threads, the caller's included.
    pub fn threads(&self) -> usize {
        self.kernels.threads()
    }

    /// How the kernels take their inputs.
    pub fn math(&self) -> Math {
        self.math
    }

    /// Shares the misses from now on with the GPU taking them from the pool's host arena, as `share` says
    /// (from the bus's time a record, [`probe_arena`](crate::load::probe_arena), or fixed).
    pub fn share_with_arena(&mut self, share: ArenaShare) {
        self.policy.share_with_arena(share);
    }

    /// The misses' share with the arena, when there is one.
    pub fn arena_share(&self) -> Option<&ArenaShare> {
        self.policy.arena()
    }

    /// Counts a layer's host side: `records` computed in `took`, from its start to the sum (the arena's
    /// share follows it).
    pub fn observe(&mut self, records: usize, took: Duration) {
        self.policy.observe_cpu(records, took);
    }

    /// Counts which side of a layer with both finished first: its GPU work or this tier's (the arena's
    /// share follows it).
    pub fn observe_finish(&mut self, gpu_first: bool) {
        self.policy.observe_finish(gpu_first);
    }

    /// Starts the next token's plans.
    pub fn next_token(&mut self) {
        self.policy.next_token();
    }

    /// Where `layer`'s picks run (see [`TierPolicy::plan`]).
    pub fn plan(
        &mut self,
        layer: u32,
        picks: &[u32],
        may_admit: bool,
        resident: impl Fn(u32) -> bool,
    ) -> Result<LayerPlan> {
        Ok(self.policy.plan(layer, picks, may_admit, resident)?)
    }

    /// Starts bringing `layer`'s experts `ids` into host memory (the host tier plans them; mapped records
    /// need nothing) and offers those of `admit` it holds already to the GPU pool's loads, so that an
    /// admission does not read the disk again. Call it before the pool loads `admit`; the compute that
    /// follows reads the records the host tier lacks.
    pub fn fetch(&mut self, layer: u32, ids: &[u32], admit: &[u32]) -> Result<()> {
        let Records::Host(host, handoff) = &mut self.records else {
            return Ok(());
        };
        finish_stale(host, &mut self.pending);
        let keys: Vec<ExpertKey> = ids.iter().map(|&e| ExpertKey::new(layer, e)).collect();
        let fetch = host.begin(&keys)?;
        for (i, key) in keys.iter().enumerate().filter(|(_, k)| admit.contains(&k.expert)) {
            if let Some(buffer) = fetch.held_buffer(i) {
                handoff.put(*key, Arc::clone(buffer));
            }
        }
        self.pending = Some((layer, ids.to_vec(), fetch));
        Ok(())
    }

    /// Reads `layer`'s experts `ids` into the host tier (those it lacks, in parallel) and offers them all
    /// to the GPU pool's loads that follow, which then copy them from host memory: what a prompt chunk's
    /// misses go through, so that its records are read from the disk once for the chunk and the steps
    /// after it. Nothing without the host tier, or when `ids` are more records than it holds.
    pub fn stage_for_pool(&mut self, layer: u32, ids: &[u32]) -> Result<()> {
        let Records::Host(host, handoff) = &mut self.records else {
            return Ok(());
        };
        if ids.is_empty() || ids.len() > host.capacity() {
            return Ok(());
        }
        finish_stale(host, &mut self.pending);
        let keys: Vec<ExpertKey> = ids.iter().map(|&e| ExpertKey::new(layer, e)).collect();
        let mut fetch = host.begin(&keys)?;
        fetch.read();
        for (key, record) in keys.iter().zip(host.finish(fetch)?) {
            handoff.put(*key, record);
        }
        Ok(())
    }

    /// `Σ w · FFN_e(xn)` over `layer`'s experts `ids` with routing weights `weights`, the time from start to
    /// finish, and what `meanwhile` returned with the time it took: this thread runs it while the pool's
    /// threads start on the experts (see [`CpuExperts::moe_while`]). Through the host tier, the experts it holds are computed
    /// while a thread reads the others, which are computed next. Mapped records used for the first time
    /// are counted ([`CpuTier::take_first_uses`]).
    pub fn compute_while<R>(
        &mut self,
        layer: u32,
        ids: &[u32],
        weights: &[f32],
        xn: &[f32],
        meanwhile: impl FnOnce() -> R,
    ) -> Result<(Vec<f32>, Duration, (R, Duration))> {
        let started = Instant::now();
        let meanwhile = || {
            let r = meanwhile();
            (r, started.elapsed())
        };
        let mut out = vec![0f32; xn.len()];
        if !matches!(self.records, Records::Host(..)) {
            let keys: Vec<ExpertKey> = ids.iter().map(|&e| ExpertKey::new(layer, e)).collect();
            let mapped_in = self.map_in(&keys)?;
            if mapped_in > 0 {
                self.first_uses.0 += mapped_in as u64;
                self.first_uses.1 += started.elapsed();
            }
            let records: Vec<RecordBytes<'_>> = keys.iter().map(|&key| self.mapped(key)).collect();
            let r = self.moe_while(layer, &records, weights, xn, &mut out, meanwhile)?;
            return Ok((out, started.elapsed(), r));
        }
        if !self.pending.as_ref().is_some_and(|(l, pending, _)| *l == layer && pending == ids) {
            self.fetch(layer, ids, &[])?;
        }
        let (_, _, mut fetch) = self.pending.take().expect("fetch left a call");
        let len = self.layout.record_bytes as usize;
        let held = fetch.held_records();
        let held_weights: Vec<f32> = held.iter().map(|(i, _)| weights[*i]).collect();
        let held_bytes: Vec<RecordBytes<'_>> =
            held.iter().map(|(_, b)| RecordBytes::Whole(&b.as_slice()[..len])).collect();
        let computed = std::thread::scope(|scope| {
            let reading = fetch.needs_reads().then(|| scope.spawn(|| fetch.read()));
            let r = self.moe_while(layer, &held_bytes, &held_weights, xn, &mut out, meanwhile);
            if let Some(reading) = reading {
                let _ = reading.join();
            }
            r
        });
        let Records::Host(host, _) = &mut self.records else { unreachable!("checked above") };
        let records = host.finish(fetch)?;
        let r = computed?;
        let read: Vec<usize> = (0..ids.len()).filter(|i| !held.iter().any(|(h, _)| h == i)).collect();
        if !read.is_empty() {
            let bytes: Vec<RecordBytes<'_>> =
                read.iter().map(|&i| RecordBytes::Whole(&records[i].as_slice()[..len])).collect();
            let read_weights: Vec<f32> = read.iter().map(|&i| weights[i]).collect();
            let mut more = vec![0f32; xn.len()];
            self.moe_while(layer, &bytes, &read_weights, xn, &mut more, || ())?;
            out.iter_mut().zip(&more).for_each(|(o, m)| *o += m);
        }
        Ok((out, started.elapsed(), r))
    }

    /// `out = Σ w · FFN(xn)` over `layer`'s `records` with `weights`, running `meanwhile` on this thread
    /// meanwhile.
    fn moe_while<R>(
        &self,
        layer: u32,
        records: &[RecordBytes<'_>],
        weights: &[f32],
        xn: &[f32],
        out: &mut [f32],
        meanwhile: impl FnOnce() -> R,
    ) -> Result<R> {
        let experts = records.iter().map(|&r| self.expert(layer, r)).collect::<Result<Vec<_>>>()?;
        let assignments: Vec<Assignment> = weights
            .iter()
            .enumerate()
            .map(|(expert, &weight)| Assignment { token: 0, expert, weight })
            .collect();
        Ok(self.kernels.moe_while(self.math, &experts, xn, &assignments, out, meanwhile)?)
    }

    /// Maps in the records of `keys` not mapped in yet, on up to one thread a core, and returns how many.
    /// A first use maps a record's pages in one call (`MADV_POPULATE_READ`): touched one by one, a 5 MB
    /// record's 1,220 page faults cost more than reading it (on the H200 the tier then read 20 GB/s where its
    /// kernels run at 55); and with checks, checks it (once: a page the kernel drops and reads again later
    /// is not checked again). On one thread, a calibrated token's dozen first uses took ~3 ms of its 25.
    ///
    /// # Errors
    /// [`DamagedRecord`](diskformer_store::Error::DamagedRecord) when one does not match its checksum.
    fn map_in(&self, keys: &[ExpertKey]) -> Result<usize> {
        let Records::Mapped { map, ready, checks, .. } = &self.records else {
            unreachable!("only mapped records are mapped in")
        };
        let index = |key: ExpertKey| (key.layer * self.layout.n_experts + key.expert) as usize;
        let todo: Vec<ExpertKey> =
            keys.iter().copied().filter(|&k| !ready[index(k)].load(Ordering::Acquire)).collect();
        if todo.is_empty() {
            return Ok(0);
        }
        let map_in = |keys: &[ExpertKey]| -> Result<()> {
            for &key in keys {
                map_in_record(map, key, checks.as_ref())?;
                ready[index(key)].store(true, Ordering::Release);
            }
            Ok(())
        };
        let threads = self.cores.min(todo.len());
        if threads <= 1 {
            map_in(&todo)?;
        } else {
            std::thread::scope(|scope| {
                let running: Vec<_> = todo
                    .chunks(todo.len().div_ceil(threads))
                    .map(|part| scope.spawn(|| map_in(part)))
                    .collect();
                running.into_iter().try_for_each(|t| t.join().expect("mapping a record does not panic"))
            })?;
        }
        Ok(todo.len())
    }

    /// The mapped record of `key` ([`CpuTier::map_in`] mapped it in).
    fn mapped(&self, key: ExpertKey) -> RecordBytes<'_> {
        let Records::Mapped { map, .. } = &self.records else {
            unreachable!("only mapped records are looked up here")
        };
        map.record(key)
    }

    /// A record of `layer` as its three matrices.
    fn expert<'a>(&self, layer: u32, record: RecordBytes<'a>) -> Result<ExpertWeights<'a>> {
        let l = &self.layout;
        let (h, f) = (l.hidden as usize, l.ffn as usize);
        let Some(ty) = self.ty else {
            let part = |p: ExpertPart, name, shape| {
                let (ty, _) = l.part(layer, p).expect("a layer of the layout");
                QuantMatrix::blocks(name, ty, shape, record.part(l, layer, p))
            };
            return Ok(ExpertWeights::new(
                part(ExpertPart::Gate, "ffn_gate_exps", (f, h))?,
                part(ExpertPart::Up, "ffn_up_exps", (f, h))?,
                part(ExpertPart::Down, "ffn_down_exps", (h, f))?,
            )?);
        };
        let RecordBytes::Whole(record) = record else {
            unreachable!("records of planes are whole: only records of blocks are read from the GGUF")
        };
        let at = |r: Region| &record[r.offset as usize..r.end() as usize];
        let (gate_up_q, gate_up_s) = (at(l.gate_up_quants), at(l.gate_up_scales));
        let (gate_q, up_q) = gate_up_q.split_at(gate_up_q.len() / 2);
        let (gate_s, up_s) = gate_up_s.split_at(gate_up_s.len() / 2);
        Ok(ExpertWeights::new(
            QuantMatrix::planes("ffn_gate_exps", ty, (f, h), gate_q, gate_s)?,
            QuantMatrix::planes("ffn_up_exps", ty, (f, h), up_q, up_s)?,
            QuantMatrix::planes("ffn_down_exps", ty, (h, f), at(l.down_quants), at(l.down_scales))?,
        )?)
    }
}

/// Ends the host tier's call that `pending` holds, if a step failed before computing it: its buffers go back
/// to their slots.
fn finish_stale(host: &mut HostRecords, pending: &mut Option<(u32, Vec<u32>, HostFetch)>) {
    if let Some((_, _, stale)) = pending.take() {
        let _ = host.finish(stale);
    }
}

/// How the tier multiplies, asked for `asked` (`None`: the default): quantised inputs only where the records
/// take them (`quantised`: Q8_0 or Q4_0 planes or blocks, or K-quant blocks whose every part has
/// quantised-input kernels on this CPU). The default is Q16 only where every part has a fused Q16 kernel
/// (`fused_q16`: Q4_K, Q5_K and Q6_K blocks, nearly Q8's speed); anywhere else a Q16 input is two Q8 passes,
/// slower than f32, so the default there is f32.
fn tier_math(asked: Option<Math>, quantised: bool, fused_q16: bool) -> Math {
    match asked {
        None if fused_q16 => Math::Q16,
        Some(math @ (Math::Q8 | Math::Q16)) if quantised => math,
        _ => Math::F32,
    }
}

/// Whether the records are blocks whose every part multiplies quantised inputs (`Math::Q8`, `Math::Q16`).
fn blocks_take_q8(layout: &ExpertLayout) -> bool {
    layout.blocks.is_some() && layout.part_types().all(|ty| ty.is_some_and(takes_quantised_input))
}

/// Whether the records are blocks whose every part has a fused Q16 kernel (Q4_K, Q5_K, Q6_K).
fn blocks_fuse_q16(layout: &ExpertLayout) -> bool {
    use TensorType as T;
    layout.blocks.is_some() && layout.part_types().all(|ty| matches!(ty, Some(T::Q4K | T::Q5K | T::Q6K)))
}

/// Maps the store's expert records (`experts.bin`, or the GGUF's files) and starts the thread mapping in (and
/// with `checks` checking) the records already in the page cache.
fn map_records(store: &Store, layout: &ExpertLayout, checks: Option<RecordChecks>) -> Result<Records> {
    let map = Arc::new(store.map_experts()?);
    let ready: Arc<[AtomicBool]> = (0..layout.n_records()).map(|_| AtomicBool::new(false)).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let mapper = {
        let (map, ready, stop, checks) =
            (Arc::clone(&map), Arc::clone(&ready), Arc::clone(&stop), checks.clone());
        // Without the thread, each record is mapped in at its first use all the same.
        std::thread::Builder::new()
            .name("cpu-tier-map".into())
            .spawn(move || map_cached_records(&map, &ready, checks.as_ref(), &stop))
            .ok()
    };
    Ok(Records::Mapped { map, ready, checks, mapper: mapper.map(|thread| (thread, stop)) })
}

/// Maps in the pages of `key`'s record in one call (`MADV_POPULATE_READ`) and, with `checks`, checks it.
///
/// # Errors
/// [`DamagedRecord`](diskformer_store::Error::DamagedRecord) when it does not match its checksum.
fn map_in_record(map: &ExpertMap, key: ExpertKey, checks: Option<&RecordChecks>) -> Result<()> {
    match checks {
        Some(checks) => map.check(key, checks)?,
        None => map.populate(key),
    }
    Ok(())
}

/// Maps in, record by record, every record whose pages are all in the page cache already, so that a
/// step's first use of a record does not pay for it (1,220 pages a 5 MB record, up to 384 records a
/// step). A record not cached is left to its first use: mapping it here would read it from the disk, and
/// a store larger than the host's memory would push out the records in use.
/// A record that does not match is left to its first use, which reports it. With checks each record is
/// hashed too, which on one thread took seconds for a 17 GB store, during which the steps checked the
/// records not reached yet themselves: a quarter of the cores share the work.
fn map_cached_records(
    map: &ExpertMap,
    ready: &[AtomicBool],
    checks: Option<&RecordChecks>,
    stop: &AtomicBool,
) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let map_some = || {
        let mut resident = Vec::new();
        loop {
            let index = next.fetch_add(1, Ordering::Relaxed);
            let Some(done) = ready.get(index) else { return };
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let key = map.layout().key(index);
            if done.load(Ordering::Acquire) || !map.cached(key, &mut resident) {
                continue;
            }
            if map_in_record(map, key, checks).is_ok() {
                done.store(true, Ordering::Release);
            }
        }
    };
    let threads =
        if checks.is_some() { std::thread::available_parallelism().map_or(1, |n| n.get() / 4) } else { 1 };
    std::thread::scope(|scope| {
        for _ in 1..threads {
            scope.spawn(map_some);
        }
        map_some();
    });
}

#[cfg(test)]
mod tests {
    use diskformer_cpu_kernels::Math;

    use super::{default_threads, tier_math};

    /// Q16 by default only on records with fused Q16 kernels (on Q8_0 blocks it would run two Q8 passes);
    /// quantised inputs asked for only where the records take them.
    #[test]
    fn the_default_math_is_q16_only_on_fused_kernels() {
        assert_eq!(tier_math(None, true, true), Math::Q16);
        assert_eq!(tier_math(None, true, false), Math::F32);
        assert_eq!(tier_math(None, false, false), Math::F32);
        assert_eq!(tier_math(Some(Math::Q16), true, false), Math::Q16);
        assert_eq!(tier_math(Some(Math::Q8), true, true), Math::Q8);
        assert_eq!(tier_math(Some(Math::Q8), false, false), Math::F32);
        assert_eq!(tier_math(Some(Math::F32), true, true), Math::F32);
    }

    /// A quarter of the cores, at least two, are left to the stepping thread and the loaders; one thread
    /// computes whatever the host.
    #[test]
    fn default_threads_leave_a_quarter_of_the_cores() {
        let got: Vec<usize> = [1, 2, 3, 4, 8, 16, 64].map(default_threads).to_vec();
        assert_eq!(got, [1, 1, 1, 2, 6, 12, 48]);
    }
}
