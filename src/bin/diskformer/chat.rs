//! `diskformer chat`: a terminal chat with a Qwen3-MoE GGUF whose experts stream from disk, or a Qwen3.5/3.6-MoE
//! (qwen35moe) GGUF with every weight on the GPU (its experts do not stream yet).
//!
//! ```text
//! diskformer chat --model Qwen3-30B-A3B-Q8_0.gguf --budget 4GB
//! diskformer chat --prompt "What is a cynic?"   # the built-in demo model, one reply
//! ```
//!
//! Commands while chatting: `/stats`, `/reset`, `/quit`. Ctrl-C stops the reply being written (the
//! conversation keeps what was said); at the prompt, or pressed twice, it quits.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use diskformer::bpe::chat::Message;
use diskformer::cli::{Budget, parse_budget, parse_bytes};
use diskformer::qwen3_moe::qwen35moe::{self, Model};
use diskformer::qwen3_moe::{
    Engine, EngineOptions, Error, Event, GenerateOptions, LoadProgress, SamplingOptions,
};
use diskformer::runtime::generate::fit_to_context;
use diskformer::runtime::{Decoder, Generation};
use indicatif::{ProgressBar, ProgressStyle};

/// Terminal chat with a Qwen3-MoE model whose experts stream from disk.
#[derive(clap::Args)]
pub struct ChatArgs {
    /// A qwen3moe or qwen35moe GGUF. Without it, the small built-in demo model runs (`diskformer::demo`).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Store directory (default: `<model>.diskformer` beside the GGUF).
    #[arg(long)]
    store: Option<PathBuf>,
    /// GPU memory to use: dense weights, KV cache, scratch, and expert slots with the rest (e.g. 4GB, 512MiB;
    /// auto: 90 % of the GPU's memory, 4GB on a software adapter).
    #[arg(long, default_value = "auto", value_parser = parse_budget)]
    budget: Budget,
    /// Context length in KV-cache positions (default: room for thinking, up to 32768, at most the model's
    /// and what an eighth of the budget holds, at least 4096, and short enough to keep experts resident
    /// that fit at 4096).
    #[arg(long)]
    ctx: Option<u32>,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 0.6, help_heading = "Sampling")]
    temperature: f32,
    /// Top-k (0 = off). From 1 to 64 the GPU draws each token, penalties included (and, with every expert
    /// resident, runs ahead); else the logits are read back and sampled on the CPU.
    #[arg(long, default_value_t = 20, help_heading = "Sampling")]
    top_k: usize,
    /// Top-p (1 = off).
    #[arg(long, default_value_t = 0.95, help_heading = "Sampling")]
    top_p: f32,
    /// Min-p (0 = off).
    #[arg(long, default_value_t = 0.0, help_heading = "Sampling")]
    min_p: f32,
    /// Repetition penalty (1 = off).
    #[arg(long, default_value_t = 1.0, help_heading = "Sampling")]
    repeat_penalty: f32,
    /// Presence penalty (0 = off).
    #[arg(long, default_value_t = 0.0, help_heading = "Sampling")]
    presence_penalty: f32,
    /// Frequency penalty: subtracted once for each time a token occurs among the recent ones (0 = off).
    #[arg(long, default_value_t = 0.0, help_heading = "Sampling")]
    frequency_penalty: f32,
    /// Sampling seed.
    #[arg(long, default_value_t = 0, help_heading = "Sampling")]
    seed: u64,
    /// Most tokens per reply (default: Qwen3's suggestion for thinking; a reply also ends where the context
    /// does).
    #[arg(long, default_value_t = 32_768)]
    max_tokens: usize,
    /// Answer without thinking first.
    #[arg(long)]
    no_think: bool,
    /// System prompt.
    #[arg(long)]
    system: Option<String>,
    /// Answer this one prompt and exit (no interactive loop).
    #[arg(long)]
    prompt: Option<String>,
    /// Turn expert prefetch off.
    #[arg(long, help_heading = "Streaming")]
    no_prefetch: bool,
    /// Read experts with O_DIRECT, past the page cache (to keep the cache for other work; a store larger
    /// than the available memory is read so without it), into a budget of host memory the CPU computes
    /// misses from (--ram-budget).
    #[arg(long, help_heading = "Streaming")]
    direct_io: bool,
    /// With a GGUF: read a K-quant file's experts (and its dense tensors but the Q8_0 ones) in place from it
    /// instead of copying them into the store.
    #[arg(long, help_heading = "Streaming")]
    experts_in_gguf: bool,
    /// Keep expert records in this much host memory, read with O_DIRECT, for a store larger than RAM (e.g.
    /// 64GB; the CPU then computes the layers' misses from there; default: with --direct-io half the
    /// available memory, else none: the page cache holds them).
    #[arg(long, value_parser = parse_bytes, help_heading = "Streaming")]
    ram_budget: Option<u64>,
    /// Do not keep a second copy of the experts in host memory that the GPU reads (the host arena, by
    /// default on where half the available memory holds the expert records): frees that memory, at the cost
    /// of slower prompts and replies while experts stream.
    #[arg(long, help_heading = "Streaming")]
    no_host_arena: bool,
    /// Threads reading expert misses (default: 8, or with --direct-io as many as a probe of the disk finds
    /// fastest while the model loads).
    #[arg(long, help_heading = "Tuning and measurement")]
    readers: Option<usize>,
    /// Prompts multiply by Q8_0-quantised activations with int8 dot products, as llama.cpp does (faster
    /// prefill; off by default: the exact f32 path).
    #[arg(long, help_heading = "Tuning and measurement")]
    int8_prefill: bool,
    /// Prompts multiply on tensor cores where the GPU offers cooperative matrices: f16 weights and
    /// activations, f32 sums (KernelOptions::tensor_prefill; elsewhere the f32 path).
    #[arg(long, help_heading = "Tuning and measurement")]
    tensor_prefill: bool,
    /// Replies multiply Q8_0 weights by Q8_0-quantised activations with int8 dot products, as llama.cpp
    /// does (off by default: the exact f32 path).
    #[arg(long, help_heading = "Tuning and measurement")]
    int8_decode: bool,
    /// Write every step's expert picks to this file as a routing trace (one JSON line a token, prompts
    /// included), a workload to measure streaming with (`bench --routing-trace`) and to share. Steps then read
    /// each layer's picks back, which is slower.
    #[arg(long, help_heading = "Tuning and measurement")]
    record_routing: Option<PathBuf>,
}

fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg:>8} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_message(what.to_owned());
    pb
}

fn count_bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg:>8} [{bar:40}] {pos}/{len} eta {eta}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_message(what.to_owned());
    pb
}

/// A load's progress bars (ingest, upload, experts), each made at its first report.
#[derive(Default)]
struct LoadBars {
    ingest: Option<ProgressBar>,
    upload: Option<ProgressBar>,
    experts: Option<ProgressBar>,
}

impl LoadBars {
    fn report(&mut self, p: LoadProgress) {
        match p {
            LoadProgress::Ingest { done, total, .. } => {
                self.ingest.get_or_insert_with(|| bar(total, "ingest")).set_position(done);
            }
            LoadProgress::Upload { done, total } => {
                self.upload.get_or_insert_with(|| bar(total, "upload")).set_position(done);
            }
            LoadProgress::Experts { done, total } => {
                self.experts.get_or_insert_with(|| count_bar(total, "experts")).set_position(done);
            }
        }
    }

    fn finish(self) {
        for pb in [self.ingest, self.upload, self.experts].into_iter().flatten() {
            pb.finish();
        }
    }
}

/// Chats until the input ends, `/quit`, or (with `--prompt`) after one reply.
pub fn run(args: ChatArgs) -> anyhow::Result<()> {
    let mut opts = EngineOptions::default();
    opts.gpu_budget = args.budget.0;
    opts.max_context = args.ctx;
    opts.stream.prefetch = !args.no_prefetch;
    opts.stream.direct_io = args.direct_io.then_some(true);
    opts.stream.copy_experts = !args.experts_in_gguf;
    opts.cpu.ram_budget = args.ram_budget;
    if args.no_host_arena {
        opts.stream.host_arena = Some(false);
    }
    opts.stream.readers = args.readers;
    opts.kernels.int8_prefill = args.int8_prefill;
    opts.kernels.tensor_prefill = args.tensor_prefill;
    opts.kernels.int8_decode = args.int8_decode;
    opts.record_routing = args.record_routing.clone();

    let model = match &args.model {
        Some(m) => m.clone(),
        None => {
            let path = diskformer::demo::demo_in_temp_dir()?;
            eprintln!(
                "No --model given: running the built-in demo model ({}), 2 MB trained on Ambrose Bierce's\n\
                 \"The Devil's Dictionary\" (1911): ask it what a word means, e.g. \"What is a cynic?\".\n\
                 Pass --model PATH.gguf for a real Qwen3-MoE model.",
                path.display()
            );
            path
        }
    };

    let mut bars = LoadBars::default();
    let opened = Engine::open_gguf(&model, args.store.as_deref(), &opts, &mut |p| bars.report(p));
    bars.finish();
    match opened {
        Ok(mut engine) => {
            let s = engine.stats();
            eprintln!(
                "{}\n{} expert slots of {} ({:.2} GB on the GPU of a {:.2} GB budget{}), context {}",
                engine.adapter(),
                engine.pool_slots(),
                engine.config().block_count * engine.config().expert_count,
                s.gpu_bytes.total() as f64 / 1e9,
                engine.gpu_budget() as f64 / 1e9,
                if opts.gpu_budget.is_none() { ", auto" } else { "" },
                engine.max_context()
            );
            if s.arena_bytes > 0 {
                eprintln!(
                    "every expert also in {:.2} GB of host memory the GPU reads{} (--no-host-arena frees it)",
                    s.arena_bytes as f64 / 1e9,
                    if engine.routes_on_gpu() {
                        ", the hottest moved onto the GPU as they are picked"
                    } else {
                        ""
                    }
                );
            }
            crate::warn_if_software(engine.software_adapter(), &engine.adapter());
            crate::warn_if_template_unused(engine.tokenizer());
            if engine.direct_io() && !args.direct_io {
                eprintln!("the experts are larger than the available memory: reading them with O_DIRECT");
            }
            if let Some(probe) = engine.reader_probe() {
                let rates: Vec<String> = probe
                    .rates
                    .iter()
                    .map(|r| format!("{}: {:.2}", r.threads, r.bytes_per_sec / 1e9))
                    .collect();
                eprintln!(
                    "{} expert readers (disk probe, GB/s by threads: {})",
                    engine.readers(),
                    rates.join(", ")
                );
            }
            converse(&mut engine, &args)
        }
        Err(Error::WrongArchitecture { found, .. }) if found == qwen35moe::ARCHITECTURE => {
            let opts = qwen35moe::OpenOptions {
                max_context: args.ctx,
                gpu_budget: opts.gpu_budget,
                cpu: opts.cpu.clone(),
                record_routing: opts.record_routing.clone(),
                store_dir: args.store.clone(),
                host_arena: opts.stream.host_arena,
                tensor_prefill: opts.kernels.tensor_prefill,
                ..qwen35moe::OpenOptions::default()
            };
            let mut bars = LoadBars::default();
            let opened = Model::open_with(&model, &opts, &mut |p| bars.report(p));
            bars.finish();
            let mut model = opened?;
            eprintln!(
                "{}\nqwen35moe, {}, context {}",
                model.adapter(),
                qwen35moe_placement(&model),
                model.max_context()
            );
            crate::warn_if_software(model.software_adapter(), &model.adapter());
            crate::warn_if_template_unused(model.tokenizer());
            converse(&mut model, &args)
        }
        Err(e) => Err(e.into()),
    }
}

