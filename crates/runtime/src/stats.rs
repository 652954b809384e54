//! What the engine did: token counts and times per stage, with the pool's counters and the GPU memory by
//! category ([`Stats`], a snapshot), from the counters a step driver keeps ([`EngineStats`]).

use std::fmt;
use std::time::Duration;

use diskformer_expert_stream::{HostStats, SpeculativeStats, StagingTimes, Stats as PoolStats};
use diskformer_store::ReadActivity;

/// Engine-side counters a step driver keeps (the pool keeps its own).
#[derive(Debug, Default, Clone)]
pub struct EngineStats {
    /// One-token steps decoded, and their time.
    pub decode_tokens: u64,
    /// See `decode_tokens`.
    pub decode_time: Duration,
    /// Prompt tokens run, and their time.
    pub prefill_tokens: u64,
    /// See `prefill_tokens`.
    pub prefill_time: Duration,
    /// Time blocked on readbacks (GPU work and the round trip).
    pub gpu_wait: Duration,
    /// Time in `ensure` (hits, late hits and misses together).
    pub ensure_time: Duration,
    /// The rest of a step's time on the host: recording dispatches, writes, submits, prefetch calls.
    pub host_time: Duration,
    /// Of the host time: recording commands (with every expert resident, mostly while the GPU runs).
    pub record_time: Duration,
    /// Of the host time: `queue.submit` calls.
    pub submit_time: Duration,
    /// Of the host time: building step graphs (a chunk size's first step, or one evicted since).
    pub graph_time: Duration,
    /// Route-ahead: layers of one-token steps whose queued run stood (every pick's expert was in the pool).
    pub layers_routed_ahead: u64,
    /// Route-ahead: layers run again from their router after a load.
    pub layers_rerun: u64,
    /// Route-ahead: layer units (whole or run again) submitted as the unit stock's thread recorded them.
    pub units_recorded_ahead: u64,
    /// Split residency: one-token picks read from the device's slots, and from the arena in host memory.
    pub split_device_picks: u64,
    /// See `split_device_picks`.
    pub split_arena_picks: u64,
    /// Split residency: records moved from the arena onto the device.
    pub split_moves: u64,
    /// The CPU tier: picks computed on the host, the time they took, and misses admitted into the pool.
    pub cpu_experts: u64,
    /// See `cpu_experts`.
    pub cpu_time: Duration,
    /// See `cpu_experts`.
    pub cpu_admitted: u64,
    /// The CPU tier with a host arena: misses the GPU took from the arena instead.
    pub cpu_arena_picks: u64,
    /// The CPU tier: mapped records a step used for the first time (mapped in and checked on its path), and
    /// the time that took (of `cpu_time`).
    pub cpu_first_uses: u64,
    /// See `cpu_first_uses`.
    pub cpu_first_use_time: Duration,
    /// The CPU tier: of `cpu_time`, the stepping thread recording the GPU's next commands before it joined
    /// the host's experts (when it is most of `cpu_time`, the recording, not the experts, bounds a layer).
    pub cpu_recording_time: Duration,
    /// The CPU tier: where its pool's jobs spent their time.
    pub cpu_pool: diskformer_cpu_kernels::PoolTimes,
}

/// GPU memory by category, in bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct GpuBytes {
    /// Dense weights (embedding, attention, norms, routers, lm head).
    pub dense: u64,
    /// The expert slot pool.
    pub pool: u64,
    /// The KV cache.
    pub kv: u64,
    /// Activations, slot indices and readback buffers.
    pub scratch: u64,
    /// The reader threads' mapped staging rings for expert uploads (host-visible memory that may sit on the
    /// device, so it counts against the budget).
    pub staging: u64,
}

impl GpuBytes {
    /// All of it.
    pub fn total(&self) -> u64 {
        self.dense + self.pool + self.kv + self.scratch + self.staging
    }
}

