//! What checking a record read costs: `RecordChecks::matches` on one Qwen3-30B-A3B-shaped Q8_0 record
//! (5,013,504 bytes: hidden 2048, expert FFN 768) in host memory, as a load checks it after reading it;
//! and a checked load's host side from the page cache, the 16 records in turn (80 MB, past the caches)
//! into a staging-sized buffer: read whole, copied and hashed after (`whole-then-hash`), or streamed
//! through a 128 KiB bounce and hashed on the way (`streamed`, `RecordReader::read_part_hashed`), beside
//! the unchecked read straight into it (`unchecked`).
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
    let (h, f, e) = (2048u64, 768u64, 16u64);
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

    let checked = store.record_reader(false).unwrap().with_checks(checks.clone());
    let record = reader.layout().record_bytes as usize;
    let mut staging = vec![0u8; record];
    let mut bounce = vec![0u8; 128 << 10];
    let mut next = {
        let mut expert = 0;
        move || {
            expert = (expert + 1) % e as u32;
            ExpertKey { layer: 0, expert }
        }
    };
    let mut g = c.benchmark_group("checked-load");
    g.throughput(Throughput::Bytes(record as u64));
    g.bench_function("unchecked", |b| b.iter(|| reader.read_into(next(), &mut staging).unwrap()));
    g.bench_function("whole-then-hash", |b| {
        b.iter(|| {
            let key = next();
            reader.read_into(key, buf.as_mut_slice()).unwrap();
            staging.copy_from_slice(&buf.as_slice()[..record]);
            assert!(checks.matches(key, buf.as_slice()));
        })
    });
    g.bench_function("streamed", |b| {
        b.iter(|| {
            let key = next();
            let mut hasher = checked.hasher(key).unwrap();
            checked.read_part_hashed(key, 0, &mut staging, &mut bounce, &mut hasher).unwrap();
            assert!(hasher.matches());
        })
    });
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);
