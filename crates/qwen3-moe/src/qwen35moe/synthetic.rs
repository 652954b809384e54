//! Synthetic qwen35moe GGUFs: random F32 weights in the exact tensor set and metadata llama.cpp's loader
//! takes (`../shared/QWEN35MOE.md` §5), for the reference's goldens against llama.cpp.

use std::path::Path;

use diskformer_gguf::{Array, GgufWriter, TensorType, Value};

use super::config::ARCHITECTURE;
use crate::synthetic::{BYTE_VOCAB, SplitMix64, SynthVocab, tokenizer_metadata, write_f32, write_quantised};
use crate::{Error, Result};

/// The dimensions of a synthetic qwen35moe model.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    /// Decoder blocks.
    pub layers: u32,
    /// Every `interval`-th block (counting from 1) is full attention, the others DeltaNet.
    pub interval: u32,
    /// Hidden size E.
    pub hidden: u32,
    /// Attention: query heads, key/value heads, head dimension D, rotated dimensions R, IMROPE sections.
    pub heads: u32,
    /// See `heads`.
    pub kv_heads: u32,
    /// See `heads`.
    pub head_dim: u32,
    /// See `heads`.
    pub rope_dims: u32,
    /// See `heads`.
    pub rope_sections: [i32; 4],
    /// Routed experts, picked per token, their FFN width, and the shared expert's.
    pub experts: u32,
    /// See `experts`.
    pub top_k: u32,
    /// See `experts`.
    pub expert_ffn: u32,
    /// See `experts`.
    pub shared_ffn: u32,
    /// DeltaNet: conv taps K_c, head size S, q/k heads H_k, v heads H_v.
    pub conv_kernel: u32,
    /// See `conv_kernel`.
    pub state_size: u32,
    /// See `conv_kernel`.
    pub k_heads: u32,
    /// See `conv_kernel`.
    pub v_heads: u32,
    /// Vocabulary rows (at least the byte vocabulary's).
    pub vocab: u32,
}

impl Shape {
    /// QWEN35MOE.md §5.3's configuration: 4 blocks (DeltaNet, attention, DeltaNet, attention), E = 64, 4
    /// query heads of 64 over 2 KV heads with 16 of them rotated, 4 experts top-2 of 32 and a shared expert
    /// of 48, conv of 4 taps, S = 16, 2 q/k heads and 4 v heads (so v heads share q/k heads, tiled).
    pub fn tiny() -> Self {
        Shape {
            layers: 4,
            interval: 2,
            hidden: 64,
            heads: 4,
            kv_heads: 2,
            head_dim: 64,
            rope_dims: 16,
            rope_sections: [3, 3, 2, 0],
            experts: 4,
            top_k: 2,
            expert_ffn: 32,
            shared_ffn: 48,
            conv_kernel: 4,
            state_size: 16,
            k_heads: 2,
            v_heads: 4,
            vocab: BYTE_VOCAB,
        }
    }

    /// [`Shape::tiny`]'s layer pattern at the sizes the GPU's block GEMVs take (every matrix's input a
    /// multiple of 256): E = 256, 4 query heads of 64 over 2 KV heads with 16 rotated, 8 experts top-2 of
    /// 256 and a shared expert of 256, S = 64, 2 q/k heads and 4 v heads.
    pub fn small() -> Self {
        Shape { hidden: 256, experts: 8, expert_ffn: 256, shared_ffn: 256, state_size: 64, ..Shape::tiny() }
    }
}

impl Shape {
    /// Qwen3.6-35B-A3B: 40 blocks (every 4th full attention), E = 2048, 16 query heads of 256 over 2 KV
    /// heads with 64 rotated (IMROPE sections 11/11/10), 256 experts top-8 of 512 and a shared expert of
    /// 512, DeltaNet with 16 q/k heads and 32 v heads of 128, a vocabulary of 248,320 rows.
    pub fn qwen36_35b_a3b() -> Self {
        Shape {
            layers: 40,
            interval: 4,
            hidden: 2048,
            heads: 16,
            kv_heads: 2,
            head_dim: 256,
            rope_dims: 64,
            rope_sections: [11, 11, 10, 0],
            experts: 256,
            top_k: 8,
            expert_ffn: 512,
            shared_ffn: 512,
            conv_kernel: 4,
            state_size: 128,
            k_heads: 16,
            v_heads: 32,
            vocab: 248_320,
        }
    }
}

