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
    /// Type of the routed experts' tensors: Q8_0 (as every other matrix) or Q4_0, with the Q8_0 file type.
    pub expert_type: TensorType,
    /// Each matrix's type: Q8_0 throughout (experts of `expert_type`), or a K-quant mix as llama.cpp's
    /// quantizer makes it.
    pub ftype: SynthFtype,
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
            ftype: SynthFtype::Q8_0,
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
            ftype: SynthFtype::Q8_0,
        }
    }

    /// Qwen3-Coder-30B-A3B: Qwen3-30B-A3B's dims with a context of 262,144.
    pub fn qwen3_coder_30b_a3b() -> Self {
        SynthShape { context_length: 262_144, ..Self::qwen3_30b_a3b() }
    }

    /// Qwen3-235B-A22B: 94 layers, 128 experts, top-8, hidden 4096, expert FFN 1536, 64/4 heads of 128,
    /// vocab 151,936, context 40,960.
    pub fn qwen3_235b_a22b() -> Self {
        SynthShape { layers: 94, hidden: 4096, heads: 64, ffn: 1536, ..Self::qwen3_30b_a3b() }
    }

    /// The named shapes.
    pub const NAMES: [&str; 4] = ["tiny", "qwen3-30b-a3b", "qwen3-coder-30b-a3b", "qwen3-235b-a22b"];

    /// A named shape (one of [`SynthShape::NAMES`]).
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "tiny" => Some(Self::tiny()),
            "qwen3-30b-a3b" => Some(Self::qwen3_30b_a3b()),
            "qwen3-coder-30b-a3b" => Some(Self::qwen3_coder_30b_a3b()),
            "qwen3-235b-a22b" => Some(Self::qwen3_235b_a22b()),
            _ => None,
        }
    }
}

/// The file types a synthetic model can have: what `llama-quantize` would make of an F32 model
/// (`../shared/KQUANTS.md` §3-4), or this crate's Q8_0 layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SynthFtype {
    /// Every matrix Q8_0, the experts of [`SynthShape::expert_type`].
    Q8_0,
    /// `LLAMA_FTYPE_MOSTLY_Q2_K`.
    Q2K,
    /// `LLAMA_FTYPE_MOSTLY_Q3_K_M`.
    Q3KM,
    /// `LLAMA_FTYPE_MOSTLY_Q4_K_S`.
    Q4KS,
    /// `LLAMA_FTYPE_MOSTLY_Q4_K_M`: the most downloaded.
    Q4KM,
    /// `LLAMA_FTYPE_MOSTLY_Q5_K_M`.
    Q5KM,
    /// `LLAMA_FTYPE_MOSTLY_Q6_K`.
    Q6K,
    /// Every matrix of one type (`uniform-q4_0`, `uniform-iq4_xs`, `uniform-bf16`, …) but the output, Q6_K
    /// as llama-quantize makes every file type's (rows that do not fit fall back as it does): for the types
    /// whose llama.cpp file types add per-tensor rules this model does not follow (IQ4_XS's attn_v, say).
    Uniform(TensorType),
    /// Every tensor F32 (`LLAMA_FTYPE_ALL_F32`): the source llama.cpp's own quantizer starts from
    /// (`scripts/qwen3moe/make_goldens.sh`).
    F32,
}

/// A matrix of a qwen3moe model, as llama.cpp's quantizer tells them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Matrix {
    /// `token_embd.weight` (untied: the model has `output.weight`).
    TokenEmbd,
    /// `output.weight`.
    Output,
    /// `attn_q` or `attn_k`.
    AttnQk,
    /// `attn_v`.
    AttnV,
    /// `attn_output`.
    AttnOutput,
    /// `ffn_gate_exps` or `ffn_up_exps`.
    FfnGateUp,
    /// `ffn_down_exps`.
    FfnDown,
}

impl SynthFtype {
    /// The types a [`SynthFtype::Uniform`] file may have.
    pub const UNIFORM: [TensorType; 14] = [
        TensorType::Q2K,
        TensorType::Q3K,
        TensorType::Q4K,
        TensorType::Q5K,
        TensorType::Q6K,
        TensorType::Q4_0,
        TensorType::Q4_1,
        TensorType::Q5_0,
        TensorType::Q5_1,
        TensorType::Q8_0,
        TensorType::IQ4NL,
        TensorType::IQ4XS,
        TensorType::F16,
        TensorType::BF16,
    ];

