//! Helpers: small qwen3moe-shaped GGUFs with seeded random weights, written with diskformer-gguf.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use diskformer_gguf::{GgufWriter, TensorType, Value};
#[allow(unused_imports)] // Not every test binary uses each.
pub use diskformer_testkit::{Rng, TempDir, flip};

/// The shape of a test model.
#[derive(Clone, Debug)]
pub struct Shape {
    pub layers: u32,
    pub experts: u64,
    pub hidden: u64,
    pub ffn: u64,
    pub expert_type: TensorType,
    /// The odd layers' `ffn_down_exps` type, when it differs (a K-quant mix: Q6_K down on some layers).
    pub odd_down: Option<TensorType>,
    pub vocab: u64,
}

impl Shape {
    pub fn small() -> Shape {
        Shape {
            layers: 2,
            experts: 4,
            hidden: 64,
            ffn: 32,
            expert_type: TensorType::Q8_0,
            odd_down: None,
            vocab: 10,
        }
    }

    /// [`Shape::small`] as a K-quant mix (Q4_K experts, Q6_K down on odd layers) of whole 256-value rows:
    /// records of blocks, which a store may keep in the GGUF.
    pub fn small_k_quant() -> Shape {
        Shape {
            hidden: 256,
            ffn: 256,
            expert_type: TensorType::Q4K,
            odd_down: Some(TensorType::Q6K),
            ..Shape::small()
        }
    }
}

/// Writes a qwen3moe-shaped GGUF (dense attention tensors, norms, router, experts) and returns its path.
pub fn write_model(dir: &Path, name: &str, shape: &Shape, seed: u64) -> PathBuf {
    let mut rng = Rng(seed);
    let Shape { layers, experts, hidden: h, ffn: f, expert_type, odd_down, vocab } = *shape;
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", Value::String("qwen3moe".into())).unwrap();
    w.add_metadata("qwen3moe.block_count", Value::U32(layers)).unwrap();
    w.add_tensor("token_embd.weight", TensorType::Q8_0, &[h, vocab], rng.blocks(TensorType::Q8_0, h * vocab))
        .unwrap();
    for l in 0..layers {
        let t = |s: &str| format!("blk.{l}.{s}.weight");
        w.add_tensor(t("attn_norm"), TensorType::F32, &[h], rng.blocks(TensorType::F32, h)).unwrap();
        w.add_tensor(t("attn_q"), TensorType::Q8_0, &[h, 2 * h], rng.blocks(TensorType::Q8_0, 2 * h * h))
            .unwrap();
        w.add_tensor(t("attn_q_norm"), TensorType::F16, &[32], rng.blocks(TensorType::F16, 32)).unwrap();
        w.add_tensor(
            t("ffn_gate_inp"),
            TensorType::F32,
            &[h, experts],
            rng.blocks(TensorType::F32, h * experts),
        )
        .unwrap();
        // Real GGUFs do not keep gate, up, down adjacent or in this order; mix them up a little.
        let exps = [
            ("ffn_down_exps", [f, h, experts]),
            ("ffn_gate_exps", [h, f, experts]),
            ("ffn_up_exps", [h, f, experts]),
        ];
        for (i, (n, dims)) in exps.iter().enumerate() {
            let ty = match odd_down {
                Some(down) if i == 0 && l % 2 == 1 => down,
                _ => expert_type,
            };
            let data = rng.blocks(ty, dims.iter().product());
            w.add_tensor(t(n), ty, dims, data).unwrap();
            if i == 0 {
                w.add_tensor(t("ffn_norm"), TensorType::F32, &[h], rng.blocks(TensorType::F32, h)).unwrap();
            }
        }
    }
    w.add_tensor("output_norm.weight", TensorType::F32, &[h], rng.blocks(TensorType::F32, h)).unwrap();
    let path = dir.join(name);
    w.write_file(&path).unwrap();
    path
}
