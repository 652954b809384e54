//! `repair`: a store's damaged records and tensors are found, rewritten from the GGUF it was made from, and
//! the store ends byte for byte as a fresh ingest made it; another GGUF is refused before anything is written.

mod common;

use std::path::Path;

use common::{Shape, TempDir, flip, write_model};
use diskformer_store::{DenseData, Error, ExpertKey, IngestOptions, Store, ingest, repair};

fn read(dir: &Path) -> [Vec<u8>; 2] {
    ["dense.bin", "experts.bin"].map(|f| std::fs::read(dir.join(f)).unwrap())
}

#[test]
fn repair_rewrites_just_the_damaged_records_and_tensors() {
    for (name, shape, copy_experts) in
        [("copied", Shape::small(), true), ("in-gguf", Shape::small_k_quant(), false)]
    {
        let dir = TempDir::new(&format!("repair-{name}"));
        let src = write_model(dir.path(), "m.gguf", &shape, 3);
        let other = write_model(dir.path(), "other.gguf", &shape, 4);
        let s = dir.path().join("s");
        ingest(&src, &s, &IngestOptions { copy_experts, ..IngestOptions::default() }, &mut |_| {}).unwrap();
        let clean = read(&s);
        let store = Store::open(&s).unwrap();
        let x = store.layout().experts.clone().unwrap();
        let keys = [ExpertKey { layer: 0, expert: 3 }, ExpertKey { layer: 1, expert: 0 }];
        if copy_experts {
            for (i, key) in keys.iter().enumerate() {
                flip(&s.join("experts.bin"), x.record_offset(*key) + 100 * i as u64 + 1);
            }
        }
        let q = store.layout().dense_tensor("blk.1.attn_q.weight").unwrap().clone();
        let DenseData::Planes { quants, .. } = q.data else { panic!("q8_0 is kept as planes") };
        flip(&s.join("dense.bin"), quants.offset + 17);
        drop(store);
        assert!(Store::open(&s).unwrap().verify().is_err());

        let err = repair(&other, &s).unwrap_err();
        assert!(matches!(err, Error::NotTheSource { .. }), "{name}: {err}");
        assert!(err.to_string().contains("other.gguf"), "{err}");
        assert!(read(&s) != clean, "{name}: nothing written for another GGUF");

        let summary = repair(&src, &s).unwrap();
        let want: Vec<ExpertKey> = if copy_experts { keys.to_vec() } else { Vec::new() };
        assert_eq!(summary.records, want, "{name}");
        assert_eq!(summary.tensors, ["blk.1.attn_q.weight"], "{name}");
        assert!(read(&s) == clean, "{name}: as a fresh ingest made it");
        Store::open(&s).unwrap().verify().unwrap();
        assert_eq!(repair(&src, &s).unwrap(), Default::default(), "{name}: nothing left to repair");
    }
}
