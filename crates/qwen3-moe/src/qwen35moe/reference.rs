//! qwen35moe's forward pass on the CPU, one token at a time, in f32 over the GGUF's weights dequantised
//! (`../shared/QWEN35MOE.md` §3): the executable statement of the architecture that the GPU kernels are to
//! be tested against, itself checked against llama.cpp's goldens. DeltaNet's steps are the GPU kernels' own
//! CPU references (`diskformer_kernels::cpu`), so the goldens hold those to llama.cpp too. Plain loops.

use std::collections::HashMap;
use std::path::Path;

use diskformer_gguf::GgufFile;

use diskformer_kernels::{DeltaNetShape, cpu};

use super::config::Config;
use crate::{Error, Result};

/// The model's weights as f32 and its state: the KV cache of each attention layer, the conv inputs and
/// delta-rule state of each DeltaNet layer.
pub struct Reference {
    config: Config,
    weights: HashMap<String, Vec<f32>>,
    layers: Vec<LayerState>,
    position: u32,
    vocab: usize,
}

/// A layer's state between tokens.
enum LayerState {
    /// Keys and values of every position so far, `kv_heads · head_dim` a position.
    Attention { keys: Vec<f32>, values: Vec<f32> },
    /// The last `conv_kernel − 1` projected inputs (oldest first, `conv_channels` each) and each v head's
    /// `S × S` state `M[vi][ki]`.
    DeltaNet { conv: Vec<f32>, state: Vec<f32> },
}

impl Reference {
    /// Reads the model at `path` (one GGUF file) and dequantises every tensor.
    ///
    /// # Errors
    /// The GGUF's read errors; as [`Config::from_metadata`]; [`Error::BadTensor`] for a missing tensor, one of
    /// the wrong size, or of a type that cannot be dequantised.
    pub fn open(path: &Path) -> Result<Reference> {
        let gguf = GgufFile::open(path)?;
        let config = Config::from_metadata(gguf.metadata())?;
        let mut weights = HashMap::new();
        for t in gguf.tensors() {
            let data = gguf.tensor_data(&t.name).expect("a listed tensor has data");
            let mut out = vec![0f32; t.n_elements as usize];
            diskformer_gguf::dequantize(t.ty, data, &mut out)
                .map_err(|e| Error::BadTensor { name: t.name.clone(), what: e.to_string() })?;
            weights.insert(t.name.clone(), out);
        }
        let vocab = weights.get("token_embd.weight").map_or(0, |w| w.len() / config.hidden as usize);
        let mut r = Reference { config, weights, layers: Vec::new(), position: 0, vocab };
        r.check_shapes()?;
        r.reset();
        Ok(r)
    }

    /// The model's hyper-parameters.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Forgets every token: position 0, empty caches, zero states.
    pub fn reset(&mut self) {
        let c = &self.config;
        let conv = (c.conv_kernel as usize - 1) * c.conv_channels();
        let state = c.v_heads as usize * (c.state_size * c.state_size) as usize;
        self.layers = (c.recurrent.iter())
            .map(|&r| match r {
                true => LayerState::DeltaNet { conv: vec![0.0; conv], state: vec![0.0; state] },
                false => LayerState::Attention { keys: Vec::new(), values: Vec::new() },
            })
            .collect();
        self.position = 0;
    }

    /// Runs `token` at the next position and returns its logits.
    ///
    /// # Errors
    /// [`Error::BadToken`] for a token past the vocabulary.
    pub fn step(&mut self, token: u32) -> Result<Vec<f32>> {
        if token as usize >= self.vocab {
            return Err(Error::BadToken { id: token, vocab: self.vocab as u32 });
        }
        let e = self.config.hidden as usize;
        let mut x = self.w("token_embd.weight")[token as usize * e..][..e].to_vec();
        for l in 0..self.config.layers as usize {
            let a = self.rms_norm(&x, &format!("blk.{l}.attn_norm.weight"));
            let mixed = match self.config.recurrent[l] {
                true => self.delta_net(l, &a),
                false => self.attention(l, &a),
            };
            add(&mut x, &mixed);
            let u = self.rms_norm(&x, &format!("blk.{l}.post_attention_norm.weight"));
            add(&mut x, &self.moe(l, &u));
        }
        self.position += 1;
        let h = self.rms_norm(&x, "output_norm.weight");
        let head = self.weights.get("output.weight").unwrap_or_else(|| &self.weights["token_embd.weight"]);
        Ok(matvec(head, &h))
    }

    fn w(&self, name: &str) -> &[f32] {
        &self.weights[name]
    }

    /// `x / sqrt(mean(x²) + ε) · w` (the mean summed in f64, as llama.cpp does).
    fn rms_norm(&self, x: &[f32], weight: &str) -> Vec<f32> {
        rms_norm(x, self.w(weight), self.config.eps)
    }

