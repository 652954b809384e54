//! qwen35moe's hyper-parameters, read from GGUF metadata under the `qwen35moe.` keys (`../shared/QWEN35MOE.md`
//! §1), with the constraints llama.cpp's loader and graph assert (§5.2) checked.

use diskformer_gguf::{Array, Metadata, Value};

use crate::config::{check_keys, get_u32};
use crate::{Error, Result};

/// The architecture name.
pub const ARCHITECTURE: &str = "qwen35moe";

/// Hyper-parameters of a Qwen3.5/3.6-MoE model.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Decoder blocks run (`block_count` less `nextn_predict_layers`, the multi-token-prediction blocks).
    pub layers: u32,
    /// Longest context the model was trained for.
    pub context_length: u32,
    /// Hidden size E.
    pub hidden: u32,
    /// Query heads of the attention layers.
    pub heads: u32,
    /// Key/value heads of the attention layers.
    pub kv_heads: u32,
    /// Head dimension D of the attention layers.
    pub head_dim: u32,
    /// Rotated dimensions R of each head (partial RoPE, NeoX pairs i and i + R/2).
    pub rope_dims: u32,
    /// IMROPE's sections [t, h, w, e] in rotated pairs: which position stream each pair turns with (text
    /// tokens: the position for t, h and w, none for e).
    pub rope_sections: [u32; 4],
    /// RoPE base frequency.
    pub rope_base: f32,
    /// ε of every RMSNorm and of DeltaNet's q/k L2 norm.
    pub eps: f32,
    /// Routed experts per layer.
    pub experts: u32,
    /// Experts picked per token.
    pub top_k: u32,
    /// FFN width of one routed expert.
    pub expert_ffn: u32,
    /// FFN width of the shared expert.
    pub shared_ffn: u32,
    /// DeltaNet: taps of the causal conv.
    pub conv_kernel: u32,
    /// DeltaNet: head size S of q, k and v (the state of a v head is S × S).
    pub state_size: u32,
    /// DeltaNet: q/k heads H_k.
    pub k_heads: u32,
    /// DeltaNet: v heads H_v (a multiple of H_k; v head h reads q/k head h mod H_k).
    pub v_heads: u32,
    /// Per layer: whether it is a DeltaNet (recurrent) layer; else full attention.
    pub recurrent: Vec<bool>,
}

impl Config {
    /// Reads the config from `metadata`.
    ///
    /// # Errors
    /// [`Error::WrongArchitecture`] first; then [`Error::MissingKeys`] naming every absent required key;
    /// then [`Error::BadValue`] for a value of the wrong type or a shape llama.cpp would refuse.
    pub fn from_metadata(metadata: &Metadata) -> Result<Config> {
        const REQUIRED: [&str; 14] = [
            "context_length",
            "embedding_length",
            "block_count",
            "attention.head_count",
            "attention.layer_norm_rms_epsilon",
            "rope.dimension_sections",
            "expert_count",
            "expert_used_count",
            "expert_feed_forward_length",
            "ssm.conv_kernel",
            "ssm.inner_size",
            "ssm.state_size",
            "ssm.time_step_rank",
            "ssm.group_count",
        ];
        check_keys(metadata, ARCHITECTURE, "expected a qwen35moe model", &REQUIRED)?;
        let key = |stem: &str| format!("{ARCHITECTURE}.{stem}");
        let bad = |stem: &str, what: String| Error::BadValue { key: key(stem), what };
        let uint = |stem: &str| get_u32(metadata, &key(stem));
        let uint_or = |stem: &str, default: u32| {
            if metadata.get(&key(stem)).is_some() { uint(stem) } else { Ok(default) }
        };
        let float = |stem: &str, default: Option<f32>| -> Result<f32> {
            match (metadata.get(&key(stem)), default) {
                (Some(Value::F32(v)), _) => Ok(*v),
                (None, Some(d)) => Ok(d),
                (other, _) => Err(bad(
                    stem,
                    format!("expected an f32, found {}", other.map_or("nothing".into(), |v| v.type_name())),
                )),
            }
        };
        let all_layers = uint("block_count")?;
        let layers = all_layers.saturating_sub(uint_or("nextn_predict_layers", 0)?);
        let heads = uint("attention.head_count")?;
        let hidden = uint("embedding_length")?;
        let head_dim = uint_or("attention.key_length", hidden / heads.max(1))?;
        let interval = uint_or("full_attention_interval", 4)?;
        let recurrent = match metadata.get(&key("attention.recurrent_layers")) {
            Some(Value::Array(a)) => {
                let flags: Vec<bool> = match a {
                    Array::Bool(v) => v.clone(),
                    Array::U32(v) => v.iter().map(|&x| x != 0).collect(),
                    Array::I32(v) => v.iter().map(|&x| x != 0).collect(),
                    _ => {
                        return Err(bad(
                            "attention.recurrent_layers",
                            "expected an array of bools or integers".into(),
                        ));
                    }
                };
                if flags.len() != all_layers as usize {
                    return Err(bad(
                        "attention.recurrent_layers",
                        format!("{} flags for {all_layers} blocks", flags.len()),
                    ));
                }
                flags[..layers as usize].to_vec()
            }
            Some(other) => {
                return Err(bad(
                    "attention.recurrent_layers",
                    format!("expected an array, found {}", other.type_name()),
                ));
            }
            None => (0..layers).map(|i| interval == 0 || (i + 1) % interval != 0).collect(),
        };
        let sections = match metadata.get(&key("rope.dimension_sections")) {
            Some(Value::Array(Array::I32(v))) => v.iter().map(|&x| x.max(0) as u32).collect::<Vec<_>>(),
            Some(Value::Array(Array::U32(v))) => v.clone(),
            _ => return Err(bad("rope.dimension_sections", "expected an array of 4 integers".into())),
        };
        let c = Config {
            layers,
            context_length: uint("context_length")?,
            hidden,
            heads,
            kv_heads: uint_or("attention.head_count_kv", heads)?,
            head_dim,
            rope_dims: uint_or("rope.dimension_count", head_dim)?,
            rope_sections: [0; 4],
            rope_base: float("rope.freq_base", Some(10_000.0))?,
            eps: float("attention.layer_norm_rms_epsilon", None)?,
            experts: uint("expert_count")?,
            top_k: uint("expert_used_count")?,
            expert_ffn: uint("expert_feed_forward_length")?,
            shared_ffn: uint_or("expert_shared_feed_forward_length", uint_or("feed_forward_length", 0)?)?,
            conv_kernel: uint("ssm.conv_kernel")?,
            state_size: uint("ssm.state_size")?,
            k_heads: uint("ssm.group_count")?,
            v_heads: uint("ssm.time_step_rank")?,
            recurrent,
        };
        if sections.len() != 4 || sections[..3].iter().all(|&s| s == 0) {
            return Err(bad(
                "rope.dimension_sections",
                format!("{sections:?}: needs 4 entries, not the first three all 0"),
            ));
        }
        let mut c = c;
        c.rope_sections.copy_from_slice(&sections);
        let value_length = uint_or("attention.value_length", head_dim)?;
        if value_length != head_dim {
            return Err(bad(
                "attention.value_length",
                format!("{value_length}, the key length is {head_dim}: they must be equal"),
            ));
        }
        let inner = uint("ssm.inner_size")?;
        if inner != c.state_size * c.v_heads {
            return Err(bad(
                "ssm.inner_size",
                format!("{inner}, not state_size {} × time_step_rank {}", c.state_size, c.v_heads),
            ));
        }
        c.check()?;
        Ok(c)
    }

