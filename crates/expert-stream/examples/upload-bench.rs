//! This example shows how fast expert records reach the GPU pool, printing one JSON object:
//!
//! - `upload`: records already in RAM → pool slots from 1, 4 and 8 threads at once, by each method:
//!   `WriteBuffer` ([`GpuPool::upload_record`]: `queue.write_buffer` of the four regions, then a submit) and
//!   `StagingRing` ([`GpuPool::upload_staged`]: a per-thread ring of `--ring` mapped staging buffers, a copy
//!   per plane); GB/s of plane bytes, timed until the device has finished every copy.
//! - with `--store DIR` (each for both methods but `read`): `miss`, the latency of one miss (read one record with the store's reader, upload
//!   it, wait until the device has it) over random records; `read`, the raw read rate of the same reader
//!   from 1/4/8 threads; `stream`, an [`ExpertPool`] with 1/4/8 reader threads serving `ensure`s of
//!   `--top-k` random experts of a random layer, every one a miss.
//!
//! ```text
//! cargo run --release -p diskformer-expert-stream --example upload-bench
//! cargo run --release -p diskformer-expert-stream --example upload-bench -- --store qwen3-30b-a3b.store --direct
//! ```
//!
//! Without `--store` the records have Qwen3-30B-A3B's Q8_0 shape (`--hidden 2048 --ffn 768`: 5,013,504 bytes).
//! Reads of a store in the page cache measure memory, not the disk: pass `--direct` (O_DIRECT) for the disk.

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use clap::Parser;
use diskformer_expert_stream::{
    Backend, ExpertKey, ExpertPool, GpuBackend, GpuPool, PoolConfig, SeededRng, Slot, UploadMethod,
};
use diskformer_kernels::Context;
use diskformer_store::{ExpertLayout, RecordBuf, Store};
use serde_json::json;

#[derive(Parser, Debug)]
#[command(about = "Measure expert upload bandwidth and miss latency into the GPU pool (JSON out)")]
struct Args {
    /// Store directory (enables the miss, read and stream measurements and sets the record shape).
    #[arg(long)]
    store: Option<std::path::PathBuf>,
    /// Read with O_DIRECT (bypassing the page cache) where the file system allows it.
    #[arg(long)]
    direct: bool,
    /// Slots in the pool.
    #[arg(long, default_value_t = 256)]
    slots: usize,
    /// Thread counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,4,8")]
    threads: Vec<usize>,
    /// Records uploaded (or read) per measurement.
    #[arg(long, default_value_t = 512)]
    records: usize,
    /// Misses timed one by one.
    #[arg(long, default_value_t = 64)]
    misses: usize,
    /// Experts per `ensure` in the stream measurement.
    #[arg(long, default_value_t = 8)]
    top_k: u32,
    /// Staging buffers per thread for the staging-ring method.
    #[arg(long, default_value_t = 2)]
    ring: usize,
    /// Pieces a record is read and uploaded in (`GpuBackend::with_read_split`) in the miss measurement of
    /// the staging-ring method, one measurement each.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pieces: Vec<usize>,
    /// Model width, without `--store`.
    #[arg(long, default_value_t = 2048)]
    hidden: u64,
    /// Expert FFN width, without `--store`.
    #[arg(long, default_value_t = 768)]
    ffn: u64,
}

/// The crate's seeded generator, for record contents and key choice.
struct Rng(SeededRng);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(SeededRng::new(seed))
    }
    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// A Q8_0 record layout as the store plans it.
fn synthetic_layout(h: u64, f: u64) -> ExpertLayout {
    ExpertLayout::new(diskformer_gguf::TensorType::Q8_0, 48, 128, h, f)
}

fn wait(ctx: &Context) -> anyhow::Result<()> {
    ctx.device.poll(wgpu::PollType::wait_indefinitely()).context("device poll")?;
    Ok(())
}

fn gbps(bytes: u64, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e9
}

