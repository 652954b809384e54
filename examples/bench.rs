//! This example shows how to measure end-to-end prefill and decode speed with streamed experts, on a GGUF or a
//! synthetic model of a named shape, and prints one JSON object.
//!
//! ```text
//! cargo run --release --example bench -- --shape tiny
//! cargo run --release --example bench -- --shape qwen3-30b-a3b --synth-dir /dev/shm --store /tmp/q3.store --budget 4GB
//! ```
//!
//! A qwen35moe `--model` runs with every weight on the GPU (its experts do not stream yet): load, prefill and
//! greedy decode only.
//!
//! Random weights route almost uniformly, so hit rates on a synthetic model are a pessimistic bound for a
//! trained one.

#[path = "common/routing.rs"]
mod routing_args;

use std::path::PathBuf;
use std::time::Instant;

use clap::{Parser, ValueEnum};

mod common;
use diskformer::expert_stream::{EvictionPolicy, UploadMethod};
use diskformer::gguf::GgufFile;
use diskformer::qwen3_moe::qwen35moe::{self, Model};
use diskformer::qwen3_moe::synthetic::{SynthShape, SynthSpec, SynthVocab, write_synthetic};
use diskformer::qwen3_moe::{Engine, EngineOptions, Error, KernelTime, Sampler, SamplingOptions};

