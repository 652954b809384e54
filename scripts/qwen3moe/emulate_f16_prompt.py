#!/usr/bin/env python3
"""Why `tensor_prefill` can move a golden's log-probabilities by ~0.2: a float64 numpy forward pass (the
golden script's) over the prompt and the golden's ids, once exact and once with the prompt's rows run as
the tensor-core GEMMs do (weights q*d and activations rounded to f16; K and V f16 everywhere). Prints the
tokens whose top-k expert set differs between the two and each step's |d logprob| against the golden.

Usage: emulate_f16_prompt.py FIXTURE.gguf tests/data/golden-NAME.json   (FIXTURE from the golden's synth_args)
"""
import os, sys, json, numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf import GGUFReader
import llama_golden as lg
model, gold = sys.argv[1], json.load(open(sys.argv[2]))
r = GGUFReader(model)
W = {t.name: lg.as_f32(t).astype(np.float64) for t in r.tensors}
f = lambda k: r.fields["qwen3moe." + k].contents()
L, NH, NKV, HD = f("block_count"), f("attention.head_count"), f("attention.head_count_kv"), f("attention.key_length")
K, eps, base = f("expert_used_count"), f("attention.layer_norm_rms_epsilon"), f("rope.freq_base")
rms = lambda x, w: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w
h16 = lambda a: a.astype(np.float16).astype(np.float64)
rope = lambda x, pos: lg.neox_rope(x, pos, base)
P = len(gold["prompt_ids"]); toks = gold["prompt_ids"] + gold["ids"][:-1]; T = len(toks)
def mm(h, wt, tensor):  # rows < P on tensor cores when asked
    out = h @ wt.T
    if tensor:
        out[:P] = h16(h[:P]) @ h16(wt).T
    return out
def forward(tensor):
    pos, x = np.arange(T, dtype=np.float64), W["token_embd.weight"][toks]
    sets = []
    for l in range(L):
        w = lambda n: W[f"blk.{l}.{n}.weight"]
        h = rms(x, w("attn_norm"))
        q = rope(rms(mm(h, w("attn_q"), tensor).reshape(T, NH, HD), w("attn_q_norm")), pos)
        k = h16(rope(rms(mm(h, w("attn_k"), tensor).reshape(T, NKV, HD), w("attn_k_norm")), pos))
        v = h16(mm(h, w("attn_v"), tensor).reshape(T, NKV, HD))
        k, v = np.repeat(k, NH // NKV, 1), np.repeat(v, NH // NKV, 1)
        sc = np.einsum("thd,shd->hts", q, k) / np.sqrt(HD) + np.triu(np.full((T, T), -np.inf), 1)
        sc = np.exp(sc - sc.max(-1, keepdims=True)); sc /= sc.sum(-1, keepdims=True)
        x = x + mm(np.einsum("hts,shd->thd", sc, v).reshape(T, NH * HD), w("attn_output"), tensor)
        h = rms(x, w("ffn_norm"))
        gl = h @ w("ffn_gate_inp").T
        pr = np.exp(gl - gl.max(-1, keepdims=True)); pr /= pr.sum(-1, keepdims=True)
        out = np.zeros_like(x)
        lsets = []
        for t in range(T):
            top = np.argsort(-pr[t], kind="stable")[:K]
            lsets.append(frozenset(top.tolist()))
            tc = tensor and t < P
            g = h16 if tc else (lambda a: a)
            for e, wt in zip(top, pr[t, top] / pr[t, top].sum()):
                a, u = g(w("ffn_gate_exps")[e]) @ g(h[t]), g(w("ffn_up_exps")[e]) @ g(h[t])
                out[t] += wt * (g(w("ffn_down_exps")[e]) @ g(a / (1 + np.exp(-a)) * u))
        sets.append(lsets)
        x = x + out
    lg_ = rms(x, W["output_norm.weight"]) @ W["output.weight"].T
    lp = lg_ - lg_.max(-1, keepdims=True); lp -= np.log(np.exp(lp).sum(-1, keepdims=True))
    return lp[P - 1:], sets
ref, s0 = forward(False)
ten, s1 = forward(True)
for l in range(L):
    sw = [t for t in range(T) if s0[l][t] != s1[l][t]]
    print(f"layer {l}: tokens whose expert set differs: {sw}")
d = [max(abs(ten[s][e["id"]] - e["logprob"]) for e in gold["tops"][s]) for s in range(len(gold["ids"]))]
d0 = [max(abs(ref[s][e["id"]] - e["logprob"]) for e in gold["tops"][s]) for s in range(len(gold["ids"]))]
print("exact vs golden worst %.1e; f16 prompt vs golden per step:" % max(d0), " ".join(f"{x:.1e}" for x in d[:8]), "... worst %.2e" % max(d))
