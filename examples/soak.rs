//! This example shows the engine holding up over a long run: it streams many replies from a tiny synthetic
//! model through a small expert pool, reopening the engine now and then with a random budget and options
//! (prefetch, the CPU tier, O_DIRECT), cancelling some replies midway, resetting the context now and then,
//! and letting conversations grow into a full context (a reply that fills it, or a prompt that no longer
//! fits, starts a new one), while it samples the process's resident memory. Any other error stops it. It
//! ends with one JSON line: tokens, replies by how they ended, and resident memory at the start (after the
//! first reply), at the end and at its highest.
//!
//! ```text
//! cargo run --release --example soak -- --tokens 20000
//! ```
//!
//! With `--store`, it streams from a store made of a real-sized model instead (for a GPU, from a cold
//! disk with `--direct-io`), under `uniform` routing with a new seed for each engine (the synthetic
//! model's own router would pick the same few experts every token), at budgets drawn from `--budgets`
//! and, with `--direct-io`, host tiers drawn from `--ram-budgets`; `--minutes` bounds it by time. Each
//! engine's open is timed and the resident memory is sampled between engines too, once one has dropped,
//! where the host tier's records are not counted.
//!
//! ```text
//! soak --store /tmp/q3.store --direct-io --minutes 10.5 --tokens 10000000 --replies-per-engine 12
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use diskformer::bpe::chat::Message;
use diskformer::expert_stream::SeededRng;
use diskformer::qwen3_moe::synthetic::{SynthShape, SynthSpec, SynthVocab, write_synthetic};
use diskformer::qwen3_moe::{
    EndReason, Engine, EngineOptions, Event, GenerateOptions, Routing, SamplingOptions,
};

mod common;

/// Stream replies from a tiny model under random budgets, cancellations and resets; report memory.
#[derive(Parser)]
struct Args {
    /// Tokens to stream in all.
    #[arg(long, default_value_t = 20_000)]
    tokens: u64,
    /// Seed of the choices (budgets, options, prompts, cancellations).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Replies before the engine is reopened with other options.
    #[arg(long, default_value_t = 40)]
    replies_per_engine: u32,
    /// Stop after this many minutes as well (whichever of it and `--tokens` comes first).
    #[arg(long)]
    minutes: Option<f64>,
    /// A store to stream from (made by `ingest` from any GGUF) instead of a tiny synthetic model.
    #[arg(long)]
    store: Option<PathBuf>,
    /// With `--store`: the GPU budgets each engine draws one of.
    #[arg(long, value_delimiter = ',', default_value = "4g,6g,8g", value_parser = common::parse_bytes)]
    budgets: Vec<u64>,
    /// With `--store`: read the records with O_DIRECT in every engine (the store read cold).
    #[arg(long)]
    direct_io: bool,
    /// With `--store --direct-io`: the host tiers (`CpuTierOptions::ram_budget`) each engine draws one of.
    #[arg(long, value_delimiter = ',', default_value = "1g,4g,16g", value_parser = common::parse_bytes)]
    ram_budgets: Vec<u64>,
}

/// Resident memory of this process, bytes (`/proc/self/statm`).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
    pages * 4096
}

