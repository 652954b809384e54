//! The engine: loads a store onto the GPU (dense weights, KV cache, scratch, expert pool) and runs the
//! forward pass. While experts stream: one-token steps queue layers ahead of the host's checks of their
//! picks, routing through a GPU table of what the pool holds and running a layer again where `ensure` had
//! to load (route-ahead); with prefetch on, and for chunks, one readback of the picks per layer, `ensure`
//! of their slots, and prefetch guesses for the next layers. When every expert fits: all loaded at start,
//! a token's picks become slots on the GPU, with no readback until the logits, each step's commands are
//! recorded while the GPU runs the step before, and a greedy or sampled step queues the next on the GPU's
//! own pick (run-ahead).
//!
//! Loading is in [`open`]; each step driver is a module of its own: [`resident`] (every expert on the GPU),
//! [`route_ahead`] (one-token steps while experts stream) and [`per_layer`] (chunks while they stream, and
//! one-token steps with prefetch or the CPU tier). [`Engine::run`] picks one a step.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use diskformer_bpe::Tokenizer;
use diskformer_expert_stream::Stats as PoolStats;
use diskformer_kernels::{Context, Kernels, PENALTY_MAX_N, SampleStep, cpu};
use diskformer_store::ReaderProbe;

use crate::graph::{Bindings, ExpertKernels, Graph, KvCache, Reach, Scratch};
use crate::unit_stock::{UnitBuffers, UnitStock};
use crate::weights::Weights;
use crate::{Config, Error, Result, Sampler, SamplingOptions};
use diskformer_runtime::{EngineStats, GpuBytes, Tiers};
use diskformer_runtime::{ForcedRoutes, RouteRecorder};

mod cpu_window;
mod open;
mod options;
mod per_layer;
mod resident;
mod route_ahead;
mod split;

pub use diskformer_runtime::load::{FALLBACK_GPU_BUDGET, LoadProgress, auto_gpu_budget, default_store_dir};
pub use diskformer_runtime::records_exceed_memory;
pub use options::{
    CpuTierOptions, EngineOptions, KernelOptions, READ_SPLIT_CHECKED, READ_SPLIT_DIRECT, READ_SPLIT_IN_GGUF,
    READ_SPLIT_PAGE_CACHE, ROUTE_AHEAD_DIRECT, ROUTE_AHEAD_PAGE_CACHE, StreamOptions,
};
pub(crate) use per_layer::SPIN_FOR_PICKS;
use resident::RunAhead;

/// What the head of a step returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Want {
    /// Nothing (a prefill chunk that is not the last).
    Nothing,
    /// The greedy token (argmax on the GPU, 4 bytes read back).
    Argmax,
    /// A sampled token (drawn on the GPU with the engine's `draw`, 4 bytes read back), with the penalties
    /// applied first when `true`.
    Sample(bool),
    /// The last token's logits.
    Logits,
}

impl Want {
    /// Whether the GPU picks the token (so a step can be queued on it).
    fn picks(self) -> bool {
        matches!(self, Want::Argmax | Want::Sample(_))
    }
}

/// What a step returned.
#[derive(Debug)]
pub(crate) enum Output {
    Nothing,
    /// The GPU's pick (greedy or sampled).
    Pick(u32),
    Logits(Vec<f32>),
}

