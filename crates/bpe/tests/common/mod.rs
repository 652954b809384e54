//! Shared helpers: the real vocabularies (built by `scripts/bpe/fetch_vocab.sh` into `.cache/`), the corpus
//! and the goldens.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

use diskformer_bpe::{PreTokenizer, TokenType, Tokenizer, TokenizerBuilder};
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The vocabularies the tests use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vocab {
    /// Qwen3 (pre = qwen2), 151,936 entries.
    Qwen3,
    /// Qwen3.5 (pre = qwen35), 248,320 entries.
    Qwen35,
}

impl Vocab {
    pub const ALL: [Vocab; 2] = [Vocab::Qwen3, Vocab::Qwen35];

    pub fn name(self) -> &'static str {
        match self {
            Vocab::Qwen3 => "qwen3",
            Vocab::Qwen35 => "qwen35",
        }
    }

    /// `.cache/<name>-vocab.gguf`.
    pub fn gguf_path(self) -> PathBuf {
        root().join(".cache").join(format!("{}-vocab.gguf", self.name()))
    }
}

#[derive(Deserialize)]
struct VocabJson {
    pre: String,
    tokens: Vec<String>,
    token_type: Vec<i32>,
    merges: Vec<String>,
    bos_token_id: u32,
    eos_token_id: u32,
    padding_token_id: u32,
    add_bos_token: bool,
}

/// Whether the vocabulary files exist; when they do not, panics with what to run, unless
/// `DISKFORMER_SKIP_VOCAB=1`, in which case it says loudly that the test is skipped and returns false.
pub fn vocab_available(v: Vocab) -> bool {
    let path = root().join(".cache").join(format!("{}-vocab.json", v.name()));
    if path.exists() {
        return true;
    }
    if std::env::var("DISKFORMER_SKIP_VOCAB").as_deref() == Ok("1") {
        eprintln!("SKIPPED: {} is missing and DISKFORMER_SKIP_VOCAB=1", path.display());
        return false;
    }
    panic!(
        "{} is missing: run scripts/bpe/fetch_vocab.sh (or set DISKFORMER_SKIP_VOCAB=1 to skip)",
        path.display()
    );
}

/// A builder holding a vocabulary's tokens, types, merges and special ids (check [`vocab_available`] first).
#[allow(dead_code)] // not every test binary builds its own
pub fn builder(v: Vocab) -> TokenizerBuilder {
    let path = root().join(".cache").join(format!("{}-vocab.json", v.name()));
    let text = std::fs::read_to_string(&path).expect("vocab json readable");
    let j: VocabJson = serde_json::from_str(&text).expect("vocab json");
    TokenizerBuilder::new(
        PreTokenizer::from_name(&j.pre).unwrap(),
        j.tokens,
        TokenType::from_gguf_values(&j.token_type).unwrap(),
        j.merges,
    )
    .bos_token_id(Some(j.bos_token_id))
    .eos_token_id(Some(j.eos_token_id))
    .padding_token_id(Some(j.padding_token_id))
    .add_bos_token(j.add_bos_token)
}

fn load(v: Vocab, ignore_merges: bool) -> Tokenizer {
    builder(v).ignore_merges(ignore_merges).build().expect("the real vocabulary builds")
}

/// The tokenizer of a vocabulary (merge-rank BPE, llama.cpp's and Hugging Face's rule), loaded once; `None`
/// when skipped (see [`vocab_available`]).
pub fn tokenizer(v: Vocab) -> Option<&'static Tokenizer> {
    static CELLS: [OnceLock<Tokenizer>; 2] = [OnceLock::new(), OnceLock::new()];
    vocab_available(v).then(|| CELLS[v as usize].get_or_init(|| load(v, false)))
}

/// The tokenizer with `ignore_merges` (tiktoken's rule), loaded once.
pub fn tokenizer_tiktoken(v: Vocab) -> Option<&'static Tokenizer> {
    static CELLS: [OnceLock<Tokenizer>; 2] = [OnceLock::new(), OnceLock::new()];
    vocab_available(v).then(|| CELLS[v as usize].get_or_init(|| load(v, true)))
}

/// The corpus documents.
pub fn corpus() -> &'static [String] {
    static CORPUS: OnceLock<Vec<String>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let text =
            std::fs::read_to_string(root().join("crates/bpe/tests/data/corpus.jsonl")).expect("corpus");
        text.lines().map(|l| serde_json::from_str(l).expect("one JSON string per line")).collect()
    })
}

/// One document's golden.
#[derive(Deserialize)]
pub struct GoldenDoc {
    pub n_bytes: usize,
    pub n_ids: usize,
    pub sha256: String,
    pub merges_sha256: String,
    pub no_special_merges_sha256: String,
    pub ids: Option<Vec<u32>>,
}

/// A golden id file.
#[derive(Deserialize)]
pub struct GoldenIds {
    pub generator: String,
    pub vocab_sha256: String,
    pub corpus_sha256: String,
    pub docs: Vec<GoldenDoc>,
}

pub fn golden_ids(v: Vocab) -> GoldenIds {
    let path = root().join(format!("crates/bpe/tests/data/golden_ids_{}.json", v.name()));
    serde_json::from_str(&std::fs::read_to_string(path).expect("golden file")).expect("golden json")
}

/// sha256 of the ids as little-endian u32, hex.
pub fn ids_sha256(ids: &[u32]) -> String {
    let mut h = Sha256::new();
    for id in ids {
        h.update(id.to_le_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// sha256 of bytes, hex.
#[allow(dead_code)] // not every test binary uses it
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// sha256 of a file, hex.
pub fn file_sha256(path: &std::path::Path) -> String {
    let bytes = std::fs::read(path).expect("file");
    Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect()
}