    /// The file type named as `llama-quantize` names it (`q4_k_m`), or `q8_0`.
    pub fn named(name: &str) -> Option<Self> {
        Some(match name.to_ascii_lowercase().as_str() {
            "q8_0" => SynthFtype::Q8_0,
            "q2_k" => SynthFtype::Q2K,
            "q3_k_m" => SynthFtype::Q3KM,
            "q4_k_s" => SynthFtype::Q4KS,
            "q4_k_m" => SynthFtype::Q4KM,
            "q5_k_m" => SynthFtype::Q5KM,
            "q6_k" => SynthFtype::Q6K,
            "f32" => SynthFtype::F32,
            other => {
                let ty = other.strip_prefix("uniform-")?;
                let ty = TensorType::ALL.into_iter().find(|t| t.name().eq_ignore_ascii_case(ty))?;
                Self::UNIFORM.contains(&ty).then_some(SynthFtype::Uniform(ty))?
            }
        })
    }

    /// The type of `matrix` of layer `layer` (of `layers`), its rows `row` values long, with `gqa` query
    /// heads a key/value head: llama.cpp's `llama_tensor_get_type` for a qwen3moe of more than 8 experts
    /// and an untied output (KQUANTS.md §3.2), then its fallback for rows that are not whole blocks (§4).
    /// The Q8_0 file type gives Q8_0 (the experts' own type is the caller's).
    pub fn tensor_type(self, matrix: Matrix, (layer, layers): (u32, u32), row: u64, gqa: u32) -> TensorType {
        use TensorType as T;
        let default = match self {
            SynthFtype::Q8_0 => return T::Q8_0,
            SynthFtype::F32 => return T::F32,
            SynthFtype::Q2K => T::Q2K,
            SynthFtype::Q3KM => T::Q3K,
            SynthFtype::Q4KS | SynthFtype::Q4KM => T::Q4K,
            SynthFtype::Q5KM => T::Q5K,
            SynthFtype::Q6K => T::Q6K,
            SynthFtype::Uniform(ty) => ty,
        };
        let (i, n) = (layer, layers);
        // ggml's use_more_bits (i - n/8 is evaluated only once i >= n/8).
        let more_bits = i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
        let chosen = match (matrix, self) {
            (Matrix::Output, _) if !row.is_multiple_of(256) => T::Q8_0,
            (Matrix::Output, _) => T::Q6K,
            (Matrix::TokenEmbd | Matrix::AttnQk | Matrix::FfnGateUp, _) | (_, SynthFtype::Uniform(_)) => {
                default
            }
            (Matrix::AttnV, SynthFtype::Q2K) => {
                if gqa >= 4 {
                    T::Q4K
                } else {
                    T::Q3K
                }
            }
            (Matrix::AttnV, SynthFtype::Q3KM) if i < 2 => T::Q5K,
            (Matrix::AttnV, SynthFtype::Q4KS) if i < 4 => T::Q5K,
            (Matrix::AttnV | Matrix::FfnDown, SynthFtype::Q4KM | SynthFtype::Q5KM) if more_bits => T::Q6K,
            (Matrix::AttnV, SynthFtype::Q3KM | SynthFtype::Q4KS | SynthFtype::Q4KM) => T::Q4K,
            (Matrix::AttnOutput, SynthFtype::Q2K) | (Matrix::FfnDown, SynthFtype::Q2K) => T::Q3K,
            (Matrix::AttnOutput, SynthFtype::Q3KM) => T::Q4K,
            (Matrix::FfnDown, SynthFtype::Q3KM) if i < n / 16 => T::Q5K,
            (Matrix::FfnDown, SynthFtype::Q4KS) if i < n / 8 => T::Q5K,
            (Matrix::FfnDown, SynthFtype::Q3KM | SynthFtype::Q4KS | SynthFtype::Q4KM) => T::Q4K,
            (Matrix::AttnV | Matrix::AttnOutput | Matrix::FfnDown, _) => default,
        };
        let fallback = match chosen {
            _ if row.is_multiple_of(chosen.block_size()) => return chosen,
            T::Q2K | T::Q3K => T::Q4_0,
            T::Q4K => T::Q5_0,
            T::Q5K => T::Q5_1,
            T::IQ4XS => T::IQ4NL,
            _ => T::Q8_0,
        };
        if row.is_multiple_of(32) { fallback } else { T::F16 }
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
    if d.ftype != SynthFtype::Q8_0 && d.expert_type != TensorType::Q8_0 {
        return bad(format!("expert_type {} applies to the q8_0 file type only", d.expert_type.name()));
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
        w.add_tensor_fill(name, ty, dims, move |out| write_quantised(out, ty, n, row, &mut rng))?;
        Ok(())
    };
    let layers = d.layers;
    let gqa = d.heads / d.kv_heads;
    let ty = |m: Matrix, layer: u32, row: u64| d.ftype.tensor_type(m, (layer, layers), row, gqa);
    let experts = |m: Matrix, layer: u32, row: u64| match d.ftype {
        SynthFtype::Q8_0 => d.expert_type,
        _ => ty(m, layer, row),
    };
    quant(&mut w, "token_embd.weight".into(), ty(Matrix::TokenEmbd, 0, h), &[h, u64::from(d.vocab)])?;
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
        quant(&mut w, t("attn_q"), ty(Matrix::AttnQk, l, h), &[h, q])?;
        quant(&mut w, t("attn_k"), ty(Matrix::AttnQk, l, h), &[h, kv])?;
        quant(&mut w, t("attn_v"), ty(Matrix::AttnV, l, h), &[h, kv])?;
        quant(&mut w, t("attn_output"), ty(Matrix::AttnOutput, l, q), &[q, h])?;
        f32s(&mut w, t("attn_q_norm"), &[u64::from(d.head_dim)], 1.0, 0.2)?;
        f32s(&mut w, t("attn_k_norm"), &[u64::from(d.head_dim)], 1.0, 0.2)?;
        f32s(&mut w, t("ffn_norm"), &[h], 1.0, 0.2)?;
        // Router logits of spread ~1 (as llama.cpp-converted models at init scale); norms near 1 (±0.1).
        f32s(&mut w, t("ffn_gate_inp"), &[h, e], 0.0, 2.0 / (h as f32).sqrt())?;
        quant(&mut w, t("ffn_gate_exps"), experts(Matrix::FfnGateUp, l, h), &[h, f, e])?;
        quant(&mut w, t("ffn_up_exps"), experts(Matrix::FfnGateUp, l, h), &[h, f, e])?;
        quant(&mut w, t("ffn_down_exps"), experts(Matrix::FfnDown, l, f), &[f, h, e])?;
    }
    f32s(&mut w, "output_norm.weight".into(), &[h], 1.0, 0.2)?;
    quant(&mut w, "output.weight".into(), ty(Matrix::Output, 0, h), &[h, u64::from(d.vocab)])?;
    Ok(w)
}