/// A loaded Qwen3-MoE model: GPU weights, KV cache, expert pool, tokenizer.
pub struct Engine {
    /// The GPU budget it was sized for (the option's, or [`auto_gpu_budget`]'s).
    gpu_budget: u64,
    config: Config,
    tokenizer: Arc<Tokenizer>,
    vocab: u32,
    ctx: Context,
    kernels: Kernels,
    weights: Weights,
    kv: KvCache,
    /// Shared with the step drivers while they also borrow the engine mutably.
    scratch: Arc<Scratch>,
    /// The GPU pool and the CPU tier, the slots a layer holds, what the stream's setup chose.
    tiers: Tiers,
    /// Shared with the route-ahead unit stock's thread.
    graphs: HashMap<u32, Arc<Graph>>,
    /// The chunk sizes (> 1) with a graph, least recently used first: at most [`CHUNK_GRAPHS`] are kept.
    chunk_graphs: VecDeque<u32>,
    /// `[layers · experts]` pool slots when every expert is resident and routing stays on the GPU (on the
    /// device for one-token steps, on the host for chunks).
    resident_table: Option<(wgpu::Buffer, Vec<u32>)>,
    /// With route-ahead: the `[layers · experts]` slots of what the pool holds (`tiers::ABSENT_SLOT` for
    /// the rest), on the device and as last written.
    route_table: Option<(wgpu::Buffer, Vec<u32>)>,
    /// Split residency ([`split`]): `resident_table` then maps each expert to a device slot or its arena
    /// slot, and this moves the hottest onto the device.
    split: Option<split::Split>,
    /// [`StreamOptions::route_ahead`] where it applies, else 0.
    route_ahead: u32,
    /// With route-ahead, once a one-token step ran: what its layer units copy between, and the stock of
    /// them a thread keeps recorded (`None` if that thread could not start: the host then records them all).
    route_units: Option<(UnitBuffers, Option<UnitStock<wgpu::CommandBuffer>>)>,
    lookahead: u32,
    max_batch: u32,
    /// Token ids whose keys and values the cache holds, position i at index i.
    cached: Vec<u32>,
    /// With every expert resident: the next one-token step's commands, recorded while the GPU ran the
    /// previous step, for the output it asked for and the argmax readback it copies to.
    next_step: Option<(Want, usize, wgpu::CommandBuffer)>,
    /// The step queued on the GPU's pick of the step before, with [`EngineOptions::run_ahead`].
    run_ahead: Option<RunAhead>,
    run_ahead_enabled: bool,
    /// A sampled step's draw, written before its submit ([`Engine::step_sampled`] sets it).
    draw: Option<SampleStep>,
    /// The draw of the sampled step queued behind this one, when one is to be queued.
    next_draw: Option<SampleStep>,
    /// Which expert kernels the store's records take.
    expert_kernels: ExpertKernels,
    /// [`KernelOptions::int8_prefill`].
    int8_prefill: bool,
    /// [`KernelOptions::tensor_prefill`] where the device has cooperative matrices.
    tensor_prefill: bool,
    /// [`KernelOptions::int8_decode`].
    int8_decode: bool,
    stats: EngineStats,
    gpu_bytes: GpuBytes,
    store_dir: PathBuf,
    /// [`EngineOptions::routing`] when forced.
    forced: Option<ForcedRoutes>,
    /// [`EngineOptions::record_routing`].
    recorder: Option<RouteRecorder>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.config)
            .field("adapter", &self.ctx.info.name)
            .field("store", &self.store_dir)
            .field("cached", &self.cached.len())
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// The model's hyper-parameters.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The model's tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    pub(crate) fn tokenizer_arc(&self) -> Arc<Tokenizer> {
        Arc::clone(&self.tokenizer)
    }

    /// Vocabulary rows of the embedding and lm head.
    pub fn vocab(&self) -> u32 {
        self.vocab
    }

    /// The GPU memory budget it was sized for, in bytes ([`EngineOptions::gpu_budget`], or
    /// [`auto_gpu_budget`]'s when that was `None`).
    pub fn gpu_budget(&self) -> u64 {
        self.gpu_budget
    }

    /// Whether it reads records with O_DIRECT ([`StreamOptions::direct_io`], or what its default chose).
    pub fn direct_io(&self) -> bool {
        self.tiers.direct_io()
    }

    /// KV-cache positions.
    pub fn max_context(&self) -> u32 {
        self.kv.ctx
    }

    /// Tokens whose keys and values the cache holds.
    pub fn cached_tokens(&self) -> &[u32] {
        &self.cached
    }

    /// Expert slots in the pool.
    pub fn pool_slots(&self) -> usize {
        self.tiers.slots()
    }

    /// Threads reading demand misses: [`StreamOptions::readers`], or the count the disk probe picked.
    pub fn readers(&self) -> usize {
        self.tiers.readers()
    }

    /// The disk probe's rates, when it chose [`Engine::readers`] (O_DIRECT and no count given).
    pub fn reader_probe(&self) -> Option<&ReaderProbe> {
        self.tiers.reader_probe()
    }

    /// Whether every expert is resident and routing stays on the GPU (no per-layer readback).
    pub fn routes_on_gpu(&self) -> bool {
        self.resident_table.is_some()
    }

    /// Layers a one-token step queues past the last one the host checked while experts stream:
    /// [`StreamOptions::route_ahead`] where it applies (streaming, prefetch off, the fused decode layer),
    /// else 0.
    pub fn route_ahead(&self) -> u32 {
        self.route_ahead
    }

    /// Pieces a demand miss's record is read in ([`StreamOptions::read_split`], its default resolved).
    pub fn read_split(&self) -> usize {
        self.tiers.read_split()
    }

    /// Most tokens one prefill chunk runs.
    pub fn max_batch(&self) -> u32 {
        self.max_batch
    }

    /// The GPU adapter, one line.
    pub fn adapter(&self) -> String {
        self.ctx.describe()
    }

    /// Whether the GPU is a software renderer on the CPU (lavapipe and the like): correct, and slow.
    pub fn software_adapter(&self) -> bool {
        self.ctx.is_software()
    }

    /// Forgets the cached tokens (the next prefill starts at position 0); the pool keeps its experts.
    pub fn reset(&mut self) {
        self.cached.clear();
        self.run_ahead = None;
    }

    /// Whether chunks run their Q8_0 GEMMs on tensor cores ([`KernelOptions::tensor_prefill`] asked for,
    /// and the device has cooperative matrices).
    pub fn tensor_prefill(&self) -> bool {
        self.tensor_prefill
    }

    /// Engine and pool counters since the load or [`reset_stats`](Self::reset_stats).
    pub fn stats(&self) -> crate::Stats {
        self.tiers.stats(&self.stats, self.gpu_bytes)
    }

    /// Zeroes the counters.
    pub fn reset_stats(&mut self) {
        self.stats = EngineStats::default();
        self.tiers.reset_stats();
    }

    /// The pool's own counters.
    pub fn pool_stats(&self) -> PoolStats {
        self.tiers.pool.stats()
    }

    /// Runs `ids` after the cached prefix they share with the cache (at least the last id runs), and returns
    /// the last token's logits. With `batched`, tokens run in chunks of up to [`max_batch`](Self::max_batch)
    /// (per layer the union of a chunk's experts ensured once); otherwise one at a time.
    ///
    /// # Errors
    /// [`Error::BadToken`], [`Error::ContextFull`], pool and GPU errors. On an error the cache is reset.
    pub fn prefill(&mut self, ids: &[u32], batched: bool) -> Result<Vec<f32>> {
        if ids.is_empty() {
            return Err(Error::BadOption {
                option: "prefill ids",
                what: "empty; give at least one token".into(),
            });
        }
        let common = self.cached.iter().zip(ids).take_while(|(a, b)| a == b).count().min(ids.len() - 1);
        self.cached.truncate(common);
        let rest = &ids[common..];
        self.check(rest)?;
        let started = Instant::now();
        let chunk = if batched { self.max_batch as usize } else { 1 };
        if chunk > 1 && self.resident_table.is_none() {
            // A chunk may need every slot: let prefetch loads still running from decode finish first.
            self.tiers.pool.drain();
        }
        let mut out = Output::Nothing;
        for (i, part) in rest.chunks(chunk).enumerate() {
            let last = (i + 1) * chunk >= rest.len();
            out = self.run(part, if last { Want::Logits } else { Want::Nothing })?;
        }
        self.stats.prefill_tokens += rest.len() as u64;
        self.stats.prefill_time += started.elapsed();
        match out {
            Output::Logits(l) => Ok(l),
            _ => unreachable!("the last chunk asks for logits"),
        }
    }

    /// Runs one token after the cache and returns its logits.
    ///
    /// # Errors
    /// As [`Engine::prefill`].
    pub fn step(&mut self, id: u32) -> Result<Vec<f32>> {
        match self.decode(id, Want::Logits)? {
            Output::Logits(l) => Ok(l),
            _ => unreachable!("asked for logits"),
        }
    }

    /// Runs one token and returns the greedy next token (argmax on the GPU, no logits read back). With
    /// every expert resident and [`EngineOptions::run_ahead`], the step after it is already queued on the
    /// GPU, on this pick, when it returns: a loop `next = step_greedy(next)` never leaves the GPU idle.
    ///
    /// # Errors
    /// As [`Engine::prefill`].
    pub fn step_greedy(&mut self, id: u32) -> Result<u32> {
        match self.decode(id, Want::Argmax)? {
            Output::Pick(t) => Ok(t),
            _ => unreachable!("asked for the argmax"),
        }
    }

    /// Runs one token and returns the next one drawn on the GPU as `sampler` draws
    /// ([`Sampler::gpu_step`]: repetition and presence penalties over the cached tokens and `id`, top-k,
    /// temperature, top-p, min-p; 4 bytes read back instead of the logits).
    /// With every expert resident and [`EngineOptions::run_ahead`], the step after it is already queued on
    /// the GPU, on this draw, when it returns, as [`Engine::step_greedy`] does. Each call takes one uniform
    /// from the sampler (the queued step only peeks at the next), so a seed draws the same tokens with
    /// run-ahead or without, resident or streaming, whatever the caller runs between.
    ///
    /// # Errors
    /// [`Error::BadOption`] where [`Engine::samples_on_gpu`] says no; else as [`Engine::prefill`].
    pub fn step_sampled(&mut self, id: u32, sampler: &mut Sampler) -> Result<u32> {
        if !self.samples_on_gpu(sampler.options()) {
            let what = format!(
                "{:?} with a {}-token vocabulary needs the CPU sampler (Engine::step)",
                sampler.options(),
                self.vocab
            );
            return Err(Error::BadOption { option: "sampling", what });
        }
        // Checked before a uniform is taken, so that a refused step leaves the sampler as it was.
        self.check(&[id])?;
        let position = self.cached.len() as u32;
        // One uniform per step; the step queued behind it only peeks at the next (a queued step runs only
        // with the draw its position then takes).
        self.draw = sampler.gpu_step();
        self.next_draw = if self.queues_next(position) { sampler.peek_gpu_step() } else { None };
        let penalised = self.draw.is_some_and(|d| d.penalised());
        let out = self.decode(id, Want::Sample(penalised));
        (self.draw, self.next_draw) = (None, None);
        match out? {
            Output::Pick(t) => Ok(t),
            _ => unreachable!("asked for a draw"),
        }
    }

    /// Whether [`Engine::step_sampled`] can draw with `opts` on this model: the options allow it
    /// ([`SamplingOptions::samples_on_gpu`]) and the vocabulary is short enough for the GPU sampler.
    pub fn samples_on_gpu(&self, opts: &SamplingOptions) -> bool {
        opts.samples_on_gpu() && self.graphs.get(&1).is_some_and(|g| g.sample.is_some())
    }

    /// Whether a one-token step at `position` that picks on the GPU queues the next step behind it (which
    /// the GPU embeds: a Q8_0 embedding).
    fn queues_next(&self, position: u32) -> bool {
        self.resident_table.is_some()
            && self.run_ahead_enabled
            && self.weights.gpu_embedding.is_some()
            && position + 1 < self.kv.ctx
    }

    /// One decode step, counted in the decode stats.
    fn decode(&mut self, id: u32, want: Want) -> Result<Output> {
        self.check(&[id])?;
        let started = Instant::now();
        let out = self.run(&[id], want)?;
        self.stats.decode_tokens += 1;
        self.stats.decode_time += started.elapsed();
        Ok(out)
    }

    fn check(&self, ids: &[u32]) -> Result<()> {
        if let Some(&id) = ids.iter().find(|&&id| id >= self.vocab) {
            return Err(Error::BadToken { id, vocab: self.vocab });
        }
        let needed = self.cached.len() + ids.len();
        if needed > self.kv.ctx as usize {
            return Err(Error::ContextFull { needed, ctx: self.kv.ctx });
        }
        Ok(())
    }

    fn graph(&mut self, t: u32) -> Result<&Graph> {
        if t > 1 {
            self.chunk_graphs.retain(|&c| c != t);
            self.chunk_graphs.push_back(t);
            if self.chunk_graphs.len() > CHUNK_GRAPHS
                && let Some(old) = self.chunk_graphs.pop_front()
            {
                self.graphs.remove(&old);
            }
        }
        if !self.graphs.contains_key(&t) {
            // One-token steps read misses from the arena too: split residency's, or the CPU tier's share
            // where it is not copied into stage slots first.
            let arena_steps = self.split.is_some()
                || (self.tiers.stage_slots() == 0
                    && self.tiers.cpu.as_ref().is_some_and(|tier| tier.arena_share().is_some()));
            let b = Bindings {
                kernels: &self.kernels,
                config: &self.config,
                weights: &self.weights,
                kv: &self.kv,
                scratch: &self.scratch,
                pool: self.tiers.pool.backend().pool(),
                arena: t > 1 || arena_steps,
                lookahead: if t == 1 { self.lookahead } else { 0 },
                resident_table: (self.resident_table.as_ref())
                    .or(self.route_table.as_ref().filter(|_| t == 1))
                    .map(|(b, _)| b),
                reach: match &self.resident_table {
                    _ if self.split.is_some() || (arena_steps && t == 1) => {
                        let device = self.tiers.slots() as u32;
                        Some(Reach::Split { device, arena_first: device })
                    }
                    table => table.as_ref().map(|(_, t)| Reach::Table(t)),
                },
                experts: &self.expert_kernels,
                int8_prefill: self.int8_prefill,
                tensor_prefill: self.tensor_prefill,
                int8_decode: self.int8_decode,
                embedding: self.weights.gpu_embedding.as_ref().map(|e| e.m()),
                forced: self.forced.is_some(),
            };
            let g = timed(&mut self.stats.graph_time, || Graph::build(&b, t))?;
            self.graphs.insert(t, Arc::new(g));
        }
        Ok(&self.graphs[&t])
    }

    /// One forward step of `ids` at the positions after the cache. On an error the cache is reset, since
    /// some layers may have stored keys for positions that never completed.
    fn run(&mut self, ids: &[u32], want: Want) -> Result<Output> {
        let started = Instant::now();
        let waited = self.stats.gpu_wait + self.stats.ensure_time;
        let result = self.run_inner(ids, want);
        // A step that failed between a layer's `ensure` and the next submit: unpin its slots.
        self.tiers.release_held();
        let waited_here = self.stats.gpu_wait + self.stats.ensure_time - waited;
        self.stats.host_time += started.elapsed().saturating_sub(waited_here);
        match &result {
            Ok(_) => self.cached.extend_from_slice(ids),
            Err(_) => {
                self.cached.clear();
                self.run_ahead = None;
            }
        }
        result
    }

    /// Writes a step's inputs (its forced picks, positions, draw, embedded rows) and runs it on its driver:
    /// [`resident`] (one-token steps and chunks with every expert on the GPU), [`route_ahead`] (one-token
    /// steps while experts stream, where it applies: `StreamOptions::route_ahead`) or [`per_layer`] (the rest).
    fn run_inner(&mut self, ids: &[u32], want: Want) -> Result<Output> {
        let t = ids.len() as u32;
        if let Some(forced) = &mut self.forced {
            let mask = forced.next_mask(t)?;
            self.ctx.queue.write_buffer(&self.scratch.route_mask, 0, bytemuck::cast_slice(&mask));
        }
        let queued = self.run_ahead.take();
        if self.resident_table.is_some() && t == 1 {
            return self.resident_step(ids[0], want, queued);
        }
        let start = self.cached.len() as u32;
        self.write_positions(start, t);
        self.write_sampling(want, start);
        if want == Want::Sample(true) {
            // The penalties read the step's token from token_ids (resident steps write it anyway).
            self.ctx.queue.write_buffer(&self.scratch.token_ids, 0, bytemuck::bytes_of(&ids[0]));
        }
        let queue = self.ctx.queue.clone();
        queue.write_buffer(&self.scratch.x, 0, bytemuck::cast_slice(&self.weights.embedding.rows(ids)));
        self.graph(t)?;
        if t == 1 && self.route_ahead > 0 {
            return self.route_ahead_step(want);
        }
        if self.graphs[&t].groups_on_gpu {
            return self.resident_chunk(t, want);
        }
        self.per_layer_step(t, want)
    }

    /// Writes a sampled step's draw for the next submit (nothing for other steps).
    fn write_draw(&self, want: Want, draw: Option<SampleStep>) {
        if let (Want::Sample(_), Some(d)) = (want, draw) {
            self.ctx.queue.write_buffer(&self.scratch.sample_step, 0, bytemuck::bytes_of(&d));
        }
    }

    /// What a sampled step the host submits itself at `position` reads besides its token: its draw and,
    /// penalised, the recent tokens (nothing for other steps).
    fn write_sampling(&self, want: Want, position: u32) {
        self.write_draw(want, self.draw);
        if want == Want::Sample(true) {
            self.write_recent(position);
        }
    }

    /// Writes the cached tokens of the `PENALTY_MAX_N - 1` positions before `position` into the ring of
    /// recent tokens, for a penalised step the host submits itself (the step writes its own token at
    /// `position`; a step queued behind it finds the ring as that one left it).
    fn write_recent(&self, position: u32) {
        let ring = PENALTY_MAX_N as usize;
        let mut recent = vec![0u32; ring];
        for q in (position as usize + 1).saturating_sub(ring)..position as usize {
            recent[q % ring] = self.cached[q];
        }
        self.ctx.queue.write_buffer(&self.scratch.recent, 0, bytemuck::cast_slice(&recent));
    }

    /// Writes the positions `start..start + t` and their RoPE table for the next submit.
    fn write_positions(&self, start: u32, t: u32) {
        let positions: Vec<u32> = (start..start + t).collect();
        let rope = cpu::rope_cos_sin(&positions, self.config.key_length as usize, self.config.rope_freq_base);
        self.ctx.queue.write_buffer(&self.scratch.positions, 0, bytemuck::cast_slice(&positions));
        self.ctx.queue.write_buffer(&self.scratch.rope, 0, bytemuck::cast_slice(&rope));
    }

    /// What the head's copies need to know of a step of `tokens` tokens.
    fn head_shape(&self, tokens: u32) -> HeadShape {
        HeadShape { hidden: self.config.embedding_length, vocab: self.vocab, tokens }
    }
}

