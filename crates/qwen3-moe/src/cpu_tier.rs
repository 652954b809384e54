//! The host tier of a streaming step: the misses of a layer's picks computed on the CPU from their store
//! records, mapped from the page cache where they lie (or, for stores larger than RAM, read whole into a
//! budget of host memory: [`HostRecords`]), while the GPU computes the hits
//! ([`EngineOptions::cpu_experts`](crate::EngineOptions::cpu_experts)). Which pick runs where, and which
//! misses are also uploaded for next time, is [`TierPolicy`]'s to say.

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use diskformer_cpu_kernels::{Assignment, CpuExperts, ExpertWeights, Isa, Math, QuantMatrix};
use diskformer_expert_stream::{ExpertKey, HostRecords, HostStats, LayerPlan, TierConfig, TierPolicy};
use diskformer_gguf::TensorType;
use diskformer_store::{ExpertLayout, Region, Store};
use memmap2::Mmap;

use crate::{Error, Result};

/// The host's expert kernels over the store's records, and the tier rules' state.
pub(crate) struct CpuTier {
    kernels: CpuExperts,
    records: Records,
    layout: ExpertLayout,
    ty: TensorType,
    policy: TierPolicy,
    math: Math,
}

/// Where the tier's records lie.
enum Records {
    /// The store mapped from the page cache.
    Mapped {
        map: Arc<Mmap>,
        /// Per record: whether its pages are mapped in yet (see [`CpuTier::record`]).
        populated: Arc<[AtomicBool]>,
        /// The thread mapping in the records already in the page cache, and its stop flag.
        mapper: Option<(JoinHandle<()>, Arc<AtomicBool>)>,
    },
    /// The host tier: whole records read with O_DIRECT into a budget of host memory.
    Host(HostRecords),
}

