//! The Qwen3-MoE engine of diskformer: loads a model from a store (ingesting a GGUF into one first when
//! needed), puts the dense weights, KV cache and a slot pool of routed experts on the GPU, and runs the
//! forward pass with the experts streamed from disk as the router asks for them.
//!
//! - [`Config`]: the hyper-parameters from GGUF metadata, architecture checked first, every missing key
//!   reported at once.
//! - [`Engine`]: load ([`Engine::open_gguf`], [`Engine::open`]), [`prefill`](Engine::prefill) (token by token
//!   or batched, reusing the cached common prefix), [`step`](Engine::step) (logits),
//!   [`step_greedy`](Engine::step_greedy) and [`step_sampled`](Engine::step_sampled) (the pick made on the
//!   GPU), [`stats`](Engine::stats).
//! - [`synthetic`]: seeded random qwen3moe GGUFs of any shape, for tests and benchmarks.
//! - [`qwen35moe`]: Qwen3.5/3.6-MoE's config, synthetic files, CPU reference, and
//!   [`qwen35moe::Resident`]: the model on the GPU with every weight resident (its experts do not stream).
//!
//! ```no_run
//! use diskformer_bpe::chat::Message;
//! use diskformer_qwen3_moe::{Engine, EngineOptions, Event, GenerateOptions};
//!
//! let mut opts = EngineOptions::default();
//! opts.gpu_budget = Some(4_000_000_000); // dense weights, KV cache, scratch; the rest holds experts
//! let gguf = std::path::Path::new("Qwen3-30B-A3B-Q8_0.gguf");
//! let mut engine = Engine::open_gguf(gguf, None, &opts, &mut |_| {})?; // ingests into a store beside it
//! for event in engine.generate(&[Message::user("Hello")], &GenerateOptions::default())? {
//!     if let Event::Text(t) = event? {
//!         print!("{t}");
//!     }
//! }
//! println!("\n{}", engine.stats());
//! # Ok::<(), diskformer_qwen3_moe::Error>(())
//! ```
//!
//! It does not batch several sequences, run matrices of types other than Q8_0 and those of `BlockQuant` in rows
//! of whole 256-value runs (the types may differ from tensor to tensor, as in llama.cpp's Q4_K_M files), or
//! render chat templates other than Qwen3's and Qwen3.5's. Config errors come before any GPU work:
//!
//! ```
//! use diskformer_gguf::{Metadata, Value};
//! use diskformer_qwen3_moe::{Config, Error};
//!
//! let mut m = Metadata::new();
//! m.insert("general.architecture", Value::String("qwen3moe".into()));
//! m.insert("qwen3moe.block_count", Value::U32(48));
//! match Config::from_metadata(&m) {
//!     Err(Error::MissingKeys { keys }) => assert_eq!(keys.len(), 11),
//!     other => panic!("{other:?}"),
//! }
//! ```

mod config;
mod decoder;
mod engine;
mod error;
mod graph;
mod kernel_times;
pub mod qwen35moe;
pub mod synthetic;
mod unit_stock;
mod weights;

pub use config::{ARCHITECTURE, Config};
pub use decoder::Generation;
pub use diskformer_runtime::sampling;
pub use diskformer_runtime::{EndReason, Event, GenerateOptions, Next};
pub use diskformer_runtime::{GpuBytes, Stats};
pub use diskformer_runtime::{Routing, Sampler, SamplingOptions, log_softmax, top_n};
pub use engine::{
    CpuTierOptions, Engine, EngineOptions, FALLBACK_GPU_BUDGET, KernelOptions, LoadProgress,
    READ_SPLIT_CHECKED, READ_SPLIT_DIRECT, READ_SPLIT_IN_GGUF, READ_SPLIT_PAGE_CACHE, ROUTE_AHEAD_DIRECT,
    ROUTE_AHEAD_PAGE_CACHE, StreamOptions, auto_gpu_budget, default_store_dir, records_exceed_memory,
};
pub use error::{Error, Result};
pub use kernel_times::KernelTime;
