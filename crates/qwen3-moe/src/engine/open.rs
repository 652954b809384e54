//! Loading: a GGUF ingested into a store (or a store opened), the budgets and the pool sized, the dense
//! weights uploaded, and with every expert fitting, all of them loaded.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;

use diskformer_bpe::Tokenizer;
use diskformer_cpu_kernels::Math;
use diskformer_expert_stream::{ArenaShare, GpuBudget, PoolConfig, RouteShape};
use diskformer_gguf::GgufModel;
use diskformer_kernels::{Context, Kernels};
use diskformer_runtime::load::{
    LoadProgress, MIN_DEFAULT_CONTEXT, auto_gpu_budget, chunk_bound, default_context, default_store_dir,
    fill_arena, ingest_gguf, load_every_expert, probe_arena,
};
use diskformer_runtime::{
    CpuTier, EngineStats, ForcedRoutes, GpuBytes, HostTier, PoolShape, RouteRecorder, StreamSetup, Tiers,
    arena_wanted, expert_pool,
};
use diskformer_store::Store;

use super::split::Split;
use super::{Engine, EngineOptions, ROUTE_AHEAD_DIRECT, ROUTE_AHEAD_PAGE_CACHE};
use crate::graph::{ExpertKernels, KvCache, Scratch, ScratchSizes, fused_decode};
use crate::weights::Weights;
use crate::{Config, Error, Result};

impl Engine {
    /// Loads the model of `gguf`, ingesting it into `store_dir` first when the store is missing, stale or
    /// incomplete (resuming an interrupted ingest). `store_dir` defaults to [`default_store_dir`]. The
    /// GGUF's architecture and hyperparameters are checked before anything is copied.
    ///
    /// # Errors
    /// [`Error::Gguf`] for a file that does not parse or a broken gguf-split set (`gguf` may be a set's
    /// first shard); [`Error::WrongArchitecture`], [`Error::MissingKeys`] or [`Error::BadValue`] for a model
    /// this engine does not run; [`Error::BadTensor`] for a tensor type it cannot run; any ingest error; then
    /// as [`Engine::open`].
    pub fn open_gguf(
        gguf: &Path,
        store_dir: Option<&Path>,
        opts: &EngineOptions,
        progress: &mut dyn FnMut(LoadProgress),
    ) -> Result<Engine> {
        let model = GgufModel::open(gguf)?;
        Config::from_metadata(model.metadata())?;
        // Every tensor's type, from the header (a split set's merged one): a file the kernels cannot run is
        // refused before it is copied.
        let header = model.header()?;
        check_types(&diskformer_store::Layout::plan(&header)?)?;
        let dir = store_dir.map_or_else(|| default_store_dir(gguf), Path::to_owned);
        ingest_gguf(gguf, &dir, opts.stream.copy_experts, progress)?;
        Self::open(&dir, opts, progress)
    }

    /// Loads the model of a complete store on the default GPU ([`Context::new`]).
    ///
    /// # Errors
    /// Store, config, tokenizer and tensor errors; [`Error::Kernels`] without a usable GPU;
    /// [`Error::Pool`] for a budget that cannot hold the dense part, the KV cache, scratch and `2 × top-k`
    /// records (with the numbers); [`Error::BadOption`] for an option out of range.
    pub fn open(
        store_dir: &Path,
        opts: &EngineOptions,
        progress: &mut dyn FnMut(LoadProgress),
    ) -> Result<Engine> {
        Self::open_on(Context::new()?, store_dir, opts, progress)
    }

