//! This example shows how fast the tokenizer encodes the exactness corpus: best of N passes, one thread, for
//! each vocabulary in `.cache/` (run `scripts/bpe/fetch_vocab.sh` first). The best pass is what a quiet machine
//! gives; criterion (`cargo bench -p diskformer-bpe`) reports means.
//!
//! ```text
//! cargo run --release -p diskformer-bpe --example encode_corpus -- 20
//! ```

use std::path::PathBuf;
use std::time::Instant;

use diskformer_bpe::{PreTokenizer, TokenType, TokenizerBuilder};
use serde::Deserialize;

#[derive(Deserialize)]
struct VocabJson {
    pre: String,
    tokens: Vec<String>,
    token_type: Vec<i32>,
    merges: Vec<String>,
}

fn main() -> anyhow::Result<()> {
    let passes: usize = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(10);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let corpus = std::fs::read_to_string(root.join("crates/bpe/tests/data/corpus.jsonl"))?;
    let docs: Vec<String> = corpus.lines().map(serde_json::from_str).collect::<Result<_, _>>()?;
    let bytes: usize = docs.iter().map(String::len).sum();
    for (name, ignore_merges) in [("qwen3", false), ("qwen3", true), ("qwen35", false), ("qwen35", true)] {
        let j: VocabJson =
            serde_json::from_str(&std::fs::read_to_string(root.join(format!(".cache/{name}-vocab.json")))?)?;
        let t = Instant::now();
        let tok = TokenizerBuilder::new(
            PreTokenizer::from_name(&j.pre)?,
            j.tokens,
            TokenType::from_gguf_values(&j.token_type)?,
            j.merges,
        )
        .ignore_merges(ignore_merges)
        .build()?;
        let build = t.elapsed().as_secs_f64();
        let mut best = f64::INFINITY;
        let mut n_ids = 0;
        for _ in 0..passes {
            let t = Instant::now();
            n_ids = docs.iter().map(|d| tok.encode(d, true).len()).sum::<usize>();
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!(
            "{{\"vocab\": \"{name}\", \"ignore_merges\": {ignore_merges}, \"bytes\": {bytes}, \"ids\": {n_ids}, \
             \"build_s\": {build:.3}, \"best_s\": {best:.4}, \"MB_per_s\": {:.2}}}",
            bytes as f64 / best / 1e6
        );
    }
    Ok(())
}
