//! Synthetic qwen3moe GGUFs: the real tensor names, dims and metadata keys (../DESIGN.md "GGUF facts"),
//! Q8_0 weights and F32 norms and routers drawn from a seeded generator, and a tokenizer. The same spec and
//! seed always give the same bytes, so tests can rebuild a fixture and check it against a golden's sha256.
//!
//! The weights are random: such a model routes almost uniformly and writes noise. It exists to test and
//! measure the pipeline, never to chat with.

use std::io::{self, Write};
use std::path::Path;

use diskformer_expert_stream::SeededRng;
use diskformer_gguf::{Array, GgufWriter, Metadata, TensorType, Value};
use half::f16;

use crate::{ARCHITECTURE, Error, Result};

/// The shape of a synthetic model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SynthShape {
    /// Transformer blocks.
    pub layers: u32,
    /// Hidden size (a multiple of 32).
    pub hidden: u32,
    /// Query heads.
    pub heads: u32,
    /// Key/value heads (divides `heads`).
    pub kv_heads: u32,
    /// Head dim (even, a multiple of 32 when `heads · head_dim` is a GEMV input).
    pub head_dim: u32,
    /// Routed experts per layer.
    pub experts: u32,
    /// Experts used per token.
    pub top_k: u32,
    /// FFN width of one expert (a multiple of 32).
    pub ffn: u32,
    /// Vocabulary rows of the embedding and the lm head (at least the tokenizer's tokens).
    pub vocab: u32,
    /// `context_length` written to the metadata.
    pub context_length: u32,
    /// Type of the routed experts' tensors: Q8_0 (as every other matrix) or Q4_0.
    pub expert_type: TensorType,
}

impl SynthShape {
    /// 2 layers, 8 experts, top-2, hidden 64: the CI model.
    pub fn tiny() -> Self {
        SynthShape {
            layers: 2,
            hidden: 64,
            heads: 4,
            kv_heads: 2,
            head_dim: 32,
            experts: 8,
            top_k: 2,
            ffn: 32,
            vocab: BYTE_VOCAB,
            context_length: 4096,
            expert_type: TensorType::Q8_0,
        }
    }

    /// Qwen3-30B-A3B: 48 layers, 128 experts, top-8, hidden 2048, expert FFN 768, 32/4 heads of 128,
    /// vocab 151,936, context 40,960.
    pub fn qwen3_30b_a3b() -> Self {
        SynthShape {
            layers: 48,
            hidden: 2048,
            heads: 32,
            kv_heads: 4,
            head_dim: 128,
            experts: 128,
            top_k: 8,
            ffn: 768,
            vocab: 151_936,
            context_length: 40_960,
            expert_type: TensorType::Q8_0,
        }
    }

    /// A named shape: `tiny` or `qwen3-30b-a3b`.
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "tiny" => Some(Self::tiny()),
            "qwen3-30b-a3b" => Some(Self::qwen3_30b_a3b()),
            _ => None,
        }
    }
}

/// Tokens of the byte vocabulary: 256 byte tokens and [`SPECIAL_TOKENS`].
pub const BYTE_VOCAB: u32 = 256 + SPECIAL_TOKENS.len() as u32;

/// The special tokens after the 256 byte tokens, with their GGUF token types (3 control, 4 user defined), as
/// in Qwen3's vocabulary.
pub const SPECIAL_TOKENS: [(&str, i32); 5] =
    [("<|endoftext|>", 3), ("<|im_start|>", 3), ("<|im_end|>", 3), ("<think>", 4), ("</think>", 4)];

/// The tokenizer a synthetic model carries.
#[derive(Clone, Debug)]
pub enum SynthVocab {
    /// A byte-level vocabulary: the 256 byte tokens, no merges, [`SPECIAL_TOKENS`], then unused padding
    /// tokens up to the shape's `vocab`.
    Bytes,
    /// The `tokenizer.*` keys of another GGUF (a real vocabulary); the shape's `vocab` must be at least its
    /// token count.
    Copied(Metadata),
}

/// Everything that decides a synthetic model's bytes.
#[derive(Clone, Debug)]
pub struct SynthSpec {
    /// Dims.
    pub shape: SynthShape,
    /// Tokenizer.
    pub vocab: SynthVocab,
    /// Seed of every weight.
    pub seed: u64,
}

/// Writes the synthetic model to `path` (streamed: a full-size model never sits in memory) and returns the
/// bytes written.
///
/// # Errors
/// [`Error::BadValue`] for a shape the model cannot have; [`Error::Gguf`] on a write failure.
pub fn write_synthetic(spec: &SynthSpec, path: &Path) -> Result<u64> {
    let writer = synthetic_writer(spec)?;
    Ok(writer.write_file(path)?)
}

