//! Split residency (`diskformer_expert_stream::Placement`): with the pool's arena holding every record in
//! host memory, the engine runs the resident driver with a slot table in which each record is either in a
//! device slot or read from the arena over the bus. Each one-token step copies its layers' picked slots
//! into a readback; their heat moves the hottest records onto the device every [`REBALANCE_STEPS`] steps,
//! each move a copy from the arena and a table entry, ordered after the steps already submitted.

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
    /// One-token steps since the last rebalance.
    since: u32,
}

impl Split {
    /// The split of `layers` × `experts` records over `device_slots` device slots, the arena after them, for
    /// steps of `top_k` picks a layer; the device's first records copied in from the arena (filled).
    ///
    /// # Errors
    /// A copy the pool refused.
    pub(super) fn new(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        pool: &diskformer_expert_stream::GpuPool,
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
        let picks = [0, 1].map(|_| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("split picks"),
                size: 4 * u64::from(layers * top_k),
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        });
        Ok(Split { placement, picks, since: 0 })
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
}

impl Engine {
    /// After a one-token step that used argmax slot `slot`, submitted as `submission` (finished: its output
    /// was read): counts its picks, and every [`REBALANCE_STEPS`] steps moves the hottest records onto the device (their copies
    /// and the new table submitted after every step already queued).
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
        if moves.is_empty() {
            return Ok(());
        }
        let pool = self.tiers.pool.backend().pool();
        let mut enc = device.create_command_encoder(&Default::default());
        for m in &moves {
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
