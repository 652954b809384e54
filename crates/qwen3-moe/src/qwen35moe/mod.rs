//! qwen35moe (Qwen3.5 / Qwen3.6 MoE: Gated DeltaNet and gated full-attention layers, routed experts and a
//! shared expert; `../shared/QWEN35MOE.md`): its config, synthetic files, and a CPU reference of its forward
//! pass checked against llama.cpp, and [`Model`]: the model on the GPU, its routed experts resident or
//! streamed through a pool of slots.

mod config;
mod model;
pub mod reference;
mod streamed;
pub mod synthetic;

pub use crate::KernelTime;
pub use config::{ARCHITECTURE, Config};
pub use model::{MAX_CHUNK, Model, OpenOptions};
pub use reference::Reference;
