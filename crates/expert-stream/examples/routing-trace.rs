//! This example shows how to write a routing trace (one JSON line a token: every layer's `top_k` expert ids)
//! from the calibrated workload, whose statistics match those published for trained Qwen3-30B-A3B routers, or
//! from the uniform one, and how to check a trace, generated or recorded, against those published figures
//! (ROUTING.md).
//!
//! ```text
//! cargo run -p diskformer-expert-stream --example routing-trace -- --out calibrated.jsonl
//! cargo run -p diskformer-expert-stream --example routing-trace -- --trace calibrated.jsonl --check
//! cargo run -p diskformer-expert-stream --example routing-trace -- --workload uniform --check
//! ```
//!
//! The model and the measures are in the crate (`CalibratedRoutes`, `TraceFigures`); this only wires them up.

use std::path::{Path, PathBuf};

use anyhow::ensure;
use clap::{Parser, ValueEnum};
use diskformer_expert_stream::{
    CalibratedRoutes, Error, RouteShape, RouteSource, TokenPicks, TraceFigures, TraceRoutes, TraceWriter,
    UniformRoutes,
};

/// Where generated picks come from.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Workload {
    /// Calibrated to the published statistics of trained Qwen3-30B-A3B routers.
    Calibrated,
    /// i.i.d. uniform picks: the floor.
    Uniform,
}

#[derive(Parser, Debug)]
#[command(
    about = "Write a routing trace, or check one against the published statistics of trained Qwen routers"
)]
struct Args {
    /// The workload to generate (without --trace).
    #[arg(long, value_enum, default_value_t = Workload::Calibrated)]
    workload: Workload,
    /// Read this trace (all of it) instead of generating one; its shape must be --layers, --experts, --top-k.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Layers with experts.
    #[arg(long, default_value_t = 48)]
    layers: u32,
    /// Experts a layer.
    #[arg(long, default_value_t = 128)]
    experts: u32,
    /// Picks a layer a token.
    #[arg(long, default_value_t = 8)]
    top_k: u32,
    /// Tokens to generate (without --trace).
    #[arg(long, default_value_t = 1024)]
    tokens: usize,
    /// Seed of the generated workload.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the trace here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the trace's figures beside the published ones, as a Markdown table.
    #[arg(long)]
    check: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    ensure!(args.out.is_some() || args.check, "nothing to do: pass --out FILE, --check, or both");
    let shape = RouteShape { layers: args.layers, experts: args.experts, top_k: args.top_k };
    ensure!(shape.layers > 0 && shape.top_k > 0, "--layers and --top-k must be at least 1");
    ensure!(shape.top_k <= shape.experts, "--top-k {} exceeds --experts {}", shape.top_k, shape.experts);

    let (tokens, origin) = match &args.trace {
        Some(path) => (read_trace(path, shape)?, path.display().to_string()),
        None => {
            let mut source: Box<dyn RouteSource> = match args.workload {
                Workload::Calibrated => Box::new(CalibratedRoutes::new(shape, args.seed)),
                Workload::Uniform => Box::new(UniformRoutes::new(shape, args.seed)),
            };
            let tokens = (0..args.tokens).map(|_| source.next_token()).collect::<Result<Vec<_>, _>>()?;
            (tokens, format!("--workload {:?} --seed {}", args.workload, args.seed).to_lowercase())
        }
    };

    if let Some(out) = &args.out {
        let mut writer = TraceWriter::create(out)?;
        for token in &tokens {
            writer.write(token)?;
        }
        eprintln!("wrote {} tokens to {}", tokens.len(), out.display());
    }
    if args.check {
        // The steady-state figure counts tokens 64 to 511 of a cold start.
        ensure!(tokens.len() >= 512, "--check needs at least 512 tokens; the trace has {}", tokens.len());
        println!(
            "{} tokens × {} layers × {} experts, top-{} ({origin})\n",
            tokens.len(),
            shape.layers,
            shape.experts,
            shape.top_k
        );
        print!("{}", TraceFigures::measure(&tokens, shape.experts).markdown());
    }
    Ok(())
}

/// Every token of the trace at `path`, each checked against `shape`.
fn read_trace(path: &Path, shape: RouteShape) -> anyhow::Result<Vec<TokenPicks>> {
    let mut routes = TraceRoutes::open(path, shape)?;
    let mut tokens = Vec::new();
    loop {
        match routes.next_token() {
            Ok(token) => tokens.push(token),
            Err(Error::TraceEnded { .. }) => return Ok(tokens),
            // The error names the file and line.
            Err(e) => return Err(e.into()),
        }
    }
}
