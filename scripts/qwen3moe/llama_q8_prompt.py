#!/usr/bin/env python3
"""Record llama.cpp's log-probabilities after a prompt, run on a Q8_0 fixture itself (not its F32 twin).

Usage:
  llama_q8_prompt.py MODEL.gguf --ids 1,2,3 --top 20 --out q8prompt.json --synth-args "..."

llama.cpp's CPU backend quantises the activations to Q8_0 (per 32 values, d = max|x| / 127, d stored as
f16) before every matmul with Q8_0 weights. The engine's `int8_prefill` does the same for a prompt's
chunks, so this is its reference, as llama_golden.py's F32-twin goldens are the reference of the f32 path.
F32 KV cache, flash attention off, as there. Each entry also carries the F32 twin's log-probability, to show
how far the two llama.cpp runs are apart.
"""
import argparse, importlib.metadata, json, os, sys, tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_golden import sha256, write_twin  # noqa: E402


def prompt_logprobs(path: str, prompt: list) -> np.ndarray:
    import llama_cpp
    llm = llama_cpp.Llama(
        model_path=path, n_ctx=max(512, len(prompt) + 1), n_batch=max(512, len(prompt)),
        n_ubatch=max(512, len(prompt)), n_threads=2, n_threads_batch=2, n_gpu_layers=0,
        type_k=0, type_v=0, flash_attn=False, logits_all=True, seed=1234, verbose=False)
    llm.eval(prompt)
    logits = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
    if not np.all(np.isfinite(logits)):
        sys.exit("non-finite logits")
    m = logits.max()
    return logits - (m + np.log(np.exp(logits - m).sum()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--ids", required=True, help="comma-separated prompt token ids (fed as-is, no BOS)")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--out", required=True)
    ap.add_argument("--synth-args", default="", help="the synth-gguf arguments that made MODEL (kept in the file)")
    args = ap.parse_args()
    import llama_cpp
    prompt = [int(x) for x in args.ids.split(",") if x.strip()]
    lp = prompt_logprobs(args.model, prompt)
    with tempfile.TemporaryDirectory() as tmp:
        twin = os.path.join(tmp, "twin-f32.gguf")
        write_twin(args.model, twin)
        twin_lp = prompt_logprobs(twin, prompt)
    order = np.argsort(-lp, kind="stable")[: args.top]
    out = {
        "generator": f"llama-cpp-python {llama_cpp.__version__} (llama.cpp via PyPI), the Q8_0 fixture itself, F32 KV, flash attention off",
        "llama_cpp_python": llama_cpp.__version__,
        "gguf_py": importlib.metadata.version("gguf"),
        "fixture": os.path.basename(args.model),
        "fixture_sha256": sha256(args.model),
        "synth_args": args.synth_args,
        "prompt_ids": prompt,
        "tops": [{"id": int(i), "logprob": float(lp[i]), "twin_logprob": float(twin_lp[i])} for i in order],
    }
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)
        fh.write("\n")
    gap = max(abs(t["logprob"] - t["twin_logprob"]) for t in out["tops"])
    print(f"wrote {args.out}: Q8_0 against F32 twin up to {gap:.2e} in log-probability")


if __name__ == "__main__":
    main()
