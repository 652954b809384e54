//! The model-agnostic runtime of diskformer: what drives any model definition and knows no model names.
//!
//! - [`generate`]: a chat reply streamed as [`Event`]s ([`Generation`]) from any engine that implements
//!   [`Decoder`]: template, prefill, steps, stop tokens and strings, limits, cancellation; a conversation's
//!   oldest turns dropped to fit the context ([`generate::fit_to_context`]).
//! - [`sampling`]: temperature, top-k, top-p, min-p and repetition penalties with a seeded draw, as the GPU's
//!   sampling kernels compute them ([`Sampler`]), and [`log_softmax`] / [`top_n`] over logits.
//! - [`routing`]: routing workloads, a step's expert picks forced from `uniform` picks or a trace instead of
//!   the router's ([`Routing`], [`ForcedRoutes`]), and a run's own picks recorded ([`RouteRecorder`]).
//! - [`stats`]: what a run did, stage by stage ([`Stats`]), from the counters a step driver keeps
//!   ([`EngineStats`]).
//! - [`stream`]: how experts stream, whatever the model: the options ([`StreamOptions`],
//!   [`CpuTierOptions`]), what they resolve to on a host and store ([`StreamSetup`]), and the expert pool
//!   built from them ([`expert_pool`]).
//! - [`load`]: loading, whatever the model: the ingest into a store, the GPU budget by default, the chunk
//!   bound of a pool, every expert loaded when all fit, and what a load reports ([`LoadProgress`]).
//! - [`cpu_tier`]: a layer's misses computed on the CPU from their records while the GPU computes the hits
//!   ([`CpuTier`]).
//! - [`tiers`]: the GPU pool and the CPU tier as a step driver holds them, with the slots a layer keeps
//!   pinned and their counters joined to the driver's ([`Tiers`]).
//!
//! The engine (`diskformer-qwen3-moe`) still holds the step drivers and prefill; they move here as the model
//! definitions get their seam.

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
pub use stream::{CpuTierOptions, PoolShape, StreamOptions, StreamSetup, expert_pool, records_exceed_memory};
pub use tiers::Tiers;
