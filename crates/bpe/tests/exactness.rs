//! Protects exactness: on the whole corpus, both real vocabularies give the ids of tiktoken (with
//! `ignore_merges`) and of Hugging Face tokenizers / llama.cpp's merge-rank BPE (without), special text
//! parsed or not, and decode gives every document back.

mod common;

use common::{Vocab, corpus, golden_ids, ids_sha256, tokenizer, tokenizer_tiktoken};

/// The golden of each document against our ids; panics listing the documents that differ.
fn check(
    v: Vocab,
    what: &str,
    ours: impl Fn(&str) -> Vec<u32>,
    golden: impl Fn(usize) -> (String, Option<Vec<u32>>),
) {
    let docs = corpus();
    let mut bad = Vec::new();
    for (i, doc) in docs.iter().enumerate() {
        let ids = ours(doc);
        let (sha, full) = golden(i);
        if let Some(full) = full {
            let k = ids.iter().zip(&full).position(|(a, b)| a != b).unwrap_or(ids.len().min(full.len()));
            assert_eq!(ids, full, "{} {what}: document {i} differs from id {k}", v.name());
        }
        if ids_sha256(&ids) != sha {
            bad.push(i);
        }
    }
    assert!(bad.is_empty(), "{} {what}: {} of {} documents differ: {bad:?}", v.name(), bad.len(), docs.len());
}

#[test]
fn corpus_is_large_and_matches_goldens() {
    let docs = corpus();
    let bytes: usize = docs.iter().map(String::len).sum();
    assert!(bytes >= 500 * 1024, "corpus has {bytes} bytes");
    let path = common::root().join("crates/bpe/tests/data/corpus.jsonl");
    let sha = common::file_sha256(&path);
    for v in Vocab::ALL {
        let g = golden_ids(v);
        assert_eq!(g.corpus_sha256, sha, "corpus changed: rerun {}", g.generator);
        assert_eq!(g.docs.len(), docs.len());
        for (d, doc) in g.docs.iter().zip(docs) {
            assert_eq!(d.n_bytes, doc.len());
        }
        let vocab = v.gguf_path();
        if vocab.exists() && common::file_sha256(&vocab) != g.vocab_sha256 {
            eprintln!(
                "warning: {} differs from the file the goldens were made with (another gguf-py version?); \
                 ids are still compared",
                vocab.display()
            );
        }
    }
}

#[test]
fn tiktoken_ids() {
    for v in Vocab::ALL {
        let Some(tok) = tokenizer_tiktoken(v) else { continue };
        let g = golden_ids(v);
        check(v, "tiktoken", |d| tok.encode(d, true), |i| (g.docs[i].sha256.clone(), g.docs[i].ids.clone()));
    }
}

#[test]
fn merge_rank_ids() {
    for v in Vocab::ALL {
        let Some(tok) = tokenizer(v) else { continue };
        let g = golden_ids(v);
        check(v, "tokenizers (merges)", |d| tok.encode(d, true), |i| (g.docs[i].merges_sha256.clone(), None));
        check(
            v,
            "tokenizers, special text not parsed",
            |d| tok.encode(d, false),
            |i| (g.docs[i].no_special_merges_sha256.clone(), None),
        );
    }
}

#[test]
fn decode_gives_the_corpus_back() {
    for v in Vocab::ALL {
        let Some(tok) = tokenizer(v) else { continue };
        for (i, doc) in corpus().iter().enumerate() {
            for parse_special in [false, true] {
                let ids = tok.encode(doc, parse_special);
                assert_eq!(tok.decode(&ids), doc.as_bytes(), "{} document {i}", v.name());
            }
        }
    }
}