    /// Gated full attention at this position (§3.1): the query rows with their gate rows interleaved a
    /// head at a time, q and k normed per head and turned by partial RoPE, causal softmax attention over
    /// the cache (f32), the output times σ(gate) — through the GPU kernels' CPU references but for the
    /// attention itself.
    fn attention(&mut self, l: usize, a: &[f32]) -> Vec<f32> {
        let c = self.config.clone();
        let (d, heads, kv_heads, r) =
            (c.head_dim as usize, c.heads as usize, c.kv_heads as usize, c.rope_dims as usize);
        let t = |s: &str| format!("blk.{l}.{s}.weight");
        let qg = matvec(self.w(&t("attn_q")), a);
        let rope = c.rope_table(&[self.position]);
        let q = cpu::qk_norm_rope_partial(&qg, self.w(&t("attn_q_norm")), &rope, heads, d, r, 2 * d, c.eps);
        let k_raw = matvec(self.w(&t("attn_k")), a);
        let k = cpu::qk_norm_rope_partial(&k_raw, self.w(&t("attn_k_norm")), &rope, kv_heads, d, r, d, c.eps);
        let v = matvec(self.w(&t("attn_v")), a);
        let LayerState::Attention { keys, values } = &mut self.layers[l] else {
            unreachable!("an attention layer")
        };
        keys.extend_from_slice(&k);
        values.extend_from_slice(&v);
        let positions = keys.len() / (kv_heads * d);
        let scale = 1.0 / (d as f32).sqrt();
        let mut o = vec![0f32; heads * d];
        for h in 0..heads {
            let j = h / (heads / kv_heads);
            let qh = &q[h * d..(h + 1) * d];
            let scores: Vec<f32> =
                (0..positions).map(|p| dot(qh, &keys[(p * kv_heads + j) * d..][..d]) * scale).collect();
            let probs = softmax(&scores);
            let oh = &mut o[h * d..(h + 1) * d];
            for (p, w) in probs.iter().enumerate() {
                let vp = &values[(p * kv_heads + j) * d..][..d];
                oh.iter_mut().zip(vp).for_each(|(o, v)| *o += w * v);
            }
        }
        matvec(self.w(&t("attn_output")), &cpu::attention_gate(&qg, &o, d))
    }

    /// Gated DeltaNet (§3.2): projections, then the GPU kernels' CPU references in the order the layer runs
    /// them: the causal conv over the saved inputs with SiLU, the delta rule per v head (q and k
    /// L2-normalised, q/k head h mod H_k), the gated RMSNorm with z; then the output projection.
    fn delta_net(&mut self, l: usize, a: &[f32]) -> Vec<f32> {
        let c = self.config.clone();
        let shape = DeltaNetShape { state: c.state_size, k_heads: c.k_heads, v_heads: c.v_heads };
        let t = |n: &str| format!("blk.{l}.{n}.weight");
        let projected = matvec(self.w(&t("attn_qkv")), a);
        let z = matvec(self.w(&t("attn_gate")), a);
        // β's logits then α, as the rule takes them.
        let mut ba = matvec(self.w(&t("ssm_beta")), a);
        ba.extend(matvec(self.w(&t("ssm_alpha")), a));
        let (dt_bias, decay_a) =
            (self.w(&format!("blk.{l}.ssm_dt.bias")).to_vec(), self.w(&format!("blk.{l}.ssm_a")).to_vec());
        let kernel = self.w(&t("ssm_conv1d")).to_vec();
        let norm = self.w(&t("ssm_norm")).to_vec();
        let LayerState::DeltaNet { conv, state } = &mut self.layers[l] else {
            unreachable!("a DeltaNet layer")
        };
        let u = cpu::delta_net_conv(&projected, &kernel, conv, c.conv_channels(), c.conv_kernel as usize);
        let o = cpu::delta_net_rule(&u, &ba, &dt_bias, &decay_a, state, shape, c.eps);
        let y = cpu::gated_rms_norm(&o, &z, &norm, c.state_size as usize, c.eps);
        matvec(self.w(&t("ssm_out")), &y)
    }

