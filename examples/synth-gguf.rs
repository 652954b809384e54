//! This example shows how to write a qwen3moe-shaped GGUF with seeded random weights using diskformer's
//! synthetic-model writer (tensor data streamed, so a full-size 32 GB model never sits in memory): Q8_0, or
//! a K-quant mix typed tensor by tensor as llama.cpp's quantizer would (`--ftype q4_k_m`).
//!
//! ```text
//! cargo run --release --example synth-gguf -- --shape qwen3-30b-a3b --out /dev/shm/q3.gguf
//! cargo run --release --example synth-gguf -- --shape qwen3-30b-a3b --ftype q4_k_m --out /dev/shm/q3-q4km.gguf
//! cargo run --release --example synth-gguf -- --shape qwen3-235b-a22b --ftype q4_k_m --layers 8 --out /tmp/big.gguf
//! cargo run --release --example synth-gguf -- --shape qwen36-35b-a3b --matrices q8_0 --out /dev/shm/q36.gguf
//! cargo run --release --example synth-gguf -- --shape tiny --layers 3 --experts 16 --top-k 4 --out /tmp/t.gguf
//! ```

use std::path::PathBuf;

use clap::Parser;
use clap::builder::PossibleValuesParser;
use diskformer::gguf::{GgufFile, TensorType};
use diskformer::qwen3_moe::synthetic::{SynthFtype, SynthShape, SynthSpec, SynthVocab, write_synthetic};

/// Write a synthetic qwen3moe GGUF (random weights: for tests and benchmarks only).
#[derive(Parser)]
struct Args {
    /// Model shape: qwen3moe, or qwen35moe (the qwen35moe-* and qwen36-* shapes, for which only --layers,
    /// --seed and --matrices apply).
    #[arg(long, default_value = "tiny",
        value_parser = PossibleValuesParser::new(SynthShape::NAMES.into_iter().chain(QWEN35MOE_SHAPES)))]
    shape: String,
    /// Output path.
    #[arg(long)]
    out: PathBuf,
    /// Seed of the weights.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Override the number of layers.
    #[arg(long)]
    layers: Option<u32>,
    /// Override the hidden size.
    #[arg(long)]
    hidden: Option<u32>,
    /// Override query heads.
    #[arg(long)]
    heads: Option<u32>,
    /// Override key/value heads.
    #[arg(long)]
    kv_heads: Option<u32>,
    /// Override the head dim.
    #[arg(long)]
    head_dim: Option<u32>,
    /// Override the experts per layer.
    #[arg(long)]
    experts: Option<u32>,
    /// Override the experts used per token.
    #[arg(long)]
    top_k: Option<u32>,
    /// Override the expert FFN width.
    #[arg(long)]
    ffn: Option<u32>,
    /// Copy the tokenizer of this GGUF (its vocabulary size becomes the model's).
    #[arg(long)]
    vocab_from: Option<PathBuf>,
    /// Type of the routed experts with the q8_0 file type: q8_0 or q4_0.
    #[arg(long, default_value = "q8_0")]
    expert_type: String,
    /// File type: q8_0, a K-quant mix as llama-quantize makes it (q2_k, q3_k_m, q4_k_s, q4_k_m, q5_k_m,
    /// q6_k), every matrix of one type but a Q6_K output (uniform-q4_0, uniform-iq4_xs, uniform-bf16, …), or
    /// f32: every tensor F32, a source for llama-quantize.
    #[arg(long, default_value = "q8_0")]
    ftype: String,
    /// qwen35moe shapes: the type of every matrix but the router and DeltaNet's conv (f32, q8_0, q4_k, …;
    /// default f32).
    #[arg(long, default_value = "f32")]
    matrices: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if QWEN35MOE_SHAPES.contains(&args.shape.as_str()) {
        return qwen35moe(&args);
    }
    let mut shape = SynthShape::named(&args.shape).ok_or_else(|| {
        anyhow::anyhow!("unknown shape {:?}; use one of {:?}", args.shape, SynthShape::NAMES)
    })?;
    for (field, v) in [
        (&mut shape.layers, args.layers),
        (&mut shape.hidden, args.hidden),
        (&mut shape.heads, args.heads),
        (&mut shape.kv_heads, args.kv_heads),
        (&mut shape.head_dim, args.head_dim),
        (&mut shape.experts, args.experts),
        (&mut shape.top_k, args.top_k),
        (&mut shape.ffn, args.ffn),
    ] {
        if let Some(v) = v {
            *field = v;
        }
    }
    shape.expert_type = match args.expert_type.as_str() {
        "q8_0" => TensorType::Q8_0,
        "q4_0" => TensorType::Q4_0,
        other => anyhow::bail!("unknown expert type {other:?}; use q8_0 or q4_0"),
    };
    shape.ftype = SynthFtype::named(&args.ftype).ok_or_else(|| {
        anyhow::anyhow!(
            "unknown file type {:?}; use q8_0, q2_k, q3_k_m, q4_k_s, q4_k_m, q5_k_m, q6_k or uniform-TYPE \
             (TYPE one of q2_k … q6_k, q4_0, q4_1, q5_0, q5_1, q8_0, iq4_nl, iq4_xs, f16, bf16)",
            args.ftype
        )
    })?;
    let vocab = match &args.vocab_from {
        Some(path) => {
            let g = GgufFile::open(path)?;
            let md = g.metadata().clone();
            shape.vocab = md.get_array("tokenizer.ggml.tokens")?.len() as u32;
            SynthVocab::Copied(md)
        }
        None => SynthVocab::Bytes,
    };
    let spec = SynthSpec { shape, vocab, seed: args.seed };
    let started = std::time::Instant::now();
    let n = write_synthetic(&spec, &args.out)?;
    let secs = started.elapsed().as_secs_f64();
    println!("wrote {} ({:.3} GB in {:.1} s)", args.out.display(), n as f64 / 1e9, secs);
    Ok(())
}

/// The qwen35moe shapes (`qwen35moe::synthetic::Shape::tiny`, `small`, `qwen36_35b_a3b`).
const QWEN35MOE_SHAPES: [&str; 3] = ["qwen35moe-tiny", "qwen35moe-small", "qwen36-35b-a3b"];

/// A qwen35moe model, its matrices of `--matrices`' type.
fn qwen35moe(args: &Args) -> anyhow::Result<()> {
    use diskformer::gguf::TensorType;
    use diskformer::qwen3_moe::qwen35moe::synthetic::{Shape, write_as};
    let others = [args.hidden, args.heads, args.kv_heads, args.head_dim, args.experts, args.top_k, args.ffn];
    if others.iter().any(Option::is_some) || args.vocab_from.is_some() || args.ftype != "q8_0" {
        anyhow::bail!("only --layers, --seed and --matrices apply to {}", args.shape);
    }
    let mut shape = match args.shape.as_str() {
        "qwen35moe-tiny" => Shape::tiny(),
        "qwen35moe-small" => Shape::small(),
        _ => Shape::qwen36_35b_a3b(),
    };
    shape.layers = args.layers.unwrap_or(shape.layers);
    let matrices = TensorType::ALL
        .into_iter()
        .find(|t| t.name().eq_ignore_ascii_case(&args.matrices))
        .ok_or_else(|| anyhow::anyhow!("unknown tensor type {:?} for --matrices", args.matrices))?;
    let n = write_as(&shape, args.seed, matrices, &args.out)?;
    println!("wrote {} ({:.3} MB, qwen35moe)", args.out.display(), n as f64 / 1e6);
    Ok(())
}