/// The writer [`write_synthetic`] uses, for writing elsewhere than a file.
///
/// # Errors
/// As [`write_synthetic`].
pub fn synthetic_writer(spec: &SynthSpec) -> Result<GgufWriter<'static>> {
    let d = &spec.shape;
    let bad = |what: String| Err(Error::BadValue { key: "synthetic shape".into(), what });
    if d.layers == 0 || d.experts == 0 || d.top_k == 0 || d.top_k > d.experts {
        return bad(format!("needs layers, experts > 0 and 0 < top_k <= experts; got {d:?}"));
    }
    if d.kv_heads == 0 || !d.heads.is_multiple_of(d.kv_heads) || !d.head_dim.is_multiple_of(2) {
        return bad(format!("needs kv_heads dividing heads and an even head_dim; got {d:?}"));
    }
    for (name, v) in [("hidden", d.hidden), ("ffn", d.ffn), ("heads x head_dim", d.heads * d.head_dim)] {
        if v == 0 || !v.is_multiple_of(32) {
            return bad(format!("{name} must be a positive multiple of 32 (Q8_0 rows); got {v}"));
        }
    }
    if !matches!(d.expert_type, TensorType::Q8_0 | TensorType::Q4_0) {
        return bad(format!("experts must be q8_0 or q4_0; got {}", d.expert_type.name()));
    }
    let mut w = GgufWriter::new();
    let a = ARCHITECTURE;
    let meta: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(a.into())),
        ("general.name".into(), Value::String("diskformer synthetic (random weights)".into())),
        (format!("{a}.block_count"), Value::U32(d.layers)),
        (format!("{a}.context_length"), Value::U32(d.context_length)),
        (format!("{a}.embedding_length"), Value::U32(d.hidden)),
        (format!("{a}.feed_forward_length"), Value::U32(d.ffn * d.top_k)),
        (format!("{a}.attention.head_count"), Value::U32(d.heads)),
        (format!("{a}.attention.head_count_kv"), Value::U32(d.kv_heads)),
        (format!("{a}.attention.key_length"), Value::U32(d.head_dim)),
        (format!("{a}.attention.value_length"), Value::U32(d.head_dim)),
        (format!("{a}.rope.freq_base"), Value::F32(1_000_000.0)),
        (format!("{a}.attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        (format!("{a}.expert_count"), Value::U32(d.experts)),
        (format!("{a}.expert_used_count"), Value::U32(d.top_k)),
        (format!("{a}.expert_feed_forward_length"), Value::U32(d.ffn)),
    ];
    for (k, v) in meta.into_iter().chain(tokenizer_metadata(&spec.vocab, d.vocab)?) {
        w.add_metadata(k, v)?;
    }

    let (h, q, kv, e, f) = (
        u64::from(d.hidden),
        u64::from(d.heads * d.head_dim),
        u64::from(d.kv_heads * d.head_dim),
        u64::from(d.experts),
        u64::from(d.ffn),
    );
    // Every tensor draws from its own stream, seeded by the model seed and the tensor's index.
    let mut index = 0u64;
    let seed = spec.seed;
    let mut next = || {
        index += 1;
        SplitMix64::new(seed.wrapping_mul(0x1000_0000_01B3).wrapping_add(index))
    };
    let mut quant = |w: &mut GgufWriter<'static>, name: String, ty: TensorType, dims: &[u64]| -> Result<()> {
        let (n, row, mut rng) = (dims.iter().product::<u64>(), dims[0], next());
        w.add_tensor_fill(name, ty, dims, move |out| match ty {
            TensorType::Q4_0 => write_q4_0(out, n, row, &mut rng),
            _ => write_q8_0(out, n, row, &mut rng),
        })?;
        Ok(())
    };
    quant(&mut w, "token_embd.weight".into(), TensorType::Q8_0, &[h, u64::from(d.vocab)])?;
    let mut f32_index = 0u64;
    let mut f32s = |w: &mut GgufWriter<'static>, name: String, dims: &[u64], around: f32, spread: f32| {
        f32_index += 1;
        let mut rng = SplitMix64::new(seed.wrapping_mul(0x9E37).wrapping_add(f32_index << 32));
        let n = dims.iter().product::<u64>();
        w.add_tensor_fill(name, TensorType::F32, dims, move |out| write_f32(out, n, around, spread, &mut rng))
    };
    for l in 0..d.layers {
        let t = |s: &str| format!("blk.{l}.{s}.weight");
        f32s(&mut w, t("attn_norm"), &[h], 1.0, 0.2)?;
        quant(&mut w, t("attn_q"), TensorType::Q8_0, &[h, q])?;
        quant(&mut w, t("attn_k"), TensorType::Q8_0, &[h, kv])?;
        quant(&mut w, t("attn_v"), TensorType::Q8_0, &[h, kv])?;
        quant(&mut w, t("attn_output"), TensorType::Q8_0, &[q, h])?;
        f32s(&mut w, t("attn_q_norm"), &[u64::from(d.head_dim)], 1.0, 0.2)?;
        f32s(&mut w, t("attn_k_norm"), &[u64::from(d.head_dim)], 1.0, 0.2)?;
        f32s(&mut w, t("ffn_norm"), &[h], 1.0, 0.2)?;
        // Router logits of spread ~1 (as llama.cpp-converted models at init scale); norms near 1 (±0.1).
        f32s(&mut w, t("ffn_gate_inp"), &[h, e], 0.0, 2.0 / (h as f32).sqrt())?;
        quant(&mut w, t("ffn_gate_exps"), d.expert_type, &[h, f, e])?;
        quant(&mut w, t("ffn_up_exps"), d.expert_type, &[h, f, e])?;
        quant(&mut w, t("ffn_down_exps"), d.expert_type, &[f, h, e])?;
    }
    f32s(&mut w, "output_norm.weight".into(), &[h], 1.0, 0.2)?;
    quant(&mut w, "output.weight".into(), TensorType::Q8_0, &[h, u64::from(d.vocab)])?;
    Ok(w)
}

