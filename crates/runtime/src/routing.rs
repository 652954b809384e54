//! Forced routing (the engine's `EngineOptions::routing`): a step's picks come from a
//! workload instead of the router's top-k. Each layer's router logits get a mask added before its top-k,
//! 0 on the forced picks and −1e30 elsewhere, so the top-k finds exactly them and their weights are the
//! router's softmax over them (the mask adds nothing to a pick's logit). Everything else runs as it would.
//! Also where a run's own picks are recorded (`EngineOptions::record_routing`).

use std::path::PathBuf;

use diskformer_expert_stream::{
    Result, RouteShape, RouteSource, TokenPicks, TraceRoutes, TraceWriter, UniformRoutes,
};

/// Where a run's expert picks come from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Routing {
    /// The router's own top-k (the default).
    #[default]
    Router,
    /// i.i.d. picks, `top_k` distinct experts a layer a token, from a seeded generator: the hit rate is the
    /// cache fraction, the pessimistic bound.
    Uniform {
        /// The generator's seed.
        seed: u64,
    },
    /// A trace file (ROUTING.md's format: one `{"picks": [[…], …]}` line a token), read in order; a run
    /// longer than the trace fails.
    Trace(PathBuf),
}

/// What an off-pick expert's logit gets added: far below any router logit, finite so no NaN arises.
const OFF: f32 = -1e30;

/// Floats a layer's mask rows take in the mask buffer for a step of `t` tokens: `t · experts`, rounded up
/// to 64 floats so each layer's region starts at a 256-byte storage offset.
pub fn layer_stride(t: u32, experts: u32) -> u64 {
    (u64::from(t) * u64::from(experts)).next_multiple_of(64)
}

/// The forced picks' source and the masks they become.
pub struct ForcedRoutes {
    source: Box<dyn RouteSource>,
    shape: RouteShape,
}

impl std::fmt::Debug for ForcedRoutes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForcedRoutes").field("shape", &self.shape).finish_non_exhaustive()
    }
}

impl ForcedRoutes {
    /// The source of `routing` for a model of `shape` (`None` for the router's own).
    pub fn open(routing: &Routing, shape: RouteShape) -> Result<Option<Self>> {
        let source: Box<dyn RouteSource> = match routing {
            Routing::Router => return Ok(None),
            Routing::Uniform { seed } => Box::new(UniformRoutes::new(shape, *seed)),
            Routing::Trace(path) => Box::new(TraceRoutes::open(path, shape)?),
        };
        Ok(Some(ForcedRoutes { source, shape }))
    }

    /// The next `t` tokens' picks as the mask of a `t`-token step: per layer ([`layer_stride`] floats
    /// apart) `t` rows of `experts` floats.
    pub fn next_mask(&mut self, t: u32) -> Result<Vec<f32>> {
        let RouteShape { layers, experts, .. } = self.shape;
        let stride = layer_stride(t, experts) as usize;
        let mut mask = vec![OFF; layers as usize * stride];
        for token in 0..t as usize {
            let picks = self.source.next_token()?;
            for (l, ids) in picks.iter().enumerate() {
                for &e in ids {
                    mask[l * stride + token * experts as usize + e as usize] = 0.0;
                }
            }
        }
        Ok(mask)
    }
}

/// Writes the picks of steps as they are read back, one trace line a token.
#[derive(Debug)]
pub struct RouteRecorder {
    writer: TraceWriter,
    top_k: usize,
}

impl RouteRecorder {
    /// A recorder writing to a new file at `path`, for steps of `top_k` picks a token.
    pub fn create(path: &std::path::Path, top_k: u32) -> Result<Self> {
        Ok(RouteRecorder { writer: TraceWriter::create(path)?, top_k: top_k as usize })
    }

    /// Writes a step's picks: `by_layer[l]` holds layer `l`'s `[t, k]` picks.
    pub fn write_step(&mut self, by_layer: &[Vec<u32>]) -> Result<()> {
        let t = by_layer.first().map_or(0, |p| p.len() / self.top_k);
        for token in 0..t {
            let picks: TokenPicks =
                by_layer.iter().map(|p| p[token * self.top_k..][..self.top_k].to_vec()).collect();
            self.writer.write(&picks)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mask_keeps_exactly_the_forced_picks_at_aligned_layer_offsets() {
        let shape = RouteShape { layers: 3, experts: 10, top_k: 2 };
        let mut forced = ForcedRoutes::open(&Routing::Uniform { seed: 5 }, shape).unwrap().unwrap();
        let mut same = UniformRoutes::new(shape, 5);
        let mask = forced.next_mask(2).unwrap();
        let stride = layer_stride(2, 10) as usize;
        assert_eq!((stride, mask.len()), (64, 3 * 64));
        let tokens = [same.next_token().unwrap(), same.next_token().unwrap()];
        for l in 0..3 {
            for (t, token) in tokens.iter().enumerate() {
                let row = &mask[l * stride + t * 10..][..10];
                let kept: Vec<u32> = (0..10).filter(|&e| row[e as usize] == 0.0).collect();
                let mut want = token[l].clone();
                want.sort_unstable();
                assert_eq!(kept, want, "layer {l} token {t}");
                assert!(row.iter().all(|&v| v == 0.0 || v == OFF));
            }
            assert!(mask[l * stride + 20..(l + 1) * stride].iter().all(|&v| v == OFF), "padding");
        }
    }
}