/// Chunk graphs kept, the most recently used: a graph holds a uniform buffer and a bind group for each of its
/// dispatches, and a long chat prefills prompts of every length, so one kept for each length up to
/// `max_batch` would grow without a bound (rebuilding one costs its bind groups, little beside a chunk).
const CHUNK_GRAPHS: usize = 4;

/// What the head's copies need to know of a step.
#[derive(Clone, Copy)]
struct HeadShape {
    hidden: u32,
    vocab: u32,
    /// Tokens of the step (the head reads the last one's row).
    tokens: u32,
}

impl HeadShape {
    /// Bytes the step reads back for `want`: the argmax (4) or the logits; `None` for nothing.
    fn output_bytes(self, want: Want) -> Option<u64> {
        match want {
            Want::Nothing => None,
            Want::Argmax | Want::Sample(_) => Some(4),
            Want::Logits => Some(4 * u64::from(self.vocab)),
        }
    }
}

/// Records what a step returns after its last layer: for logits or a pick, the last token's normed row, the
/// head, the argmax or the draw, and the copy into the readback buffer (for a pick, argmax readback
/// `slot`); nothing for [`Want::Nothing`].
fn record_head(
    enc: &mut wgpu::CommandEncoder,
    graph: &Graph,
    s: &Scratch,
    want: Want,
    shape: HeadShape,
    slot: usize,
) {
    let Some(bytes) = shape.output_bytes(want) else { return };
    let h = 4 * u64::from(shape.hidden);
    enc.copy_buffer_to_buffer(s.xn(), (u64::from(shape.tokens) - 1) * h, &s.last_n, 0, h);
    let pick = match want {
        Want::Argmax => Some(&graph.argmax),
        // step_sampled checked the graph has it.
        Want::Sample(_) => graph.sample.as_ref(),
        _ => None,
    };
    {
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        graph.head.record(&mut pass);
        if want == Want::Sample(true) {
            graph.penalties.record(&mut pass);
        }
        if let Some(p) = pick {
            p.record(&mut pass);
        }
    }
    let (src, dst) = output_buffers(s, want, slot);
    enc.copy_buffer_to_buffer(src, 0, dst, 0, bytes);
}