/// End-to-end tokens per second.
#[derive(Parser)]
struct Args {
    /// A qwen3moe GGUF to run (else `--shape`).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Synthetic model shape when no `--model`: tiny or qwen3-30b-a3b (written once, seeded).
    #[arg(long, default_value = "tiny")]
    shape: String,
    /// Where the synthetic GGUF is written (default: the temp dir).
    #[arg(long)]
    synth_dir: Option<PathBuf>,
    /// Store directory (default: beside the GGUF).
    #[arg(long)]
    store: Option<PathBuf>,
    /// GPU budget (e.g. 4g, 4GB, 512MiB).
    #[arg(long, default_value = "4g", value_parser = common::parse_bytes)]
    budget: u64,
    /// Explicit expert slots (overrides the budget).
    #[arg(long)]
    pool_slots: Option<usize>,
    /// Turn prefetch off.
    #[arg(long)]
    no_prefetch: bool,
    /// A streaming chunk queues the next layer's experts after it waited for this one's, not before
    /// (StreamOptions::early_chunk_prefetch off).
    #[arg(long)]
    no_early_chunk_prefetch: bool,
    /// Keep every expert record in host memory the GPU reads (StreamOptions::host_arena; default: the
    /// engine's choice).
    #[arg(long)]
    host_arena: bool,
    /// No host arena: prefill chunks upload the experts the pool lacks.
    #[arg(long, conflicts_with = "host_arena")]
    no_host_arena: bool,
    /// With the host arena, split residency even where the CPU tier runs (StreamOptions::split_residency;
    /// default: split residency only where the CPU tier is off).
    #[arg(long)]
    split_residency: bool,
    /// With the host arena, stream one-token steps through the pool and the CPU tier instead of split
    /// residency (StreamOptions::split_residency off; the default where the CPU tier runs).
    #[arg(long, conflicts_with = "split_residency")]
    no_split_residency: bool,
    /// Layers of lookahead for prefetch.
    #[arg(long, default_value_t = 2)]
    lookahead: u32,
    /// Eviction policy.
    #[arg(long, value_enum, default_value_t = Policy::Cyclic)]
    policy: Policy,
    /// Read records with O_DIRECT (cold-disk figures without dropping the page cache).
    #[arg(long)]
    direct_io: bool,
    /// With a GGUF: read a K-quant file's experts (and its dense tensors but the Q8_0 ones) in place from it
    /// instead of copying them into the store.
    #[arg(long)]
    experts_in_gguf: bool,
    /// Prompt tokens for the prefill measurement.
    #[arg(long, default_value_t = 64)]
    prompt_tokens: usize,
    /// Tokens to decode.
    #[arg(long, default_value_t = 32)]
    decode_tokens: usize,
    /// Most tokens per prefill chunk.
    #[arg(long, default_value_t = 512)]
    max_batch: u32,
    /// Context length (default: 4096, at most the model's; not the engine's default, which follows the
    /// budget: every figure since the first ran at 4096, and the KV cache takes from the pool's budget).
    #[arg(long)]
    ctx: Option<u32>,
    /// With every expert resident, still route through readbacks and `ensure` (to measure their cost).
    #[arg(long)]
    no_gpu_routing: bool,
    /// With every expert resident, read each greedy pick before queuing the next step (to measure what
    /// run-ahead saves).
    #[arg(long)]
    no_run_ahead: bool,
    /// Chunks multiply by Q8_0-quantised activations with int8 dot products (KernelOptions::int8_prefill).
    #[arg(long)]
    int8_prefill: bool,
    /// Chunks run their Q8_0 GEMMs on tensor cores where the device has cooperative matrices, f16 weights
    /// and activations (KernelOptions::tensor_prefill).
    #[arg(long)]
    tensor_prefill: bool,
    /// One-token steps run their Q8_0 GEMVs on Q8_0-quantised inputs (KernelOptions::int8_decode).
    #[arg(long)]
    int8_decode: bool,
    /// After the measurements, with every expert resident (a qwen35moe file, or a budget that holds every
    /// expert): each kernel's GPU time in a one-token step and in a prefill chunk (`kernel_times` in the
    /// JSON; the graph of each kind alone, 10 submissions of a step, 3 of a chunk).
    #[arg(long)]
    kernel_times: bool,
    /// While experts stream, layers a one-token step queues past the last one checked (with prefetch off;
    /// 0 reads each layer's picks back first; default: the engine's, StreamOptions::route_ahead: 8 with
    /// --direct-io, else 4).
    #[arg(long)]
    route_ahead: Option<u32>,
    /// With route-ahead: host record buffers that guessed misses are read into while a layer's loads run
    /// (StreamOptions::speculative_reads; default: the engine's, 32; 0 off).
    #[arg(long)]
    speculative_reads: Option<usize>,
    /// How records reach the pool: ring (mapped staging, read into directly) or write (queue.write_buffer).
    #[arg(long, value_enum, default_value_t = Upload::Ring)]
    upload: Upload,
    /// Pieces a record is read, staged and uploaded in (ring upload; default: the engine's, EngineOptions::
    /// read_split: whole records with --direct-io or checked reads, else 4).
    #[arg(long)]
    read_split: Option<usize>,
    /// Threads reading demand misses (default: the engine's, 8, or with --direct-io the count a probe of the
    /// disk picks while the model loads).
    #[arg(long)]
    readers: Option<usize>,
    /// Tokens decoded after the prefill and before the decode is timed (the first one-token step builds
    /// its bind groups, and the driver may finish compiling its pipelines on first use).
    #[arg(long, default_value_t = 1)]
    warmup_tokens: usize,
    /// Sampling temperature; 0 (the default) decodes greedily on the GPU's argmax (`step_greedy`), above 0
    /// samples as the chat example does (its defaults: `--temperature 0.6 --top-k 20 --top-p 0.95`): on the
    /// GPU (`step_sampled`) with top-k of 1 to 64, else every token's logits read back and sampled on the CPU.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Top-k when sampling (0 = off).
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Top-p when sampling (1 = off).
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Sampling seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Sample on the CPU from the logits even where the GPU could draw (for comparison).
    #[arg(long)]
    cpu_sampling: bool,
    #[command(flatten)]
    routing: routing_args::RoutingArgs,
    /// Compute each layer's misses on the CPU while the GPU computes the hits (CpuTierOptions::enabled;
    /// default: on, through the page cache or with --direct-io the host tier).
    #[arg(long)]
    cpu_experts: bool,
    /// Turn the CPU tier off (uploads every miss, as before it).
    #[arg(long, conflicts_with = "cpu_experts")]
    no_cpu_experts: bool,
    /// Threads of the CPU tier (default: every core but a quarter, at least two).
    #[arg(long)]
    cpu_threads: Option<usize>,
    /// How the CPU tier takes its inputs where its kernels take quantised ones (CpuTierOptions::math;
    /// default: q16 on K-quant records, else f32).
    #[arg(long, value_enum)]
    cpu_math: Option<CpuMath>,
    /// The host tier (CpuTierOptions::ram_budget): host memory for expert records read with O_DIRECT, for
    /// stores larger than RAM (e.g. 16g; default: with --direct-io half the available memory, else none:
    /// the CPU tier maps the store from the page cache).
    #[arg(long, value_parser = common::parse_bytes)]
    ram_budget: Option<u64>,
    /// The CPU tier admits a miss into the pool when it was picked within this many tokens before (0:
    /// never; default: the engine's, TierConfig::default).
    #[arg(long)]
    cpu_reuse_window: Option<u32>,
    /// With the host arena, outside split residency: the fraction of each layer's misses the GPU reads from
    /// the arena, fixed (CpuTierOptions::arena_share; default: from the measured rates, corrected by which
    /// side finishes first).
    #[arg(long)]
    cpu_arena_share: Option<f64>,
    /// With the host arena, outside split residency: the expert kernels read the GPU's share of the misses
    /// from the arena over the bus, instead of copies first moving them into device slots of their own
    /// (CpuTierOptions::arena_over_bus).
    #[arg(long)]
    cpu_arena_over_bus: bool,
    /// With the host arena, outside split residency: a prefill chunk copies the experts its device slots
    /// lack from the arena into the pool's slots, instead of its GEMMs reading them over the bus
    /// (StreamOptions::chunk_arena_copies).
    #[arg(long)]
    chunk_arena_copies: bool,
    /// Do not check expert records against the store's checksums as they are read
    /// (StreamOptions::check_reads; to measure what the checks cost).
    #[arg(long)]
    no_read_checks: bool,
}