/// The `tokenizer.*` metadata of `vocab`, padded with unused tokens to `rows` tokens.
fn tokenizer_metadata(vocab: &SynthVocab, rows: u32) -> Result<Vec<(String, Value)>> {
    let bad = |what: String| Err(Error::BadValue { key: "tokenizer.ggml.tokens".into(), what });
    match vocab {
        SynthVocab::Copied(md) => {
            let n = md.get_array("tokenizer.ggml.tokens").map(|a| a.len()).unwrap_or(0);
            if n == 0 || n > rows as usize {
                return bad(format!("the copied vocabulary has {n} tokens; the shape has {rows} rows"));
            }
            Ok(md
                .iter()
                .filter(|(k, _)| k.starts_with("tokenizer."))
                .map(|(k, v)| (k.to_owned(), v.clone()))
                .collect())
        }
        SynthVocab::Bytes => {
            if rows < BYTE_VOCAB {
                return bad(format!("the byte vocabulary needs {BYTE_VOCAB} rows; the shape has {rows}"));
            }
            let mut tokens: Vec<String> = (0..=255u8).map(diskformer_bpe::byte_level_text).collect();
            let mut types = vec![1i32; 256];
            for (text, ty) in SPECIAL_TOKENS {
                tokens.push(text.to_owned());
                types.push(ty);
            }
            for i in tokens.len()..rows as usize {
                tokens.push(format!("[PAD{i}]"));
                types.push(5);
            }
            let id =
                |text: &str| 256 + SPECIAL_TOKENS.iter().position(|(t, _)| *t == text).unwrap_or(0) as u32;
            let k = |s: &str| format!("tokenizer.ggml.{s}");
            Ok(vec![
                (k("model"), Value::String("gpt2".into())),
                (k("pre"), Value::String("qwen2".into())),
                (k("tokens"), Value::Array(Array::String(tokens))),
                (k("token_type"), Value::Array(Array::I32(types))),
                (k("merges"), Value::Array(Array::String(Vec::new()))),
                (k("bos_token_id"), Value::U32(id("<|endoftext|>"))),
                (k("eos_token_id"), Value::U32(id("<|im_end|>"))),
                (k("padding_token_id"), Value::U32(id("<|endoftext|>"))),
                (k("add_bos_token"), Value::Bool(false)),
            ])
        }
    }
}

/// SplitMix64 ([`SeededRng`]): small, fast and fully specified, so fixtures are the same on every machine.
struct SplitMix64(SeededRng);

impl SplitMix64 {
    fn new(seed: u64) -> Self {
        SplitMix64(SeededRng::new(seed))
    }

    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in [-0.5, 0.5).
    fn centered(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    }
}

