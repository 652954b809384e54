//! This example shows how to compare the pool's eviction policies on a routing trace: it replays the trace
//! through [`PoolCore`] (LRU, hot, LFU, cyclic: the real policy code, loads completing at once, no prefetch)
//! and through Belady's MIN (evict the record whose next use is farthest away, the offline optimum and so the
//! bound) for several pool sizes, and prints hit rates as a Markdown table.
//!
//! ```text
//! cargo run --release -p diskformer-expert-stream --example trace-sim -- --slots 400,800,1600,3200
//! cargo run --release -p diskformer-expert-stream --example trace-sim -- --trace routing.jsonl --slots 800
//! ```
//!
//! A trace is JSON lines, one `ensure` each, tokens in order and layers in order within a token:
//! `{"layer": 3, "ids": [5, 17, 40, 41, 77, 90, 101, 127]}`. `--write-trace` saves the synthetic one.
//!
//! The synthetic trace models temporal reuse as follows (every number is a flag). Each layer ranks its
//! experts in a random order and draws a pick from a Zipf law over that rank (`--zipf s`: weight
//! 1/(rank+1)^s; 0 is uniform). For each of a token's `--top-k` distinct picks, with probability `--reuse`
//! the pick instead repeats, uniformly, one of the experts this layer picked in the last `--window` tokens
//! (and not yet picked now); this is the "consecutive tokens route alike" effect. Every `--topic-len` tokens
//! each layer re-ranks its experts at random (a change of subject). The first `--warmup` tokens fill the
//! pool and are not counted.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;

use anyhow::{Context, bail, ensure};
use clap::Parser;
use diskformer_expert_stream::{
    EvictionPolicy, ExpertKey, LoadReport, PoolConfig, PoolCore, Progress, SeededRng,
};
use serde::{Deserialize, Serialize};

#[derive(Parser, Debug)]
#[command(about = "Replay expert routing traces under pool sizes and eviction policies")]
struct Args {
    /// A JSON-lines trace ({"layer", "ids"} per line); without it a synthetic trace is generated.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Save the (synthetic) trace here.
    #[arg(long)]
    write_trace: Option<PathBuf>,
    /// Pool sizes to try, in slots (records).
    #[arg(long, value_delimiter = ',', default_values_t = [400, 800, 1600, 3200])]
    slots: Vec<usize>,
    /// Hot-policy half-lives to try, in tokens.
    #[arg(long, value_delimiter = ',', default_values_t = [2.0, 8.0, 32.0])]
    half_lives: Vec<f64>,
    /// Bytes of one record (Qwen3-30B-A3B Q8_0), for the GB-per-token column.
    #[arg(long, default_value_t = 5_013_504)]
    record_bytes: u64,
    /// Tokens at the start not counted.
    #[arg(long, default_value_t = 100)]
    warmup: usize,
    /// Synthetic: tokens.
    #[arg(long, default_value_t = 2000)]
    tokens: usize,
    /// Synthetic: layers.
    #[arg(long, default_value_t = 48)]
    layers: u32,
    /// Synthetic: experts per layer.
    #[arg(long, default_value_t = 128)]
    experts: u32,
    /// Synthetic: experts picked per token and layer.
    #[arg(long, default_value_t = 8)]
    top_k: usize,
    /// Synthetic: Zipf exponent of each layer's expert popularity (0 = uniform).
    #[arg(long, default_value_t = 0.8)]
    zipf: f64,
    /// Synthetic: probability that a pick repeats one of the layer's picks of the last `window` tokens.
    #[arg(long, default_value_t = 0.5)]
    reuse: f64,
    /// Synthetic: tokens a repeated pick looks back.
    #[arg(long, default_value_t = 4)]
    window: usize,
    /// Synthetic: tokens between re-rankings of every layer's experts (0 = never).
    #[arg(long, default_value_t = 256)]
    topic_len: usize,
    /// Synthetic: random seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// One line of a trace: one `ensure`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Step {
    layer: u32,
    ids: Vec<u32>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (trace, layers, experts) = match &args.trace {
        Some(path) => read_trace(path)?,
        None => {
            ensure!(args.top_k as u32 <= args.experts, "--top-k must not exceed --experts");
            (synthesize(&args), args.layers, args.experts)
        }
    };
    if let Some(path) = &args.write_trace {
        let mut out =
            BufWriter::new(File::create(path).with_context(|| format!("creating {}", path.display()))?);
        for step in &trace {
            serde_json::to_writer(&mut out, step)?;
            writeln!(out)?;
        }
        out.flush()?;
    }
    let warmup_steps = args.warmup * layers as usize;
    ensure!(
        trace.len() > warmup_steps,
        "the trace has {} steps, not more than the warm-up's {warmup_steps}",
        trace.len()
    );
    let counted: usize = trace[warmup_steps..].iter().map(|s| s.ids.len()).sum();
    let tokens = (trace.len() - warmup_steps) as f64 / f64::from(layers);