/// `--policy`: the pool's eviction policy.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Policy {
    Lru,
    Hot,
    Lfu,
    Cyclic,
}

/// `--upload`: how records reach the pool.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Upload {
    /// Mapped staging buffers, read into directly.
    Ring,
    /// `queue.write_buffer`.
    Write,
}

/// `--cpu-math`: how the CPU tier takes its inputs.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum CpuMath {
    /// f32, the GPU's arithmetic.
    F32,
    /// Quantised to 16 bits as two int8 halves (within 2^-16 of f32's inputs).
    Q16,
    /// Quantised to Q8_0, as llama.cpp's CPU backend does.
    Q8,
}

impl CpuMath {
    fn math(self) -> diskformer_cpu_kernels::Math {
        use diskformer_cpu_kernels::Math;
        match self {
            CpuMath::F32 => Math::F32,
            CpuMath::Q16 => Math::Q16,
            CpuMath::Q8 => Math::Q8,
        }
    }
}

/// [`Args::ctx`]'s default, where the model's context is longer.
const BENCH_CONTEXT: u32 = 4096;

fn main() -> anyhow::Result<()> {
    common::runtime_dir_for_drivers();
    let args = Args::parse();
    let model = match &args.model {
        Some(m) => m.clone(),
        None => {
            let shape = SynthShape::named(&args.shape).ok_or_else(|| {
                anyhow::anyhow!("unknown shape {:?}; use tiny or qwen3-30b-a3b", args.shape)
            })?;
            let dir = args.synth_dir.clone().unwrap_or_else(std::env::temp_dir);
            let path = dir.join(format!("diskformer-synth-{}.gguf", args.shape));
            if !path.exists() {
                let started = Instant::now();
                let spec = SynthSpec { shape, vocab: SynthVocab::Bytes, seed: 1 };
                let n = write_synthetic(&spec, &path)?;
                eprintln!(
                    "wrote {} ({:.2} GB, {:.1} s)",
                    path.display(),
                    n as f64 / 1e9,
                    started.elapsed().as_secs_f64()
                );
            }
            path
        }
    };
    let ctx = match args.ctx {
        Some(ctx) => ctx,
        None => {
            let gguf = GgufFile::open(&model)?;
            let md = gguf.metadata();
            let arch = md.get_str("general.architecture")?;
            BENCH_CONTEXT.min(md.get_uint(&format!("{arch}.context_length"))? as u32)
        }
    };
    let sampling = SamplingOptions {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        seed: args.seed,
        ..SamplingOptions::default()
    };
    sampling.validate().map_err(|e| anyhow::anyhow!("bad sampling option: {e}"))?;
    let mut opts = EngineOptions::default();
    opts.gpu_budget = Some(args.budget);
    opts.pool_slots = args.pool_slots;
    opts.stream.prefetch = !args.no_prefetch;
    opts.stream.early_chunk_prefetch = !args.no_early_chunk_prefetch;
    opts.stream.split_residency = match (args.split_residency, args.no_split_residency) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    };
    opts.stream.host_arena = if args.host_arena {
        Some(true)
    } else if args.no_host_arena {
        Some(false)
    } else {
        None
    };
    opts.stream.lookahead = args.lookahead;
    opts.stream.direct_io = Some(args.direct_io);
    opts.stream.copy_experts = !args.experts_in_gguf;
    opts.max_batch = args.max_batch;
    opts.max_context = Some(ctx);
    opts.gpu_routing = !args.no_gpu_routing;
    opts.run_ahead = !args.no_run_ahead;
    opts.kernels.int8_prefill = args.int8_prefill;
    opts.kernels.tensor_prefill = args.tensor_prefill;
    opts.kernels.int8_decode = args.int8_decode;
    opts.stream.route_ahead = args.route_ahead.or(opts.stream.route_ahead);
    opts.stream.speculative_reads = args.speculative_reads.unwrap_or(opts.stream.speculative_reads);
    opts.stream.read_split = args.read_split.or(opts.stream.read_split);
    opts.stream.readers = args.readers.or(opts.stream.readers);
    opts.stream.check_reads = !args.no_read_checks;
    args.routing.apply(&mut opts)?;
    opts.cpu.enabled = match (args.cpu_experts, args.no_cpu_experts) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    };
    opts.cpu.threads = args.cpu_threads;
    opts.cpu.math = args.cpu_math.map(CpuMath::math);
    opts.cpu.ram_budget = args.ram_budget;
    opts.cpu.arena_share = args.cpu_arena_share;
    opts.cpu.arena_over_bus = args.cpu_arena_over_bus;
    opts.stream.chunk_arena_copies = args.chunk_arena_copies;
    if let Some(w) = args.cpu_reuse_window {
        opts.cpu.admission.reuse_window = w;
    }
    opts.stream.upload = match args.upload {
        Upload::Ring => UploadMethod::StagingRing(2),
        Upload::Write => UploadMethod::WriteBuffer,
    };
    opts.stream.policy = match args.policy {
        Policy::Lru => EvictionPolicy::Lru,
        Policy::Hot => EvictionPolicy::HOT,
        Policy::Lfu => EvictionPolicy::Lfu,
        Policy::Cyclic => EvictionPolicy::Cyclic,
    };
    // A seeded prompt of ordinary tokens (the first 256 ids are bytes in every vocabulary used here).
    let mut x = 0x9E37_79B9u64;
    let prompt: Vec<u32> = (0..args.prompt_tokens.max(1))
        .map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            ((x >> 33) % 256) as u32
        })
        .collect();
    let started = Instant::now();
    let mut engine = match Engine::open_gguf(&model, args.store.as_deref(), &opts, &mut |_| {}) {
        Ok(engine) => engine,
        Err(Error::WrongArchitecture { found, .. }) if found == qwen35moe::ARCHITECTURE => {
            return bench_qwen35moe(&model, &args, &opts, ctx, &prompt);
        }
        Err(e) => return Err(e.into()),
    };
    let load_s = started.elapsed().as_secs_f64();
    let read_before_prefill = storage_read_bytes();
    let logits = engine.prefill(&prompt, true)?;
    let prefill = engine.stats();
    let read_by_prefill = storage_read_bytes().zip(read_before_prefill).map(|(b, a)| b - a);
    let mut next = logits.iter().enumerate().fold(0, |b, (i, &v)| if v > logits[b] { i } else { b }) as u32;
    // Greedy steps and top-k draws pick on the GPU; other sampled ones read the logits back and sample
    // here (timed apart).
    let mut sampler = Sampler::new(sampling);
    let on_gpu = engine.samples_on_gpu(&sampling) && !args.cpu_sampling;
    // The penalties' window on the CPU, as the GPU's: the prompt, then each token fed.
    let (mut generated, mut sample_s) = (prompt.clone(), 0.0);
    generated.push(next);
    let mut step = |engine: &mut Engine, id: u32, sample_s: &mut f64| -> anyhow::Result<u32> {
        if sampling.is_plain_greedy() {
            return Ok(engine.step_greedy(id)?);
        }
        if on_gpu {
            return Ok(engine.step_sampled(id, &mut sampler)?);
        }
        let logits = engine.step(id)?;
        let started = Instant::now();
        let pick = sampler.sample(&logits, &generated);
        *sample_s += started.elapsed().as_secs_f64();
        generated.push(pick);
        Ok(pick)
    };
    for _ in 0..args.warmup_tokens {
        next = step(&mut engine, next, &mut sample_s)?;
    }
    engine.reset_stats();
    sample_s = 0.0;
    let decode_started = Instant::now();
    let read_before_decode = storage_read_bytes();
    for _ in 0..args.decode_tokens {
        next = step(&mut engine, next, &mut sample_s)?;
    }
    let decode_wall_s = decode_started.elapsed().as_secs_f64();
    let read_by_decode = storage_read_bytes().zip(read_before_decode).map(|(b, a)| b - a);
    let d = engine.stats();
    let c = engine.config();
    let tokens = d.decode_tokens.max(1) as f64;
    // Loads run by the pool's threads (misses and prefetches): per-load read and upload times.
    let loads = (d.pool.misses + d.pool.prefetch_issued).max(1);
    // The disk probe's rates (threads, GB/s) when it chose the readers.
    let reader_probe = engine
        .reader_probe()
        .map(|p| p.rates.iter().map(|r| (r.threads, r.bytes_per_sec / 1e9)).collect::<Vec<_>>());
    let mut out = serde_json::json!({
        "model": model.display().to_string(),
        "adapter": engine.adapter(),
        "shape": {"layers": c.block_count, "experts": c.expert_count, "top_k": c.expert_used_count,
                  "hidden": c.embedding_length, "ffn": c.expert_feed_forward_length, "vocab": engine.vocab()},
        "budget": args.budget,
        "pool_slots": engine.pool_slots(),
        "routes_on_gpu": engine.routes_on_gpu(),
        "run_ahead": !args.no_run_ahead,
        "prefetch": !args.no_prefetch,
        "lookahead": args.lookahead,
        "policy": args.policy.to_possible_value().map(|v| v.get_name().to_owned()),
        "direct_io": args.direct_io,
        "upload": args.upload.to_possible_value().map(|v| v.get_name().to_owned()),
        "read_split": engine.read_split(),
        "readers": engine.readers(),
        "warmup_tokens": args.warmup_tokens,
        "load_s": load_s,
        "prefill_tokens": prefill.prefill_tokens,
        "prefill_tok_s": prefill.prefill_tok_s(),
        "prefill_hit_rate": prefill.pool.hit_rate(),
        "decode_tokens": d.decode_tokens,
        "decode_tok_s": d.decode_tok_s(),
        "hit_rate": d.pool.hit_rate(),
        "bytes_read_per_token": d.pool.bytes_read as f64 / tokens,
        "stall_ms_per_token": d.pool.wait_time.as_secs_f64() * 1e3 / tokens,
        "loads_per_token": loads as f64 / tokens,
        "read_ms_per_load": d.pool.read_time.as_secs_f64() * 1e3 / loads as f64,
        "upload_ms_per_load": d.pool.upload_time.as_secs_f64() * 1e3 / loads as f64,
        "ensure_ms_per_token": d.ensure_time.as_secs_f64() * 1e3 / tokens,
        "gpu_wait_ms_per_token": d.gpu_wait.as_secs_f64() * 1e3 / tokens,
        "host_ms_per_token": d.host_time.as_secs_f64() * 1e3 / tokens,
        "record_ms_per_token": d.record_time.as_secs_f64() * 1e3 / tokens,
        "submit_ms_per_token": d.submit_time.as_secs_f64() * 1e3 / tokens,
        "prefetch_issued": d.pool.prefetch_issued,
        "prefetch_used": d.pool.prefetch_used,
        "gpu_bytes": {"dense": d.gpu_bytes.dense, "pool": d.gpu_bytes.pool, "kv": d.gpu_bytes.kv,
                      "scratch": d.gpu_bytes.scratch, "staging": d.gpu_bytes.staging,
                      "total": d.gpu_bytes.total()},
    });
    out["experts_in_gguf"] = args.experts_in_gguf.into();
    out["read_checks"] = (!args.no_read_checks).into();
    out["rereads"] = d.disk.rereads.into();
    // What this process read from storage (the pool's reads and the CPU tier's page faults on mapped
    // records, with the kernel's readahead): the bytes a cold run's disk bound is taken over.
    out["storage_read"] = serde_json::json!({
        "prefill_bytes": read_by_prefill,
        "decode_bytes_per_token": read_by_decode.map(|b| b as f64 / tokens),
    });
    // The prompt's expert loads: what the pool read and uploaded, and where the prefill's time went.
    let prefill_s = prefill.prefill_time.as_secs_f64();
    out["prefill"] = serde_json::json!({
        "seconds": prefill_s, "pool_bytes": prefill.pool.bytes_read,
        "pool_gb_s": prefill.pool.bytes_read as f64 / prefill_s.max(1e-9) / 1e9,
        "misses": prefill.pool.misses, "late_hits": prefill.pool.late_hits,
        "prefetch_issued": prefill.pool.prefetch_issued, "prefetch_used": prefill.pool.prefetch_used,
        "ensure_s": prefill.ensure_time.as_secs_f64(), "gpu_wait_s": prefill.gpu_wait.as_secs_f64(),
        "host_s": prefill.host_time.as_secs_f64(), "record_s": prefill.record_time.as_secs_f64(),
        "submit_s": prefill.submit_time.as_secs_f64(), "graph_s": prefill.graph_time.as_secs_f64(),
    });
    out["prefill"]["readers"] = readers_json(&prefill);
    out["readers"] = readers_json(&d);
    // Beside the rest: more fields would pass json!'s recursion limit.
    out["reader_probe_gb_s"] = serde_json::json!(reader_probe);
    out["routing"] = routing_json(&args);
    out["early_chunk_prefetch"] = (!args.no_early_chunk_prefetch).into();
    out["arena_bytes"] = d.arena_bytes.into();
    out["split"] = serde_json::json!({
        "device_share": d.split_device_share(), "moves_per_token": d.split_moves as f64 / tokens,
    });
    out["int8_prefill"] = args.int8_prefill.into();
    out["tensor_prefill"] = engine.tensor_prefill().into();
    out["int8_decode"] = args.int8_decode.into();
    out["route_ahead"] = serde_json::json!({
        "layers": engine.route_ahead(), "stood": d.layers_routed_ahead, "rerun": d.layers_rerun,
        "recorded_ahead": d.units_recorded_ahead,
    });
    // The store's reads (demand and speculative): time with one in flight, the bytes, and their rate then.
    let busy_s = d.disk.busy.as_secs_f64();
    out["disk"] = serde_json::json!({
        "busy_ms_per_token": busy_s * 1e3 / tokens, "bytes_per_token": d.disk.bytes as f64 / tokens,
        "busy_fraction": busy_s / decode_wall_s, "gb_per_s_busy": d.disk.bytes as f64 / busy_s.max(1e-9) / 1e9,
    });
    if let Some(mut cpu) = cpu_tier_json(&d, tokens) {
        let engine_only = serde_json::json!({
            "per_token": d.cpu_experts as f64 / tokens,
            "share": d.cpu_share(), "ms_per_token": d.cpu_time.as_secs_f64() * 1e3 / tokens,
            "admitted_per_token": d.cpu_admitted as f64 / tokens,
            "reuse_window": opts.cpu.admission.reuse_window,
        });
        cpu.as_object_mut().expect("an object").extend(engine_only.as_object().expect("an object").clone());
        out["cpu_experts"] = cpu;
    }
    if let Some(h) = &d.host {
        let read_s = h.read_time.as_secs_f64();
        out["host_tier"] = serde_json::json!({
            "budget": args.ram_budget, "held_per_token": h.hits as f64 / tokens,
            "reads_per_token": h.reads as f64 / tokens, "bytes_per_token": h.bytes as f64 / tokens,
            "read_ms_per_token": read_s * 1e3 / tokens, "gb_per_s_reading": h.bytes as f64 / read_s.max(1e-9) / 1e9,
        });
    }
    if let Some(spec) = &d.speculative {
        out["speculative"] = serde_json::json!({
            "buffers": opts.stream.speculative_reads, "started": spec.started, "read": spec.read, "used": spec.used,
            "waited": spec.waited, "dropped": spec.dropped, "wasted": spec.wasted, "failed": spec.failed,
            "bytes_per_token": spec.bytes as f64 / tokens,
            "yielded_ms_per_token": spec.yielded.as_secs_f64() * 1e3 / tokens,
        });
    }
    // The engine's decode_tok_s counts its own steps; sampling on the CPU lies between them.
    out["sampling"] = serde_json::json!({
        "temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p, "seed": args.seed,
        "on_gpu": on_gpu && !sampling.is_plain_greedy(),
        "sample_ms_per_token": sample_s * 1e3 / tokens,
        "decode_with_sampling_tok_s": d.decode_tokens as f64 / decode_wall_s,
    });
    if args.kernel_times {
        // Rows of [kernel, dispatches, ms]: the engine's own graphs (every expert resident).
        let chunk = args.max_batch.min(args.prompt_tokens as u32).max(1);
        out["kernel_times"] = serde_json::json!({
            "step": kernel_rows(engine.kernel_times(1, 10)?),
            "chunk": kernel_rows(engine.kernel_times(chunk, 3)?),
        });
        engine.reset();
    }
    println!("{out}");
    Ok(())
}

