//! The CPU tier's part of a per-layer one-token step: a layer's picks split between the GPU's hits and the
//! host's misses ([`Engine::plan_cpu_layer`]), then the misses computed on the host while the GPU runs the
//! hits, their sum joined to the residual stream before the GPU's combine ([`Engine::join_cpu_layer`]).

use diskformer_expert_stream::{ExpertKey, Pinned, Tier};

use super::per_layer::record_layer_head;
use super::{ABSENT, Engine, timed};
use crate::Result;
use crate::graph::{CpuJoin, Graph, JoinVia, record};

/// The host's share of a layer: its picks' experts, their router weights, the layer's normed state, and
/// which pick's down row carries the host's sum when it joins as a pick.
pub(super) struct CpuWork {
    ids: Vec<u32>,
    weights: Vec<f32>,
    xn: Vec<f32>,
    sum_row: usize,
}

impl Engine {
    /// Splits layer `l`'s picks (`read`: the token's `k` picks, their weights and the normed state, as
    /// read back) by the tier's plan: hits pinned in the pool (their slots, [`ABSENT`] for the host's
    /// picks), the host tier's reads and the pool's admissions started, and the host's work, if any.
    pub(super) fn plan_cpu_layer(
        &mut self,
        l: u32,
        read: &[u32],
        join: &CpuJoin,
    ) -> Result<(Pinned, Vec<u32>, Option<CpuWork>)> {
        let (k, hidden) = (self.config.expert_used_count as usize, self.config.embedding_length as usize);
        let picks = &read[..k];
        let tier = self.tiers.cpu.as_mut().expect("a CPU layer runs with the tier");
        // One look under the pool's lock: which picks it holds ready, and whether loads are queued.
        let (may_admit, ready) = self.tiers.pool.inspect(|core| {
            let ready: Vec<bool> =
                picks.iter().map(|&e| core.slot_of(ExpertKey::new(l, e)).is_some()).collect();
            (core.queued() == 0, ready)
        });
        let resident = |e: u32| picks.iter().zip(&ready).any(|(&p, &r)| p == e && r);
        let plan = tier.plan(l, picks, may_admit, resident)?;
        let hits: Vec<u32> =
            picks.iter().zip(&plan.tiers).filter(|(_, t)| **t == Tier::Gpu).map(|(&e, _)| e).collect();
        let pinned = self.tiers.pool.ensure(l, &hits)?;
        let mut hit_slots = pinned.slots().iter();
        let slots: Vec<u32> = (plan.tiers.iter())
            .map(|t| match t {
                Tier::Gpu => hit_slots.next().expect("a slot for every hit").0,
                Tier::Cpu => ABSENT,
            })
            .collect();
        let ids: Vec<u32> = plan.cpu_picks().map(|i| picks[i]).collect();
        // The host tier reads what it lacks first, so that the admissions load from host memory.
        tier.fetch(l, &ids, &plan.admit)?;
        if !plan.admit.is_empty() {
            self.stats.cpu_admitted += self.tiers.pool.prefetch(l, &plan.admit)? as u64;
        }
        let floats = |r: &[u32]| r.iter().map(|&b| f32::from_bits(b)).collect::<Vec<f32>>();
        let (mut weights, xn) = (floats(&read[k..2 * k]), floats(&read[2 * k..2 * k + hidden]));
        let cpu_weights: Vec<f32> = plan.cpu_picks().map(|i| weights[i]).collect();
        // The unfused combine adds every pick's down row: the host's sum comes in as its first pick's, with
        // weight 1, and its other picks count zero (their rows hold an earlier step's finite values).
        let sum_row = plan.cpu_picks().next();
        if let (Some(first), JoinVia::AsPick) = (sum_row, &join.via) {
            plan.cpu_picks().for_each(|i| weights[i] = 0.0);
            weights[first] = 1.0;
            self.ctx.queue.write_buffer(&self.scratch.pick_weights, 0, bytemuck::cast_slice(&weights));
        }
        let work = sum_row.map(|sum_row| CpuWork { ids, weights: cpu_weights, xn, sum_row });
        Ok((pinned, slots, work))
    }

    /// Runs layer `l` of `graph` with the host's `work`: gate‖up of the hits (and, unfused, their down) runs
    /// on the GPU while the host computes the misses; their sum joins the residual stream before the GPU's
    /// combine adds the hits'. Meanwhile this thread submits the hits' gate‖up and records (and finishes:
    /// most of wgpu's encoding cost) what follows the sum into `enc`: the join, down and the combine, and
    /// the next layer up to its picks (its readback as a CPU layer's when `next_on_cpu`), which it returns.
    pub(super) fn join_cpu_layer(
        &mut self,
        enc: &mut wgpu::CommandEncoder,
        graph: &Graph,
        l: u32,
        work: CpuWork,
        next_on_cpu: bool,
    ) -> Result<Option<wgpu::CommandBuffer>> {
        let lg = &graph.layers[l as usize];
        let CpuJoin { at: down_from, via } = lg.cpu_join.as_ref().expect("a CPU layer has its join");
        let (k, hidden) = (self.config.expert_used_count as usize, self.config.embedding_length as usize);
        let (device, queue, s) = (&self.ctx.device, &self.ctx.queue, &self.scratch);
        let (record_time, submit_time) = (&mut self.stats.record_time, &mut self.stats.submit_time);
        let next = graph.layers.get(l as usize + 1);
        let meanwhile = || {
            let gate_up = timed(record_time, || {
                record(enc, &lg.experts[..*down_from]);
                std::mem::replace(enc, device.create_command_encoder(&Default::default())).finish()
            });
            timed(submit_time, || queue.submit([gate_up]));
            timed(record_time, || {
                if let JoinVia::Add(join) = via {
                    record(enc, std::slice::from_ref(join));
                    enc.copy_buffer_to_buffer(&s.cpu_joined, 0, &s.x, 0, 4 * hidden as u64);
                }
                record(enc, &lg.experts[*down_from..]);
                next.map(|next| {
                    record_layer_head(enc, next, s, next_on_cpu, k, hidden, k);
                    std::mem::replace(enc, device.create_command_encoder(&Default::default())).finish()
                })
            })
        };
        let tier = self.tiers.cpu.as_mut().expect("CPU work comes from the tier");
        let CpuWork { ids, weights, xn, sum_row } = work;
        let (sum, took, (next_head, recording)) = tier.compute_while(l, &ids, &weights, &xn, meanwhile)?;
        self.stats.cpu_experts += ids.len() as u64;
        self.stats.cpu_time += took;
        self.stats.cpu_recording_time += recording;
        self.stats.cpu_pool += tier.take_pool_times();
        let (first_uses, first_use_time) = tier.take_first_uses();
        self.stats.cpu_first_uses += first_uses;
        self.stats.cpu_first_use_time += first_use_time;
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
