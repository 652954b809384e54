//! The resident step driver, with every expert on the GPU: one submission a step, the next recorded
//! while the GPU runs this one, and run-ahead (the next step queued on the GPU's own pick).

use diskformer_kernels::{Dispatch, SampleStep};

use super::{Engine, HeadShape, Output, Want, read_output, record_head, timed};
use crate::graph::{Graph, Scratch};
use crate::kernel_times::{KernelTime, time_graph};
use crate::{Error, Result};

impl Engine {
    /// A one-token step with every expert resident: the token's graph embeds it and turns picks into slots
    /// itself, one submit a token. Its inputs are in buffers written ahead of the submit, so the commands
    /// are recorded before the token is known: each step submits what the previous one recorded and records
    /// the next while the GPU runs, hiding the host's recording (a few ms a token) behind the GPU's work.
    ///
    /// With run-ahead and a pick asked for (the argmax, or a draw with the next step's draw given), the
    /// step also queues the next one, whose token is this step's pick, copied on the GPU: the host reads the
    /// pick while the GPU already runs on. `queued` is such a step from the call before; it is this step
    /// when it runs `id` at this position for the same kind of pick.
    pub(super) fn resident_step(&mut self, id: u32, want: Want, queued: Option<RunAhead>) -> Result<Output> {
        let position = self.cached.len() as u32;
        self.graph(1)?;
        let queue = self.ctx.queue.clone();
        let (slot, submission) = match queued {
            Some(q)
                if q.position == position
                    && q.token == Some(id)
                    && want.picks()
                    && q.want == want
                    && q.draw == self.draw =>
            {
                (q.slot, q.submission)
            }
            // A queued step for another token (or none) is left to run unused; later writes and submits are
            // ordered after it.
            _ => {
                queue.write_buffer(&self.scratch.token_ids, 0, bytemuck::bytes_of(&id));
                if self.weights.gpu_embedding.is_none() {
                    // An embedding the GPU does not hold (not Q8_0): the host writes the row.
                    let row = self.weights.embedding.rows(&[id]);
                    queue.write_buffer(&self.scratch.x, 0, bytemuck::cast_slice(&row));
                }
                self.write_positions(position, 1);
                self.write_sampling(want, position);
                let commands = self.resident_commands(want, 0);
                (0, timed(&mut self.stats.submit_time, || queue.submit([commands])))
            }
        };
        let ahead = self.queues_next(position)
            && (want == Want::Argmax || (matches!(want, Want::Sample(_)) && self.next_draw.is_some()));
        let next_slot = if ahead {
            // The queued step's position, table and draw; its token arrives by the copy at this step's end.
            self.write_positions(position + 1, 1);
            self.write_draw(want, self.next_draw);
            let commands = self.resident_commands(want, 1 - slot);
            let submission = timed(&mut self.stats.submit_time, || queue.submit([commands]));
            let (position, slot, draw) = (position + 1, 1 - slot, self.next_draw);
            self.run_ahead = Some(RunAhead { position, token: None, want, draw, slot, submission });
            slot
        } else {
            0
        };
        let next = self.record_resident(want, next_slot);
        self.next_step = Some((want, next_slot, next));
        let (device, s, shape) = (&self.ctx.device, &self.scratch, self.head_shape(1));
        let out =
            read_output(device, s, want, shape, slot, Some(submission.clone()), &mut self.stats.gpu_wait)?;
        if let (Some(q), Output::Pick(pick)) = (&mut self.run_ahead, &out) {
            q.token = Some(*pick);
        }
        self.note_split_step(slot, submission)?;
        Ok(out)
    }

    /// The commands of a resident one-token step: those recorded during the step before when they match,
    /// else recorded now.
    fn resident_commands(&mut self, want: Want, slot: usize) -> wgpu::CommandBuffer {
        match self.next_step.take() {
            Some((w, sl, commands)) if w == want && sl == slot => commands,
            _ => self.record_resident(want, slot),
        }
    }

