//! Encode throughput on the exactness corpus (bytes of UTF-8 per second, one thread), for both real
//! vocabularies, and the pre-tokenizer alone against the regex it replaces. Compare with tiktoken and Hugging
//! Face tokenizers on the same corpus: `scripts/bpe/bench_reference.py`.
//!
//! Needs `scripts/bpe/fetch_vocab.sh` (vocabularies in `.cache/`).

use std::path::PathBuf;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use diskformer_bpe::{PreTokenizer, TokenType, Tokenizer, TokenizerBuilder};
use serde::Deserialize;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn corpus() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("crates/bpe/tests/data/corpus.jsonl")).expect("corpus");
    text.lines().map(|l| serde_json::from_str(l).expect("json string")).collect()
}

#[derive(Deserialize)]
struct VocabJson {
    pre: String,
    tokens: Vec<String>,
    token_type: Vec<i32>,
    merges: Vec<String>,
}

fn tokenizer(name: &str, ignore_merges: bool) -> Option<Tokenizer> {
    let path = root().join(".cache").join(format!("{name}-vocab.json"));
    let Ok(text) = std::fs::read_to_string(&path) else {
        eprintln!("SKIPPED {name}: {} missing, run scripts/bpe/fetch_vocab.sh", path.display());
        return None;
    };
    let j: VocabJson = serde_json::from_str(&text).expect("vocab json");
    let types = TokenType::from_gguf_values(&j.token_type).expect("types");
    let pre = PreTokenizer::from_name(&j.pre).expect("pre");
    Some(
        TokenizerBuilder::new(pre, j.tokens, types, j.merges)
            .ignore_merges(ignore_merges)
            .build()
            .expect("build"),
    )
}

fn encode(c: &mut Criterion) {
    let docs = corpus();
    let bytes: usize = docs.iter().map(String::len).sum();
    let mut g = c.benchmark_group("encode");
    g.throughput(Throughput::Bytes(bytes as u64));
    g.sample_size(20);
    for (name, ignore_merges, label) in
        [("qwen3", false, "qwen3"), ("qwen3", true, "qwen3_ignore_merges"), ("qwen35", false, "qwen35")]
    {
        let Some(tok) = tokenizer(name, ignore_merges) else { continue };
        g.bench_function(label, |b| {
            b.iter(|| docs.iter().map(|d| tok.encode(d, true).len()).sum::<usize>());
        });
    }
    g.finish();

    let mut g = c.benchmark_group("pretokenize");
    g.throughput(Throughput::Bytes(bytes as u64));
    g.sample_size(10);
    for pre in [PreTokenizer::Qwen2, PreTokenizer::Qwen35] {
        g.bench_function(format!("{}_hand_written", pre.name()), |b| {
            b.iter(|| docs.iter().map(|d| pre.split(d).count()).sum::<usize>());
        });
        g.bench_function(format!("{}_fancy_regex", pre.name()), |b| {
            b.iter(|| docs.iter().map(|d| pre.split_regex(d).len()).sum::<usize>());
        });
    }
    g.finish();
}

criterion_group!(benches, encode);
criterion_main!(benches);
