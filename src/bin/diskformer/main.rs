//! The `diskformer` command: `diskformer chat` talks with a model in the terminal, `diskformer serve` answers
//! the OpenAI API over HTTP.

mod chat;
mod reasoning;
mod serve;
mod worker;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use clap::{Parser, Subcommand};
use diskformer::qwen3_moe::EngineOptions;

#[derive(Parser)]
#[command(name = "diskformer", version, about = "Mixture-of-experts LLMs larger than the GPU's memory")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Chat in the terminal (without --model, a small built-in demo model answers what words mean).
    Chat(chat::ChatArgs),
    /// Serve a model over the OpenAI API (`/v1/chat/completions`, `/v1/completions`, `/v1/models`, `/health`).
    Serve(ServeArgs),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// The model: a qwen3moe GGUF (the first shard of a split set), ingested into a store beside it once
    /// (default: the small built-in demo model, `diskformer::demo`).
    #[arg(long)]
    model: Option<PathBuf>,
    /// The store's directory (default: beside the GGUF).
    #[arg(long)]
    store: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0: any free one, printed at start).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// GPU memory for the model: dense weights, KV cache and scratch; the rest holds experts (e.g. 4GB;
    /// auto: 90 % of the GPU's memory, 4GB on a software adapter).
    #[arg(long, default_value = "auto", value_parser = diskformer::cli::parse_budget)]
    budget: diskformer::cli::Budget,
    /// Context length (default: room for thinking, up to 32768, at most the model's and what an eighth of
    /// the budget holds, at least 4096, and short enough to keep experts resident that fit at 4096).
    #[arg(long)]
    ctx: Option<u32>,
    /// Most tokens of a reply when a request names no limit (default: Qwen3's suggestion for thinking; at
    /// most what the context leaves after the prompt).
    #[arg(long, default_value_t = 32_768)]
    max_tokens: usize,
    /// Requests that may wait while one runs; more are refused with 503 and Retry-After.
    #[arg(long, default_value_t = 8)]
    queue: usize,
    /// Largest request body in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    body_limit: usize,
    /// Seconds a request's body may take to arrive.
    #[arg(long, default_value_t = 30.0)]
    body_timeout: f64,
    /// The model's name in responses (default: the file's stem).
    #[arg(long)]
    name: Option<String>,
}

/// Says so when the GPU is a software renderer: a fresh machine without its GPU driver gets lavapipe.
fn warn_if_software(software: bool, adapter: &str) {
    if software {
        eprintln!(
            "warning: {} is a software renderer on the CPU (no GPU driver found): replies are correct but slow; \
             install the GPU's Vulkan driver, or pick an adapter with DISKFORMER_ADAPTER",
            adapter.split(" (").next().unwrap_or(adapter)
        );
    }
}

/// Says so when the model's own chat template is not used (it does not compile): replies then follow the
/// built-in template of the model's family.
fn warn_if_template_unused(tokenizer: &diskformer::bpe::Tokenizer) {
    if let Some(problem) = tokenizer.chat_template_problem() {
        eprintln!("warning: {problem}");
    }
}

fn main() -> anyhow::Result<()> {
    diskformer::cli::runtime_dir_for_drivers();
    let args = match Cli::parse().command {
        Command::Chat(args) => return chat::run(args),
        Command::Serve(args) => args,
    };
    let mut opts = EngineOptions::default();
    opts.gpu_budget = args.budget.0;
    opts.max_context = args.ctx;
    let path = match &args.model {
        Some(model) => model.clone(),
        None => diskformer::demo::demo_in_temp_dir()?,
    };
    eprintln!("loading {}", path.display());
    let (queue, info) = worker::start(path.clone(), args.store.clone(), opts, args.queue)?;
    match info.budget {
        Some(b) => {
            eprintln!("{}, context {}, GPU budget {:.2} GB", info.adapter, info.context, b as f64 / 1e9)
        }
        None => eprintln!("{}, context {}", info.adapter, info.context),
    }
    warn_if_software(info.software, &info.adapter);
    warn_if_template_unused(&info.tokenizer);
    let model = args.name.clone().unwrap_or_else(|| {
        path.file_stem().map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned())
    });
    let served = serve::Served {
        queue,
        info: Arc::new(info),
        model,
        max_tokens: args.max_tokens,
        next_id: Arc::new(AtomicU64::new(1)),
        body_limit: args.body_limit,
        body_timeout: Duration::try_from_secs_f64(args.body_timeout)
            .map_err(|_| anyhow::anyhow!("--body-timeout {}: a number of seconds", args.body_timeout))?,
    };
    let app = serve::router(served);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port)).await?;
        let at: SocketAddr = listener.local_addr()?;
        // Tests and scripts read this line for the port.
        println!("listening on http://{at}");
        axum::serve(listener, app)
            .with_graceful_shutdown(async { drop(tokio::signal::ctrl_c().await) })
            .await?;
        Ok(())
    })
}
