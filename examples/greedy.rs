//! This example shows how to run a model greedily from given token ids and print what chose each token:
//! the diagnostic the llama.cpp comparison uses.
//!
//! ```text
//! cargo run --release --example greedy -- MODEL.gguf --ids 1,2,3 -n 32 --top 5 [--pool-slots 16] [--batch-prefill]
//! ```
//!
//! Prints `{"ids": [...], "tops": [[{"id": i, "logprob": x}, ...], ...]}`; `tops[i]` ranks the logits that
//! chose `ids[i]`.

#[path = "common/routing.rs"]
mod routing_args;

use std::path::PathBuf;

use clap::Parser;
use diskformer::qwen3_moe::{Engine, EngineOptions, log_softmax, top_n};

/// Greedy decode from token ids.
#[derive(Parser)]
struct Args {
    /// A qwen3moe GGUF (ingested into `--store` first when needed) or a store directory.
    model: PathBuf,
    /// Store directory for a GGUF (default: `<model>.diskformer` beside it).
    #[arg(long)]
    store: Option<PathBuf>,
    /// Prompt token ids, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    ids: Vec<u32>,
    /// Tokens to generate.
    #[arg(short = 'n', default_value_t = 32)]
    n: usize,
    /// Log-probabilities reported per step.
    #[arg(long, default_value_t = 5)]
    top: usize,
    /// Expert slots (default: as many as the budget holds).
    #[arg(long)]
    pool_slots: Option<usize>,
    /// Run the prompt in chunks instead of token by token.
    #[arg(long)]
    batch_prefill: bool,
    /// With --batch-prefill: multiply by Q8_0-quantised activations (KernelOptions::int8_prefill).
    #[arg(long)]
    int8_prefill: bool,
    /// Turn prefetch off.
    #[arg(long)]
    no_prefetch: bool,
    #[command(flatten)]
    routing: routing_args::RoutingArgs,
    /// Compute the misses of one-token steps on the CPU (CpuTierOptions::enabled), admitting none into
    /// the pool, so every miss is the CPU's.
    #[arg(long)]
    cpu_experts: bool,
    /// Do not check expert records against the store's checksums as they are read
    /// (StreamOptions::check_reads).
    #[arg(long)]
    no_read_checks: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut opts = EngineOptions::default();
    opts.pool_slots = args.pool_slots;
    opts.kernels.int8_prefill = args.int8_prefill;
    opts.stream.prefetch = !args.no_prefetch;
    opts.stream.check_reads = !args.no_read_checks;
    args.routing.apply(&mut opts)?;
    opts.cpu.enabled = args.cpu_experts.then_some(true);
    if args.cpu_experts {
        opts.cpu.admission.reuse_window = 0;
    }
    let mut engine = if args.model.is_dir() {
        Engine::open(&args.model, &opts, &mut |_| {})?
    } else {
        Engine::open_gguf(&args.model, args.store.as_deref(), &opts, &mut |_| {})?
    };
    let mut logits = engine.prefill(&args.ids, args.batch_prefill)?;
    let (mut ids, mut tops) = (Vec::new(), Vec::new());
    for i in 0..args.n {
        let lp = log_softmax(&logits);
        let top = top_n(&logits, args.top.max(1));
        let next = top[0].0;
        tops.push(
            top.iter()
                .take(args.top)
                .map(|&(id, _)| serde_json::json!({"id": id, "logprob": lp[id as usize]}))
                .collect::<Vec<_>>(),
        );
        ids.push(next);
        if i + 1 < args.n {
            logits = engine.step(next)?;
        }
    }
    println!("{}", serde_json::json!({"ids": ids, "tops": tops}));
    eprintln!("{}", engine.stats());
    Ok(())
}
