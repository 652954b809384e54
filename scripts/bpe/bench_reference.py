#!/usr/bin/env python3
"""Encode throughput of tiktoken and Hugging Face tokenizers on the exactness corpus, one thread, same vocabularies
as `cargo bench -p diskformer-bpe --bench encode`. Prints one JSON line per (library, vocabulary).

  RAYON_NUM_THREADS=1 .venv/bin/python scripts/bpe/bench_reference.py [--repeat 5]
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from make_goldens import references  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def best_of(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with open(os.path.join(ROOT, "crates/bpe/tests/data/corpus.jsonl"), encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    n_bytes = sum(len(d.encode()) for d in docs)
    for name in ("qwen3", "qwen35"):
        enc, hf = references(name, os.path.join(ROOT, ".cache"))
        runs = {
            "tiktoken": lambda: [enc.encode(d, allowed_special="all") for d in docs],
            "tokenizers": lambda: [hf.encode(d, add_special_tokens=False) for d in docs],
        }
        for lib, fn in runs.items():
            fn()  # warm up (tokenizers caches words; tiktoken compiles its regex)
            s = best_of(fn, args.repeat)
            print(json.dumps({"library": lib, "vocab": name, "bytes": n_bytes, "seconds": round(s, 4),
                              "MB_per_s": round(n_bytes / s / 1e6, 2)}))


if __name__ == "__main__":
    main()
