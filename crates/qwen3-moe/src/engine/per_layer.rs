//! The per-layer step driver, for chunks while experts stream (and one-token steps with prefetch, or the
//! CPU tier): each layer's head submitted and its picks read back, `ensure` (or the CPU tier's plan and join,
//! in [`cpu_window`](super::cpu_window)) before the layer's experts are submitted (a CPU layer's recorded
//! while its picks are read back, others after), prefetch guesses for the layers after it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use diskformer_kernels::expert_gemm_groups;

use super::{Engine, Output, Want, read_output, readback, record_head, timed};
use crate::Result;
use crate::graph::{LayerGraph, Scratch, finish_recorded, gemm_groups_len, record};

impl Engine {
    /// One step of `t` tokens (positions, inputs and graph written), a readback of the picks per layer.
    pub(super) fn per_layer_step(&mut self, t: u32, want: Want) -> Result<Output> {
        let (queue, device) = (self.ctx.queue.clone(), self.ctx.device.clone());
        let (graph, s) = (Arc::clone(&self.graphs[&t]), Arc::clone(&self.scratch));
        let (k, layers) = (self.config.expert_used_count as usize, self.config.block_count);
        let lookahead = if t == 1 { self.lookahead } else { 0 };
        let shape = self.head_shape(t);
        // Streaming (or routing off the GPU): a readback of the picks per layer, `ensure`, then the layer's
        // experts; chunks group their pairs by slot for the expert GEMM on the host.
        let mut enc = device.create_command_encoder(&Default::default());
        debug_assert!(self.tiers.held.is_none());
        let pairs = t as usize * k;
        let hidden = self.config.embedding_length as usize;
        if let Some(tier) = self.tiers.cpu.as_mut().filter(|_| t == 1) {
            tier.next_token();
        }
        let mut recorded = Vec::with_capacity(if self.recorder.is_some() { layers as usize } else { 0 });
        let tier_on = t == 1 && self.tiers.cpu.is_some();
        let cpu_layer = |lg: &LayerGraph| tier_on && lg.cpu_join.is_some();
        // A layer's attention and router, recorded and finished while the host computed the experts of
        // the layer before (the CPU tier); else recorded into `enc` at the layer's start.
        let mut head_ready: Option<wgpu::CommandBuffer> = None;
        for l in 0..layers {
            let lg = &graph.layers[l as usize];
            let guesses = lookahead.min(layers - 1 - l);
            let on_cpu = cpu_layer(lg);
            let (rb, rb_bytes) = readback_of_picks(&s, on_cpu, k, hidden, pairs);
            let commands = match head_ready.take() {
                Some(commands) => commands,
                None => timed(&mut self.stats.record_time, || {
                    record_layer_head(&mut enc, lg, &s, on_cpu, k, hidden, pairs);
                    finish_recorded(&device, &mut enc)
                }),
            };
            let picked = timed(&mut self.stats.submit_time, || queue.submit([commands]));
            // A CPU layer's GPU experts, recorded while the GPU runs the head: submitted as soon as the
            // picks are planned, so that the GPU's share starts before the host's.
            let at = lg.cpu_join.as_ref().filter(|_| on_cpu).map(|join| join.at);
            let experts_ready = at.map(|at| {
                timed(&mut self.stats.record_time, || {
                    let mut enc = device.create_command_encoder(&Default::default());
                    record(&mut enc, &lg.experts[..at]);
                    enc.finish()
                })
            });
            // The guesses in a submission of their own, so that the host maps the picks and loads the
            // layer's misses while the GPU runs them (each of their 2 · lookahead dependent dispatches costs
            // several µs in the chain).
            let guessed_by = (guesses > 0).then(|| {
                let mut enc = device.create_command_encoder(&Default::default());
                timed(&mut self.stats.record_time, || record(&mut enc, &lg.guesses));
                for j in 0..guesses {
                    let at = 4 * (j as usize * k) as u64;
                    enc.copy_buffer_to_buffer(
                        &s.guess_ids[j as usize],
                        0,
                        &s.guess_readback,
                        at,
                        4 * k as u64,
                    );
                }
                timed(&mut self.stats.submit_time, || queue.submit([enc.finish()]))
            });
            self.tiers.release_held();
            let read: Vec<u32> =
                readback(&device, rb, rb_bytes, Some(picked), SPIN_FOR_PICKS, &mut self.stats.gpu_wait)?;
            let picks = &read[..pairs];
            if self.recorder.is_some() {
                recorded.push(picks.to_vec());
            }

            let ensure_started = Instant::now();
            let (mut cpu_work, mut staging) = (None, None);
            let (pinned, slots) = if let Some(join) = lg.cpu_join.as_ref().filter(|_| on_cpu) {
                // Hits run on the GPU, misses on the CPU (their slots absent: the expert kernels skip them)
                // or, copied from the arena, on the GPU.
                let plan = self.plan_cpu_layer(l, &read, join)?;
                (cpu_work, staging) = (plan.work, plan.staging);
                (Some(plan.pinned), plan.slots)
            } else if let Some((_, table)) = &self.resident_table {
                let base = (l * self.config.expert_count) as usize;
                (None, picks.iter().map(|&id| table[base + id as usize]).collect::<Vec<u32>>())
            } else if t == 1 {
                let pinned = self.tiers.pool.ensure(l, picks)?;
                let slots: Vec<u32> = pinned.slots().iter().map(|s| s.0).collect();
                (Some(pinned), slots)
            } else {
                let (pinned, slots) = self.tiers.ensure_chunk(l, picks)?;
                (Some(pinned), slots)
            };
            self.stats.ensure_time += ensure_started.elapsed();
            if t == 1 {
                queue.write_buffer(&s.slot_idx[l as usize], 0, bytemuck::cast_slice(&slots));
            } else {
                let len = gemm_groups_len(&self.config, t) as usize;
                let (groups, order) = expert_gemm_groups(&slots, self.expert_kernels.group_size(), len);
                queue.write_buffer(&s.gemm_groups[l as usize], 0, bytemuck::cast_slice(&groups));
                queue.write_buffer(&s.gemm_order[l as usize], 0, bytemuck::cast_slice(&order));
            }
            if let Some(submission) = guessed_by {
                let (bytes, wait) = (4 * (guesses as usize * k) as u64, &mut self.stats.gpu_wait);
                let guessed =
                    readback(&device, &s.guess_readback, bytes, Some(submission), Duration::ZERO, wait)?;
                for (j, ids) in guessed.chunks(k).enumerate() {
                    self.tiers.pool.prefetch(l + 1 + j as u32, ids)?;
                }
            }
            self.tiers.held = pinned;
            // The stage slots' copies go before the experts that read them.
            let experts_ready = experts_ready.map(|experts| staging.into_iter().chain([experts]).collect());
            match (cpu_work, experts_ready) {
                (Some(work), Some(experts)) => {
                    let next_on_cpu = graph.layers.get(l as usize + 1).is_some_and(cpu_layer);
                    head_ready = self.join_cpu_layer(&mut enc, &graph, l, work, experts, next_on_cpu)?;
                }
                // No pick on the host: no sum joins (`enc` holds nothing yet, so the order stays).
                (None, Some(experts)) => {
                    timed(&mut self.stats.submit_time, || queue.submit::<Vec<_>>(experts));
                    let rest = &lg.experts[at.unwrap_or_default()..];
                    timed(&mut self.stats.record_time, || record(&mut enc, rest));
                }
                (_, None) => timed(&mut self.stats.record_time, || record(&mut enc, &lg.experts)),
            }
        }

        timed(&mut self.stats.record_time, || record_head(&mut enc, &graph, &s, want, shape, 0));
        timed(&mut self.stats.submit_time, || queue.submit([enc.finish()]));
        if let Some(recorder) = &mut self.recorder {
            recorder.write_step(&recorded)?;
        }
        let out = read_output(&device, &s, want, shape, 0, None, &mut self.stats.gpu_wait)?;
        // Writes for the next step (ids, positions, slots, uploads into freed slots) are ordered after
        // this submit by the queue, so nothing waits here.
        self.tiers.release_held();
        Ok(out)
    }
}