/// `n_values` of Q8_0 blocks: random quants, and a scale of 1/(127·sqrt(row)) jittered per block so values
/// keep a unit-ish scale after a dot product over a row.
fn write_q8_0(out: &mut dyn Write, n_values: u64, row: u64, rng: &mut SplitMix64) -> io::Result<()> {
    let base = 1.0 / (127.0 * (row as f32).sqrt());
    let mut buf = Vec::with_capacity(1 << 20);
    for _ in 0..n_values / 32 {
        let d = f16::from_f32(base * (1.5 + rng.centered()));
        buf.extend_from_slice(&d.to_le_bytes());
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

/// `n_values` of Q4_0 blocks: random nibbles (value = nibble − 8), and a scale of 1/(8·sqrt(row)) jittered
/// per block, so values keep the magnitude of the Q8_0 tensors.
fn write_q4_0(out: &mut dyn Write, n_values: u64, row: u64, rng: &mut SplitMix64) -> io::Result<()> {
    let base = 1.0 / (8.0 * (row as f32).sqrt());
    let mut buf = Vec::with_capacity(1 << 20);
    for _ in 0..n_values / 32 {
        let d = f16::from_f32(base * (1.5 + rng.centered()));
        buf.extend_from_slice(&d.to_le_bytes());
        for _ in 0..2 {
            buf.extend_from_slice(&rng.next().to_le_bytes());
        }
        if buf.len() >= (1 << 20) - 18 {
            out.write_all(&buf)?;
            buf.clear();
        }
    }
    out.write_all(&buf)
}

fn write_f32(out: &mut dyn Write, n: u64, around: f32, spread: f32, rng: &mut SplitMix64) -> io::Result<()> {
    let mut buf = Vec::with_capacity(1 << 16);
    for _ in 0..n {
        buf.extend_from_slice(&(around + spread * rng.centered()).to_le_bytes());
        if buf.len() >= 1 << 16 {
            out.write_all(&buf)?;
            buf.clear();
        }
    }
    out.write_all(&buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_spec_same_bytes_and_a_readable_model() {
        let spec = SynthSpec { shape: SynthShape::tiny(), vocab: SynthVocab::Bytes, seed: 7 };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        synthetic_writer(&spec).unwrap().write_to(&mut a).unwrap();
        synthetic_writer(&spec).unwrap().write_to(&mut b).unwrap();
        assert_eq!(a, b);
        let other = SynthSpec { seed: 8, ..spec };
        let mut c = Vec::new();
        synthetic_writer(&other).unwrap().write_to(&mut c).unwrap();
        assert_ne!(a, c);

        let g = diskformer_gguf::Gguf::from_bytes(a).unwrap();
        let config = crate::Config::from_metadata(g.metadata()).unwrap();
        assert_eq!((config.block_count, config.expert_count, config.expert_used_count), (2, 8, 2));
        let tok = diskformer_bpe::Tokenizer::from_gguf(&g).unwrap();
        assert_eq!(tok.encode("hi", false).len(), 2);
    }

    #[test]
    fn q4_0_experts() {
        let mut shape = SynthShape::tiny();
        shape.expert_type = TensorType::Q4_0;
        let spec = SynthSpec { shape, vocab: SynthVocab::Bytes, seed: 3 };
        let mut bytes = Vec::new();
        synthetic_writer(&spec).unwrap().write_to(&mut bytes).unwrap();
        let g = diskformer_gguf::Gguf::from_bytes(bytes).unwrap();
        let t = |name: &str| g.header().tensor(name).unwrap().ty;
        assert_eq!(t("blk.1.ffn_down_exps.weight"), TensorType::Q4_0);
        assert_eq!(t("blk.1.attn_q.weight"), TensorType::Q8_0);
        let mut values = vec![0f32; 64 * 32 * 8];
        let data = g.tensor_data("blk.0.ffn_up_exps.weight").unwrap();
        diskformer_gguf::dequantize(TensorType::Q4_0, data, &mut values).unwrap();
        let rms = (values.iter().map(|v| v * v).sum::<f32>() / values.len() as f32).sqrt();
        // Nibble values −8..7 times ~1.5/(8·sqrt(64)): an RMS near 0.08, as the Q8_0 tensors'.
        assert!((0.04..0.16).contains(&rms), "{rms}");
    }

    #[test]
    fn bad_shapes_are_refused() {
        let mut shape = SynthShape::tiny();
        shape.top_k = 9;
        let spec = SynthSpec { shape, vocab: SynthVocab::Bytes, seed: 1 };
        assert!(matches!(synthetic_writer(&spec), Err(Error::BadValue { .. })));
        let mut shape = SynthShape::tiny();
        shape.vocab = 100;
        let spec = SynthSpec { shape, vocab: SynthVocab::Bytes, seed: 1 };
        assert!(matches!(synthetic_writer(&spec), Err(Error::BadValue { .. })));
    }
}
