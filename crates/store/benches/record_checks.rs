//! What checking a record read costs: `RecordChecks::matches` on one Qwen3-30B-A3B-shaped Q8_0 record
//! (5,013,504 bytes: hidden 2048, expert FFN 768) in host memory, as a load checks it after reading it.
//!
//! `cargo bench -p diskformer-store --bench record_checks`

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use diskformer_gguf::{GgufWriter, TensorType};
use diskformer_store::{ExpertKey, IngestOptions, RecordBuf, Store, ingest};

fn bench(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("diskformer-bench-checks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut w = GgufWriter::new();
    let q8 = |n: u64| (0..n / 32 * 34).map(|i| (i * 7 % 251) as u8).collect::<Vec<u8>>();
    let (h, f, e) = (2048u64, 768u64, 2u64);
    w.add_tensor("blk.0.ffn_gate_exps.weight", TensorType::Q8_0, &[h, f, e], q8(h * f * e)).unwrap();
    w.add_tensor("blk.0.ffn_up_exps.weight", TensorType::Q8_0, &[h, f, e], q8(h * f * e)).unwrap();
    w.add_tensor("blk.0.ffn_down_exps.weight", TensorType::Q8_0, &[f, h, e], q8(h * f * e)).unwrap();
    w.add_tensor("output_norm.weight", TensorType::F32, &[h], vec![0u8; 4 * h as usize]).unwrap();
    w.write_file(dir.join("m.gguf")).unwrap();
    ingest(&dir.join("m.gguf"), &dir.join("s"), &IngestOptions::default(), &mut |_| {}).unwrap();
    let store = Store::open(dir.join("s")).unwrap();
    let checks = store.record_checks().unwrap();
    let reader = store.record_reader(false).unwrap();
    let key = ExpertKey { layer: 0, expert: 1 };
    let mut buf = RecordBuf::new(reader.layout().record_bytes as usize);
    reader.read(key, &mut buf).unwrap();
    assert!(checks.matches(key, buf.as_slice()));
    let mut g = c.benchmark_group("record-checks");
    g.throughput(Throughput::Bytes(reader.layout().record_bytes));
    g.bench_function("q8_0-30b-a3b-record", |b| b.iter(|| checks.matches(key, buf.as_slice())));
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);
