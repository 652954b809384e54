//! qwen35moe's routed experts streamed through the runtime's tiers, and the per-layer step driver that runs
//! them: each layer's mixer and router submitted and its picks read back; a chunk's made resident in the
//! pool of GPU slots (loaded from the GGUF in place, through a store of the file's expert layout), or with
//! the CPU tier a one-token step's split between the pool's hits and the host's misses, computed on the CPU
//! while the GPU runs the hits, their sum joining the GPU's combine as one pick's down row; each pick's
//! slot written, then the layer's experts submitted with the next layer's mixer. The CPU tier reads its
//! records mapped from the page cache, or through the host tier (`ram_budget`) for files larger than the
//! host's memory. Where the host holds them twice over, every record is kept in the pool's **arena** (pinned
//! host memory, as the qwen3moe engine's): the pool's loads copy from there, and the CPU tier shares each
//! layer's misses with the GPU, which has the copy engine bring its share into stage slots of its own. No
//! router guesses or route-ahead yet: those are the qwen3moe engine's.

use std::path::Path;
use std::time::Duration;

use diskformer_expert_stream::{ArenaShare, Pinned, PoolConfig};
use diskformer_kernels::{BlockQuant, Context, Dispatch};
use diskformer_runtime::load::{chunk_bound, fill_arena, ingest_gguf, probe_arena};
use diskformer_runtime::tiers::{FinishRace, LayerSplit, sum_as_pick};
use diskformer_runtime::{
    CpuTier, CpuTierOptions, EngineStats, GpuBytes, HostTier, LoadProgress, PoolShape, Stats, StreamOptions,
    StreamSetup, Tiers, expert_pool,
};
use diskformer_store::{ExpertLayout, RecordReader, Store};
use wgpu::util::DeviceExt;

use super::MAX_CHUNK;
use super::config::Config;
use crate::engine::{SPIN_FOR_PICKS, readback};
use crate::graph::{ExpertKernels, finish_recorded, record};
use crate::{Error, Result};

/// A layer's dispatches in a step: its mixer through the router's picks, the experts' (the shared expert, then
/// the routed experts' projections), and the rest (the routed experts' and the σ-gated shared expert's
/// combine onto the residual stream, with the next layer's attention norm).
pub(super) struct LayerDispatches {
    pub mixer: Vec<Dispatch>,
    pub routed: Vec<Dispatch>,
    pub rest: Vec<Dispatch>,
}

/// What a step's layers read and write that the driver copies or writes between them.
pub(super) struct StepBuffers<'a> {
    /// The layer's picks, `[T · k]` u32, and their router weights.
    pub pick_ids: &'a wgpu::Buffer,
    pub pick_weights: &'a wgpu::Buffer,
    /// The experts' input (the FFN's normed state), `[T, hidden]`.
    pub normed: &'a wgpu::Buffer,
    /// The routed experts' down rows, one a pair, `[T · k, hidden]`.
    pub expert_out: &'a wgpu::Buffer,
    /// Where each layer's picks are copied for the routing recorder (`[layers, T · k]` u32), if one runs.
    pub recorded: Option<&'a wgpu::Buffer>,
}

/// The tiers a qwen35moe model's routed experts stream through, and what its expert kernels read of them.
pub(super) struct StreamedExperts {
    pub tiers: Tiers,
    /// The driver's counters (the CPU tier's time among them).
    pub stats: EngineStats,
    /// Per layer gate, up and down: each its type and where it starts in its plane's slot.
    pub parts: Vec<[(BlockQuant, u64); 3]>,
    /// The slot of each (token, pick) pair of the layer running, `[MAX_CHUNK · k]` u32 ([`ABSENT_SLOT`] for
    /// a pick the CPU computes), written once the tiers hold the layer's picks.
    ///
    /// [`ABSENT_SLOT`]: diskformer_runtime::tiers::ABSENT_SLOT
    pub pair_slots: wgpu::Buffer,
    /// `[layers · experts]` u32: the slot of each expert a chunk's layer picked (what the grouped GEMMs'
    /// `expert_groups` maps picks through); other entries stale.
    pub table: wgpu::Buffer,
    /// The picks read back (a chunk's), or a CPU layer's picks, weights and normed state.
    readback: wgpu::Buffer,
    /// The layer running's records, pinned until the GPU has run its experts.
    held: Option<Pinned>,
    /// Tokens a chunk may have: its layer's picks must fit in the pool at once.
    pub max_chunk: u32,
    /// Device bytes of the staging rings the pool's loads go through.
    pub staging: u64,
    /// Experts a layer, top-k, and the model's width.
    shape: (u32, u32, u32),
}

