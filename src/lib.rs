//! diskformer runs mixture-of-experts LLMs larger than GPU memory, and larger than RAM, on any GPU that wgpu
//! reaches: dense weights and the KV cache live on the GPU, the routed experts live in a store on disk and
//! stream into a GPU slot pool as the router asks for them.
//!
//! This crate is a facade: each module re-exports one workspace crate, beside [`cli`], what command-line
//! programs share, and [`demo`], the small trained model `diskformer chat` runs without one. Its `diskformer` binary (feature `cli`, on by default) serves models over the OpenAI API.

#[cfg(feature = "cli")]
pub mod api;
pub mod cli;
pub mod demo;

pub use diskformer_bpe as bpe;
pub use diskformer_cpu_kernels as cpu_kernels;
pub use diskformer_expert_stream as expert_stream;
pub use diskformer_gguf as gguf;
pub use diskformer_kernels as kernels;
pub use diskformer_qwen3_moe as qwen3_moe;
pub use diskformer_runtime as runtime;
pub use diskformer_store as store;