/// The `tokenizer.*` metadata of `vocab`, padded with unused tokens to `rows` tokens.
pub(crate) fn tokenizer_metadata(vocab: &SynthVocab, rows: u32) -> Result<Vec<(String, Value)>> {
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
pub(crate) struct SplitMix64(SeededRng);

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix64(SeededRng::new(seed))
    }

    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in [-0.5, 0.5).
    pub(crate) fn centered(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    }
}

/// `n_values` of random blocks of `ty` in rows of `row` values, of about the magnitude 1/sqrt(row) gives.
pub(crate) fn write_quantised(
    out: &mut dyn Write,
    ty: TensorType,
    n_values: u64,
    row: u64,
    rng: &mut SplitMix64,
) -> io::Result<()> {
    match ty {
        TensorType::Q4_0 => write_legacy(out, (8.0, 2), n_values, row, rng),
        TensorType::Q8_0 => write_legacy(out, (127.0, 4), n_values, row, rng),
        _ => write_blocks(out, ty, n_values, row, rng),
    }
}

/// `n_values` of Q8_0 or Q4_0 blocks: random quants (`words` u64s a block: Q4_0's nibbles are value + 8),
/// and a scale of 1/(`largest` · sqrt(row)) jittered per block, `largest` the type's largest quant, so values
/// keep a unit-ish scale after a dot product over a row whatever the type.
fn write_legacy(
    out: &mut dyn Write,
    (largest, words): (f32, usize),
    n_values: u64,
    row: u64,
    rng: &mut SplitMix64,
) -> io::Result<()> {
    let base = 1.0 / (largest * (row as f32).sqrt());
    let block = 2 + 8 * words;
    let mut buf = Vec::with_capacity(1 << 20);
    for _ in 0..n_values / 32 {
        let d = f16::from_f32(base * (1.5 + rng.centered()));
        buf.extend_from_slice(&d.to_le_bytes());
        for _ in 0..words {
            buf.extend_from_slice(&rng.next().to_le_bytes());
        }
        if buf.len() >= (1 << 20) - block {
            out.write_all(&buf)?;
            buf.clear();
        }
    }
    out.write_all(&buf)
}