/// What the chat loop needs of a model besides generating.
trait ChatModel: Decoder<Error = Error> {
    fn max_context(&self) -> u32;
    fn reset(&mut self);
    /// What `/stats` prints.
    fn stats_text(&self) -> String;
}

impl ChatModel for Engine {
    fn max_context(&self) -> u32 {
        Engine::max_context(self)
    }
    fn reset(&mut self) {
        Engine::reset(self);
    }
    fn stats_text(&self) -> String {
        self.stats().to_string()
    }
}

impl ChatModel for Model {
    fn max_context(&self) -> u32 {
        Model::max_context(self)
    }
    fn reset(&mut self) {
        Model::reset(self);
    }
    fn stats_text(&self) -> String {
        format!("{} tokens in the cache of {}", self.cached_tokens().len(), Model::max_context(self))
    }
}

/// The conversation: a prompt from the command line or lines from stdin, each reply streamed to stdout.
fn converse(engine: &mut impl ChatModel, args: &ChatArgs) -> anyhow::Result<()> {
    let sampling = SamplingOptions {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        repetition_penalty: args.repeat_penalty,
        presence_penalty: args.presence_penalty,
        frequency_penalty: args.frequency_penalty,
        seed: args.seed,
        ..SamplingOptions::default()
    };
    let mut gen_opts = GenerateOptions::default();
    gen_opts.sampling = sampling;
    gen_opts.max_tokens = args.max_tokens;
    gen_opts.thinking = !args.no_think;
    let cancel = Arc::new(AtomicBool::new(false));
    gen_opts.cancel = Some(Arc::clone(&cancel));
    let replying = Arc::new(AtomicBool::new(false));
    {
        let (cancel, replying) = (Arc::clone(&cancel), Arc::clone(&replying));
        ctrlc::set_handler(move || {
            // While a reply is written the first Ctrl-C ends it; otherwise (or a second time) quit.
            if !replying.load(Ordering::SeqCst) || cancel.swap(true, Ordering::SeqCst) {
                eprintln!();
                std::process::exit(130);
            }
        })?;
    }

    let mut history: Vec<Message> = args.system.iter().map(Message::system).collect();
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        let input = match &args.prompt {
            Some(p) if history.iter().all(|m| m.role != diskformer::bpe::chat::Role::User) => p.clone(),
            Some(_) => break,
            None => {
                eprint!("\n> ");
                std::io::stderr().flush()?;
                match lines.next() {
                    Some(line) => line?,
                    None => break,
                }
            }
        };
        match input.trim() {
            "/quit" | "/exit" => break,
            "/stats" => {
                eprintln!("{}", engine.stats_text());
                continue;
            }
            "/reset" => {
                history.retain(|m| m.role == diskformer::bpe::chat::Role::System);
                engine.reset();
                eprintln!("(conversation cleared)");
                continue;
            }
            "" => continue,
            _ => {}
        }
        history.push(Message::user(input.trim()));
        // A long conversation keeps going: its oldest turns go once the prompt would leave the reply less
        // than its token limit (or half the context).
        let context = engine.max_context() as usize;
        let room = gen_opts.max_tokens.min(context / 2);
        let dropped = fit_to_context(&engine.tokenizer(), &mut history, gen_opts.thinking, context, room);
        if dropped > 0 {
            eprintln!("(dropped the {dropped} oldest messages to fit the context of {context} tokens)");
        }
        let mut reply = String::new();
        let mut out = std::io::stdout();
        cancel.store(false, Ordering::SeqCst);
        replying.store(true, Ordering::SeqCst);
        let started = Instant::now();
        let mut generation = Generation::start(engine, &history, &gen_opts)?;
        let (prompt_tokens, prompt_time) = (generation.prompt_tokens(), started.elapsed());
        let (mut end, mut tokens) = (None, 0u64);
        for event in &mut generation {
            match event? {
                Event::Text(t) => {
                    out.write_all(t.as_bytes())?;
                    out.flush()?;
                    reply.push_str(&t);
                }
                Event::Token(_) => tokens += 1,
                Event::End(reason) => end = Some(reason),
            }
        }
        replying.store(false, Ordering::SeqCst);
        let secs = (started.elapsed() - prompt_time).as_secs_f64();
        eprintln!(
            "\n[{tokens} tokens, {:.2} tok/s; prompt {prompt_tokens} tokens, {:.1} tok/s; ended: {end:?}]",
            tokens as f64 / secs.max(1e-9),
            prompt_tokens as f64 / prompt_time.as_secs_f64().max(1e-9),
        );
        history.push(Message::assistant(reply));
    }
    Ok(())
}

/// Where a qwen35moe model's routed experts are, for the line printed at open.
pub fn qwen35moe_placement(model: &Model) -> String {
    match model.pool_slots() {
        Some(slots) => format!(
            "routed experts streamed through {slots} slots of {} (loaded as picked, a step's misses computed on \
             the CPU where its tier runs; no router guesses or host arena for this architecture yet)",
            model.config().layers * model.config().experts
        ),
        None => "every weight on the GPU".into(),
    }
}