/// [`KernelTime`] rows as JSON arrays of [kernel, dispatches, ms].
fn kernel_rows(times: Vec<KernelTime>) -> Vec<serde_json::Value> {
    times.into_iter().map(|k| serde_json::json!([k.kernel, k.dispatches, k.seconds * 1e3])).collect()
}

/// A qwen35moe file (`qwen35moe::Model`): every weight on the GPU where all fit `--budget`, else the
/// routed experts streamed through a pool of slots (or of `--pool-slots`), under the routing workload asked
/// for (the qwen3moe engine's streaming options other than these do not apply): load, the prompt in
/// chunks, then greedy decode (the argmax on the GPU).
fn bench_qwen35moe(
    model: &std::path::Path,
    args: &Args,
    opts: &EngineOptions,
    ctx: u32,
    prompt: &[u32],
) -> anyhow::Result<()> {
    let open = qwen35moe::OpenOptions {
        max_context: Some(ctx),
        gpu_budget: opts.gpu_budget,
        pool_slots: opts.pool_slots,
        store_dir: args.store.clone(),
        routing: opts.routing.clone(),
        record_routing: opts.record_routing.clone(),
        cpu: opts.cpu.clone(),
        host_arena: opts.stream.host_arena,
        check_reads: opts.stream.check_reads,
        tensor_prefill: opts.kernels.tensor_prefill,
    };
    let started = Instant::now();
    let mut m = Model::open_with(model, &open, &mut |_| {})?;
    let load_s = started.elapsed().as_secs_f64();
    let argmax = |l: &[f32]| l.iter().enumerate().fold(0, |b, (i, &v)| if v > l[b] { i } else { b }) as u32;
    // The first prefill builds each chunk size's graph (and the device compiles its pipelines): timed apart,
    // then the prompt again from a reset.
    let started = Instant::now();
    m.prefill(prompt)?;
    let first_prefill_s = started.elapsed().as_secs_f64();
    m.reset();
    m.reset_stream_stats();
    let started = Instant::now();
    let mut next = argmax(&m.prefill(prompt)?);
    let prefill_s = started.elapsed().as_secs_f64();
    let prefilled = m.stream_stats();
    for _ in 0..args.warmup_tokens {
        next = m.step_greedy(next)?;
    }
    m.reset_stream_stats();
    let started = Instant::now();
    for _ in 0..args.decode_tokens {
        next = m.step_greedy(next)?;
    }
    let decode_s = started.elapsed().as_secs_f64();
    // The tiers' counters over the decode alone, and the prompt's loads.
    let pool = m.stream_stats().map(|d| {
        let tokens = args.decode_tokens.max(1) as f64;
        let ms = |t: std::time::Duration| t.as_secs_f64() * 1e3 / tokens;
        let (hits, misses) = (d.pool.hits, d.pool.misses);
        let mut pool = serde_json::json!({
            "slots": m.pool_slots(), "hits_per_token": hits as f64 / tokens,
            "misses_per_token": misses as f64 / tokens,
            "hit_rate": hits as f64 / (hits + misses).max(1) as f64,
            "read_mb_per_token": d.pool.bytes_read as f64 / 1e6 / tokens,
            "cpu_experts_per_token": d.cpu_experts as f64 / tokens,
            "cpu_ms_per_token": ms(d.cpu_time),
            "gpu_wait_ms_per_token": ms(d.gpu_wait),
            "gpu_gb": d.gpu_bytes.total() as f64 / 1e9,
        });
        if let Some(cpu) = cpu_tier_json(&d, tokens) {
            pool["cpu"] = cpu;
        }
        pool["arena_bytes"] = d.arena_bytes.into();
        if let Some(p) = &prefilled {
            pool["prefill"] = serde_json::json!({
                "pool_gb": p.pool.bytes_read as f64 / 1e9,
                "pool_gb_s": p.pool.bytes_read as f64 / prefill_s.max(1e-9) / 1e9,
                "gpu_wait_s": p.gpu_wait.as_secs_f64(), "readers": readers_json(p),
            });
        }
        pool
    });
    let kernel_times = match args.kernel_times {
        true => {
            let times = serde_json::json!({
                "step": kernel_rows(m.kernel_times(1, 10)?),
                "chunk": kernel_rows(m.kernel_times(qwen35moe::MAX_CHUNK, 3)?),
            });
            m.reset();
            Some(times)
        }
        false => None,
    };
    let c = m.config();
    let out = serde_json::json!({
        "model": model.display().to_string(),
        "architecture": qwen35moe::ARCHITECTURE,
        "adapter": m.adapter(),
        "shape": {"layers": c.layers, "experts": c.experts, "top_k": c.top_k, "hidden": c.hidden,
                  "ffn": c.expert_ffn, "vocab": m.vocab()},
        "resident": !m.streams_experts(),
        "max_chunk": m.max_chunk(),
        "budget": opts.gpu_budget,
        "routing": routing_json(args),
        "read_checks": opts.stream.check_reads,
        "tensor_prefill": m.tensor_prefill(),
        "pool": pool,
        "load_s": load_s,
        "prompt_tokens": prompt.len(),
        "prefill_tok_s": prompt.len() as f64 / prefill_s,
        "first_prefill_tok_s": prompt.len() as f64 / first_prefill_s,
        "decode_tokens": args.decode_tokens,
        "decode_tok_s": args.decode_tokens as f64 / decode_s.max(1e-9),
        "kernel_times": kernel_times,
    });
    println!("{out}");
    Ok(())
}