/// `n_values` of any other block type (the K-quants, Q5_0, Q5_1, F16): random bytes, with each f16 scale
/// set so that values keep about the magnitude of the Q8_0 tensors, 1/sqrt(row), and each min so that they
/// centre on zero, as a quantizer's do (with the min at random, every value of a Q4_K block leans the same
/// way: the matrices then share one direction, and every token routes to the same experts).
fn write_blocks(
    out: &mut dyn Write,
    ty: TensorType,
    n_values: u64,
    row: u64,
    rng: &mut SplitMix64,
) -> io::Result<()> {
    let base = 1.0 / (row as f32).sqrt();
    // Where the block's f16 scale and min lie, and the scale giving values of about `base` (the largest
    // quant times its sub-block scale, where it has one).
    // And the min's ratio to the scale that centres the values: the mean quant (Q5_1 adds its min).
    let (d_at, min_at, per_unit): (usize, Option<(usize, f32)>, f32) = match ty {
        TensorType::Q2K => (80, Some((82, 1.5)), 3.0 * 15.0),
        TensorType::Q3K => (108, None, 4.0 * 32.0),
        TensorType::Q4K => (0, Some((2, 7.5)), 16.0 * 63.0),
        TensorType::Q5K => (0, Some((2, 15.5)), 32.0 * 63.0),
        TensorType::Q6K => (208, None, 32.0 * 127.0),
        TensorType::Q5_0 => (0, None, 16.0),
        TensorType::Q5_1 => (0, Some((2, -15.5)), 32.0),
        TensorType::Q4_1 => (0, Some((2, -7.5)), 16.0),
        TensorType::IQ4NL => (0, None, 127.0),
        TensorType::IQ4XS => (0, None, 32.0 * 127.0),
        TensorType::F16 | TensorType::BF16 | TensorType::F32 => {
            let mut buf = Vec::with_capacity(4 * n_values as usize);
            for _ in 0..n_values {
                let v = 2.0 * base * rng.centered();
                match ty {
                    TensorType::F16 => buf.extend_from_slice(&f16::from_f32(v).to_le_bytes()),
                    TensorType::BF16 => buf.extend_from_slice(&half::bf16::from_f32(v).to_le_bytes()),
                    _ => buf.extend_from_slice(&v.to_le_bytes()),
                }
            }
            return out.write_all(&buf);
        }
        other => {
            let what = format!("no synthetic writer for {}", other.name());
            return Err(io::Error::new(io::ErrorKind::InvalidInput, what));
        }
    };
    let size = ty.block_bytes() as usize;
    let mut buf = Vec::with_capacity(1 << 20);
    for _ in 0..n_values / ty.block_size() {
        let start = buf.len();
        while buf.len() < start + size {
            buf.extend_from_slice(&rng.next().to_le_bytes());
        }
        buf.truncate(start + size);
        let block = &mut buf[start..];
        let d = f16::from_f32(base / per_unit * (1.5 + rng.centered()));
        block[d_at..d_at + 2].copy_from_slice(&d.to_le_bytes());
        if let Some((m, centre)) = min_at {
            let min = f16::from_f32(d.to_f32() * centre * (1.0 + 0.2 * rng.centered()));
            block[m..m + 2].copy_from_slice(&min.to_le_bytes());
        }
        if buf.len() >= (1 << 20) - size {
            out.write_all(&buf)?;
            buf.clear();
        }
    }
    out.write_all(&buf)
}

