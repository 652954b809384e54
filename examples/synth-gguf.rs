//! This example shows how to write a qwen3moe-shaped Q8_0 GGUF with seeded random weights using
//! diskformer's GGUF writer (tensor data streamed, so a full-size 32 GB model never sits in memory).
//!
//! ```text
//! cargo run --release --example synth-gguf -- --shape qwen3-30b-a3b --out /dev/shm/q3.gguf
//! ```

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use diskformer::gguf::{GgufWriter, TensorType, Value};
use half::f16;

/// Write a synthetic qwen3moe GGUF.
#[derive(Parser)]
struct Args {
    /// Model shape.
    #[arg(long, value_enum, default_value = "tiny")]
    shape: Shape,
    /// Output path.
    #[arg(long)]
    out: PathBuf,
    /// Seed of the weights.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Override the number of layers (e.g. a few layers of the full shape for quick I/O tests).
    #[arg(long)]
    layers: Option<u32>,
}

#[derive(Clone, Copy, ValueEnum)]
enum Shape {
    /// 2 layers, 8 experts, hidden 64.
    Tiny,
    /// Qwen3-30B-A3B: 48 layers, 128 experts, top-8, hidden 2048, expert FFN 768, vocab 151,936.
    Qwen3_30bA3b,
}

struct Dims {
    layers: u32,
    hidden: u64,
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    experts: u64,
    top_k: u32,
    ffn: u64,
    vocab: u64,
}

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Writes `n_values` of Q8_0 blocks: a scale of 1/(127·sqrt(row)) keeps activations bounded, random quants.
fn q8_0(out: &mut dyn Write, n_values: u64, row: u64, rng: &mut Rng) -> std::io::Result<()> {
    let d = f16::from_f32(1.0 / (127.0 * (row as f32).sqrt())).to_le_bytes();
    let mut buf = Vec::with_capacity(1 << 20);
    for _ in 0..n_values / 32 {
        buf.extend_from_slice(&d);
        for _ in 0..4 {
            buf.extend_from_slice(&rng.next().to_le_bytes());
        }
        if buf.len() >= (1 << 20) - 34 {
            out.write_all(&buf)?;
            buf.clear();
        }
    }
    out.write_all(&buf)
}

fn f32s(out: &mut dyn Write, n: u64, around: f32, spread: f32, rng: &mut Rng) -> std::io::Result<()> {
    let v: Vec<u8> = (0..n)
        .flat_map(|_| {
            (around + spread * ((rng.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5)).to_le_bytes()
        })
        .collect();
    out.write_all(&v)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut d = match args.shape {
        Shape::Tiny => Dims {
            layers: 2,
            hidden: 64,
            heads: 4,
            kv_heads: 2,
            head_dim: 32,
            experts: 8,
            top_k: 2,
            ffn: 32,
            vocab: 256,
        },
        Shape::Qwen3_30bA3b => Dims {
            layers: 48,
            hidden: 2048,
            heads: 32,
            kv_heads: 4,
            head_dim: 128,
            experts: 128,
            top_k: 8,
            ffn: 768,
            vocab: 151_936,
        },
    };
    if let Some(l) = args.layers {
        d.layers = l;
    }
    let mut w = GgufWriter::new();
    let a = "qwen3moe";
    let meta: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(a.into())),
        ("general.name".into(), Value::String("diskformer synthetic (random weights)".into())),
        (format!("{a}.block_count"), Value::U32(d.layers)),
        (format!("{a}.context_length"), Value::U32(40960)),
        (format!("{a}.embedding_length"), Value::U32(d.hidden as u32)),
        (format!("{a}.feed_forward_length"), Value::U32(6144)),
        (format!("{a}.attention.head_count"), Value::U32(d.heads as u32)),
        (format!("{a}.attention.head_count_kv"), Value::U32(d.kv_heads as u32)),
        (format!("{a}.attention.key_length"), Value::U32(d.head_dim as u32)),
        (format!("{a}.attention.value_length"), Value::U32(d.head_dim as u32)),
        (format!("{a}.rope.freq_base"), Value::F32(1_000_000.0)),
        (format!("{a}.attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        (format!("{a}.expert_count"), Value::U32(d.experts as u32)),
        (format!("{a}.expert_used_count"), Value::U32(d.top_k)),
        (format!("{a}.expert_feed_forward_length"), Value::U32(d.ffn as u32)),
    ];
    for (k, v) in meta {
        w.add_metadata(k, v)?;
    }
    let (h, q, kv) = (d.hidden, d.heads * d.head_dim, d.kv_heads * d.head_dim);
    let mut seed = args.seed;
    let mut next_seed = || {
        seed += 1;
        seed
    };
    let mut q8 = |w: &mut GgufWriter, name: String, dims: &[u64]| -> anyhow::Result<()> {
        let (n, row, s) = (dims.iter().product::<u64>(), dims[0], next_seed());
        w.add_tensor_fill(name, TensorType::Q8_0, dims, move |out| q8_0(out, n, row, &mut Rng(s)))?;
        Ok(())
    };
    q8(&mut w, "token_embd.weight".into(), &[h, d.vocab])?;
    let mut f32_seed = 1u64 << 32;
    let mut norm =
        |w: &mut GgufWriter, name: String, n: u64, around: f32, spread: f32| -> anyhow::Result<()> {
            f32_seed += 1;
            let s = f32_seed;
            w.add_tensor_fill(name, TensorType::F32, &[n], move |out| {
                f32s(out, n, around, spread, &mut Rng(s))
            })?;
            Ok(())
        };
    for l in 0..d.layers {
        let t = |s: &str| format!("blk.{l}.{s}.weight");
        norm(&mut w, t("attn_norm"), h, 1.0, 0.2)?;
        q8(&mut w, t("attn_q"), &[h, q])?;
        q8(&mut w, t("attn_k"), &[h, kv])?;
        q8(&mut w, t("attn_v"), &[h, kv])?;
        q8(&mut w, t("attn_output"), &[q, h])?;
        norm(&mut w, t("attn_q_norm"), d.head_dim, 1.0, 0.2)?;
        norm(&mut w, t("attn_k_norm"), d.head_dim, 1.0, 0.2)?;
        norm(&mut w, t("ffn_norm"), h, 1.0, 0.2)?;
        let s = (3u64 << 32) + u64::from(l);
        let (hh, e) = (h, d.experts);
        w.add_tensor_fill(t("ffn_gate_inp"), TensorType::F32, &[h, e], move |out| {
            f32s(out, hh * e, 0.0, 2.0 / (hh as f32).sqrt(), &mut Rng(s))
        })?;
        q8(&mut w, t("ffn_gate_exps"), &[h, d.ffn, d.experts])?;
        q8(&mut w, t("ffn_up_exps"), &[h, d.ffn, d.experts])?;
        q8(&mut w, t("ffn_down_exps"), &[d.ffn, h, d.experts])?;
    }
    norm(&mut w, "output_norm.weight".into(), h, 1.0, 0.2)?;
    q8(&mut w, "output.weight".into(), &[h, d.vocab])?;
    let started = std::time::Instant::now();
    let n = w.write_file(&args.out)?;
    let secs = started.elapsed().as_secs_f64();
    println!("wrote {} ({:.2} GB in {:.1} s)", args.out.display(), n as f64 / 1e9, secs);
    Ok(())
}