    fn check(&self) -> Result<()> {
        let bad =
            |stem: &str, what: String| Err(Error::BadValue { key: format!("{ARCHITECTURE}.{stem}"), what });
        if self.layers == 0 {
            return bad("block_count", "no decoder blocks".into());
        }
        if self.kv_heads == 0 || !self.heads.is_multiple_of(self.kv_heads) {
            return bad(
                "attention.head_count_kv",
                format!("{} KV heads do not divide {} query heads", self.kv_heads, self.heads),
            );
        }
        if self.rope_dims == 0 || !self.rope_dims.is_multiple_of(2) || self.rope_dims > self.head_dim {
            return bad(
                "rope.dimension_count",
                format!("{}: needs an even count ≤ the head dimension {}", self.rope_dims, self.head_dim),
            );
        }
        if self.top_k == 0 || self.top_k > self.experts {
            return bad("expert_used_count", format!("{} experts used of {}", self.top_k, self.experts));
        }
        if self.expert_ffn == 0 || self.shared_ffn == 0 {
            return bad(
                "expert_shared_feed_forward_length",
                format!("expert FFN {} and shared FFN {} must be positive", self.expert_ffn, self.shared_ffn),
            );
        }
        if self.k_heads == 0
            || self.state_size == 0
            || !self.v_heads.is_multiple_of(self.k_heads)
            || self.v_heads == 0
        {
            return bad(
                "ssm.group_count",
                format!("{} q/k heads must divide {} v heads", self.k_heads, self.v_heads),
            );
        }
        if self.conv_kernel == 0 {
            return bad("ssm.conv_kernel", "0 taps".into());
        }
        Ok(())
    }

    /// DeltaNet: the q and k width (H_k · S).
    pub fn key_dim(&self) -> usize {
        (self.k_heads * self.state_size) as usize
    }

    /// DeltaNet: the v width (H_v · S).
    pub fn value_dim(&self) -> usize {
        (self.v_heads * self.state_size) as usize
    }

    /// DeltaNet: the conv's channels, q ‖ k ‖ v.
    pub fn conv_channels(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }
}

impl Config {
    /// RoPE's `(cos, sin)` of each rotated pair at each of `positions` (`[T, r/2]`, as
    /// `qk_norm_rope_partial_store` takes them): llama.cpp's angles over the first `rope_dims` dims, `(1, 0)`
    /// for a pair IMROPE's sections leave still.
    pub fn rope_table(&self, positions: &[u32]) -> Vec<[f32; 2]> {
        let half = (self.rope_dims / 2) as usize;
        let mut table =
            diskformer_kernels::cpu::rope_cos_sin(positions, self.rope_dims as usize, self.rope_base);
        for (i, cs) in table.iter_mut().enumerate() {
            if !self.pair_rotates((i % half) as u32) {
                *cs = [1.0, 0.0];
            }
        }
        table
    }

    /// Whether rotated pair `i` turns with the token's position (IMROPE's t, h or w stream, all the position
    /// for text) or stays put (the e stream, position 0), as llama.cpp's `ggml_rope_multi` picks it.
    pub fn pair_rotates(&self, i: u32) -> bool {
        let [t, h, w, _] = self.rope_sections;
        let s = i % self.rope_sections.iter().sum::<u32>().max(1);
        match s % 3 {
            0 => s < 3 * t,
            1 => s < 3 * h,
            _ => s < 3 * w,
        }
    }
}
