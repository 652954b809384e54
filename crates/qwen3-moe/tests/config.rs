//! Config from metadata: the real Qwen3-30B-A3B values, the architecture checked first (before a GGUF is
//! copied into a store), every missing key named at once, bad values refused.

use diskformer_gguf::{Metadata, Value};
use diskformer_qwen3_moe::{Config, Error};

fn qwen3_30b_a3b() -> Metadata {
    let mut m = Metadata::new();
    m.insert("general.architecture", Value::String("qwen3moe".into()));
    for (k, v) in [
        ("block_count", 48u32),
        ("context_length", 40960),
        ("embedding_length", 2048),
        ("attention.head_count", 32),
        ("attention.head_count_kv", 4),
        ("attention.key_length", 128),
        ("attention.value_length", 128),
        ("expert_count", 128),
        ("expert_used_count", 8),
        ("expert_feed_forward_length", 768),
    ] {
        m.insert(format!("qwen3moe.{k}"), Value::U32(v));
    }
    m.insert("qwen3moe.rope.freq_base", Value::F32(1_000_000.0));
    m.insert("qwen3moe.attention.layer_norm_rms_epsilon", Value::F32(1e-6));
    m
}

fn without(m: &Metadata, drop: &[&str]) -> Metadata {
    let mut out = Metadata::new();
    for (k, v) in m.iter().filter(|(k, _)| !drop.contains(k)) {
        out.insert(k, v.clone());
    }
    out
}

#[test]
fn reads_the_real_shape() {
    let c = Config::from_metadata(&qwen3_30b_a3b()).unwrap();
    assert_eq!((c.block_count, c.embedding_length, c.head_count, c.head_count_kv), (48, 2048, 32, 4));
    assert_eq!((c.expert_count, c.expert_used_count, c.expert_feed_forward_length), (128, 8, 768));
    assert_eq!((c.rope_freq_base, c.layer_norm_rms_epsilon, c.gqa_ratio()), (1e6, 1e-6, 8));
}

#[test]
fn architecture_is_checked_first() {
    let mut m = without(&qwen3_30b_a3b(), &["general.architecture", "qwen3moe.block_count"]);
    assert!(
        matches!(Config::from_metadata(&m), Err(Error::WrongArchitecture { found, .. }) if found.is_empty())
    );
    m.insert("general.architecture", Value::String("llama".into()));
    assert!(
        matches!(Config::from_metadata(&m), Err(Error::WrongArchitecture { found, .. }) if found == "llama")
    );
}

#[test]
fn every_missing_key_is_named_at_once() {
    let m = without(&qwen3_30b_a3b(), &["qwen3moe.expert_count", "qwen3moe.rope.freq_base"]);
    match Config::from_metadata(&m) {
        Err(Error::MissingKeys { keys }) => {
            assert_eq!(keys, ["qwen3moe.rope.freq_base", "qwen3moe.expert_count"])
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_values_are_refused() {
    let cases: [(&str, Value); 5] = [
        ("qwen3moe.attention.head_count_kv", Value::U32(5)),
        ("qwen3moe.expert_used_count", Value::U32(129)),
        ("qwen3moe.embedding_length", Value::U32(2047)),
        ("qwen3moe.block_count", Value::String("48".into())),
        ("qwen3moe.rope.freq_base", Value::U32(1)),
    ];
    for (key, value) in cases {
        let mut m = without(&qwen3_30b_a3b(), &[key]);
        m.insert(key, value);
        assert!(matches!(Config::from_metadata(&m), Err(Error::BadValue { .. })), "{key}");
    }
}

#[test]
fn open_gguf_refuses_another_architecture_before_copying_anything() {
    let dir = std::env::temp_dir().join(format!("diskformer-test-arch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let gguf = dir.join("qwen35.gguf");
    let mut w = diskformer_gguf::GgufWriter::new();
    w.add_metadata("general.architecture", Value::String("qwen35moe".into())).unwrap();
    w.add_tensor("output.weight", diskformer_gguf::TensorType::F32, &[32], vec![0; 128]).unwrap();
    w.write_file(&gguf).unwrap();
    let store = dir.join("store");
    let result = diskformer_qwen3_moe::Engine::open_gguf(
        &gguf,
        Some(&store),
        &diskformer_qwen3_moe::EngineOptions::default(),
        &mut |_| {},
    );
    assert!(
        matches!(&result, Err(Error::WrongArchitecture { found, .. }) if found == "qwen35moe"),
        "{:?}",
        result.err()
    );
    assert!(!store.exists(), "no store is written for a model the engine refuses");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A file whose matrix the GPU kernels cannot multiply (a Q3_K_M mix whose attention output rows of 128 values
/// fall back to Q5_0, as llama.cpp's quantizer does, and the block kernels read rows of whole 256-value runs)
/// is refused from its header, the tensor and its type named, before a byte is copied; the same model with
/// rows of whole super-blocks opens as Q2_K, Q3_K_M, Q4_K_M, Q5_K_M and with every matrix IQ4_XS.
#[test]
fn open_gguf_refuses_a_tensor_type_the_kernels_lack_before_copying_anything() {
    use diskformer_qwen3_moe::synthetic::{SynthFtype, SynthShape, SynthSpec, SynthVocab, write_synthetic};
    let dir = std::env::temp_dir().join(format!("diskformer-test-types-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut shape = SynthShape::tiny();
    (shape.hidden, shape.heads, shape.ffn) = (256, 4, 256);
    for (ftype, head_dim, refused) in [
        (SynthFtype::Q3KM, 32, true),
        (SynthFtype::Q2K, 64, false),
        (SynthFtype::Q3KM, 64, false),
        (SynthFtype::Q4KM, 64, false),
        (SynthFtype::Q5KM, 64, false),
        (SynthFtype::Uniform(diskformer_gguf::TensorType::IQ4XS), 64, false),
    ] {
        (shape.ftype, shape.head_dim) = (ftype, head_dim);
        let gguf = dir.join(format!("{ftype:?}-{head_dim}.gguf"));
        write_synthetic(&SynthSpec { shape: shape.clone(), vocab: SynthVocab::Bytes, seed: 3 }, &gguf)
            .unwrap();
        let store = dir.join(format!("{ftype:?}-{head_dim}.store"));
        let opts = diskformer_qwen3_moe::EngineOptions::default();
        let result = diskformer_qwen3_moe::Engine::open_gguf(&gguf, Some(&store), &opts, &mut |_| {});
        if refused {
            assert!(
                matches!(&result, Err(Error::BadTensor { name, what }) if name == "blk.0.attn_output.weight" && what.contains("q5_0 in rows of 128")),
                "{:?}",
                result.err()
            );
            assert!(!store.exists(), "no store is written for a file the engine cannot run");
        } else if let Err(e) = result {
            // Without a GPU the open fails past the checks; the store was written all the same.
            assert!(matches!(e, Error::Kernels(_)), "{e}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
