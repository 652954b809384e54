//! qwen35moe's routed experts streamed through a pool of GPU slots, and the per-layer step driver that runs
//! them: each layer's mixer and router submitted and its picks read back, the pool made to hold them
//! (loaded from the GGUF in place, through a store of the file's expert layout), each pick's slot written,
//! then the layer's experts submitted with the next layer's mixer. No prefetch, CPU tier or host arena yet:
//! those are the qwen3moe engine's.

use std::path::Path;
use std::time::Duration;

use diskformer_expert_stream::{ExpertPool, GpuBackend, Pinned, Stats as PoolStats};
use diskformer_kernels::{BlockQuant, Context, Dispatch};
use diskformer_runtime::load::{chunk_bound, ingest_gguf};
use diskformer_runtime::{CpuTierOptions, LoadProgress, PoolShape, StreamOptions, StreamSetup, expert_pool};
use diskformer_store::{ExpertLayout, RecordReader, Store};
use wgpu::util::DeviceExt;

use super::config::Config;
use crate::engine::readback;
use crate::graph::{ExpertKernels, record};
use crate::{Error, Result};

/// The pool a qwen35moe model's routed experts stream through, and what its expert kernels read of it.
pub(super) struct StreamedExperts {
    pub pool: ExpertPool<GpuBackend>,
    /// Per layer gate, up and down: each its type and where it starts in its plane's slot.
    pub parts: Vec<[(BlockQuant, u64); 3]>,
    /// The slot of each (token, pick) pair of the layer running, `[MAX_CHUNK · k]` u32, written after
    /// [`StreamedExperts::place`].
    pub pair_slots: wgpu::Buffer,
    /// `[layers · experts]` u32: the slot of each expert a chunk's layer picked (what the grouped GEMMs'
    /// `expert_groups` maps picks through); other entries stale.
    pub table: wgpu::Buffer,
    /// The picks read back, `[MAX_CHUNK · k]` u32.
    picks: wgpu::Buffer,
    /// The layer running's records, pinned until the GPU has run its experts.
    held: Option<Pinned>,
    /// Tokens a chunk may have: its layer's picks must fit in the pool at once.
    pub max_chunk: u32,
    experts: u32,
}

impl StreamedExperts {
    /// The store of `gguf`'s expert records in `store_dir` (ingested there first where missing or stale,
    /// the experts left in the GGUF), its layout checked for the block kernels.
    pub fn store(gguf: &Path, store_dir: &Path, progress: &mut dyn FnMut(LoadProgress)) -> Result<Store> {
        ingest_gguf(gguf, store_dir, false, progress)?;
        Ok(Store::open(store_dir)?)
    }

    /// The records' layout in `store`.
    pub fn layout(store: &Store) -> Result<ExpertLayout> {
        store.layout().experts.clone().ok_or_else(|| Error::BadTensor {
            name: "blk.0.ffn_gate_exps.weight".into(),
            what: "the file holds no routed experts".into(),
        })
    }

    /// The readers' setup for `store`, its record reader, and the device bytes the staging rings take.
    pub fn setup(
        store: &Store,
        layout: &ExpertLayout,
        c: &Config,
    ) -> Result<(StreamSetup, RecordReader, u64)> {
        let stream = streaming();
        let mut cpu = CpuTierOptions::default();
        cpu.enabled = Some(false);
        let (setup, reader) = StreamSetup::resolve(store, layout, &stream, &cpu, c.top_k)?;
        let staging = setup.staging_bytes(stream.upload, layout.record_bytes, 0);
        Ok((setup, reader, staging))
    }