/// Where the head's output is and where it is copied to be mapped.
fn output_buffers(s: &Scratch, want: Want, slot: usize) -> (&wgpu::Buffer, &wgpu::Buffer) {
    match want {
        Want::Argmax | Want::Sample(_) => (&s.argmax, &s.argmax_readback[slot]),
        _ => (&s.logits, &s.readback),
    }
}

/// Reads what [`record_head`] copied, once the GPU is done with `submission` (else with everything
/// submitted).
fn read_output(
    device: &wgpu::Device,
    s: &Scratch,
    want: Want,
    shape: HeadShape,
    slot: usize,
    submission: Option<wgpu::SubmissionIndex>,
    wait: &mut Duration,
) -> Result<Output> {
    let Some(bytes) = shape.output_bytes(want) else { return Ok(Output::Nothing) };
    let read = readback(device, output_buffers(s, want, slot).1, bytes, submission, Duration::ZERO, wait)?;
    Ok(match want {
        Want::Argmax | Want::Sample(_) => Output::Pick(read[0]),
        _ => Output::Logits(bytemuck::cast_slice(&read).to_vec()),
    })
}

/// Runs `f`, adding its time to `total`.
fn timed<T>(total: &mut Duration, f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = f();
    *total += started.elapsed();
    out
}

/// Maps the first `bytes` of `buffer`, waits for the GPU to finish `submission` (else everything
/// submitted; polling without blocking for up to `spin` first; adding the wait to `wait`), and copies them
/// out.
pub(crate) fn readback(
    device: &wgpu::Device,
    buffer: &wgpu::Buffer,
    bytes: u64,
    submission: Option<wgpu::SubmissionIndex>,
    spin: Duration,
    wait: &mut Duration,
) -> Result<Vec<u32>> {
    let started = Instant::now();
    let slice = buffer.slice(..bytes);
    let (tx, rx) = mpsc::channel();
    slice.map_async(wgpu::MapMode::Read, move |r| {
        let _ = tx.send(r);
    });
    let mapped = loop {
        if let Ok(mapped) = rx.try_recv() {
            break mapped;
        }
        if started.elapsed() >= spin {
            device
                .poll(wgpu::PollType::Wait { submission_index: submission, timeout: None })
                .map_err(|e| Error::Gpu(e.to_string()))?;
            break rx.recv().map_err(|_| Error::Gpu("the readback was dropped before it mapped".into()))?;
        }
        device.poll(wgpu::PollType::Poll).map_err(|e| Error::Gpu(e.to_string()))?;
    };
    mapped.map_err(|e| Error::Gpu(format!("readback did not map: {e}")))?;
    let out = bytemuck::pod_collect_to_vec(&slice.get_mapped_range().expect("mapped just now"));
    buffer.unmap();
    *wait += started.elapsed();
    Ok(out)
}
