//! The model's hyper-parameters, read from GGUF metadata under the `qwen3moe.` keys (names as llama.cpp's
//! `LLM_KV_*`), with the architecture checked first and every missing key reported at once.

use diskformer_gguf::{Metadata, Value};

use crate::{Error, Result};

/// The architecture this engine runs.
pub const ARCHITECTURE: &str = "qwen3moe";

/// Hyper-parameters of a Qwen3-MoE model. Field names are the metadata key stems.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Transformer blocks.
    pub block_count: u32,
    /// Longest context the model was trained for.
    pub context_length: u32,
    /// Hidden size.
    pub embedding_length: u32,
    /// Query heads.
    pub head_count: u32,
    /// Key/value heads (GQA).
    pub head_count_kv: u32,
    /// Head dimension of keys.
    pub key_length: u32,
    /// Head dimension of values.
    pub value_length: u32,
    /// RoPE base frequency.
    pub rope_freq_base: f32,
    /// RMSNorm epsilon.
    pub layer_norm_rms_epsilon: f32,
    /// Routed experts per layer.
    pub expert_count: u32,
    /// Experts picked per token.
    pub expert_used_count: u32,
    /// FFN width of one expert.
    pub expert_feed_forward_length: u32,
}

const KEYS: [&str; 12] = [
    "block_count",
    "context_length",
    "embedding_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "rope.freq_base",
    "attention.layer_norm_rms_epsilon",
    "expert_count",
    "expert_used_count",
    "expert_feed_forward_length",
];

impl Config {
    /// Reads the config from `metadata`.
    ///
    /// # Errors
    /// [`Error::WrongArchitecture`] first; then [`Error::MissingKeys`] naming every absent key; then
    /// [`Error::BadValue`] for a value of the wrong type or an inconsistent shape.
    pub fn from_metadata(metadata: &Metadata) -> Result<Config> {
        check_keys(metadata, ARCHITECTURE, "this engine runs \"qwen3moe\" models", &KEYS)?;
        let key = |stem: &str| format!("{ARCHITECTURE}.{stem}");
        let uint = |stem: &str| get_u32(metadata, &key(stem));
        let float = |stem: &str| -> Result<f32> {
            let k = key(stem);
            match metadata.get(&k) {
                Some(Value::F32(v)) => Ok(*v),
                Some(Value::F64(v)) => Ok(*v as f32),
                other => Err(Error::BadValue {
                    key: k,
                    what: format!(
                        "expected a float, found {}",
                        other.map_or("nothing".into(), |v| v.type_name())
                    ),
                }),
            }
        };
        let c = Config {
            block_count: uint("block_count")?,
            context_length: uint("context_length")?,
            embedding_length: uint("embedding_length")?,
            head_count: uint("attention.head_count")?,
            head_count_kv: uint("attention.head_count_kv")?,
            key_length: uint("attention.key_length")?,
            value_length: uint("attention.value_length")?,
            rope_freq_base: float("rope.freq_base")?,
            layer_norm_rms_epsilon: float("attention.layer_norm_rms_epsilon")?,
            expert_count: uint("expert_count")?,
            expert_used_count: uint("expert_used_count")?,
            expert_feed_forward_length: uint("expert_feed_forward_length")?,
        };
        c.check()?;
        Ok(c)
    }

    fn check(&self) -> Result<()> {
        let bad =
            |key: &str, what: String| Err(Error::BadValue { key: format!("{ARCHITECTURE}.{key}"), what });
        if self.head_count_kv == 0 || !self.head_count.is_multiple_of(self.head_count_kv) {
            return bad(
                "attention.head_count_kv",
                format!("{} KV heads do not divide {} query heads", self.head_count_kv, self.head_count),
            );
        }
        if self.key_length != self.value_length || !self.key_length.is_multiple_of(2) {
            return bad(
                "attention.key_length",
                format!(
                    "key length {} and value length {} must be equal and even (NeoX RoPE pairs)",
                    self.key_length, self.value_length
                ),
            );
        }
        if self.expert_used_count == 0 || self.expert_used_count > self.expert_count {
            return bad(
                "expert_used_count",
                format!("{} experts used of {}", self.expert_used_count, self.expert_count),
            );
        }
        for (key, v) in [
            ("embedding_length", self.embedding_length),
            ("expert_feed_forward_length", self.expert_feed_forward_length),
        ] {
            if v == 0 || !v.is_multiple_of(32) {
                return bad(key, format!("{v} is not a positive multiple of 32 (one Q8_0 block)"));
            }
        }
        if self.block_count == 0 {
            return bad("block_count", "a model needs at least one block".into());
        }
        Ok(())
    }

    /// Query heads per KV head.
    pub fn gqa_ratio(&self) -> u32 {
        self.head_count / self.head_count_kv
    }
}

/// Checks that `metadata` is of architecture `arch` (else [`Error::WrongArchitecture`] with `expected`) and
/// has every key `arch.STEM` of `stems` (else [`Error::MissingKeys`] naming every absent one).
pub(crate) fn check_keys(
    metadata: &Metadata,
    arch: &str,
    expected: &'static str,
    stems: &[&str],
) -> Result<()> {
    let found = metadata.get_str("general.architecture").unwrap_or("");
    if found != arch {
        return Err(Error::WrongArchitecture { found: found.to_owned(), expected });
    }
    let missing: Vec<String> =
        stems.iter().map(|s| format!("{arch}.{s}")).filter(|k| metadata.get(k).is_none()).collect();
    if !missing.is_empty() {
        return Err(Error::MissingKeys { keys: missing });
    }
    Ok(())
}

/// The non-negative integer at `key`, which must fit in 32 bits.
///
/// # Errors
/// [`Error::BadValue`] naming the key when it is absent, not a non-negative integer, or too large.
pub(crate) fn get_u32(metadata: &Metadata, key: &str) -> Result<u32> {
    let bad = |what: String| Error::BadValue { key: key.to_owned(), what };
    let v = metadata.get_uint(key).map_err(|e| bad(e.to_string()))?;
    u32::try_from(v).map_err(|_| bad(format!("{v} does not fit in 32 bits")))
}