impl StreamedExperts {
    /// The store of `gguf`'s expert records in `store_dir` (ingested there first where missing or stale,
    /// the experts left in the GGUF) and the records' layout.
    pub fn store(
        gguf: &Path,
        store_dir: &Path,
        progress: &mut dyn FnMut(LoadProgress),
    ) -> Result<(Store, ExpertLayout)> {
        ingest_gguf(gguf, store_dir, false, progress)?;
        let store = Store::open(store_dir)?;
        let layout = store.layout().experts.clone().ok_or_else(|| Error::BadTensor {
            name: "blk.0.ffn_gate_exps.weight".into(),
            what: "the file holds no routed experts".into(),
        })?;
        Ok((store, layout))
    }

    /// The readers' setup for `store` (the CPU tier's as `cpu` asks, every record checked where it is read
    /// with `check_reads`, the arena as `host_arena` asks), its record reader, the device bytes the staging
    /// rings take, and the pool's stream options it was resolved with ([`StreamedExperts::open`] takes all
    /// four).
    pub fn setup(
        store: &Store,
        layout: &ExpertLayout,
        cpu: &CpuTierOptions,
        c: &Config,
        (check_reads, host_arena): (bool, Option<bool>),
    ) -> Result<(StreamSetup, RecordReader, u64, StreamOptions)> {
        if cpu.arena_over_bus {
            return Err(Error::BadOption {
                option: "arena_over_bus",
                what: "qwen35moe's expert kernels read device slots only (the arena's picks are copied into \
                       stage slots); leave it off"
                    .into(),
            });
        }
        let mut stream = streaming(check_reads);
        stream.host_arena = host_arena;
        let (setup, reader) = StreamSetup::resolve(store, layout, &stream, cpu, c.top_k)?;
        let staging = setup.staging_bytes(stream.upload, layout.record_bytes, prefetch_threads());
        Ok((setup, reader, staging, stream))
    }

