#![doc = include_str!("../README.md")]

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