/// Records in RAM → pool from `threads` threads, each uploading its own records into its own slots.
fn upload(
    ctx: &Context,
    pool: &GpuPool,
    method: UploadMethod,
    threads: usize,
    records: usize,
) -> anyhow::Result<serde_json::Value> {
    let rb = pool.record_bytes();
    let slot_bytes = pool.device_bytes() / pool.slots() as u64;
    let mut rng = Rng::new(threads as u64);
    let data: Vec<Vec<u8>> = (0..threads).map(|_| (0..rb).map(|_| rng.next_u64() as u8).collect()).collect();
    let per_thread = records.div_ceil(threads);
    let run = || -> anyhow::Result<Duration> {
        let start = Instant::now();
        std::thread::scope(|s| -> anyhow::Result<()> {
            let handles: Vec<_> = data
                .iter()
                .enumerate()
                .map(|(t, rec)| {
                    s.spawn(move || -> anyhow::Result<()> {
                        let mut ring = match method {
                            UploadMethod::StagingRing(n) => Some(pool.staging_ring(n, 1)),
                            _ => None,
                        };
                        for i in 0..per_thread {
                            let slot = Slot(((t + i * threads) % pool.slots()) as u32);
                            match &mut ring {
                                Some(ring) => pool.upload_staged(slot, rec, ring),
                                None => pool.upload_record(slot, rec),
                            }
                            .map_err(|e| anyhow::anyhow!(e))?;
                        }
                        Ok(())
                    })
                })
                .collect();
            for h in handles {
                h.join().map_err(|_| anyhow::anyhow!("upload thread panicked"))??;
            }
            Ok(())
        })?;
        wait(ctx)?;
        Ok(start.elapsed())
    };
    run()?; // warm-up: first-touch of staging memory and the pool
    let t = run()?;
    let n = (per_thread * threads) as u64;
    Ok(json!({
        "method": format!("{method:?}"),
        "threads": threads,
        "records": n,
        "seconds": t.as_secs_f64(),
        "gb_per_s": gbps(n * slot_bytes, t),
    }))
}

fn percentiles(mut v: Vec<f64>) -> serde_json::Value {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    json!({ "mean": v.iter().sum::<f64>() / v.len() as f64, "p50": at(0.5), "p90": at(0.9), "max": at(1.0) })
}

fn random_key(rng: &mut Rng, layout: &ExpertLayout) -> ExpertKey {
    ExpertKey::new(
        rng.below(u64::from(layout.n_layers)) as u32,
        rng.below(u64::from(layout.n_experts)) as u32,
    )
}

/// One record at a time: read, upload, wait for the device (with the staging ring, `read` already uploads
/// the record piece by piece).
fn misses(ctx: &Context, backend: &GpuBackend, n: usize, pieces: usize) -> anyhow::Result<serde_json::Value> {
    let layout = backend.reader().layout().clone();
    let mut rng = Rng::new(42);
    let mut staging = backend.staging(false);
    let (mut read_us, mut upload_us, mut total_us) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let key = random_key(&mut rng, &layout);
        let t0 = Instant::now();
        let slot = Slot((i % backend.pool().slots()) as u32);
        backend.read(key, slot, &mut staging).map_err(|e| anyhow::anyhow!(e))?;
        let t1 = Instant::now();
        backend.upload(slot, &mut staging).map_err(|e| anyhow::anyhow!(e))?;
        wait(ctx)?;
        let t2 = Instant::now();
        read_us.push((t1 - t0).as_secs_f64() * 1e6);
        upload_us.push((t2 - t1).as_secs_f64() * 1e6);
        total_us.push((t2 - t0).as_secs_f64() * 1e6);
    }
    Ok(json!({
        "method": format!("{:?}", backend.method()),
        "pieces": pieces,
        "records": n,
        "read_us": percentiles(read_us),
        "upload_us": percentiles(upload_us),
        "total_us": percentiles(total_us),
    }))
}

/// Raw reads of random records from `threads` threads.
fn reads(backend: &GpuBackend, threads: usize, records: usize) -> anyhow::Result<serde_json::Value> {
    let layout = backend.reader().layout();
    let per_thread = records.div_ceil(threads);
    let start = Instant::now();
    std::thread::scope(|s| -> anyhow::Result<()> {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> anyhow::Result<()> {
                    let mut rng = Rng::new(1000 + t as u64);
                    let mut buf = RecordBuf::new(layout.record_bytes as usize);
                    for _ in 0..per_thread {
                        backend.reader().read(random_key(&mut rng, layout), &mut buf)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| anyhow::anyhow!("read thread panicked"))??;
        }
        Ok(())
    })?;
    let t = start.elapsed();
    let n = (per_thread * threads) as u64;
    Ok(json!({ "threads": threads, "records": n, "seconds": t.as_secs_f64(),
               "gb_per_s": gbps(n * layout.record_bytes, t) }))
}