    /// A pool of `slots` records of `layout` read by `reader` on `ctx`, with its arena as `arena` plans it
    /// (filled here, reporting to `progress`), the CPU tier over `store` where `setup` says (as `cpu` asks),
    /// and the buffers the step driver writes for chunks of up to `max_chunk` tokens (no more than the
    /// pool's cache holds a layer's picks of).
    pub fn open(
        ctx: &Context,
        (store, layout): (&Store, &ExpertLayout),
        (setup, reader, staging, stream): (StreamSetup, RecordReader, u64, StreamOptions),
        (cpu, c): (&CpuTierOptions, &Config),
        (slots, arena, max_chunk): (usize, ArenaPlan, u32),
        progress: &mut dyn FnMut(LoadProgress),
    ) -> Result<StreamedExperts> {
        let parts = match ExpertKernels::of(layout)? {
            ExpertKernels::Blocks(parts) => parts,
            // The store keeps planes for qwen3moe files alone (`diskformer_store::PLANAR_ARCHITECTURE`).
            ExpertKernels::Q8 | ExpertKernels::Q4 => {
                let what = "is stored as planes, which qwen35moe's expert kernels do not read; ingest the \
                            GGUF into a new store";
                return Err(Error::BadTensor {
                    name: "blk.0.ffn_gate_exps.weight".into(),
                    what: what.into(),
                });
            }
        };
        let shape = PoolShape {
            slots,
            layers: c.layers,
            experts: c.experts,
            top_k: c.top_k,
            prefetch_threads: prefetch_threads(),
            speculate: false,
            arena: arena.on,
            stage_slots: arena.stage_slots,
        };
        let (pool, handoff) = expert_pool(ctx, layout, reader, &setup, &stream, shape)?;
        if arena.on {
            fill_arena(&pool, c.layers, c.experts, progress)?;
        }
        // The host tier (records read with O_DIRECT into a budget of host memory) where `ram_budget` asks
        // for it, or the records exceed the host's memory.
        let host = setup.ram_budget.zip(handoff).map(|(budget, handoff)| HostTier {
            budget,
            min_records: c.top_k as usize,
            readers: setup.readers,
            handoff,
        });
        let tier = setup.cpu_experts.then(|| {
            CpuTier::open(store, layout, cpu.threads, cpu.admission, cpu.math, host, setup.checks.clone())
        });
        let mut tier = tier.transpose()?;
        // With stage slots, the tier shares its misses with the GPU taking them from the arena, in
        // proportion to the bus's time a record (measured here, before anything is on the device) and its
        // own, or as asked.
        if let Some(tier) = tier.as_mut().filter(|_| arena.stage_slots > 0) {
            tier.share_with_arena(match cpu.arena_share {
                Some(fraction) => ArenaShare::fixed(fraction),
                None => ArenaShare::new(probe_arena(&pool)?),
            });
        }
        debug_assert!(max_chunk <= chunk_limit(slots - arena.stage_slots, c), "a layer's picks fit the pool");
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
        let readback = pairs.max(4 * u64::from(2 * c.top_k + c.hidden));
        let table = vec![u32::MAX; (c.layers * c.experts) as usize];
        Ok(StreamedExperts {
            tiers: Tiers::new(pool, tier, setup, shape, &stream),
            stats: EngineStats::default(),
            parts,
            pair_slots: buffer("pair slots", pairs, storage),
            table: device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("expert slot table"),
                contents: bytemuck::cast_slice(&table),
                usage: storage,
            }),
            readback: buffer(
                "picks readback",
                readback,
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            ),
            held: None,
            max_chunk,
            staging,
            shape: (c.experts, c.top_k, c.hidden),
        })
    }

    /// The tiers' counters with the driver's, and `gpu` (the pool's and the staging rings' bytes filled in).
    pub fn stats(&self, gpu: GpuBytes) -> Stats {
        let pool = self.tiers.pool.backend().pool().device_bytes();
        self.tiers.stats(&self.stats, GpuBytes { pool, staging: self.staging, ..gpu })
    }

    /// Lets the layer that ran last go (the GPU has finished its experts).
    pub fn release_held(&mut self) {
        if let Some(pinned) = self.held.take() {
            self.tiers.pool.release(pinned);
        }
    }

    /// Runs a step's `layers` of `pairs` (token, pick) pairs (grouped on the GPU with `grouped`) on `device`:
    /// each layer's picks read back, and the routed experts recorded once the tiers hold them (a one-token
    /// step's misses computed on the CPU meanwhile, with the tier, while this thread records and finishes
    /// what follows), then the rest of the layer, which goes with the next layer's mixer into one submission;
    /// the rest of the step is left in `enc`.
    pub fn run_layers(
        &mut self,
        (device, queue): (&wgpu::Device, &wgpu::Queue),
        enc: &mut wgpu::CommandEncoder,
        layers: &[LayerDispatches],
        b: &StepBuffers<'_>,
        (pairs, grouped): (u32, bool),
        wait: &mut Duration,
    ) -> Result<()> {
        let (experts, k, _) = self.shape;
        let on_cpu = pairs == k && self.tiers.cpu.is_some();
        if let Some(tier) = self.tiers.cpu.as_mut().filter(|_| on_cpu) {
            tier.next_token();
        }
        let head = LayerHead { b, ids_bytes: 4 * u64::from(pairs), on_cpu, shape: self.shape };
        // The next layer's mixer and copies, recorded and finished already (while the host computed this
        // one's misses).
        let mut next_head: Option<wgpu::CommandBuffer> = None;
        for (l, layer) in layers.iter().enumerate() {
            let next = layers.get(l + 1).map(|next| (&next.mixer[..], l as u32 + 1));
            let l = l as u32;
            let done = match next_head.take() {
                Some(done) => done,
                None => {
                    head.record(enc, &layer.mixer, l, &self.readback);
                    finish_recorded(device, enc)
                }
            };
            let submitted = queue.submit([done]);
            let read =
                readback(device, &self.readback, head.read_bytes(), Some(submitted), SPIN_FOR_PICKS, wait)?;
            // The GPU has run the layer before: its records may go.
            self.release_held();
            let picks = &read[..pairs as usize];
            if on_cpu {
                match self.split_layer((device, queue), enc, l, &read, (layer, next), &head)? {
                    Joined::Rest(Some(finished)) => {
                        next_head = Some(finished);
                        continue;
                    }
                    Joined::Rest(None) => continue,
                    Joined::NoMisses => {}
                }
            } else {
                let (pinned, slots) = self.tiers.ensure_chunk(l, picks)?;
                self.held = Some(pinned);
                queue.write_buffer(&self.pair_slots, 0, bytemuck::cast_slice(&slots));
                if grouped {
                    let mut row = vec![u32::MAX; experts as usize];
                    picks.iter().zip(&slots).for_each(|(&e, &slot)| row[e as usize] = slot);
                    queue.write_buffer(&self.table, 4 * u64::from(l * experts), bytemuck::cast_slice(&row));
                }
                record(enc, &layer.routed);
            }
            record(enc, &layer.rest);
        }
        Ok(())
    }

    /// A one-token layer `l` with the CPU tier (`read`: its `k` picks, their weights and the normed state):
    /// the hits pinned and their slots written, the GPU's share of the misses copied from the arena into its
    /// stage slots (where the tier shares them); where the host computes misses, meanwhile the layer's routed
    /// experts recorded and submitted for the hits, then the rest of the layer and the next one's mixer and
    /// copies (`next`, with its index) recorded into `enc` and finished (most of wgpu's encoding cost); the
    /// host's sum written as its first pick's down row, weighted 1 (its other picks 0), which the combine
    /// adds with the GPU's picks. Without misses for the host, the routed experts recorded into `enc`.
    fn split_layer(
        &mut self,
        (device, queue): (&wgpu::Device, &wgpu::Queue),
        enc: &mut wgpu::CommandEncoder,
        l: u32,
        read: &[u32],
        (layer, next): (&LayerDispatches, Option<(&[Dispatch], u32)>),
        head: &LayerHead<'_>,
    ) -> Result<Joined> {
        let (_, k, hidden) = self.shape;
        let (k, hidden) = (k as usize, hidden as usize);
        let b = head.b;
        let split = self.tiers.split_layer(l, &read[..k], &mut self.stats)?;
        let race = FinishRace::new(&mut self.tiers, &split);
        let LayerSplit { pinned, slots, staged, cpu_picks, cpu_experts, .. } = split;
        self.held = Some(pinned);
        queue.write_buffer(&self.pair_slots, 0, bytemuck::cast_slice(&slots));
        // The GPU's share of the misses, before the experts read it.
        self.tiers.record_stage_copies(enc, &staged)?;
        let floats = |r: &[u32]| r.iter().map(|&b| f32::from_bits(b)).collect::<Vec<f32>>();
        let mut weights = floats(&read[k..2 * k]);
        let cpu_weights: Vec<f32> = cpu_picks.iter().map(|&i| weights[i]).collect();
        let Some(first) = sum_as_pick(&cpu_picks, &mut weights) else {
            record(enc, &layer.routed);
            return Ok(Joined::NoMisses);
        };
        let xn = floats(&read[2 * k..2 * k + hidden]);
        queue.write_buffer(b.pick_weights, 0, bytemuck::cast_slice(&weights));
        let readback = &self.readback;
        let meanwhile = || {
            record(enc, &layer.routed);
            let hits = finish_recorded(device, enc);
            queue.submit([hits]);
            race.submitted(queue);
            // The sum's write lands before the submission these go in, whenever they are recorded.
            record(enc, &layer.rest);
            next.map(|(mixer, next_l)| {
                head.record(enc, mixer, next_l, readback);
                finish_recorded(device, enc)
            })
        };
        let cpu = (&cpu_experts[..], &cpu_weights[..], &xn[..]);
        let (sum, next_head) =
            self.tiers.compute_misses_while(l, cpu.0, cpu.1, cpu.2, &mut self.stats, meanwhile)?;
        race.settle(device, &mut self.tiers)?;
        queue.write_buffer(b.expert_out, 4 * (first * hidden) as u64, bytemuck::cast_slice(&sum));
        Ok(Joined::Rest(next_head))
    }
}

