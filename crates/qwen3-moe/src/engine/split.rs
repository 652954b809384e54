//! Split residency (`diskformer_expert_stream::Placement`): with the pool's arena holding every record in
//! host memory, the engine runs the resident driver with a slot table in which each record is either in a
//! device slot or read from the arena over the bus. Each one-token step copies its layers' picked slots
//! into a readback; their heat moves the hottest records onto the device every [`REBALANCE_STEPS`] steps,
//! each move a copy from the arena and a table entry, ordered after the steps already submitted. A chunk's
//! groups of pairs count too, and after a chunk as many records move as its heat says (the prompt places
//! the device for the reply).

use diskformer_expert_stream::{Placement, PlacementConfig};

use super::{Engine, readback};
use crate::graph::Scratch;
use crate::{Error, Result};

/// One-token steps between two rebalances.
pub(super) const REBALANCE_STEPS: u32 = 4;

/// Split residency's state beside the resident table.
pub(super) struct Split {
    placement: Placement,
    /// For each of the two argmax readback slots of run-ahead, the picked slots of every layer of the step
    /// that used it (`[layers · k] u32`).
    picks: [wgpu::Buffer; 2],
    /// A chunk's groups of pairs (`Scratch::gemm_groups`, every layer's after the other).
    groups: wgpu::Buffer,
    /// One-token steps since the last rebalance.
    since: u32,
}

impl Split {
    /// The split of `layers` × `experts` records over the pool's device slots, the arena after them, for
    /// steps of `top_k` picks a layer and chunks grouped in `s`; the device's first records copied in from
    /// the arena (filled).
    ///
    /// # Errors
    /// A copy the pool refused.
    pub(super) fn new(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        pool: &diskformer_expert_stream::GpuPool,
        s: &Scratch,
        (layers, experts, top_k): (u32, u32, u32),
    ) -> Result<Self> {
        let slots = pool.slots();
        let placement = Placement::new(layers, experts, slots, slots as u32, PlacementConfig::default());
        let mut enc = device.create_command_encoder(&Default::default());
        for (to, &record) in placement.owners().iter().enumerate() {
            let from = diskformer_expert_stream::Slot(slots as u32 + record);
            pool.copy_from_arena(&mut enc, from, diskformer_expert_stream::Slot(to as u32))
                .map_err(|e| Error::Gpu(e.to_string()))?;
        }
        queue.submit([enc.finish()]);
        let readback = |label, size| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        };
        let picks = [0, 1].map(|_| readback("split picks", 4 * u64::from(layers * top_k)));
        let groups = readback("split groups", u64::from(layers) * s.gemm_groups[0].size());
        Ok(Split { placement, picks, groups, since: 0 })
    }

    /// The slot table the kernels start with.
    pub(super) fn table(&self) -> &[u32] {
        self.placement.table()
    }

    /// Records into `enc` the copy of every layer's picked slots (`s.slot_idx`, `top_k` each) into the
    /// readback of argmax slot `slot`.
    pub(super) fn record_picks(&self, enc: &mut wgpu::CommandEncoder, s: &Scratch, top_k: u32, slot: usize) {
        let bytes = 4 * u64::from(top_k);
        for (l, idx) in s.slot_idx.iter().enumerate() {
            enc.copy_buffer_to_buffer(idx, 0, &self.picks[slot], l as u64 * bytes, bytes);
        }
    }

    /// Records into `enc` the copy of every layer's groups of a chunk's pairs into the readback.
    pub(super) fn record_groups(&self, enc: &mut wgpu::CommandEncoder, s: &Scratch) {
        for (l, groups) in s.gemm_groups.iter().enumerate() {
            enc.copy_buffer_to_buffer(groups, 0, &self.groups, l as u64 * groups.size(), groups.size());
        }
    }
}

impl Engine {
    /// After a one-token step that used argmax slot `slot`, submitted as `submission` (finished: its output
    /// was read): counts its picks, and every [`REBALANCE_STEPS`] steps moves the hottest records onto the
    /// device ([`Engine::apply_moves`]).
    pub(super) fn note_split_step(&mut self, slot: usize, submission: wgpu::SubmissionIndex) -> Result<()> {
        let Some(split) = self.split.as_mut() else { return Ok(()) };
        let device = &self.ctx.device;
        let buffer = &split.picks[slot];
        let wait = &mut self.stats.gpu_wait;
        let picked =
            readback(device, buffer, buffer.size(), Some(submission), std::time::Duration::ZERO, wait)?;
        let on_device = split.placement.note_picks(&picked) as u64;
        self.stats.split_device_picks += on_device;
        self.stats.split_arena_picks += picked.len() as u64 - on_device;
        split.since += 1;
        if split.since < REBALANCE_STEPS {
            return Ok(());
        }
        split.since = 0;
        let moves = split.placement.rebalance();
        self.apply_moves(&moves)
    }

    /// After a chunk submitted as `submission` (finished): counts the pairs of its groups (each layer's
    /// slot and pair count, [`Split::record_groups`]) and moves the hottest records onto the device, as
    /// many as differ: the prompt's picks place the device for the replies' before their first step.
    pub(super) fn note_split_chunk(&mut self, submission: wgpu::SubmissionIndex) -> Result<()> {
        let Some(split) = self.split.as_mut() else { return Ok(()) };
        let (device, buffer, wait) = (&self.ctx.device, &split.groups, &mut self.stats.gpu_wait);
        let groups =
            readback(device, buffer, buffer.size(), Some(submission), std::time::Duration::ZERO, wait)?;
        // Each group is (slot, first pair, pairs, 0); padding groups have no pairs.
        for g in groups.chunks_exact(4).filter(|g| g[2] > 0) {
            split.placement.note(g[0], g[2]);
        }
        split.since = 0;
        let moves = split.placement.rebalance_up_to(usize::MAX);
        self.apply_moves(&moves)
    }

    /// Submits the copies of `moves` from the arena onto the device and the new slot table, ordered after
    /// every step already submitted (which reads the old ones).
    fn apply_moves(&mut self, moves: &[diskformer_expert_stream::Move]) -> Result<()> {
        let Some(split) = self.split.as_ref().filter(|_| !moves.is_empty()) else { return Ok(()) };
        let (device, pool) = (&self.ctx.device, self.tiers.pool.backend().pool());
        let mut enc = device.create_command_encoder(&Default::default());
        for m in moves {
            pool.copy_from_arena(&mut enc, m.from, m.to).map_err(|e| Error::Gpu(e.to_string()))?;
        }
        let (buffer, table) = self.resident_table.as_mut().expect("split residency runs the resident driver");
        table.copy_from_slice(split.placement.table());
        // The table's write lands before the copies in the same submit: both after the steps queued before.
        self.ctx.queue.write_buffer(buffer, 0, bytemuck::cast_slice(table));
        self.ctx.queue.submit([enc.finish()]);
        self.stats.split_moves += moves.len() as u64;
        Ok(())
    }
}