    /// A pool of `slots` records of `layout` read by `reader` on `ctx`, with the buffers the step driver
    /// writes.
    pub fn open(
        ctx: &Context,
        layout: &ExpertLayout,
        (setup, reader): (&StreamSetup, RecordReader),
        c: &Config,
        slots: usize,
        max_chunk: u32,
    ) -> Result<StreamedExperts> {
        let parts = match ExpertKernels::of(layout)? {
            ExpertKernels::Blocks(parts) => parts,
            // The store keeps planes for qwen3moe files alone (`diskformer_store::PLANAR_ARCHITECTURE`).
            ExpertKernels::Q8 | ExpertKernels::Q4 => {
                return Err(Error::BadTensor {
                    name: "blk.0.ffn_gate_exps.weight".into(),
                    what:
                        "is stored as planes, which qwen35moe's expert kernels do not read; ingest the GGUF \
                           into a new store"
                            .into(),
                });
            }
        };
        let shape = PoolShape {
            slots,
            layers: c.layers,
            experts: c.experts,
            top_k: c.top_k,
            prefetch_threads: 0,
            speculate: false,
            arena: false,
            stage_slots: 0,
        };
        let (pool, _) = expert_pool(ctx, layout, reader, setup, &streaming(), shape)?;
        let max_chunk = max_chunk.min(chunk_bound(slots, c.experts, c.top_k)).max(1);
        let pairs = 4 * u64::from(max_chunk * c.top_k);
        let device = &ctx.device;
        let buffer = |label, size, usage| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size,
                usage,
                mapped_at_creation: false,
            })
        };
        let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
        let table = vec![u32::MAX; (c.layers * c.experts) as usize];
        Ok(StreamedExperts {
            pool,
            parts,
            pair_slots: buffer("pair slots", pairs, storage),
            table: device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("expert slot table"),
                contents: bytemuck::cast_slice(&table),
                usage: storage,
            }),
            picks: buffer(
                "picks readback",
                pairs,
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            ),
            held: None,
            max_chunk,
            experts: c.experts,
        })
    }

    /// The pool's counters.
    pub fn stats(&self) -> PoolStats {
        self.pool.stats()
    }

    /// Lets the layer that ran last go (the GPU has finished its experts).
    pub fn release_held(&mut self) {
        if let Some(pinned) = self.held.take() {
            self.pool.release(pinned);
        }
    }

    /// Makes the pool hold layer `l`'s picks `ids` (a chunk's, `[T · k]`) and pins them until the next
    /// layer's, then writes each pair's slot and, for `grouped` chunks, the layer's row of the table.
    fn place(&mut self, queue: &wgpu::Queue, l: u32, ids: &[u32], grouped: bool) -> Result<()> {
        self.release_held();
        let mut unique = ids.to_vec();
        unique.sort_unstable();
        unique.dedup();
        if let Some(&bad) = unique.last().filter(|&&e| e >= self.experts) {
            return Err(Error::Gpu(format!("layer {l}'s router picked expert {bad} of {}", self.experts)));
        }
        let pinned = self.pool.ensure(l, &unique)?;
        let slot_of = |e: u32| pinned.slots()[unique.binary_search(&e).expect("every pick asked for")].0;
        let pair_slots: Vec<u32> = ids.iter().map(|&e| slot_of(e)).collect();
        queue.write_buffer(&self.pair_slots, 0, bytemuck::cast_slice(&pair_slots));
        if grouped {
            let mut row = vec![u32::MAX; self.experts as usize];
            for &e in &unique {
                row[e as usize] = slot_of(e);
            }
            queue.write_buffer(&self.table, 4 * u64::from(l * self.experts), bytemuck::cast_slice(&row));
        }
        self.held = Some(pinned);
        Ok(())
    }

    /// Runs a step's layers (`layers[l]`: its mixer and router, then its experts) on `device`: each layer's
    /// picks (the first `pairs` of `pick_ids`) read back and placed before its experts are recorded, which
    /// go with the next layer's mixer into one submission; the rest of the step is left in `enc`.
    pub fn run_layers(
        &mut self,
        (device, queue): (&wgpu::Device, &wgpu::Queue),
        enc: &mut wgpu::CommandEncoder,
        layers: &[(Vec<Dispatch>, Vec<Dispatch>)],
        (pick_ids, pairs, grouped): (&wgpu::Buffer, u32, bool),
        wait: &mut Duration,
    ) -> Result<()> {
        let bytes = 4 * u64::from(pairs);
        for (l, (head, experts)) in layers.iter().enumerate() {
            record(enc, head);
            enc.copy_buffer_to_buffer(pick_ids, 0, &self.picks, 0, bytes);
            let done = std::mem::replace(enc, device.create_command_encoder(&Default::default())).finish();
            let submitted = queue.submit([done]);
            let ids = readback(device, &self.picks, bytes, Some(submitted), Duration::ZERO, wait)?;
            self.place(queue, l as u32, &ids, grouped)?;
            record(enc, experts);
        }
        Ok(())
    }
}

/// The pool's stream options: loads on demand only.
fn streaming() -> StreamOptions {
    let mut stream = StreamOptions::default();
    stream.prefetch = false;
    stream
}