/// The reader threads' side of a run's loads (seconds summed over them): the loads' reads and uploads and,
/// staged through rings, the pieces' waits for a buffer the device still copied from, fills and submits.
fn readers_json(s: &diskformer::qwen3_moe::Stats) -> serde_json::Value {
    let staged = &s.staging;
    serde_json::json!({
        "read_s": s.pool.read_time.as_secs_f64(), "upload_s": s.pool.upload_time.as_secs_f64(),
        "pieces": staged.pieces, "ring_wait_s": staged.ring_wait.as_secs_f64(),
        "fill_s": staged.fill.as_secs_f64(), "submit_s": staged.submit.as_secs_f64(),
    })
}

/// Bytes this process has caused to be read from storage (`read_bytes` of `/proc/self/io`); `None` where
/// the kernel does not count them.
fn storage_read_bytes() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    io.lines().find_map(|l| l.strip_prefix("read_bytes:")).and_then(|v| v.trim().parse().ok())
}

/// The CPU tier's figures a token that both models' rows carry (its ISA, threads and math, first uses,
/// recording, its pool's times, and its share of the misses with the arena), where the tier ran.
fn cpu_tier_json(d: &diskformer::qwen3_moe::Stats, tokens: f64) -> Option<serde_json::Value> {
    let (isa, threads) = d.cpu_isa?;
    let ms = |t: std::time::Duration| t.as_secs_f64() * 1e3 / tokens;
    let us = |t: std::time::Duration| t.as_secs_f64() * 1e6;
    Some(serde_json::json!({
        "isa": isa.name(), "threads": threads, "math": d.cpu_math.map(|m| m.name()),
        "first_uses_per_token": d.cpu_first_uses as f64 / tokens,
        "first_use_ms_per_token": ms(d.cpu_first_use_time),
        "recording_ms_per_token": ms(d.cpu_recording_time),
        "pool": pool_times(&d.cpu_pool, tokens),
        "arena_per_token": d.cpu_arena_picks as f64 / tokens, "arena_fraction": d.cpu_arena_fraction,
        "stage_slots": d.stage_slots,
        "bus_us_per_record": d.cpu_arena_times.map(|(bus, _)| us(bus)),
        "cpu_us_per_record": d.cpu_arena_times.and_then(|(_, cpu)| cpu).map(us),
    }))
}