/// What [`StreamedExperts::split_layer`] left to record.
enum Joined {
    /// The host had no misses: the routed experts are recorded, the rest of the layer is not.
    NoMisses,
    /// The rest of the layer is recorded, and the next layer's head finished where there is one.
    Rest(Option<wgpu::CommandBuffer>),
}

/// How a step records a layer's head: its mixer through the router, then the copies of what the host
/// reads back (the picks, and for the CPU tier their weights and the normed state) and of the picks for
/// the routing recorder.
struct LayerHead<'a> {
    b: &'a StepBuffers<'a>,
    /// Bytes of a layer's picks.
    ids_bytes: u64,
    on_cpu: bool,
    /// Experts a layer, top-k, and the model's width.
    shape: (u32, u32, u32),
}

impl LayerHead<'_> {
    /// Bytes the host reads back after a layer's head.
    fn read_bytes(&self) -> u64 {
        let (_, k, hidden) = self.shape;
        if self.on_cpu { 4 * u64::from(2 * k + hidden) } else { self.ids_bytes }
    }

    /// Records layer `l`'s `mixer` into `enc`, then the copies after it (into `readback`, for the host).
    fn record(&self, enc: &mut wgpu::CommandEncoder, mixer: &[Dispatch], l: u32, readback: &wgpu::Buffer) {
        let (b, ids_bytes) = (self.b, self.ids_bytes);
        record(enc, mixer);
        enc.copy_buffer_to_buffer(b.pick_ids, 0, readback, 0, ids_bytes);
        if let Some(recorded) = b.recorded {
            enc.copy_buffer_to_buffer(b.pick_ids, 0, recorded, u64::from(l) * ids_bytes, ids_bytes);
        }
        if self.on_cpu {
            let (_, k, hidden) = self.shape;
            let weights_at = 4 * u64::from(k);
            enc.copy_buffer_to_buffer(b.pick_weights, 0, readback, weights_at, weights_at);
            enc.copy_buffer_to_buffer(b.normed, 0, readback, 2 * weights_at, 4 * u64::from(hidden));
        }
    }
}

