//! GPU test helpers: the shared device (or a loud skip), small qwen3moe-shaped stores with seeded random
//! experts, and reading a buffer back.

use std::path::Path;
use std::sync::OnceLock;

use diskformer_gguf::{GgufWriter, TensorType, Value};
use diskformer_kernels::Context;
use diskformer_store::{IngestOptions, Store, ingest};
#[allow(unused_imports)] // Not every test binary uses each.
pub use diskformer_testkit::{Rng, TempDir};

/// Set to 1 to skip the GPU tests when no adapter exists (they fail otherwise).
pub const SKIP_ENV: &str = "DISKFORMER_SKIP_GPU_TESTS";

/// The test binary's GPU, created once; `None` (after a loud message) only when skipping is asked for.
pub fn gpu() -> Option<&'static Context> {
    static GPU: OnceLock<Option<Context>> = OnceLock::new();
    GPU.get_or_init(|| match Context::new() {
        Ok(ctx) => {
            eprintln!("GPU tests on {}", ctx.describe());
            Some(ctx)
        }
        Err(e) if std::env::var(SKIP_ENV).is_ok_and(|v| v == "1") => {
            eprintln!("SKIPPING GPU TESTS ({SKIP_ENV}=1): {e}");
            None
        }
        Err(e) => {
            panic!("no GPU for the expert pool tests: {e}; install lavapipe or set {SKIP_ENV}=1 to skip")
        }
    })
    .as_ref()
}

/// Returns the GPU or skips the calling test.
#[macro_export]
macro_rules! gpu_or_skip {
    () => {
        match common::gpu::gpu() {
            Some(g) => g,
            None => return,
        }
    };
}

/// Writes a qwen3moe-shaped GGUF (`layers` layers of `experts` Q8_0 experts, hidden `h`, expert FFN `f`, a
/// router and norms, experts in GGUF order down, gate, up) and ingests it into a store under `dir`.
pub fn store(dir: &Path, layers: u32, experts: u64, h: u64, f: u64, seed: u64) -> Store {
    let mut rng = Rng::new(seed);
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", Value::String("qwen3moe".into())).unwrap();
    w.add_metadata("qwen3moe.block_count", Value::U32(layers)).unwrap();
    w.add_tensor("token_embd.weight", TensorType::Q8_0, &[h, 8], rng.blocks(TensorType::Q8_0, h * 8))
        .unwrap();
    for l in 0..layers {
        let t = |s: &str| format!("blk.{l}.{s}.weight");
        w.add_tensor(t("attn_norm"), TensorType::F32, &[h], rng.blocks(TensorType::F32, h)).unwrap();
        w.add_tensor(
            t("ffn_gate_inp"),
            TensorType::F32,
            &[h, experts],
            rng.blocks(TensorType::F32, h * experts),
        )
        .unwrap();
        for (name, dims) in [
            ("ffn_down_exps", [f, h, experts]),
            ("ffn_gate_exps", [h, f, experts]),
            ("ffn_up_exps", [h, f, experts]),
        ] {
            let data = rng.blocks(TensorType::Q8_0, dims.iter().product());
            w.add_tensor(t(name), TensorType::Q8_0, &dims, data).unwrap();
        }
    }
    w.add_tensor("output_norm.weight", TensorType::F32, &[h], rng.blocks(TensorType::F32, h)).unwrap();
    let gguf = dir.join("model.gguf");
    w.write_file(&gguf).unwrap();
    let store_dir = dir.join("store");
    ingest(&gguf, &store_dir, &IngestOptions::default(), &mut |_| {}).unwrap();
    Store::open(store_dir).unwrap()
}

/// Reads a whole buffer back (submits and waits).
pub fn read_back(ctx: &Context, buf: &wgpu::Buffer) -> Vec<u8> {
    let size = buf.size();
    let staging = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("read back"),
        size,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = ctx.device.create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(buf, 0, &staging, 0, size);
    ctx.queue.submit([enc.finish()]);
    staging.slice(..).map_async(wgpu::MapMode::Read, |r| r.expect("map"));
    ctx.device.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
    staging.slice(..).get_mapped_range().expect("mapped range").to_vec()
}