/// The host tier's knobs ([`EngineOptions::ram_budget`](crate::EngineOptions::ram_budget)).
#[derive(Clone, Copy, Debug)]
pub(crate) struct HostTier {
    /// Bytes of host memory for records.
    pub budget: u64,
    /// The fewest records it must hold: a layer's picks.
    pub min_records: usize,
    /// Threads reading one layer's records at once.
    pub readers: usize,
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

impl CpuTier {
    /// Maps the store's `experts.bin` (or, with `host`, sets up the host tier over it) and starts `threads`
    /// CPU threads (`None`: every core but two) on the best SIMD path the CPU has, multiplying on
    /// Q8_0-quantised inputs when `int8` (else f32).
    pub fn open(
        store: &Store,
        layout: &ExpertLayout,
        threads: Option<usize>,
        config: TierConfig,
        int8: bool,
        host: Option<HostTier>,
    ) -> Result<Self> {
        let ty = match layout.quant_type.as_str() {
            "q8_0" => TensorType::Q8_0,
            "q4_0" => TensorType::Q4_0,
            other => {
                return Err(Error::BadOption {
                    option: "cpu_experts",
                    what: format!("the store's experts are {other}; the CPU tier computes Q8_0 and Q4_0"),
                });
            }
        };
        let records = match host {
            Some(host) => {
                let reader = Arc::new(store.record_reader(true)?);
                Records::Host(HostRecords::new(reader, host.budget, host.min_records, host.readers)?)
            }
            None => map_records(store, layout)?,
        };
        // Two cores are left to the stepping thread (it records the GPU's next commands while the others
        // compute, then joins them), the pool's loaders and the mapping thread: on the H200 (16 cores) 14
        // threads decoded faster than 15, and 15 than 16 (BENCHMARKS.md).
        let threads = threads.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, |n| n.get().saturating_sub(2)).max(1)
        });
        Ok(CpuTier {
            kernels: CpuExperts::new(threads, Isa::detect())?,
            records,
            layout: layout.clone(),
            ty,
            policy: TierPolicy::new(config, layout.n_layers, layout.n_experts),
            math: if int8 { Math::Q8 } else { Math::F32 },
        })
    }

    /// The host tier's counters, when it runs.
    pub fn host_stats(&self) -> Option<HostStats> {
        match &self.records {
            Records::Host(host) => Some(host.stats()),
            Records::Mapped { .. } => None,
        }
    }

    /// Zeroes the host tier's counters.
    pub fn reset_host_stats(&mut self) {
        if let Records::Host(host) = &mut self.records {
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

    /// `Σ w · FFN_e(xn)` over `layer`'s experts `ids` with routing weights `weights`, the time from start to
    /// finish, and what `meanwhile` returned: this thread runs it while the pool's threads start on the
    /// experts (see [`CpuExperts::moe_while`]). The host tier first reads the records it lacks.
    pub fn compute_while<R>(
        &mut self,
        layer: u32,
        ids: &[u32],
        weights: &[f32],
        xn: &[f32],
        meanwhile: impl FnOnce() -> R,
    ) -> Result<(Vec<f32>, Duration, R)> {
        let started = Instant::now();
        let keys: Vec<ExpertKey> = ids.iter().map(|&e| ExpertKey::new(layer, e)).collect();
        let host_slots = match &mut self.records {
            Records::Host(host) => Some(host.ensure(&keys)?),
            Records::Mapped { .. } => None,
        };
        let experts = keys
            .iter()
            .enumerate()
            .map(|(i, &key)| self.expert(self.record(key, host_slots.as_ref().map(|s| s[i]))))
            .collect::<Result<Vec<_>>>()?;
        let assignments: Vec<Assignment> = weights
            .iter()
            .enumerate()
            .map(|(expert, &weight)| Assignment { token: 0, expert, weight })
            .collect();
        let mut out = vec![0f32; xn.len()];
        let r = self.kernels.moe_while(self.math, &experts, xn, &assignments, &mut out, meanwhile)?;
        Ok((out, started.elapsed(), r))
    }

    /// The record of `key`: in the host tier's slot `host_slot`, or borrowed from the mapping. A mapped
    /// record's first use maps its pages in one call (`MADV_POPULATE_READ`): touched one by one, a 5 MB
    /// record's 1,220 page faults cost more than reading it (on the H200 the tier then read 20 GB/s where its
    /// kernels run at 55).
    fn record(&self, key: ExpertKey, host_slot: Option<usize>) -> &[u8] {
        let l = &self.layout;
        match (&self.records, host_slot) {
            (Records::Host(host), Some(slot)) => host.record(slot),
            (Records::Mapped { map, populated, .. }, _) => {
                let index = (key.layer * l.n_experts + key.expert) as usize;
                if !populated[index].swap(true, Ordering::Relaxed) {
                    populate(map, l.record_offset(key) as usize, l.record_bytes as usize);
                }
                &map[l.record_offset(key) as usize..][..l.record_bytes as usize]
            }
            (Records::Host(_), None) => unreachable!("the host tier names a slot for every record"),
        }
    }

    /// A record as its three matrices.
    fn expert<'a>(&self, record: &'a [u8]) -> Result<ExpertWeights<'a>> {
        let l = &self.layout;
        let at = |r: Region| &record[r.offset as usize..r.end() as usize];
        let (gate_up_q, gate_up_s) = (at(l.gate_up_quants), at(l.gate_up_scales));
        let (gate_q, up_q) = gate_up_q.split_at(gate_up_q.len() / 2);
        let (gate_s, up_s) = gate_up_s.split_at(gate_up_s.len() / 2);
        let (h, f) = (l.hidden as usize, l.ffn as usize);
        Ok(ExpertWeights::new(
            QuantMatrix::planes("ffn_gate_exps", self.ty, (f, h), gate_q, gate_s)?,
            QuantMatrix::planes("ffn_up_exps", self.ty, (f, h), up_q, up_s)?,
            QuantMatrix::planes("ffn_down_exps", self.ty, (h, f), at(l.down_quants), at(l.down_scales))?,
        )?)
    }
}

