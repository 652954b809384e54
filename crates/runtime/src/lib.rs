#![doc = include_str!("../README.md")]

pub mod cpu_tier;
mod error;
pub mod generate;
pub mod load;
pub mod routing;
pub mod sampling;
pub mod stats;
pub mod stream;
pub mod tiers;

pub use cpu_tier::{CpuTier, HostTier};
pub use error::{Error, Result};
pub use generate::{Decoder, EndReason, Event, GenerateOptions, Generation, Next};
pub use load::LoadProgress;
pub use routing::{ForcedRoutes, RouteRecorder, Routing, layer_stride};
pub use sampling::{Sampler, SamplingOptions, log_softmax, top_n};
pub use stats::{EngineStats, GpuBytes, Stats};
pub use stream::{
    CpuTierOptions, PoolShape, StreamOptions, StreamSetup, arena_wanted, expert_pool, records_exceed_memory,
};
pub use tiers::Tiers;