/// Writes a `shape` model of `seed` with the byte vocabulary to `path`, every tensor F32; returns its size.
///
/// # Errors
/// [`Error::BadValue`] for a vocabulary too small for the byte tokens; a write error.
pub fn write(shape: &Shape, seed: u64, path: &Path) -> Result<u64> {
    write_as(shape, seed, TensorType::F32, path)
}

/// [`write()`] with every matrix but the router and DeltaNet's conv of type `matrices` (random blocks of about
/// the F32 file's magnitudes; those two, the norms and DeltaNet's vectors stay F32, as in llama.cpp's files). The
/// file is streamed: a full-size model never sits in memory.
///
/// # Errors
/// As [`write()`], and [`Error::BadValue`] for a type without a synthetic writer or a
/// row that is not whole blocks of it.
pub fn write_as(shape: &Shape, seed: u64, matrices: TensorType, path: &Path) -> Result<u64> {
    let d = shape;
    let a = ARCHITECTURE;
    let mut w = GgufWriter::new();
    let u = |stem: &str, v: u32| (format!("{a}.{stem}"), Value::U32(v));
    let meta: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(a.into())),
        ("general.name".into(), Value::String("diskformer synthetic qwen35moe (random weights)".into())),
        u("context_length", 4096),
        u("embedding_length", d.hidden),
        u("block_count", d.layers),
        u("attention.head_count", d.heads),
        u("attention.head_count_kv", d.kv_heads),
        u("attention.key_length", d.head_dim),
        u("attention.value_length", d.head_dim),
        (format!("{a}.attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        u("rope.dimension_count", d.rope_dims),
        (format!("{a}.rope.dimension_sections"), Value::Array(Array::I32(d.rope_sections.to_vec()))),
        (format!("{a}.rope.freq_base"), Value::F32(1e7)),
        u("expert_count", d.experts),
        u("expert_used_count", d.top_k),
        u("expert_feed_forward_length", d.expert_ffn),
        u("expert_shared_feed_forward_length", d.shared_ffn),
        u("full_attention_interval", d.interval),
        u("ssm.conv_kernel", d.conv_kernel),
        u("ssm.inner_size", d.state_size * d.v_heads),
        u("ssm.state_size", d.state_size),
        u("ssm.time_step_rank", d.v_heads),
        u("ssm.group_count", d.k_heads),
    ];
    for (k, v) in meta.into_iter().chain(tokenizer_metadata(&SynthVocab::Bytes, d.vocab)?) {
        w.add_metadata(k, v)?;
    }
    let (e, v) = (u64::from(d.hidden), u64::from(d.vocab));
    let (key_dim, value_dim) = (u64::from(d.k_heads * d.state_size), u64::from(d.v_heads * d.state_size));
    let channels = 2 * key_dim + value_dim;
    let (q, kv) = (u64::from(d.heads * d.head_dim), u64::from(d.kv_heads * d.head_dim));
    let (n_e, f_e, f_s, h_v) =
        (u64::from(d.experts), u64::from(d.expert_ffn), u64::from(d.shared_ffn), u64::from(d.v_heads));
    // Every tensor from its own stream: values `around ± spread / 2`.
    let mut index = 0u64;
    let mut add =
        |w: &mut GgufWriter<'static>, name: String, dims: &[u64], around: f32, spread: f32| -> Result<()> {
            index += 1;
            let mut rng = SplitMix64::new(seed.wrapping_mul(0x1000_0000_01B3).wrapping_add(index));
            let n = dims.iter().product::<u64>();
            let f32_always = ["ffn_gate_inp.weight", "ssm_conv1d.weight"].iter().any(|n| name.ends_with(n));
            let ty = if dims.len() == 1 || f32_always { TensorType::F32 } else { matrices };
            if ty != TensorType::F32 && !dims[0].is_multiple_of(ty.block_size()) {
                let what = format!("{name}: rows of {} values are not whole {} blocks", dims[0], ty.name());
                return Err(Error::BadValue { key: "synthetic shape".into(), what });
            }
            let row = dims[0];
            w.add_tensor_fill(name, ty, dims, move |out| match ty {
                TensorType::F32 => write_f32(out, n, around, spread, &mut rng),
                _ => write_quantised(out, ty, n, row, &mut rng),
            })?;
            Ok(())
        };
    // A matrix of `cols` inputs: outputs of about unit size for unit inputs.
    let m = |cols: u64| 2.0 / (cols as f32).sqrt();
    add(&mut w, "token_embd.weight".into(), &[e, v], 0.0, 2.0)?;
    for l in 0..d.layers {
        let t = |s: &str| format!("blk.{l}.{s}.weight");
        add(&mut w, t("attn_norm"), &[e], 1.0, 0.4)?;
        add(&mut w, t("post_attention_norm"), &[e], 1.0, 0.4)?;
        if (l + 1) % d.interval != 0 {
            add(&mut w, t("attn_qkv"), &[e, channels], 0.0, m(e))?;
            add(&mut w, t("attn_gate"), &[e, value_dim], 0.0, m(e))?;
            add(&mut w, t("ssm_conv1d"), &[u64::from(d.conv_kernel), channels], 0.0, 1.2)?;
            add(&mut w, format!("blk.{l}.ssm_dt.bias"), &[h_v], 0.0, 1.0)?;
            // A = −exp(A_log): negative, so the decay exp(A · softplus(α)) lies in (0, 1).
            add(&mut w, format!("blk.{l}.ssm_a"), &[h_v], -1.0, 1.2)?;
            add(&mut w, t("ssm_beta"), &[e, h_v], 0.0, m(e))?;
            add(&mut w, t("ssm_alpha"), &[e, h_v], 0.0, m(e))?;
            add(&mut w, t("ssm_norm"), &[u64::from(d.state_size)], 1.0, 0.4)?;
            add(&mut w, t("ssm_out"), &[value_dim, e], 0.0, m(value_dim))?;
        } else {
            add(&mut w, t("attn_q"), &[e, 2 * q], 0.0, m(e))?;
            add(&mut w, t("attn_k"), &[e, kv], 0.0, m(e))?;
            add(&mut w, t("attn_v"), &[e, kv], 0.0, m(e))?;
            add(&mut w, t("attn_output"), &[q, e], 0.0, m(q))?;
            add(&mut w, t("attn_q_norm"), &[u64::from(d.head_dim)], 1.0, 0.4)?;
            add(&mut w, t("attn_k_norm"), &[u64::from(d.head_dim)], 1.0, 0.4)?;
        }
        add(&mut w, t("ffn_gate_inp"), &[e, n_e], 0.0, 2.0 * m(e))?;
        add(&mut w, t("ffn_gate_exps"), &[e, f_e, n_e], 0.0, m(e))?;
        add(&mut w, t("ffn_up_exps"), &[e, f_e, n_e], 0.0, m(e))?;
        add(&mut w, t("ffn_down_exps"), &[f_e, e, n_e], 0.0, m(f_e))?;
        add(&mut w, t("ffn_gate_inp_shexp"), &[e], 0.0, m(e))?;
        add(&mut w, t("ffn_gate_shexp"), &[e, f_s], 0.0, m(e))?;
        add(&mut w, t("ffn_up_shexp"), &[e, f_s], 0.0, m(e))?;
        add(&mut w, t("ffn_down_shexp"), &[f_s, e], 0.0, m(f_s))?;
    }
    add(&mut w, "output_norm.weight".into(), &[e], 1.0, 0.4)?;
    add(&mut w, "output.weight".into(), &[e, v], 0.0, m(e))?;
    Ok(w.write_file(path)?)
}