    /// The routed experts (softmax, top-k, renormalised) plus the σ-gated shared expert (§3.3).
    fn moe(&self, l: usize, u: &[f32]) -> Vec<f32> {
        let c = &self.config;
        let t = |n: &str| format!("blk.{l}.{n}.weight");
        let probs = softmax(&matvec(self.w(&t("ffn_gate_inp")), u));
        let mut order: Vec<usize> = (0..probs.len()).collect();
        order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
        let picked = &order[..c.top_k as usize];
        let total = picked.iter().map(|&e| probs[e]).sum::<f32>().max(6.103_515_6e-5);
        let (f, e) = (c.expert_ffn as usize, c.hidden as usize);
        let mut y = vec![0f32; e];
        for &x in picked {
            let expert = |n: &str, len: usize| &self.w(&t(n))[x * len..(x + 1) * len];
            let out = swiglu(
                expert("ffn_gate_exps", f * e),
                expert("ffn_up_exps", f * e),
                expert("ffn_down_exps", f * e),
                u,
            );
            let w = probs[x] / total;
            y.iter_mut().zip(&out).for_each(|(y, o)| *y += w * o);
        }
        let shared =
            swiglu(self.w(&t("ffn_gate_shexp")), self.w(&t("ffn_up_shexp")), self.w(&t("ffn_down_shexp")), u);
        cpu::shared_expert_gate(u, self.w(&t("ffn_gate_inp_shexp")), &shared, &y, e)
    }

    /// Every tensor the forward pass reads is present with the size the config gives it.
    fn check_shapes(&self) -> Result<()> {
        let c = &self.config;
        let (e, v) = (c.hidden as usize, self.vocab);
        let (q, kv, d) =
            ((c.heads * c.head_dim) as usize, (c.kv_heads * c.head_dim) as usize, c.head_dim as usize);
        let (n_e, f_e, f_s) = (c.experts as usize, c.expert_ffn as usize, c.shared_ffn as usize);
        let (ch, vd, h_v, s) = (c.conv_channels(), c.value_dim(), c.v_heads as usize, c.state_size as usize);
        let mut want: Vec<(String, usize)> =
            vec![("token_embd.weight".into(), e * v.max(1)), ("output_norm.weight".into(), e)];
        if self.weights.contains_key("output.weight") {
            want.push(("output.weight".into(), e * v));
        }
        for (l, &recurrent) in c.recurrent.iter().enumerate() {
            let t = |n: &str| format!("blk.{l}.{n}.weight");
            want.extend([(t("attn_norm"), e), (t("post_attention_norm"), e)]);
            if recurrent {
                want.extend([
                    (t("attn_qkv"), e * ch),
                    (t("attn_gate"), e * vd),
                    (t("ssm_conv1d"), c.conv_kernel as usize * ch),
                    (format!("blk.{l}.ssm_dt.bias"), h_v),
                    (format!("blk.{l}.ssm_a"), h_v),
                    (t("ssm_beta"), e * h_v),
                    (t("ssm_alpha"), e * h_v),
                    (t("ssm_norm"), s),
                    (t("ssm_out"), vd * e),
                ]);
            } else {
                want.extend([
                    (t("attn_q"), e * 2 * q),
                    (t("attn_k"), e * kv),
                    (t("attn_v"), e * kv),
                    (t("attn_output"), q * e),
                    (t("attn_q_norm"), d),
                    (t("attn_k_norm"), d),
                ]);
            }
            want.extend([
                (t("ffn_gate_inp"), e * n_e),
                (t("ffn_gate_exps"), e * f_e * n_e),
                (t("ffn_up_exps"), e * f_e * n_e),
                (t("ffn_down_exps"), f_e * e * n_e),
                (t("ffn_gate_inp_shexp"), e),
                (t("ffn_gate_shexp"), e * f_s),
                (t("ffn_up_shexp"), e * f_s),
                (t("ffn_down_shexp"), f_s * e),
            ]);
        }
        for (name, len) in want {
            match self.weights.get(&name) {
                None => return Err(Error::BadTensor { name, what: "missing".into() }),
                Some(w) if w.len() != len => {
                    return Err(Error::BadTensor {
                        name,
                        what: format!("{} values, the config gives {len}", w.len()),
                    });
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

fn rms_norm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    cpu::rms_norm(x, w, x.len(), eps)
}

/// `W · x` for a row-major `W` of `W.len() / x.len()` rows (a GGUF matrix of ne `[x.len(), rows]`).
fn matvec(w: &[f32], x: &[f32]) -> Vec<f32> {
    w.chunks_exact(x.len()).map(|row| dot(row, x)).collect()
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(a, b)| a * b).sum()
}

fn add(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(x, y)| *x += y);
}

fn softmax(x: &[f32]) -> Vec<f32> {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exp: Vec<f32> = x.iter().map(|v| (v - max).exp()).collect();
    let sum: f32 = exp.iter().sum();
    exp.into_iter().map(|v| v / sum).collect()
}

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// `down · (SiLU(gate · x) ⊙ (up · x))`.
fn swiglu(gate: &[f32], up: &[f32], down: &[f32], x: &[f32]) -> Vec<f32> {
    let (g, u) = (matvec(gate, x), matvec(up, x));
    let h: Vec<f32> = g.iter().zip(&u).map(|(g, u)| silu(*g) * u).collect();
    matvec(down, &h)
}
