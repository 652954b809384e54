//! Test scaffolding shared by the engine's integration tests: a synthetic model ingested into a store in a
//! temporary directory, removed when dropped.

use std::path::PathBuf;

use diskformer_qwen3_moe::synthetic::{SynthShape, SynthSpec, SynthVocab, write_synthetic};

/// A synthetic GGUF's store; the directory goes when this does.
pub struct Model {
    pub dir: PathBuf,
    pub store: PathBuf,
}

impl Drop for Model {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A `shape` model of `seed` with a byte vocabulary, ingested; `name` keeps tests' directories apart.
pub fn model(name: &str, shape: SynthShape, seed: u64) -> Model {
    let dir = std::env::temp_dir().join(format!("diskformer-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let gguf = dir.join("m.gguf");
    write_synthetic(&SynthSpec { shape, vocab: SynthVocab::Bytes, seed }, &gguf).unwrap();
    let store = dir.join("store");
    diskformer_store::ingest(&gguf, &store, &Default::default(), &mut |_| {}).unwrap();
    Model { dir, store }
}
