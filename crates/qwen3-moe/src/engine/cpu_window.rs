//! The CPU tier's part of a per-layer one-token step: a layer's picks split between the GPU's hits and the
//! host's misses ([`Engine::plan_cpu_layer`]), then the misses computed on the host while the GPU runs the
//! hits, their sum joined to the residual stream in the GPU's combine or after it ([`Engine::join_cpu_layer`]).

use std::time::Duration;

use diskformer_expert_stream::Pinned;
use diskformer_runtime::tiers::{FinishRace, LayerSplit, sum_as_pick};

use super::per_layer::record_layer_head;
use super::{Engine, timed};
use crate::Result;
use crate::graph::{CpuJoin, Graph, JoinVia, finish_recorded, record};

/// The host's share of a layer: its picks' experts, their router weights, the layer's normed state, and
/// which pick's down row carries the host's sum when it joins as a pick.
pub(super) struct CpuWork {
    ids: Vec<u32>,
    weights: Vec<f32>,
    xn: Vec<f32>,
    sum_row: usize,
    race: FinishRace,
}

/// A CPU layer's plan ([`Engine::plan_cpu_layer`]).
pub(super) struct CpuPlan {
    /// The GPU's hits, pinned.
    pub pinned: Pinned,
    /// Each pick's slot.
    pub slots: Vec<u32>,
    /// The host's share, if any.
    pub work: Option<CpuWork>,
    /// The copies into the stage slots, to be submitted before the layer's experts, if any.
    pub staging: Option<wgpu::CommandBuffer>,
}

impl Engine {
    /// Splits layer `l`'s picks (`read`: the token's `k` picks, their weights and the normed state, as
    /// read back) by the tier's plan: hits pinned in the pool (their slots, `tiers::ABSENT_SLOT` for the host's
    /// picks), the host tier's reads and the pool's admissions started, the host's work, if any, and the
    /// copies of the GPU's misses from the arena into its stage slots, if any, recorded to run before the
    /// layer's experts.
    pub(super) fn plan_cpu_layer(&mut self, l: u32, read: &[u32], join: &CpuJoin) -> Result<CpuPlan> {
        let (k, hidden) = (self.config.expert_used_count as usize, self.config.embedding_length as usize);
        let picks = &read[..k];
        let split = self.tiers.split_layer(l, picks, &mut self.stats)?;
        let staging = (!split.staged.is_empty()).then(|| {
            let mut enc = self.ctx.device.create_command_encoder(&Default::default());
            self.tiers.record_stage_copies(&mut enc, &split.staged).map(|()| enc.finish())
        });
        let staging = match staging.transpose() {
            Ok(staging) => staging,
            Err(e) => {
                self.tiers.pool.release(split.pinned);
                return Err(e.into());
            }
        };
        let race = FinishRace::new(&mut self.tiers, &split);
        let LayerSplit { pinned, slots, cpu_picks, cpu_experts: ids, .. } = split;
        let floats = |r: &[u32]| r.iter().map(|&b| f32::from_bits(b)).collect::<Vec<f32>>();
        let (mut weights, xn) = (floats(&read[k..2 * k]), floats(&read[2 * k..2 * k + hidden]));
        let cpu_weights: Vec<f32> = cpu_picks.iter().map(|&i| weights[i]).collect();
        // The unfused combine adds every pick's down row: the host's sum comes in as its first pick's.
        let sum_row = cpu_picks.first().copied();
        if matches!(join.via, JoinVia::AsPick) && sum_as_pick(&cpu_picks, &mut weights).is_some() {
            self.ctx.queue.write_buffer(&self.scratch.pick_weights, 0, bytemuck::cast_slice(&weights));
        }
        let work = sum_row.map(|sum_row| CpuWork { ids, weights: cpu_weights, xn, sum_row, race });
        Ok(CpuPlan { pinned, slots, work, staging })
    }

    /// Runs layer `l` of `graph` with the host's `work`: the GPU's picks (`experts`, recorded: the stage
    /// slots' copies, if any, then the picks' gate‖up and down, fused: and their combine onto the residual
    /// stream) run on the GPU while the host computes the misses; then their sum joins (unfused: in the
    /// combine, as a pick's down row; fused: added onto the residual stream). Meanwhile this thread submits
    /// `experts` and records (and finishes: most of wgpu's encoding cost) what follows the sum into `enc`:
    /// the join or the combine, and the next layer up to its picks (its readback as a CPU layer's when
    /// `next_on_cpu`), which it returns.
    pub(super) fn join_cpu_layer(
        &mut self,
        enc: &mut wgpu::CommandEncoder,
        graph: &Graph,
        l: u32,
        work: CpuWork,
        experts: Vec<wgpu::CommandBuffer>,
        next_on_cpu: bool,
    ) -> Result<Option<wgpu::CommandBuffer>> {
        let lg = &graph.layers[l as usize];
        let CpuJoin { at: down_from, via } = lg.cpu_join.as_ref().expect("a CPU layer has its join");
        let (k, hidden) = (self.config.expert_used_count as usize, self.config.embedding_length as usize);
        let (device, queue, s) = (&self.ctx.device, &self.ctx.queue, &self.scratch);
        // Counted here and added after: the tier counts its own time in the stats meanwhile.
        let (mut record_time, mut submit_time) = (Duration::ZERO, Duration::ZERO);
        let next = graph.layers.get(l as usize + 1);
        let CpuWork { ids, weights, xn, sum_row, race } = work;
        let meanwhile = || {
            timed(&mut submit_time, || queue.submit(experts));
            race.submitted(queue);
            timed(&mut record_time, || {
                if let JoinVia::Add(join) = via {
                    record(enc, std::slice::from_ref(join));
                }
                record(enc, &lg.experts[*down_from..]);
                next.map(|next| {
                    record_layer_head(enc, next, s, next_on_cpu, k, hidden, k);
                    finish_recorded(device, enc)
                })
            })
        };
        let (sum, next_head) =
            self.tiers.compute_misses_while(l, &ids, &weights, &xn, &mut self.stats, meanwhile)?;
        self.stats.record_time += record_time;
        self.stats.submit_time += submit_time;
        race.settle(device, &mut self.tiers)?;
        match via {
            JoinVia::Add(_) => queue.write_buffer(&s.cpu_sum, 0, bytemuck::cast_slice(&sum)),
            JoinVia::AsPick => {
                let row = 4 * (sum_row * hidden) as u64;
                queue.write_buffer(&s.down, row, bytemuck::cast_slice(&sum));
            }
        }
        Ok(next_head)
    }
}