    /// Records a resident one-token step now ([`record_resident_step`]), timed as recording.
    fn record_resident(&mut self, want: Want, slot: usize) -> wgpu::CommandBuffer {
        let shape = self.head_shape(1);
        let (device, graph, s) = (&self.ctx.device, &self.graphs[&1], &self.scratch);
        let top_k = self.config.expert_used_count;
        timed(&mut self.stats.record_time, || {
            let mut enc = record_resident_step(device, graph, s, want, shape, slot);
            if let Some(split) = &self.split {
                split.record_picks(&mut enc, s, top_k, slot);
            }
            enc.finish()
        })
    }

    /// Where a step of `t` tokens spends its GPU time with every expert resident: the whole step's graph
    /// (every layer and the head with its argmax, the row `step`), then each kernel's dispatches of it alone
    /// ([`KernelTime`]), each submitted `repeats` times. The dispatches run on whatever the scratch holds and
    /// write the cache at the next positions: [`Engine::reset`] after.
    ///
    /// # Errors
    /// [`Error::BadOption`] where experts stream (the per-layer and route-ahead steps read back between
    /// layers) or for `t` of 0 or past [`max_batch`](Engine::max_batch); GPU errors.
    pub fn kernel_times(&mut self, t: u32, repeats: u32) -> Result<Vec<KernelTime>> {
        if self.resident_table.is_none() {
            let what = "experts stream; give a budget that holds every expert".into();
            return Err(Error::BadOption { option: "kernel times", what });
        }
        if t == 0 || t > self.max_batch {
            let what = format!("{t} tokens: must be 1..={}", self.max_batch);
            return Err(Error::BadOption { option: "kernel times", what });
        }
        self.graph(t)?;
        let graph = &self.graphs[&t];
        let dispatches: Vec<&Dispatch> =
            graph.layer_dispatches().chain([&graph.head, &graph.argmax]).collect();
        time_graph(&self.ctx, &dispatches, "step", repeats)
    }

    /// A chunk with every expert resident: routing and the grouping of its pairs stay on the GPU, so the
    /// whole step is one submission.
    pub(super) fn resident_chunk(&mut self, t: u32, want: Want) -> Result<Output> {
        let shape = self.head_shape(t);
        let (queue, device, s, graph) = (&self.ctx.queue, &self.ctx.device, &self.scratch, &self.graphs[&t]);
        let split = self.split.as_ref();
        let commands = timed(&mut self.stats.record_time, || {
            let mut enc = record_resident_step(device, graph, s, want, shape, 0);
            if let Some(split) = split {
                split.record_groups(&mut enc, s);
            }
            enc.finish()
        });
        let submission = timed(&mut self.stats.submit_time, || queue.submit([commands]));
        let out = read_output(device, s, want, shape, 0, Some(submission.clone()), &mut self.stats.gpu_wait)?;
        self.note_split_chunk(submission)?;
        Ok(out)
    }
}

/// A one-token step queued before the pick it runs on was read (see [`EngineOptions::run_ahead`](crate::EngineOptions::run_ahead)).
pub(super) struct RunAhead {
    /// The position it runs at.
    position: u32,
    /// The token it runs: the step before's pick, once read.
    token: Option<u32>,
    /// How it picks its own token: the argmax, or a draw with `draw`.
    want: Want,
    draw: Option<SampleStep>,
    /// The argmax readback it copies its own pick to.
    slot: usize,
    submission: wgpu::SubmissionIndex,
}

/// Records a step with every expert resident (one token, or a chunk that groups its pairs on the GPU):
/// every layer, then the head, and for a pick its copy into `token_ids`, where a step queued behind this
/// one finds its token; the encoder is left open for what the caller adds.
fn record_resident_step(
    device: &wgpu::Device,
    graph: &Graph,
    s: &Scratch,
    want: Want,
    shape: HeadShape,
    slot: usize,
) -> wgpu::CommandEncoder {
    let mut enc = device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        graph.layer_dispatches().for_each(|d| d.record(&mut pass));
    }
    record_head(&mut enc, graph, s, want, shape, slot);
    if want.picks() {
        enc.copy_buffer_to_buffer(&s.argmax, 0, &s.token_ids, 0, 4);
    }
    enc
}