    /// [`Engine::open`] on a given GPU context.
    ///
    /// # Errors
    /// As [`Engine::open`].
    pub fn open_on(
        ctx: Context,
        store_dir: &Path,
        opts: &EngineOptions,
        progress: &mut dyn FnMut(LoadProgress),
    ) -> Result<Engine> {
        let store = Store::open(store_dir)?;
        let config = Config::from_metadata(&store.header().metadata)?;
        let tokenizer = Arc::new(Tokenizer::from_header(store.header())?);
        check_types(store.layout())?;
        let experts = store.layout().experts.clone().ok_or_else(|| Error::BadTensor {
            name: "blk.0.ffn_gate_exps.weight".into(),
            what: "the store holds no routed experts".into(),
        })?;
        if config.value_length != config.key_length {
            return Err(Error::BadValue {
                key: "qwen3moe.attention.value_length".into(),
                what: format!(
                    "{} differs from key_length {}; the attention kernels need one head dim",
                    config.value_length, config.key_length
                ),
            });
        }
        if opts.stream.lookahead > 8 {
            return Err(Error::BadOption {
                option: "lookahead",
                what: format!("{} layers; allowed 0..=8", opts.stream.lookahead),
            });
        }
        let gpu_budget = opts.gpu_budget.unwrap_or_else(|| auto_gpu_budget(&ctx));
        if let Some(ctx_len) = opts.max_context
            && (ctx_len == 0 || ctx_len > config.context_length)
        {
            return Err(Error::BadOption {
                option: "max_context",
                what: format!(
                    "{ctx_len} positions; allowed 1..={} (the model's context length)",
                    config.context_length
                ),
            });
        }
        let top_k = config.expert_used_count;
        let (setup, reader) = StreamSetup::resolve(&store, &experts, &opts.stream, &opts.cpu, top_k)?;
        let (direct_io, readers, cpu_experts) = (setup.direct_io, setup.readers, setup.cpu_experts);
        let all = (config.block_count * config.expert_count) as usize;
        // The CPU tier runs without the routers' guesses: its admissions take the pool's background loads
        // (the configuration measured, BENCHMARKS.md).
        let mut lookahead = if opts.stream.prefetch && !cpu_experts {
            opts.stream.lookahead.min(config.block_count - 1)
        } else {
            0
        };
        let window = opts.stream.route_ahead.unwrap_or(if direct_io {
            ROUTE_AHEAD_DIRECT
        } else {
            ROUTE_AHEAD_PAGE_CACHE
        });
        // The CPU tier reads every layer's picks back: no route-ahead with it.
        let recording = opts.record_routing.is_some();
        // Route-ahead runs layers again from their router in the fused decode layer, on planes alone.
        let expert_kernels = ExpertKernels::of(&experts)?;
        let fused = fused_decode(&config)
            && !matches!(expert_kernels, ExpertKernels::Blocks(_))
            && dense_q8(store.layout());
        let mut route_ahead = if lookahead == 0 && fused && !cpu_experts && !recording { window } else { 0 };
        let shape = RouteShape {
            layers: config.block_count,
            experts: config.expert_count,
            top_k: config.expert_used_count,
        };
        // Both before anything is uploaded: a bad path fails the open at once.
        let forced = ForcedRoutes::open(&opts.routing, shape)?;
        let recorder = opts.record_routing.as_deref().map(|p| RouteRecorder::create(p, top_k)).transpose()?;
        let vocab = store.layout().dense_tensor("token_embd.weight").map_or(0, |t| t.dims[1] as u32);

        // Size everything but the pool, then the pool from what the budget leaves.
        let dense = Weights::device_bytes(&store, false);
        let probe_batch = opts.max_batch.clamp(1, 1024);
        // Each reader (and, with prefetch, each prefetch thread) keeps a ring of mapped staging buffers. They
        // may be device memory (resizable BAR), so they count against the budget.
        // The CPU tier admits misses into the pool through the same background loads as prefetch.
        let prefetch_threads = if opts.stream.prefetch || cpu_experts {
            PoolConfig::new(1, 1, 1).max_prefetch_in_flight
        } else {
            0
        };
        let staging = setup.staging_bytes(opts.stream.upload, experts.record_bytes, prefetch_threads);
        // The pool from what the budget leaves; while experts stream a chunk is at most slots / top-k
        // tokens, so the scratch is sized again for that chunk and the pool once more. `streams`: with the
        // buffers of prefetch guesses and route-ahead (else as every expert resident needs).
        let slots_for_dense = |batch: u32, streams: bool, dense: u64, ctx_len: u32| -> Result<usize> {
            let (lookahead, route_ahead) = if streams { (lookahead, route_ahead > 0) } else { (0, false) };
            let sizes = ScratchSizes {
                vocab,
                ctx: ctx_len,
                max_t: batch,
                lookahead,
                route_ahead,
                forced: forced.is_some(),
            };
            let scratch = Scratch::estimate(&config, sizes) + staging;
            let kv_cache = KvCache::bytes(&config, ctx_len);
            let budget = GpuBudget { budget: gpu_budget, dense, kv_cache, scratch };
            Ok(budget.expert_slots(experts.record_bytes, top_k)?.min(all))
        };
        // Resident routing also puts the embedding on the GPU (see `Weights`): all must fit with it.
        let with_embedding = Weights::device_bytes(&store, true);
        // The pool's slots and the chunk it is sized for with `c` positions: for the longest chunk, or where
        // that leaves less than every slot, again for the chunk a pool of that size bounds.
        let pool_for = |c: u32| -> Result<(usize, u32)> {
            let first = slots_for_dense(probe_batch, true, dense, c)?;
            let streamed_batch = probe_batch.min(chunk_bound(first, config.expert_count, top_k)).max(1);
            Ok(if first == all || streamed_batch == probe_batch {
                (first, probe_batch)
            } else {
                (slots_for_dense(streamed_batch, true, dense, c)?, streamed_batch)
            })
        };
        // Whether every expert fits with `c` positions, as the pool's sizing below decides it.
        let all_fit = |c: u32| {
            matches!(pool_for(c), Ok((slots, batch)) if slots == all
                && slots_for_dense(batch, false, with_embedding, c).ok() == Some(all))
        };
        // The context when none is given: room for thinking as the budget allows, but not at the cost of
        // every expert resident where they would be at the least default (resident decode is many times
        // faster than streaming), nor of opening at all: then the longest context that keeps them.
        let ctx_len = match opts.max_context {
            Some(ctx_len) => ctx_len,
            None => {
                let wanted = default_context(config.context_length, KvCache::bytes(&config, 1), gpu_budget);
                let least = MIN_DEFAULT_CONTEXT.min(config.context_length);
                let may_be_resident =
                    opts.gpu_routing && !recording && opts.pool_slots.is_none() && all_fit(least);
                let keeps = |c: u32| if may_be_resident { all_fit(c) } else { pool_for(c).is_ok() };
                // `default_context` gives at least `least`.
                if wanted == least || keeps(wanted) || !keeps(least) {
                    wanted
                } else {
                    let (mut lo, mut hi) = (least, wanted);
                    while hi - lo > 1 {
                        let mid = lo + (hi - lo) / 2;
                        if keeps(mid) { lo = mid } else { hi = mid }
                    }
                    lo
                }
            }
        };
        let kv_bytes = KvCache::bytes(&config, ctx_len);
        let (slots, sized_batch) = match opts.pool_slots {
            Some(s) if s < 2 * top_k as usize => {
                return Err(Error::BadOption {
                    option: "pool_slots",
                    what: format!("{s}; the pool needs at least 2 × top-k = {} slots", 2 * top_k),
                });
            }
            Some(s) => (s.min(all), probe_batch),
            None => pool_for(ctx_len)?,
        };
        let resident = opts.gpu_routing
            && !recording
            && slots == all
            && (opts.pool_slots.is_some()
                || slots_for_dense(sized_batch, false, with_embedding, ctx_len)? == all);
        let arena = !resident && slots < all && arena_wanted(opts.stream.host_arena, &ctx, &experts, &setup)?;
        // Split residency: the resident driver over the device's slots and the arena.
        let split =
            arena && opts.stream.split_residency.unwrap_or(!cpu_experts) && opts.gpu_routing && !recording;
        if resident || split {
            lookahead = 0;
            route_ahead = 0;
        }
        // The CPU tier's share of the misses for the GPU, copied from the arena into slots of their own.
        let stage_slots = if arena
            && cpu_experts
            && !split
            && !opts.cpu.arena_over_bus
            && opts.cpu.arena_share != Some(0.0)
            && slots >= 3 * top_k as usize
        {
            top_k as usize
        } else {
            0
        };
        let pool_bound = if resident || split {
            u32::MAX
        } else {
            chunk_bound(slots - stage_slots, config.expert_count, top_k)
        };
        let max_batch = sized_batch.min(pool_bound).min(ctx_len).max(1);

        let device = ctx.device.clone();
        let weights = Weights::upload(&store, &config, &device, &ctx.queue, resident, &mut |done, total| {
            progress(LoadProgress::Upload { done, total })
        })?;
        if weights.head.rows() != vocab {
            return Err(Error::BadTensor {
                name: "output.weight".into(),
                what: format!("has {} rows; the embedding has {vocab}", weights.head.rows()),
            });
        }
        let kv = KvCache::new(&device, &config, ctx_len);
        let sizes = ScratchSizes {
            vocab,
            ctx: ctx_len,
            max_t: max_batch,
            lookahead,
            route_ahead: route_ahead > 0,
            forced: forced.is_some(),
        };
        let scratch = Arc::new(Scratch::new(&device, &config, sizes));
        let shape = PoolShape {
            slots,
            layers: config.block_count,
            experts: config.expert_count,
            top_k,
            prefetch_threads,
            // route_ahead is 0 when resident: nothing streams.
            speculate: route_ahead > 0,
            arena,
            stage_slots,
        };
        let (pool, handoff) = expert_pool(&ctx, &experts, reader, &setup, &opts.stream, shape)?;
        let gpu_bytes = GpuBytes {
            dense: weights.bytes,
            pool: pool.backend().pool().device_bytes(),
            kv: kv_bytes,
            scratch: scratch.bytes(),
            staging,
        };
        if shape.arena {
            fill_arena(&pool, config.block_count, config.expert_count, progress)?;
        }
        let split = if split {
            let shape = (config.block_count, config.expert_count, top_k);
            Some(Split::new(&device, &ctx.queue, pool.backend().pool(), &scratch, shape)?)
        } else {
            None
        };
        // The slot table picks become slots through on the GPU: the split's, or every expert loaded.
        let table = match &split {
            Some(split) => Some((split.table().to_vec(), "split slots")),
            None if resident => {
                let table = load_every_expert(&pool, config.block_count, config.expert_count, progress)?;
                Some((table, "resident slots"))
            }
            None => None,
        };
        let resident_table = table.map(|(table, label)| {
            let bytes = 4 * table.len() as u64;
            let buffer = crate::weights::storage(&device, label, bytes, wgpu::BufferUsages::empty());
            ctx.queue.write_buffer(&buffer, 0, bytemuck::cast_slice(&table));
            (buffer, table)
        });
        let route_table = (route_ahead > 0).then(|| {
            let len = (config.block_count * config.expert_count) as usize;
            let buffer =
                crate::weights::storage(&device, "route table", 4 * len as u64, wgpu::BufferUsages::empty());
            // Written before each step from the pool (`sync_route_table`).
            (buffer, Vec::new())
        });
        let host = setup.ram_budget.zip(handoff).map(|(budget, handoff)| HostTier {
            budget,
            min_records: top_k as usize,
            readers,
            handoff,
        });
        let mut cpu_tier = (cpu_experts && !resident && split.is_none())
            .then(|| {
                let math = if opts.kernels.int8_decode { Some(Math::Q8) } else { opts.cpu.math };
                CpuTier::open(
                    &store,
                    &experts,
                    opts.cpu.threads,
                    opts.cpu.admission,
                    math,
                    host,
                    setup.checks.clone(),
                )
            })
            .transpose()?;
        // With the arena, the tier shares its misses with the GPU taking them from there, in proportion
        // to the bus's time a record (the copies' into device slots, measured here before anything is on
        // the device) and its own, or as asked.
        if let Some(tier) = cpu_tier.as_mut().filter(|_| shape.arena) {
            tier.share_with_arena(match opts.cpu.arena_share {
                Some(fraction) => ArenaShare::fixed(fraction),
                None => ArenaShare::new(probe_arena(&pool)?),
            });
        }
        let kernels = Kernels::new(&ctx);
        let kernels_coop = kernels.cooperative_matrix();
        let mut engine = Engine {
            gpu_budget,
            config,
            tokenizer,
            vocab,
            ctx,
            kernels,
            weights,
            kv,
            scratch,
            tiers: Tiers::new(pool, cpu_tier, setup, shape, &opts.stream),
            graphs: HashMap::new(),
            chunk_graphs: VecDeque::new(),
            resident_table,
            route_table,
            split,
            route_ahead,
            route_units: None,
            lookahead,
            max_batch,
            cached: Vec::new(),
            next_step: None,
            run_ahead: None,
            run_ahead_enabled: opts.run_ahead && forced.is_none() && !recording,
            draw: None,
            next_draw: None,
            expert_kernels,
            int8_prefill: opts.kernels.int8_prefill,
            tensor_prefill: opts.kernels.tensor_prefill && kernels_coop,
            int8_decode: opts.kernels.int8_decode,
            stats: EngineStats::default(),
            gpu_bytes,
            store_dir: store_dir.to_owned(),
            forced,
            recorder,
        };
        engine.graph(1)?;
        Ok(engine)
    }
}

/// Checks that the kernels multiply every matrix of `layout` (dense and experts), naming the first they
/// do not.
fn check_types(layout: &diskformer_store::Layout) -> Result<()> {
    crate::weights::check_dense_types(layout)?;
    layout.experts.as_ref().map_or(Ok(()), |x| ExpertKernels::of(x).map(|_| ()))
}

/// Whether every dense matrix of the store is Q8_0 planes (norms and routers are F32), as the fused decode
/// layer reads them; the token embedding may be of any type (the host embeds it).
fn dense_q8(layout: &diskformer_store::Layout) -> bool {
    layout
        .dense
        .iter()
        .filter(|t| t.name != "token_embd.weight" || layout.dense_tensor("output.weight").is_none())
        .all(|t| t.ty == "q8_0" || t.ty == "f32")
}