/// Whether the pool keeps every record in host memory too (its arena), and how many of its device slots are
/// stage slots: where the CPU tier's share of a layer's misses for the GPU is copied from the arena before the
/// layer's experts read it (the pool's cache has the rest).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct ArenaPlan {
    pub on: bool,
    pub stage_slots: usize,
}

impl ArenaPlan {
    /// The arena of a pool of `slots` records (`wanted`: what
    /// [`arena_wanted`](diskformer_runtime::arena_wanted) said of the records): where the pool lacks some
    /// record; top-k stage slots where the CPU tier runs (`cpu_experts`) and shares its misses (`cpu`'s share
    /// not fixed at 0) and the pool keeps at least twice top-k slots besides.
    pub fn new(
        wanted: bool,
        (cpu_experts, cpu): (bool, &CpuTierOptions),
        c: &Config,
        slots: usize,
    ) -> ArenaPlan {
        let on = wanted && slots < (c.layers * c.experts) as usize;
        let k = c.top_k as usize;
        let shares = on && cpu_experts && cpu.arena_share != Some(0.0) && slots >= 3 * k;
        ArenaPlan { on, stage_slots: if shares { k } else { 0 } }
    }
}

/// The most tokens a chunk may have while the experts stream through `slots` slots: the driver lets a
/// layer's records go before it pins the next layer's (the GPU has run it once the next one's picks are read
/// back), so a pool of one layer's experts holds any chunk's union, and each layer's experts are read once a
/// chunk; a smaller pool bounds the chunks by `slots / top_k`
/// ([`chunk_bound`](diskformer_runtime::load::chunk_bound), which asks two layers' experts of the qwen3moe
/// engine, whose chunks pin the next layer before they let the last one go).
pub(super) fn chunk_limit(slots: usize, c: &Config) -> u32 {
    match slots >= c.experts as usize {
        true => MAX_CHUNK,
        false => chunk_bound(slots, c.experts, c.top_k).clamp(1, MAX_CHUNK),
    }
}

/// The pool's stream options: no guesses from the routers (a chunk's next layer is still queued where the
/// pool holds two layers' experts, and the CPU tier's admissions load in the background), records checked
/// where they are read with `check_reads`, a chunk's records copied from the arena (where there is one) into
/// device slots, which are all the expert kernels read.
fn streaming(check_reads: bool) -> StreamOptions {
    let mut stream = StreamOptions::default();
    stream.prefetch = false;
    stream.check_reads = check_reads;
    stream.chunk_arena_copies = true;
    stream
}

/// The pool's background loads: the CPU tier's admissions and a chunk's next layer.
fn prefetch_threads() -> usize {
    PoolConfig::new(1, 1, 1).max_prefetch_in_flight
}