pub(crate) fn write_f32(
    out: &mut dyn Write,
    n: u64,
    around: f32,
    spread: f32,
    rng: &mut SplitMix64,
) -> io::Result<()> {
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

    /// KQUANTS.md §3.3's worked table: 48 layers under Q4_K_M give Q6_K attn_v and ffn_down_exps on the
    /// 24 layers `use_more_bits` picks, Q4_K for every other matrix, a Q6_K output; and the other file
    /// types' rows of §3.2's table on a few layers.
    #[test]
    fn k_quant_file_types_choose_llama_cpps_types() {
        use Matrix as M;
        use TensorType as T;
        let more_bits =
            [0, 1, 2, 3, 4, 5, 8, 11, 14, 17, 20, 23, 26, 29, 32, 35, 38, 41, 42, 43, 44, 45, 46, 47];
        let q4km = |m: Matrix, layer: u32| SynthFtype::Q4KM.tensor_type(m, (layer, 48), 2048, 8);
        for layer in 0..48 {
            let want = if more_bits.contains(&layer) { T::Q6K } else { T::Q4K };
            assert_eq!((q4km(M::AttnV, layer), q4km(M::FfnDown, layer)), (want, want), "layer {layer}");
            for m in [M::AttnQk, M::AttnOutput, M::FfnGateUp] {
                assert_eq!(q4km(m, layer), T::Q4K, "{m:?}, layer {layer}");
            }
        }
        assert_eq!((q4km(M::Output, 0), q4km(M::TokenEmbd, 0)), (T::Q6K, T::Q4K));
        let ty = |f: SynthFtype, m: Matrix, layer: u32, gqa: u32| f.tensor_type(m, (layer, 48), 2048, gqa);
        assert_eq!(
            (ty(SynthFtype::Q2K, M::AttnV, 9, 8), ty(SynthFtype::Q2K, M::AttnV, 9, 2)),
            (T::Q4K, T::Q3K)
        );
        assert_eq!(ty(SynthFtype::Q2K, M::FfnDown, 9, 8), T::Q3K);
        assert_eq!(ty(SynthFtype::Q2K, M::FfnGateUp, 9, 8), T::Q2K);
        assert_eq!(
            (ty(SynthFtype::Q3KM, M::AttnV, 1, 8), ty(SynthFtype::Q3KM, M::AttnV, 2, 8)),
            (T::Q5K, T::Q4K)
        );
        assert_eq!(
            (ty(SynthFtype::Q3KM, M::FfnDown, 2, 8), ty(SynthFtype::Q3KM, M::FfnDown, 3, 8)),
            (T::Q5K, T::Q4K)
        );
        assert_eq!(
            (ty(SynthFtype::Q4KS, M::FfnDown, 5, 8), ty(SynthFtype::Q4KS, M::FfnDown, 6, 8)),
            (T::Q5K, T::Q4K)
        );
        assert_eq!(
            (ty(SynthFtype::Q5KM, M::AttnV, 0, 8), ty(SynthFtype::Q5KM, M::AttnV, 6, 8)),
            (T::Q6K, T::Q5K)
        );
        assert_eq!(
            (ty(SynthFtype::Q6K, M::AttnQk, 6, 8), ty(SynthFtype::Q6K, M::Output, 0, 8)),
            (T::Q6K, T::Q6K)
        );
        assert_eq!(ty(SynthFtype::Q8_0, M::AttnV, 0, 8), T::Q8_0);
        // §3.3's tiny-model sets: n = 2 gives {1}, n = 8 gives {0, 3, 6, 7}.
        let down = |layer: u32, n: u32| SynthFtype::Q4KM.tensor_type(M::FfnDown, (layer, n), 256, 8);
        assert_eq!([down(0, 2), down(1, 2)], [T::Q4K, T::Q6K]);
        let picked: Vec<u32> = (0..8).filter(|&l| down(l, 8) == T::Q6K).collect();
        assert_eq!(picked, [0, 3, 6, 7]);
    }

    /// The matrices of a model (the routers aside).
    fn matrices(g: &diskformer_gguf::Gguf<Vec<u8>>) -> impl Iterator<Item = &diskformer_gguf::TensorInfo> {
        g.tensors().iter().filter(|t| t.dims.len() >= 2 && !t.name.contains("ffn_gate_inp"))
    }

    /// That `t` dequantises to values of the Q8_0 tensors' magnitude: about 1.5/sqrt(row) at most, an RMS
    /// near half that.
    fn assert_q8_0_magnitude(
        g: &diskformer_gguf::Gguf<Vec<u8>>,
        t: &diskformer_gguf::TensorInfo,
        what: &str,
    ) {
        let mut values = vec![0f32; t.n_elements as usize];
        diskformer_gguf::dequantize(t.ty, g.tensor_data(&t.name).unwrap(), &mut values).unwrap();
        let rms = (values.iter().map(|v| v * v).sum::<f32>() / values.len() as f32).sqrt();
        let row = t.dims[0] as f32;
        assert!(rms.is_finite() && (0.05..3.0).contains(&(rms * row.sqrt())), "{what} {}: {rms}", t.name);
    }

    /// §4: rows that are not whole 256-value blocks fall back (Q4_K to Q5_0, Q6_K to Q8_0, Q5_K to Q5_1,
    /// Q2_K and Q3_K to Q4_0), and to F16 when not whole 32-value blocks either; a tiny Q4_K_M model so
    /// made parses, and every matrix dequantises to values of the Q8_0 tensors' magnitude.
    #[test]
    fn rows_that_are_not_whole_blocks_fall_back_and_the_file_reads() {
        use TensorType as T;
        let f = |ftype: SynthFtype, m: Matrix, layer: u32, row: u64| ftype.tensor_type(m, (layer, 2), row, 2);
        assert_eq!(f(SynthFtype::Q4KM, Matrix::FfnDown, 0, 64), T::Q5_0);
        assert_eq!(f(SynthFtype::Q4KM, Matrix::FfnDown, 1, 64), T::Q8_0);
        assert_eq!(f(SynthFtype::Q5KM, Matrix::AttnQk, 0, 64), T::Q5_1);
        assert_eq!(f(SynthFtype::Q2K, Matrix::AttnQk, 0, 64), T::Q4_0);
        assert_eq!(f(SynthFtype::Q4KM, Matrix::Output, 0, 64), T::Q8_0);
        assert_eq!(f(SynthFtype::Q4KM, Matrix::AttnQk, 0, 48), T::F16);

        for ftype in [SynthFtype::Q4KM, SynthFtype::Q2K, SynthFtype::Q3KM, SynthFtype::Q5KM, SynthFtype::Q6K]
        {
            // Rows of 256 (hidden) and 64 (expert FFN): K-quants and their fallbacks both.
            let shape = SynthShape { hidden: 256, ffn: 64, ftype, ..SynthShape::tiny() };
            let spec = SynthSpec { shape, vocab: SynthVocab::Bytes, seed: 5 };
            let mut bytes = Vec::new();
            synthetic_writer(&spec).unwrap().write_to(&mut bytes).unwrap();
            let g = diskformer_gguf::Gguf::from_bytes(bytes).unwrap();
            let mut types = std::collections::BTreeSet::new();
            for t in matrices(&g) {
                assert_q8_0_magnitude(&g, t, &format!("{ftype:?}"));
                types.insert(t.ty.name());
            }
            let k_quant = match ftype {
                SynthFtype::Q2K => "q2_K",
                SynthFtype::Q3KM => "q3_K",
                SynthFtype::Q5KM => "q5_K",
                _ => "q6_K",
            };
            assert!(types.contains(k_quant), "{ftype:?}: {types:?}");
        }
    }

    /// A uniform file type: every matrix the type (its fallback where a row does not fit), the output Q6_K;
    /// every uniform type writes values of the Q8_0 tensors' magnitude.
    #[test]
    fn uniform_file_types_give_every_matrix_their_type() {
        use TensorType as T;
        assert_eq!(SynthFtype::named("uniform-iq4_xs"), Some(SynthFtype::Uniform(T::IQ4XS)));
        assert_eq!(SynthFtype::named("UNIFORM-Q4_K"), Some(SynthFtype::Uniform(T::Q4K)));
        assert_eq!(SynthFtype::named("uniform-iq2_xxs"), None);
        let u = SynthFtype::Uniform(T::IQ4XS);
        assert_eq!(u.tensor_type(Matrix::AttnV, (0, 2), 256, 4), T::IQ4XS);
        assert_eq!(u.tensor_type(Matrix::FfnDown, (1, 2), 256, 4), T::IQ4XS);
        assert_eq!(u.tensor_type(Matrix::Output, (0, 2), 256, 4), T::Q6K);
        assert_eq!(u.tensor_type(Matrix::FfnDown, (0, 2), 64, 4), T::IQ4NL);
        assert_eq!(SynthFtype::Uniform(T::Q4_1).tensor_type(Matrix::AttnQk, (0, 2), 48, 4), T::F16);
        for ty in SynthFtype::UNIFORM {
            let ftype = SynthFtype::Uniform(ty);
            let shape = SynthShape { hidden: 256, ffn: 256, head_dim: 64, ftype, ..SynthShape::tiny() };
            let spec = SynthSpec { shape, vocab: SynthVocab::Bytes, seed: 6 };
            let mut bytes = Vec::new();
            synthetic_writer(&spec).unwrap().write_to(&mut bytes).unwrap();
            let g = diskformer_gguf::Gguf::from_bytes(bytes).unwrap();
            for t in matrices(&g) {
                let want = if t.name == "output.weight" { T::Q6K } else { ty };
                assert_eq!(t.ty, want, "{}", t.name);
                assert_q8_0_magnitude(&g, t, &format!("{ty:?}"));
            }
        }
    }

    /// The F32 file type (llama-quantize's source): every tensor F32, the matrices of the Q8_0 tensors'
    /// magnitude.
    #[test]
    fn the_f32_file_type_writes_every_tensor_f32() {
        assert_eq!(SynthFtype::named("F32"), Some(SynthFtype::F32));
        let shape = SynthShape { ftype: SynthFtype::F32, ..SynthShape::tiny() };
        let spec = SynthSpec { shape, vocab: SynthVocab::Bytes, seed: 7 };
        let mut bytes = Vec::new();
        synthetic_writer(&spec).unwrap().write_to(&mut bytes).unwrap();
        let g = diskformer_gguf::Gguf::from_bytes(bytes).unwrap();
        assert!(g.tensors().iter().all(|t| t.ty == TensorType::F32));
        for t in matrices(&g) {
            assert_q8_0_magnitude(&g, t, "F32");
        }
    }

    #[test]
    fn q8_0_experts_of_another_type_need_the_q8_0_file_type() {
        let shape =
            SynthShape { expert_type: TensorType::Q4_0, ftype: SynthFtype::Q4KM, ..SynthShape::tiny() };
        let spec = SynthSpec { shape, vocab: SynthVocab::Bytes, seed: 1 };
        let err = synthetic_writer(&spec).err().expect("refused").to_string();
        assert!(err.contains("q8_0 file type"), "{err}");
    }

    #[test]
    fn every_named_shape_is_known_and_the_big_one_has_qwen3_235bs_dims() {
        for name in SynthShape::NAMES {
            assert!(SynthShape::named(name).is_some(), "{name}");
        }
        let s = SynthShape::named("qwen3-235b-a22b").unwrap();
        let dims = (s.layers, s.hidden, s.heads, s.kv_heads, s.head_dim, s.experts, s.top_k, s.ffn);
        assert_eq!(dims, (94, 4096, 64, 4, 128, 128, 8, 1536));
        assert_eq!(SynthShape::named("qwen3-coder-30b-a3b").unwrap().context_length, 262_144);
        assert!(SynthShape::named("qwen3-7b").is_none());
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