    let mut policies = vec![("LRU".to_owned(), Sim::Core(EvictionPolicy::Lru))];
    for &h in &args.half_lives {
        policies.push((format!("hot({h})"), Sim::Core(EvictionPolicy::Hot { half_life_tokens: h })));
    }
    policies.push(("LFU".to_owned(), Sim::Core(EvictionPolicy::Lfu)));
    policies.push(("cyclic".to_owned(), Sim::Core(EvictionPolicy::Cyclic)));
    policies.push(("Belady".to_owned(), Sim::Belady));

    println!(
        "{} tokens × {layers} layers × {experts} experts ({} records), \
         {counted} picks counted after {} warm-up tokens",
        tokens.round(),
        u64::from(layers) * u64::from(experts),
        args.warmup
    );
    println!();
    print!("| slots | GB |");
    for (name, _) in &policies {
        print!(" {name} |");
    }
    println!(" best policy GB read/token | Belady GB read/token |");
    print!("|---:|---:|");
    for _ in 0..policies.len() + 2 {
        print!("---:|");
    }
    println!();
    for &slots in &args.slots {
        let mut misses = Vec::new();
        for (_, policy) in &policies {
            misses.push(match policy {
                Sim::Core(p) => replay(&trace, slots, layers, experts, *p, warmup_steps)?,
                Sim::Belady => belady(&trace, slots, warmup_steps)?,
            });
        }
        print!("| {slots} | {:.1} |", slots as f64 * args.record_bytes as f64 / 1e9);
        for m in &misses {
            print!(" {:.1}% |", 100.0 * (1.0 - *m as f64 / counted as f64));
        }
        let best = misses[..misses.len() - 1].iter().min().expect("policies");
        let per_token = |m: u64| m as f64 * args.record_bytes as f64 / tokens / 1e9;
        println!(" {:.3} | {:.3} |", per_token(*best), per_token(misses[misses.len() - 1]));
    }
    Ok(())
}

/// How a column is simulated.
enum Sim {
    /// The pool's own policy code.
    Core(EvictionPolicy),
    /// The offline optimum.
    Belady,
}

/// Misses after the warm-up when `trace` runs through the real policy core.
fn replay(
    trace: &[Step],
    slots: usize,
    layers: u32,
    experts: u32,
    policy: EvictionPolicy,
    warmup_steps: usize,
) -> anyhow::Result<u64> {
    let mut config = PoolConfig::new(slots, layers, experts);
    config.policy = policy;
    let mut core = PoolCore::new(config)?;
    for (i, step) in trace.iter().enumerate() {
        if i == warmup_steps {
            core.reset_stats();
        }
        let (ticket, jobs) = core.demand(step.layer, &step.ids)?;
        for job in jobs {
            core.complete(job.id, LoadReport::default(), Ok(()));
        }
        match core.poll(ticket) {
            Progress::Done(pinned) => core.release(pinned?),
            Progress::Waiting(_) => bail!("every load of step {i} completed, yet the demand waits"),
        }
    }
    Ok(core.stats().misses)
}

/// Misses after the warm-up under Belady's MIN: on a miss with the pool full, evict the resident record (not
/// demanded by this step) whose next use is farthest in the future.
fn belady(trace: &[Step], slots: usize, warmup_steps: usize) -> anyhow::Result<u64> {
    // next[i][j]: the step at which trace[i].ids[j] is next demanded after step i.
    let mut next_use: HashMap<ExpertKey, usize> = HashMap::new();
    let mut next = vec![Vec::new(); trace.len()];
    for (i, step) in trace.iter().enumerate().rev() {
        next[i] = step
            .ids
            .iter()
            .map(|&e| next_use.insert(ExpertKey::new(step.layer, e), i).unwrap_or(usize::MAX))
            .collect();
    }
    let mut resident: HashMap<ExpertKey, usize> = HashMap::new(); // key → its next use
    let mut by_next: BTreeSet<(usize, ExpertKey)> = BTreeSet::new();
    let mut misses = 0;
    for (i, step) in trace.iter().enumerate() {
        ensure!(
            step.ids.len() <= slots,
            "step {i} demands {} experts but the pool has {slots} slots",
            step.ids.len()
        );
        // Keys of this step are filed under "next use = now" (i), below every other resident's next use, so
        // eviction (the largest next use) never takes one of them. A repeated id finds itself resident: a
        // hit.
        for &e in &step.ids {
            let key = ExpertKey::new(step.layer, e);
            if let Some(n) = resident.insert(key, i) {
                by_next.remove(&(n, key));
                by_next.insert((i, key));
            } else {
                if i >= warmup_steps {
                    misses += 1;
                }
                if by_next.len() == slots {
                    let (n, victim) = by_next.pop_last().expect("a full pool");
                    ensure!(n > i, "Belady would evict a record of the current step");
                    resident.remove(&victim);
                }
                by_next.insert((i, key));
            }
        }
        for (&e, &n) in step.ids.iter().zip(&next[i]) {
            let key = ExpertKey::new(step.layer, e);
            if by_next.remove(&(i, key)) {
                by_next.insert((n, key));
                resident.insert(key, n);
            }
        }
    }
    Ok(misses)
}