/// A snapshot of the engine's counters since the load or the last reset.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Stats {
    /// Tokens decoded one at a time.
    pub decode_tokens: u64,
    /// Time spent decoding them.
    pub decode_time: Duration,
    /// Prompt tokens run.
    pub prefill_tokens: u64,
    /// Time spent on them.
    pub prefill_time: Duration,
    /// Time blocked on GPU readbacks.
    pub gpu_wait: Duration,
    /// Time in the pool's `ensure`.
    pub ensure_time: Duration,
    /// The rest of the steps' time on the host (recording dispatches, writes, submits).
    pub host_time: Duration,
    /// Of the host time: recording commands (with every expert resident, mostly while the GPU runs).
    pub record_time: Duration,
    /// Of the host time: `queue.submit` calls.
    pub submit_time: Duration,
    /// Of the host time: building step graphs (a chunk size's first step, or one evicted since).
    pub graph_time: Duration,
    /// Route-ahead (`StreamOptions::route_ahead`): layers of one-token steps whose queued run
    /// stood, with every pick's expert in the pool.
    pub layers_routed_ahead: u64,
    /// Route-ahead: layers run again from their router once their experts were loaded.
    pub layers_rerun: u64,
    /// Route-ahead: layer units (a layer whole, or again from its router) submitted as a thread had
    /// recorded them ahead; the host recorded the rest.
    pub units_recorded_ahead: u64,
    /// Split residency: one-token picks read from the device's slots, from the arena, and records moved.
    pub split_device_picks: u64,
    /// See `split_device_picks`.
    pub split_arena_picks: u64,
    /// See `split_device_picks`.
    pub split_moves: u64,
    /// The CPU tier (`CpuTierOptions::enabled`): picks computed on the host.
    pub cpu_experts: u64,
    /// The CPU tier: time the host spent computing them.
    pub cpu_time: Duration,
    /// The CPU tier: misses also uploaded into the pool in the background.
    pub cpu_admitted: u64,
    /// The CPU tier with a host arena: misses the GPU took from the arena instead.
    pub cpu_arena_picks: u64,
    /// The CPU tier with a host arena: the fraction of the misses it gives the arena now, from the bus's
    /// time a record and the CPU's, both measured (`ArenaShare`).
    pub cpu_arena_fraction: Option<f64>,
    /// The CPU tier with a host arena: the times a record the fraction starts from, the bus's (probed at
    /// open) and the CPU's (its running mean), when it follows them.
    pub cpu_arena_times: Option<(Duration, Option<Duration>)>,
    /// The CPU tier with a host arena: device slots the GPU's misses are copied into from the arena (0:
    /// the expert kernels read them over the bus).
    pub stage_slots: usize,
    /// The CPU tier: mapped records a step used first (mapped in, and checked, on its path).
    pub cpu_first_uses: u64,
    /// The CPU tier: the time that took (of `cpu_time`).
    pub cpu_first_use_time: Duration,
    /// The CPU tier: of `cpu_time`, the stepping thread recording the GPU's next commands before it joined
    /// the host's experts.
    pub cpu_recording_time: Duration,
    /// The CPU tier: where its pool's jobs spent their time (the tasks, the workers' start, the stepping
    /// thread's wait for tasks other threads held).
    pub cpu_pool: diskformer_cpu_kernels::PoolTimes,
    /// The CPU tier's SIMD path and threads, when it runs.
    pub cpu_isa: Option<(diskformer_cpu_kernels::Isa, usize)>,
    /// How the CPU tier takes its inputs (f32, Q8_0- or Q16-quantised), when it runs.
    pub cpu_math: Option<diskformer_cpu_kernels::Math>,
    /// The host tier's counters (`CpuTierOptions::ram_budget`), when it runs.
    pub host: Option<HostStats>,
    /// The pool's counters (hits, late hits, misses, bytes, read and upload times, prefetch, by layer).
    pub pool: PoolStats,
    /// The speculative reads' counters (`StreamOptions::speculative_reads`), when they run.
    pub speculative: Option<SpeculativeStats>,
    /// The store's expert reads, demand and speculative: time with one in flight, and bytes.
    pub disk: ReadActivity,
    /// Where the loads staged through mapped rings spent the reader threads' time (left zero by engines
    /// whose experts do not stream).
    pub staging: StagingTimes,
    /// Expert slots.
    pub pool_slots: usize,
    /// GPU memory by category.
    pub gpu_bytes: GpuBytes,
    /// Host memory of the pool's arena ([`StreamOptions::host_arena`](crate::StreamOptions::host_arena);
    /// 0 without one), apart from the GPU's.
    pub arena_bytes: u64,
}

