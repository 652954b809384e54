//! The routing flags the bench and greedy examples share (forced picks and their recording).

use std::path::PathBuf;

use diskformer::qwen3_moe::{EngineOptions, Routing};

/// Where the experts' picks come from, and where to record them.
#[derive(clap::Args, Debug)]
pub struct RoutingArgs {
    /// Force the experts' picks: `router` (the router's own top-k, the default) or `uniform` (seeded i.i.d.
    /// picks; ROUTING.md). See also --routing-trace.
    #[arg(long, default_value = "router")]
    pub routing: String,
    /// Seed of `--routing uniform`.
    #[arg(long, default_value_t = 1)]
    pub routing_seed: u64,
    /// Force the picks from a routing trace (one `{"picks": [[…], …]}` line a token; the routing-trace
    /// example writes calibrated ones).
    #[arg(long, conflicts_with = "routing")]
    pub routing_trace: Option<PathBuf>,
    /// Record every step's picks to this file as a routing trace.
    #[arg(long)]
    pub record_routing: Option<PathBuf>,
}

impl RoutingArgs {
    /// Sets `opts.routing` and `opts.record_routing`.
    pub fn apply(&self, opts: &mut EngineOptions) -> anyhow::Result<()> {
        opts.routing = match (&self.routing_trace, self.routing.as_str()) {
            (Some(path), _) => Routing::Trace(path.clone()),
            (None, "router") => Routing::Router,
            (None, "uniform") => Routing::Uniform { seed: self.routing_seed },
            (None, other) => {
                anyhow::bail!("unknown routing {other:?}; use router or uniform (or --routing-trace FILE)")
            }
        };
        opts.record_routing = self.record_routing.clone();
        Ok(())
    }
}