/// How long the per-layer path's readback of a layer's picks polls before it blocks: a blocking wait wakes
/// ~25 µs later than a spinning one (H200, `submit-latency` in the kernels crate), once a layer. Other
/// readbacks block at once: they wait for a whole step, and with them polling too resident decode ran
/// slower on the H200 (BENCHMARKS.md).
pub(crate) const SPIN_FOR_PICKS: Duration = Duration::from_millis(1);

/// Records layer `lg`'s attention and router, and the copies of what the host reads back after them
/// (see [`readback_of_picks`]).
pub(super) fn record_layer_head(
    enc: &mut wgpu::CommandEncoder,
    lg: &LayerGraph,
    s: &Scratch,
    on_cpu: bool,
    k: usize,
    hidden: usize,
    pairs: usize,
) {
    record(enc, &lg.attention);
    let (rb, _) = readback_of_picks(s, on_cpu, k, hidden, pairs);
    if on_cpu {
        let (w, x) = (4 * k as u64, 4 * hidden as u64);
        enc.copy_buffer_to_buffer(&s.pick_ids, 0, rb, 0, w);
        enc.copy_buffer_to_buffer(&s.pick_weights, 0, rb, w, w);
        enc.copy_buffer_to_buffer(s.xn(), 0, rb, 2 * w, x);
    } else {
        enc.copy_buffer_to_buffer(&s.pick_ids, 0, rb, 0, 4 * pairs as u64);
    }
}

/// Where a layer's picks are read back from, and how many bytes: the picks of the step's `pairs`, or for
/// the CPU tier the token's `k` picks with their weights and the layer's normed state (`hidden` values).
fn readback_of_picks(
    s: &Scratch,
    on_cpu: bool,
    k: usize,
    hidden: usize,
    pairs: usize,
) -> (&wgpu::Buffer, u64) {
    if on_cpu { (&s.cpu_readback, 4 * (2 * k + hidden) as u64) } else { (&s.readback, 4 * pairs as u64) }
}