impl Stats {
    /// The snapshot of a step driver's counters `e` with the pool's, the speculative reads', the disk's,
    /// the GPU memory and the slot count (the CPU and host tiers' fields left for the caller).
    pub fn new(
        e: &EngineStats,
        pool: PoolStats,
        speculative: Option<SpeculativeStats>,
        disk: ReadActivity,
        gpu_bytes: GpuBytes,
        pool_slots: usize,
    ) -> Self {
        Stats {
            decode_tokens: e.decode_tokens,
            decode_time: e.decode_time,
            prefill_tokens: e.prefill_tokens,
            prefill_time: e.prefill_time,
            gpu_wait: e.gpu_wait,
            ensure_time: e.ensure_time,
            host_time: e.host_time,
            record_time: e.record_time,
            submit_time: e.submit_time,
            graph_time: e.graph_time,
            layers_routed_ahead: e.layers_routed_ahead,
            layers_rerun: e.layers_rerun,
            units_recorded_ahead: e.units_recorded_ahead,
            split_device_picks: e.split_device_picks,
            split_arena_picks: e.split_arena_picks,
            split_moves: e.split_moves,
            cpu_experts: e.cpu_experts,
            cpu_time: e.cpu_time,
            cpu_admitted: e.cpu_admitted,
            cpu_arena_picks: e.cpu_arena_picks,
            cpu_arena_fraction: None,
            cpu_arena_times: None,
            stage_slots: 0,
            cpu_first_uses: e.cpu_first_uses,
            cpu_first_use_time: e.cpu_first_use_time,
            cpu_recording_time: e.cpu_recording_time,
            cpu_pool: e.cpu_pool,
            cpu_isa: None,
            cpu_math: None,
            host: None,
            pool,
            speculative,
            disk,
            staging: StagingTimes::default(),
            pool_slots,
            gpu_bytes,
            arena_bytes: 0,
        }
    }

    /// Decode tokens per second.
    pub fn decode_tok_s(&self) -> f64 {
        per_sec(self.decode_tokens, self.decode_time)
    }

    /// Prefill tokens per second.
    pub fn prefill_tok_s(&self) -> f64 {
        per_sec(self.prefill_tokens, self.prefill_time)
    }

    /// Tokens of either kind.
    pub fn tokens(&self) -> u64 {
        self.decode_tokens + self.prefill_tokens
    }

    /// Milliseconds per token of `d`, over every token run.
    pub fn ms_per_token(&self, d: Duration) -> f64 {
        if self.tokens() == 0 { 0.0 } else { d.as_secs_f64() * 1e3 / self.tokens() as f64 }
    }

    /// Split residency: the share of one-token picks read from the device's slots (`None` before any).
    pub fn split_device_share(&self) -> Option<f64> {
        let all = self.split_device_picks + self.split_arena_picks;
        (all > 0).then(|| self.split_device_picks as f64 / all as f64)
    }

    /// The share of the picks the CPU tier computed (`None` before any pick).
    pub fn cpu_share(&self) -> Option<f64> {
        let p = &self.pool;
        let all = self.cpu_experts + self.cpu_arena_picks + p.hits + p.late_hits + p.misses;
        (all > 0).then(|| self.cpu_experts as f64 / all as f64)
    }

    /// Expert bytes the pool loaded into its slots per token: read from the store, or copied from host
    /// memory (the arena, the host tier's hand-off, speculative reads); the store's own reads are `disk`'s.
    pub fn bytes_read_per_token(&self) -> f64 {
        if self.tokens() == 0 { 0.0 } else { self.pool.bytes_read as f64 / self.tokens() as f64 }
    }
}