/// Reads a JSON-lines trace and infers the model's layers and experts from it.
fn read_trace(path: &PathBuf) -> anyhow::Result<(Vec<Step>, u32, u32)> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut trace = Vec::new();
    for (n, line) in BufReader::new(file).lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let step: Step =
            serde_json::from_str(&line).with_context(|| format!("{}:{}", path.display(), n + 1))?;
        trace.push(step);
    }
    let layers = trace.iter().map(|s| s.layer + 1).max().context("the trace is empty")?;
    let experts =
        trace.iter().flat_map(|s| s.ids.iter().map(|&e| e + 1)).max().context("the trace has no ids")?;
    Ok((trace, layers, experts))
}

/// The crate's seeded generator, with the draws this simulator makes.
struct Rng(SeededRng);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn below(&mut self, n: usize) -> usize {
        (self.unit() * n as f64) as usize
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }
}

/// The synthetic trace described in the crate docs of this example.
fn synthesize(args: &Args) -> Vec<Step> {
    let mut rng = Rng(SeededRng::new(args.seed));
    let experts = args.experts as usize;
    // Cumulative Zipf weights over ranks.
    let mut cdf: Vec<f64> = (0..experts).map(|r| 1.0 / ((r + 1) as f64).powf(args.zipf)).collect();
    for r in 1..experts {
        cdf[r] += cdf[r - 1];
    }
    let total = cdf[experts - 1];
    let mut rank_to_expert: Vec<Vec<u32>> = (0..args.layers).map(|_| (0..args.experts).collect()).collect();
    let mut history: Vec<VecDeque<Vec<u32>>> = vec![VecDeque::new(); args.layers as usize];
    let mut trace = Vec::with_capacity(args.tokens * args.layers as usize);
    for t in 0..args.tokens {
        if t % args.topic_len.max(1) == 0 && (t == 0 || args.topic_len > 0) {
            for order in &mut rank_to_expert {
                rng.shuffle(order);
            }
        }
        for layer in 0..args.layers as usize {
            let recent: Vec<u32> = {
                let mut v: Vec<u32> = history[layer].iter().flatten().copied().collect();
                v.sort_unstable();
                v.dedup();
                v
            };
            let mut ids: Vec<u32> = Vec::with_capacity(args.top_k);
            while ids.len() < args.top_k {
                let fresh: Vec<u32> = recent.iter().copied().filter(|e| !ids.contains(e)).collect();
                let pick = if !fresh.is_empty() && rng.unit() < args.reuse {
                    fresh[rng.below(fresh.len())]
                } else {
                    let u = rng.unit() * total;
                    rank_to_expert[layer][cdf.partition_point(|&c| c <= u).min(experts - 1)]
                };
                if !ids.contains(&pick) {
                    ids.push(pick);
                }
            }
            ids.sort_unstable();
            history[layer].push_back(ids.clone());
            if history[layer].len() > args.window {
                history[layer].pop_front();
            }
            trace.push(Step { layer: layer as u32, ids });
        }
    }
    trace
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The textbook reference string (Silberschatz, 3 frames): MIN faults 9 times, LRU 12.
    fn textbook() -> Vec<Step> {
        [7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2, 1, 2, 0, 1, 7, 0, 1]
            .map(|e| Step { layer: 0, ids: vec![e] })
            .into()
    }

    #[test]
    fn belady_and_lru_match_the_textbook() {
        assert_eq!(belady(&textbook(), 3, 0).unwrap(), 9);
        assert_eq!(replay(&textbook(), 3, 1, 8, EvictionPolicy::Lru, 0).unwrap(), 12);
        // With one layer, the cyclic experiment is LRU.
        assert_eq!(replay(&textbook(), 3, 1, 8, EvictionPolicy::Cyclic, 0).unwrap(), 12);
    }

    #[test]
    fn belady_is_a_bound_on_a_synthetic_trace() {
        let args = Args::parse_from([
            "trace-sim",
            "--tokens",
            "60",
            "--layers",
            "4",
            "--experts",
            "16",
            "--top-k",
            "4",
        ]);
        let trace = synthesize(&args);
        assert_eq!(trace.len(), 240);
        assert!(trace.iter().all(|s| s.ids.len() == 4 && s.ids.windows(2).all(|w| w[0] < w[1])));
        for slots in [8, 16, 32] {
            let min = belady(&trace, slots, 0).unwrap();
            for policy in
                [EvictionPolicy::Lru, EvictionPolicy::HOT, EvictionPolicy::Lfu, EvictionPolicy::Cyclic]
            {
                assert!(
                    min <= replay(&trace, slots, 4, 16, policy, 0).unwrap(),
                    "{policy:?} at {slots} slots"
                );
            }
        }
    }

    #[test]
    fn traces_round_trip_through_json_lines() {
        let dir = std::env::temp_dir().join(format!("trace-sim-{}", std::process::id()));
        let path = dir.with_extension("jsonl");
        let text: String = textbook().iter().map(|s| serde_json::to_string(s).unwrap() + "\n").collect();
        std::fs::write(&path, text).unwrap();
        let (trace, layers, experts) = read_trace(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!((trace.len(), layers, experts), (20, 1, 8));
        assert_eq!(trace[3].ids, [2]);
    }
}
