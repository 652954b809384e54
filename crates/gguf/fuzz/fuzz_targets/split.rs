//! Fuzzes opening a gguf-split set: the input is two shards, `[u32 LE length of the first][first][second]`
//! (seeds: `scripts/gguf/make_split_seed.py`), written as `x-00001-of-00002.gguf` and
//! `x-00002-of-00002.gguf`; opening the first must give a model whose every tensor has its bytes and whose
//! merged header (what ingest stores for a set) parses to the same tensors, or a typed error, never a panic.
#![no_main]

use std::path::PathBuf;

use diskformer_gguf::{GgufModel, Header};
use libfuzzer_sys::fuzz_target;

fn dir() -> PathBuf {
    let base = if std::path::Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    let dir = base.join(format!("diskformer-split-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory for the shards");
    dir
}

fuzz_target!(|data: &[u8]| {
    let Some((len, rest)) = data.split_first_chunk::<4>() else { return };
    let len = (u32::from_le_bytes(*len) as usize).min(rest.len());
    let (first, second) = rest.split_at(len);
    let dir = dir();
    let (a, b) = (dir.join("x-00001-of-00002.gguf"), dir.join("x-00002-of-00002.gguf"));
    std::fs::write(&a, first).expect("write the first shard");
    std::fs::write(&b, second).expect("write the second shard");
    if let Ok(model) = GgufModel::open(&a) {
        for (_, t) in model.tensors() {
            let bytes = model.tensor_data(&t.name).expect("listed tensor has data");
            assert_eq!(bytes.len() as u64, t.n_bytes);
        }
        let merged = Header::parse(&model.merged_header().expect("an open set merges")).expect("it parses");
        let listed = |t: &diskformer_gguf::TensorInfo| (t.name.clone(), t.ty, t.dims.clone(), t.n_bytes);
        let want: Vec<_> = model.tensors().map(|(_, t)| listed(t)).collect();
        assert_eq!(merged.tensors.iter().map(listed).collect::<Vec<_>>(), want);
    }
});