fn main() -> anyhow::Result<()> {
    common::runtime_dir_for_drivers();
    let args = Args::parse();
    if args.store.is_some() && (args.budgets.is_empty() || args.ram_budgets.is_empty()) {
        anyhow::bail!("--budgets and --ram-budgets need at least one size each");
    }
    let dir = std::env::temp_dir().join(format!("diskformer-soak-{}", std::process::id()));
    let (store, tiny) = match &args.store {
        Some(store) => (store.clone(), None),
        None => {
            std::fs::create_dir_all(&dir)?;
            let gguf = dir.join("tiny.gguf");
            let shape = SynthShape::tiny();
            write_synthetic(&SynthSpec { shape: shape.clone(), vocab: SynthVocab::Bytes, seed: 7 }, &gguf)?;
            let store = dir.join("store");
            diskformer::store::ingest(&gguf, &store, &Default::default(), &mut |_| {})?;
            (store, Some(shape))
        }
    };
    let deadline = args.minutes.map(|m| Instant::now() + Duration::from_secs_f64(m * 60.0));
    let out_of_time = || deadline.is_some_and(|d| Instant::now() >= d);

    let mut rng = SeededRng::new(args.seed);
    let started = Instant::now();
    let (mut tokens, mut replies, mut engines, mut resets) = (0u64, 0u64, 0u64, 0u64);
    let (mut cancelled, mut context_full, mut stopped, mut limited) = (0u64, 0u64, 0u64, 0u64);
    let mut prompt_full = 0u64;
    let (mut rss_start, mut rss_max) = (None, 0u64);
    // Between engines (the last one dropped), and the longest open.
    let (mut idle_first, mut idle_last, mut idle_max) = (None, 0u64, 0u64);
    let mut longest_open = Duration::ZERO;
    let words = ["hello", "the quick brown fox", "why is the sky blue?", "count to ten", "ok"];
    while tokens < args.tokens && !out_of_time() {
        let mut opts = EngineOptions::default();
        let prefetch_and_tier = |opts: &mut EngineOptions, rng: &mut SeededRng| {
            opts.stream.prefetch = rng.below(2) == 0;
            opts.cpu.enabled = [None, Some(true), Some(false)][rng.below(3) as usize];
        };
        // (The tiny model's draws in the order RELIABILITY.md's runs made them.)
        if let Some(shape) = &tiny {
            // From 2 × top-k slots (every step loads) to every expert resident.
            let (top_k, all_slots) = (u64::from(shape.top_k), u64::from(shape.layers * shape.experts));
            opts.pool_slots = Some((2 * top_k + rng.below(all_slots - 2 * top_k + 1)) as usize);
            prefetch_and_tier(&mut opts, &mut rng);
            opts.stream.direct_io = Some(rng.below(4) == 0);
            opts.max_context = Some(128 + rng.below(384) as u32);
        } else {
            prefetch_and_tier(&mut opts, &mut rng);
            opts.gpu_budget = Some(args.budgets[rng.below(args.budgets.len() as u64) as usize]);
            opts.stream.direct_io = Some(args.direct_io);
            if args.direct_io && opts.cpu.enabled != Some(false) {
                opts.cpu.ram_budget =
                    Some(args.ram_budgets[rng.below(args.ram_budgets.len() as u64) as usize]);
            }
            opts.routing = Routing::Uniform { seed: rng.next_u64() };
            opts.max_context = Some(256 + rng.below(1792) as u32);
        }
        let chosen = format!(
            "budget {}, ram budget {}, cpu experts {:?}, prefetch {}",
            opts.gpu_budget.map_or("-".into(), |b| format!("{:.0} GB", b as f64 / 1e9)),
            opts.cpu.ram_budget.map_or("-".into(), |b| format!("{:.0} GB", b as f64 / 1e9)),
            opts.cpu.enabled,
            opts.stream.prefetch,
        );
        let opening = Instant::now();
        let mut engine = Engine::open(&store, &opts, &mut |_| {})?;
        longest_open = longest_open.max(opening.elapsed());
        engines += 1;
        let (served, tokens_before) = (Instant::now(), tokens);
        let mut history: Vec<Message> = Vec::new();
        for _ in 0..args.replies_per_engine {
            if rng.below(5) == 0 {
                engine.reset();
                history.clear();
                resets += 1;
            }
            history.push(Message::user(words[rng.below(words.len() as u64) as usize]));
            let cancel = Arc::new(AtomicBool::new(false));
            let cancel_after = (rng.below(3) == 0).then(|| rng.below(40));
            let gen_opts = {
                let mut g = GenerateOptions::default();
                g.max_tokens = 8 + rng.below(120) as usize;
                g.cancel = Some(Arc::clone(&cancel));
                g.thinking = rng.below(2) == 0;
                if rng.below(2) == 0 {
                    g.sampling = SamplingOptions {
                        temperature: 0.8,
                        top_k: 20,
                        top_p: 0.95,
                        seed: rng.next_u64(),
                        ..SamplingOptions::default()
                    };
                }
                g
            };
            let (mut reply_ids, mut text, mut end) = (0u64, String::new(), None);
            let generation = match engine.generate(&history, &gen_opts) {
                Ok(g) => g,
                // The conversation outgrew the context: start a new one, as a client would.
                Err(diskformer::qwen3_moe::Error::ContextFull { .. }) => {
                    prompt_full += 1;
                    engine.reset();
                    history.clear();
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            for event in generation {
                match event? {
                    Event::Token(_) => {
                        reply_ids += 1;
                        if cancel_after == Some(reply_ids) {
                            cancel.store(true, Ordering::Relaxed);
                        }
                    }
                    Event::Text(t) => text.push_str(&t),
                    Event::End(reason) => end = Some(reason),
                }
            }
            tokens += reply_ids;
            replies += 1;
            match end {
                Some(EndReason::Cancelled) => cancelled += 1,
                Some(EndReason::ContextFull) => {
                    context_full += 1;
                    engine.reset();
                    history.clear();
                }
                Some(EndReason::StopToken(_) | EndReason::StopString(_)) => stopped += 1,
                Some(EndReason::MaxTokens) => limited += 1,
                None => anyhow::bail!("a reply without an End event"),
            }
            history.push(Message::assistant(text));
            let rss = resident_bytes();
            rss_start.get_or_insert(rss);
            rss_max = rss_max.max(rss);
            if tokens >= args.tokens || out_of_time() {
                break;
            }
        }
        let (open, rate) =
            (resident_bytes(), (tokens - tokens_before) as f64 / served.elapsed().as_secs_f64());
        drop(engine);
        let idle = resident_bytes();
        idle_first.get_or_insert(idle);
        (idle_last, idle_max) = (idle, idle_max.max(idle));
        eprintln!(
            "{tokens} tokens, {replies} replies, {engines} engines, resident {:.1} MB with the engine, {:.1} MB \
             after it ({:.0} s; this engine: {chosen}, {rate:.1} tok/s with prompts, opened in {:.1} s)",
            open as f64 / 1e6,
            idle as f64 / 1e6,
            started.elapsed().as_secs_f64(),
            (served - opening).as_secs_f64(),
        );
    }
    let rss_end = resident_bytes();
    println!(
        "{}",
        serde_json::json!({
            "tokens": tokens, "replies": replies, "engines": engines, "resets": resets,
            "ended": {"cancelled": cancelled, "context_full": context_full, "stop": stopped, "max_tokens": limited},
            "prompts_past_the_context": prompt_full,
            "seconds": started.elapsed().as_secs_f64(),
            "resident_bytes": {"start": rss_start, "end": rss_end, "max": rss_max},
            "resident_bytes_between_engines": {"first": idle_first, "last": idle_last, "max": idle_max},
            "longest_open_seconds": longest_open.as_secs_f64(),
        })
    );
    if tiny.is_some() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}