/// The CPU tier's pool a token: its jobs' wall time, their tasks' time summed over the threads, the stepping thread's part before it joined, its wait
/// for tasks other threads held, the workers' start, and the longest task (a thread that lost its core).
fn pool_times(p: &diskformer::cpu_kernels::PoolTimes, tokens: f64) -> serde_json::Value {
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3 / tokens;
    let jobs = p.jobs.max(1) as f64;
    serde_json::json!({
        "jobs_per_token": p.jobs as f64 / tokens, "tasks_per_job": p.tasks as f64 / jobs,
        "caller_tasks_per_job": p.caller_tasks as f64 / jobs, "busy_ms_per_token": ms(p.busy),
        "task_ms_per_token": ms(p.task_time),
        "meanwhile_ms_per_token": ms(p.meanwhile), "join_wait_ms_per_token": ms(p.join_wait),
        "worker_start_us_per_job": p.worker_start.as_secs_f64() * 1e6 / jobs,
        "longest_task_us": p.longest_task.as_secs_f64() * 1e6,
    })
}

/// The routing workload a run names.
fn routing_json(args: &Args) -> serde_json::Value {
    match &args.routing.routing_trace {
        Some(path) => serde_json::json!({"trace": path.display().to_string()}),
        None => serde_json::json!({"kind": args.routing.routing, "seed": args.routing.routing_seed}),
    }
}
