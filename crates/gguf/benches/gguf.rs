//! Header parsing of a real-size tokenizer header (151,936 tokens, 151,387 merges) and Q8_0 plane split.
//!
//! `cargo bench -p diskformer-gguf`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use diskformer_gguf::{Array, GgufWriter, Header, TensorType, Value, plane_sizes, split_planes};

/// A header shaped like Qwen3's: the vocabulary and merges as string arrays, token types as i32.
fn qwen3_sized_header() -> Vec<u8> {
    let n_tokens = 151_936;
    let tokens: Vec<String> = (0..n_tokens).map(|i| format!("Ġtok{i:x}")).collect();
    let merges: Vec<String> = (0..151_387).map(|i| format!("Ġt{:x} ok{:x}", i % 977, i)).collect();
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", Value::String("qwen3moe".into())).unwrap();
    w.add_metadata("tokenizer.ggml.tokens", Value::Array(Array::String(tokens))).unwrap();
    w.add_metadata("tokenizer.ggml.token_type", Value::Array(Array::I32(vec![1; n_tokens]))).unwrap();
    w.add_metadata("tokenizer.ggml.merges", Value::Array(Array::String(merges))).unwrap();
    for l in 0..48 {
        w.add_tensor(format!("blk.{l}.attn_norm.weight"), TensorType::F32, &[2048], vec![0u8; 8192]).unwrap();
    }
    let mut out = Vec::new();
    w.write_to(&mut out).unwrap();
    let header_len = Header::parse(&out).unwrap().data_offset as usize;
    out.truncate(header_len);
    out
}

fn header_parse(c: &mut Criterion) {
    let header = qwen3_sized_header();
    let mut g = c.benchmark_group("header_parse");
    g.throughput(Throughput::Bytes(header.len() as u64));
    g.bench_function("qwen3_vocab_header", |b| b.iter(|| Header::parse(black_box(&header)).unwrap()));
    g.finish();
}

fn q8_0_split(c: &mut Criterion) {
    // One Qwen3-30B-A3B expert's gate, up and down matrices: 3 × 768 × 2048 values.
    let n_blocks = 3 * 768 * 2048 / 32;
    let blocks: Vec<u8> = (0..n_blocks * 34).map(|i| (i * 31 + 7) as u8).collect();
    let (nq, ns) = plane_sizes(TensorType::Q8_0, n_blocks).unwrap();
    let (mut q, mut s) = (vec![0u8; nq], vec![0u8; ns]);
    let mut g = c.benchmark_group("q8_0_split");
    g.throughput(Throughput::Bytes(blocks.len() as u64));
    g.bench_function("one_expert", |b| {
        b.iter(|| split_planes(TensorType::Q8_0, black_box(&blocks), &mut q, &mut s).unwrap())
    });
    g.finish();
}

criterion_group!(benches, header_parse, q8_0_split);
criterion_main!(benches);
