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

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use clap::Parser;
use diskformer::bpe::chat::Message;
use diskformer::expert_stream::SeededRng;
use diskformer::qwen3_moe::synthetic::{SynthShape, SynthSpec, SynthVocab, write_synthetic};
use diskformer::qwen3_moe::{EndReason, Engine, EngineOptions, Event, GenerateOptions, SamplingOptions};

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
}

/// Resident memory of this process, bytes (`/proc/self/statm`).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
    pages * 4096
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = std::env::temp_dir().join(format!("diskformer-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let gguf = dir.join("tiny.gguf");
    let shape = SynthShape::tiny();
    write_synthetic(&SynthSpec { shape: shape.clone(), vocab: SynthVocab::Bytes, seed: 7 }, &gguf)?;
    let store = dir.join("store");
    diskformer::store::ingest(&gguf, &store, &Default::default(), &mut |_| {})?;
    let all_slots = (shape.layers * shape.experts) as u64;

    let mut rng = SeededRng::new(args.seed);
    let started = Instant::now();
    let (mut tokens, mut replies, mut engines, mut resets) = (0u64, 0u64, 0u64, 0u64);
    let (mut cancelled, mut context_full, mut stopped, mut limited) = (0u64, 0u64, 0u64, 0u64);
    let mut prompt_full = 0u64;
    let (mut rss_start, mut rss_max) = (None, 0u64);
    let words = ["hello", "the quick brown fox", "why is the sky blue?", "count to ten", "ok"];
    while tokens < args.tokens {
        let mut opts = EngineOptions::default();
        // From 2 × top-k slots (every step loads) to every expert resident.
        let top_k = u64::from(shape.top_k);
        opts.pool_slots = Some((2 * top_k + rng.below(all_slots - 2 * top_k + 1)) as usize);
        opts.prefetch = rng.below(2) == 0;
        opts.cpu_experts = [None, Some(true), Some(false)][rng.below(3) as usize];
        opts.direct_io = Some(rng.below(4) == 0);
        opts.max_context = Some(128 + rng.below(384) as u32);
        let mut engine = Engine::open(&store, &opts, &mut |_| {})?;
        engines += 1;
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
            if tokens >= args.tokens {
                break;
            }
        }
        eprintln!(
            "{tokens} tokens, {replies} replies, {engines} engines, resident {:.1} MB ({:.0} s)",
            resident_bytes() as f64 / 1e6,
            started.elapsed().as_secs_f64()
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
        })
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