/// The pool with `readers` reader threads: `ensure`s of `top_k` random experts, all misses.
fn stream(
    ctx: &Context,
    store: &Store,
    args: &Args,
    method: UploadMethod,
    readers: usize,
) -> anyhow::Result<serde_json::Value> {
    let layout = store.layout().experts.clone().context("the store has no experts")?;
    let gpu = GpuPool::new(ctx, &layout, args.slots)?;
    let backend = GpuBackend::new(gpu, store.record_reader(args.direct)?)?.with_method(method);
    let mut config = PoolConfig::new(args.slots, layout.n_layers, layout.n_experts);
    config.readers = readers;
    let pool = ExpertPool::new(backend, config)?;
    let mut rng = Rng::new(7 + readers as u64);
    let k = args.top_k.min(layout.n_experts);
    let calls = args.records.div_ceil(k as usize);
    let start = Instant::now();
    for _ in 0..calls {
        pool.clear();
        let layer = rng.below(u64::from(layout.n_layers)) as u32;
        let mut ids = Vec::with_capacity(k as usize);
        while ids.len() < k as usize {
            let e = rng.below(u64::from(layout.n_experts)) as u32;
            if !ids.contains(&e) {
                ids.push(e);
            }
        }
        let pinned = pool.ensure(layer, &ids)?;
        pool.release(pinned);
    }
    wait(ctx)?;
    let t = start.elapsed();
    let stats = pool.stats();
    Ok(json!({
        "method": format!("{method:?}"),
        "readers": readers,
        "records": stats.misses,
        "seconds": t.as_secs_f64(),
        "gb_per_s": gbps(stats.misses * layout.record_bytes, t),
        "ensure_ms_mean": t.as_secs_f64() * 1e3 / calls as f64,
    }))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    ensure!(args.slots > 0 && args.records > 0 && args.threads.iter().all(|&t| t > 0), "counts must be > 0");
    let ctx = Context::new()?;
    let store = args.store.as_ref().map(Store::open).transpose()?;
    let layout = match &store {
        Some(s) => s.layout().experts.clone().context("the store has no experts")?,
        None => synthetic_layout(args.hidden, args.ffn),
    };
    let gpu = GpuPool::new(&ctx, &layout, args.slots)?;

    let methods = [UploadMethod::WriteBuffer, UploadMethod::StagingRing(args.ring.max(1))];
    let mut out = json!({
        "device": ctx.describe(),
        "record_bytes": layout.record_bytes,
        "slots": args.slots,
        "pool_bytes": gpu.device_bytes(),
    });
    let mut uploads = Vec::new();
    for method in methods {
        for &t in &args.threads {
            uploads.push(upload(&ctx, &gpu, method, t, args.records)?);
        }
    }
    out["upload"] = uploads.into();

    if let Some(store) = &store {
        let backend = GpuBackend::new(gpu, store.record_reader(args.direct)?)?;
        out["direct"] = json!(backend.reader().is_direct());
        out["read"] =
            args.threads.iter().map(|&t| reads(&backend, t, args.records)).collect::<Result<_, _>>()?;
        let mut miss = Vec::new();
        let mut backend = Some(backend);
        for method in methods {
            let pieces = if method == UploadMethod::WriteBuffer { &[1][..] } else { &args.pieces };
            for &p in pieces {
                let b = backend.take().context("backend")?.with_method(method).with_read_split(p);
                miss.push(misses(&ctx, &b, args.misses, p)?);
                backend = Some(b);
            }
        }
        out["miss"] = miss.into();
        drop(backend);
        let mut streams = Vec::new();
        for method in methods {
            for &r in &args.threads {
                streams.push(stream(&ctx, store, &args, method, r)?);
            }
        }
        out["stream"] = streams.into();
    }
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}