/// Maps the store's `experts.bin` and starts the thread mapping in the records already in the page cache.
fn map_records(store: &Store, layout: &ExpertLayout) -> Result<Records> {
    let path = store.experts_path();
    let file = File::open(&path).map_err(|source| Error::Io { path: path.clone(), source })?;
    // Safety: the store is complete and read-only (ingest never rewrites a complete store), so the
    // mapping's bytes do not change while it lives; a file truncated under it by another process would
    // fault, as any reader of a store would fail.
    let map = unsafe { Mmap::map(&file) }.map_err(|source| Error::Io { path, source })?;
    if (map.len() as u64) < layout.file_bytes() {
        return Err(Error::BadOption {
            option: "cpu_experts",
            what: format!("experts.bin holds {} bytes, its layout {}", map.len(), layout.file_bytes()),
        });
    }
    let map = Arc::new(map);
    let populated: Arc<[AtomicBool]> = (0..layout.n_records()).map(|_| AtomicBool::new(false)).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let mapper = {
        let (map, populated, stop) = (Arc::clone(&map), Arc::clone(&populated), Arc::clone(&stop));
        let record_bytes = layout.record_bytes as usize;
        // Without the thread, each record is mapped in at its first use all the same.
        std::thread::Builder::new()
            .name("cpu-tier-map".into())
            .spawn(move || map_cached_records(&map, record_bytes, &populated, &stop))
            .ok()
    };
    Ok(Records::Mapped { map, populated, mapper: mapper.map(|thread| (thread, stop)) })
}

/// Maps in the pages of `records[offset..][..len]` in one call (`MADV_POPULATE_READ`). Best effort: kernels
/// before Linux 5.14 refuse the advice, and the pages then fault in as read.
fn populate(records: &Mmap, offset: usize, len: usize) {
    #[cfg(target_os = "linux")]
    let _ = records.advise_range(memmap2::Advice::PopulateRead, offset, len);
    #[cfg(not(target_os = "linux"))]
    let _ = (records, offset, len);
}

/// Maps in, record by record, every record whose pages are all in the page cache already, so that a
/// step's first use of a record does not pay for it (1,220 pages a 5 MB record, up to 384 records a
/// step). A record not cached is left to its first use: mapping it here would read it from the disk, and
/// a store larger than the host's memory would push out the records in use.
fn map_cached_records(records: &Mmap, record_bytes: usize, populated: &[AtomicBool], stop: &AtomicBool) {
    let mut resident = Vec::new();
    for (index, done) in populated.iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let offset = index * record_bytes;
        if done.load(Ordering::Relaxed) || !cached(records, offset, record_bytes, &mut resident) {
            continue;
        }
        if !done.swap(true, Ordering::Relaxed) {
            populate(records, offset, record_bytes);
        }
    }
}

/// Whether every page of `records[offset..][..len]` (page-aligned: records are multiples of 4,096 bytes)
/// is in the page cache (`mincore`; `false` where it cannot tell).
fn cached(records: &Mmap, offset: usize, len: usize, resident: &mut Vec<u8>) -> bool {
    #[cfg(unix)]
    {
        // Safety: `sysconf` has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1);
        let start = records.as_ptr() as usize + offset;
        if !start.is_multiple_of(page) || offset + len > records.len() {
            return false;
        }
        resident.resize(len.div_ceil(page), 0);
        // Safety: the range lies inside the live mapping (checked), page-aligned, and `resident` holds a
        // byte for each of its pages.
        let rc = unsafe { libc::mincore(start as *mut libc::c_void, len, resident.as_mut_ptr().cast()) };
        rc == 0 && resident.iter().all(|r| r & 1 == 1)
    }
    #[cfg(not(unix))]
    {
        let _ = (records, offset, len, resident);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_just_written_is_cached_and_a_misaligned_range_is_not_claimed() {
        let path = std::env::temp_dir().join(format!("diskformer-cached-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; 3 * 4096]).unwrap();
        let file = File::open(&path).unwrap();
        // Safety: this test's own file, unchanged while mapped.
        let map = unsafe { Mmap::map(&file) }.unwrap();
        std::fs::remove_file(&path).unwrap();
        let mut resident = Vec::new();
        if cfg!(target_os = "linux") {
            assert!(cached(&map, 0, 3 * 4096, &mut resident));
        }
        assert!(!cached(&map, 100, 4096, &mut resident), "misaligned");
        assert!(!cached(&map, 4096, 3 * 4096, &mut resident), "past the mapping");
    }
}