fn per_sec(n: u64, d: Duration) -> f64 {
    if d.is_zero() { 0.0 } else { n as f64 / d.as_secs_f64() }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.pool;
        let pct = |x: Option<f64>| x.map_or("-".to_owned(), |v| format!("{:.1}%", 100.0 * v));
        writeln!(
            f,
            "decode {} tok, {:.2} tok/s; prefill {} tok, {:.1} tok/s",
            self.decode_tokens,
            self.decode_tok_s(),
            self.prefill_tokens,
            self.prefill_tok_s()
        )?;
        writeln!(
            f,
            "per token: GPU wait {:.2} ms, ensure {:.2} ms, host {:.2} ms (recording {:.2}, submits {:.2}), read {:.2} ms, upload {:.2} ms, {:.1} MB loaded",
            self.ms_per_token(self.gpu_wait),
            self.ms_per_token(self.ensure_time),
            self.ms_per_token(self.host_time),
            self.ms_per_token(self.record_time),
            self.ms_per_token(self.submit_time),
            self.ms_per_token(p.read_time),
            self.ms_per_token(p.upload_time),
            self.bytes_read_per_token() / 1e6
        )?;
        writeln!(
            f,
            "experts: hit rate {} ({} hits, {} late, {} misses), prefetch {} issued / {} used ({}), {} slots",
            pct(p.hit_rate()),
            p.hits,
            p.late_hits,
            p.misses,
            p.prefetch_issued,
            p.prefetch_used,
            pct(p.prefetch_accuracy()),
            self.pool_slots
        )?;
        if self.layers_routed_ahead + self.layers_rerun > 0 {
            writeln!(
                f,
                "route-ahead: {} layers stood, {} run again after a load, {} units recorded ahead",
                self.layers_routed_ahead, self.layers_rerun, self.units_recorded_ahead
            )?;
        }
        if let Some(share) = self.split_device_share() {
            writeln!(
                f,
                "split residency: {} of picks from the device's slots, the rest from host memory; {} records moved in",
                pct(Some(share)),
                self.split_moves
            )?;
        }
        if let Some((isa, threads)) = self.cpu_isa {
            writeln!(
                f,
                "CPU experts ({isa}, {} inputs, {threads} threads): {:.1} a token ({} of picks), {:.2} ms a token, {} admitted to the pool",
                self.cpu_math.map_or("f32", |m| m.name()),
                self.cpu_experts as f64 / self.tokens().max(1) as f64,
                pct(self.cpu_share()),
                self.ms_per_token(self.cpu_time),
                self.cpu_admitted
            )?;
        }
        if let Some(fraction) = self.cpu_arena_fraction {
            writeln!(
                f,
                "host arena: {:.1} misses a token taken by the GPU from it ({} of the misses now; {})",
                self.cpu_arena_picks as f64 / self.tokens().max(1) as f64,
                pct(Some(fraction)),
                if self.stage_slots > 0 { "copied into stage slots" } else { "read over the bus" }
            )?;
        }
        if let Some(h) = &self.host {
            let secs = h.read_time.as_secs_f64();
            writeln!(
                f,
                "host tier: {} held, {} read ({:.1} MB in {:.1} ms, {:.2} GB/s while reading)",
                h.hits,
                h.reads,
                h.bytes as f64 / 1e6,
                secs * 1e3,
                h.bytes as f64 / secs.max(1e-9) / 1e9
            )?;
        }
        if let Some(spec) = &self.speculative {
            writeln!(f, "{spec}")?;
        }
        if self.disk.bytes > 0 {
            let busy = self.disk.busy.as_secs_f64();
            writeln!(
                f,
                "store reads: {:.1} MB in {:.1} ms busy ({:.2} GB/s while busy)",
                self.disk.bytes as f64 / 1e6,
                busy * 1e3,
                self.disk.bytes as f64 / busy.max(1e-9) / 1e9
            )?;
        }
        let by_layer: Vec<String> = (0..p.hits_by_layer.len()).map(|l| pct(p.layer_hit_rate(l))).collect();
        writeln!(f, "hit rate by layer: {}", by_layer.join(" "))?;
        let g = &self.gpu_bytes;
        let mb = |b: u64| b as f64 / 1e6;
        write!(
            f,
            "GPU MB: dense {:.1}, pool {:.1}, kv {:.1}, scratch {:.1}, staging {:.1}, total {:.1}",
            mb(g.dense),
            mb(g.pool),
            mb(g.kv),
            mb(g.scratch),
            mb(g.staging),
            mb(g.total())
        )?;
        if self.arena_bytes > 0 {
            write!(f, "; host arena {:.1} MB", mb(self.arena_bytes))?;
        }
        Ok(())
    }
}
