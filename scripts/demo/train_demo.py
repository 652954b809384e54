#!/usr/bin/env python3
"""Trains the demo model `diskformer chat` runs when no --model is given: a small qwen3moe (4 layers, hidden
128, 8 experts of which the router picks 2, a byte-level BPE of 1,024 tokens) on Ambrose Bierce's "The Devil's
Dictionary" (1911, public domain), as Debian's package `dict-devil` ships it, set as chats in Qwen3's template
("What is an abstainer?" answered with the dictionary's entry). Writes the GGUF (Q8_0 matrices, F32 norms and
routers) with its tokenizer, and a JSON line of what it did.

    python3 -m venv /tmp/demo-venv && /tmp/demo-venv/bin/pip install "jax[cpu]==0.10.2" numpy==2.4.6 \\
        gguf==0.19.0 tokenizers==0.23.3
    /tmp/demo-venv/bin/python scripts/demo/train_demo.py --out demo/devil-moe.gguf

Without --corpus it fetches the package with `apt-get download dict-devil` (Debian's archive is reachable
from the development machine). 37 minutes on two cores; XLA's CPU kernels may round differently on another
machine, so a rerun elsewhere makes a model of the same quality, not the same bytes. The model is the
engine's architecture exactly as llama.cpp's qwen3moe runs it: RMSNorm, per-head q/k RMSNorm, NeoX RoPE
(base 1e6), grouped-query attention, a softmax router whose top-k weights are renormalised, SwiGLU experts; trained in f32 with a small
load-balancing loss so that the router spreads its picks (a real routing workload, if a small one).
"""

import argparse
import glob
import gzip
import hashlib
import json
import math
import os
import re
import subprocess
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

import gguf

# Qwen2's pre-tokenizer (its tokenizer.json), which the engine's `qwen2` pre-tokenizer reproduces.
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
# After the byte tokens and merges, as in Qwen3's vocabulary (types: 3 control, 4 user defined).
SPECIALS = [("<|endoftext|>", 3), ("<|im_start|>", 3), ("<|im_end|>", 3), ("<think>", 4), ("</think>", 4)]
SHAPE = dict(layers=4, hidden=128, heads=4, kv_heads=2, head_dim=32, experts=8, top_k=2, ffn=128, vocab=1024)
ROPE_BASE, EPS, CONTEXT = 1e6, 1e-6, 2048
# Each holds the word after a space, as the answers of nouns do ("A cynic, n. …"), so that question and answer
# share its tokens (answers opening "Cynic, n." had the headword right in 16 of 40 random entries, these 19).
QUESTIONS = [
    "What is {w}?", "Define {w}.", "What does {w} mean?", "Tell me about {w}.", "What is the meaning of {w}?",
    "Explain {w}.",
]


def dictd_number(s):
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    n = 0
    for c in s:
        n = n * 64 + alphabet.index(c)
    return n


def fetch_corpus():
    """`apt-get download dict-devil`, unpacked: the path of its devil.dict.dz and the package's file name."""
    d = tempfile.mkdtemp()
    subprocess.run(["apt-get", "download", "dict-devil"], cwd=d, check=True, capture_output=True)
    deb = glob.glob(os.path.join(d, "dict-devil_*.deb"))[0]
    subprocess.run(["dpkg", "-x", deb, os.path.join(d, "x")], check=True)
    return os.path.join(d, "x/usr/share/dictd/devil.dict.dz"), os.path.basename(deb)


def entries(dict_dz):
    """(headword, entry text) for each of the dictionary's entries, whitespace collapsed, cross-reference
    braces dropped."""
    index = dict_dz[: -len(".dict.dz")] + ".index"
    data = gzip.open(dict_dz).read()
    out = []
    for line in open(index, encoding="utf-8"):
        word, start, length = line.rstrip("\n").split("\t")
        if word.startswith("00database"):
            continue
        text = data[dictd_number(start) : dictd_number(start) + dictd_number(length)].decode("utf-8", "replace")
        text = re.sub(r"\{([^}]*)\}", r"\1", text)
        text = re.sub(r"\s+", " ", text).strip()
        head, _, rest = text.partition(",")
        if not rest:
            continue
        out.append((head.strip(), head.strip().capitalize() + "," + rest))
    return out


def chats(items, rng):
    """Each entry as three one-turn chats in Qwen3's template with thinking off, as the engine renders them: a
    noun's answer opens with its article ("What is a cynic?" "A cynic, n. A blackguard whose …"), the other
    entries' with the headword as Bierce wrote it."""
    texts = []
    for head, entry in items:
        word = head.lower()
        article = "an" if word[:1] in "aeiou" else "a"
        questions = list(rng.choice(QUESTIONS, size=2, replace=False))
        if re.match(r"[^,]*, n\.", entry):
            entry = article.capitalize() + " " + word + entry[len(head) :]
            questions.append(f"What is {article} {{w}}?")
        else:
            questions.append("What is {w}?")
        for q in questions:
            texts.append(("user\n" + q.format(w=word), entry))
    rng.shuffle(texts)
    return texts


def train_tokenizer(texts):
    """A byte-level BPE with Qwen2's pre-tokenizer: the merges, learnt on the chats' text."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    merges_wanted = SHAPE["vocab"] - 256 - len(SPECIALS)
    trainer = trainers.BpeTrainer(
        vocab_size=256 + merges_wanted,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [q for q, _ in texts] + [a for _, a in texts] + ["assistant\n", "\n\n", "\n"]
    tok.train_from_iterator(corpus, trainer)
    merges = json.loads(tok.to_str())["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges][:merges_wanted]
    return tok, merges


def vocabulary(merges):
    """Tokens in id order: the 256 bytes (as byte-level text), each merge's result, the specials; and types."""
    byte_text = pre_tokenizers.ByteLevel.alphabet()
    # The byte-level alphabet in byte order (GPT-2's mapping).
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    by_byte = dict(zip(bs, (chr(c) for c in cs)))
    assert set(by_byte.values()) == set(byte_text)
    tokens = [by_byte[b] for b in range(256)] + [m.replace(" ", "") for m in merges]
    types = [1] * len(tokens)
    # Unused rows, should the corpus give fewer merges than asked (type 5, unused).
    for i in range(len(tokens), SHAPE["vocab"] - len(SPECIALS)):
        tokens.append(f"[PAD{i}]")
        types.append(5)
    for text, ty in SPECIALS:
        tokens.append(text)
        types.append(ty)
    assert len(tokens) == SHAPE["vocab"], len(tokens)
    return tokens, types


def encode_chats(tok, texts, ids):
    """Token ids of every chat, concatenated: the rendered template, specials as their ids."""
    enc = lambda s: [ids[t] for t in tok.encode(s).tokens]
    s = {text: ids[text] for text, _ in SPECIALS}
    out = []
    for q, a in texts:
        out += [s["<|im_start|>"]] + enc(q) + [s["<|im_end|>"]] + enc("\n") + [s["<|im_start|>"]]
        out += enc("assistant\n") + [s["<think>"]] + enc("\n\n") + [s["</think>"]] + enc("\n\n" + a)
        out += [s["<|im_end|>"]] + enc("\n")
    return np.array(out, dtype=np.int32)


def init(key):
    h, q, kv, e, f, v = (SHAPE[k] for k in ("hidden", "heads", "kv_heads", "experts", "ffn", "vocab"))
    d = SHAPE["head_dim"]
    keys = iter(jax.random.split(key, 64))
    normal = lambda *shape, std=0.02: std * jax.random.normal(next(keys), shape, jnp.float32)
    out_std = 0.02 / math.sqrt(2 * SHAPE["layers"])
    p = {"embd": normal(v, h), "out_norm": jnp.ones(h), "output": normal(v, h), "layers": []}
    for _ in range(SHAPE["layers"]):
        p["layers"].append(
            {
                "attn_norm": jnp.ones(h),
                "q": normal(q * d, h),
                "k": normal(kv * d, h),
                "v": normal(kv * d, h),
                "o": normal(h, q * d, std=out_std),
                "q_norm": jnp.ones(d),
                "k_norm": jnp.ones(d),
                "ffn_norm": jnp.ones(h),
                "router": normal(e, h),
                "gate": normal(e, f, h),
                "up": normal(e, f, h),
                "down": normal(e, h, f, std=out_std),
            }
        )
    return p


def rms(x, w):
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + EPS) * w


def rope(x):
    """NeoX RoPE over the last dim of `x` [B, T, H, D] (pairs i, i + D/2), positions 0..T-1."""
    t, d = x.shape[1], x.shape[-1]
    theta = jnp.arange(t)[:, None] * ROPE_BASE ** (-2.0 * jnp.arange(d // 2) / d)
    cos, sin = jnp.cos(theta)[None, :, None, :], jnp.sin(theta)[None, :, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def forward(p, ids):
    """Logits [B, T, V] and the load-balancing loss."""
    b, t = ids.shape
    nh, nkv, d, e, k = (SHAPE[s] for s in ("heads", "kv_heads", "head_dim", "experts", "top_k"))
    x = p["embd"][ids]
    mask = jnp.tril(jnp.ones((t, t), bool))
    balance = 0.0
    for lp in p["layers"]:
        xn = rms(x, lp["attn_norm"])
        q = rope(rms((xn @ lp["q"].T).reshape(b, t, nh, d), lp["q_norm"]))
        kk = rope(rms((xn @ lp["k"].T).reshape(b, t, nkv, d), lp["k_norm"]))
        vv = (xn @ lp["v"].T).reshape(b, t, nkv, d)
        # Query head h reads kv head h // (nh / nkv), as llama.cpp groups them.
        kk, vv = jnp.repeat(kk, nh // nkv, axis=2), jnp.repeat(vv, nh // nkv, axis=2)
        s = jnp.einsum("bqhd,bkhd->bhqk", q, kk) / math.sqrt(d)
        a = jax.nn.softmax(jnp.where(mask, s, -1e30), -1)
        x = x + jnp.einsum("bhqk,bkhd->bqhd", a, vv).reshape(b, t, nh * d) @ lp["o"].T
        hn = rms(x, lp["ffn_norm"])
        logits = hn @ lp["router"].T
        probs = jax.nn.softmax(logits, -1)
        top, idx = jax.lax.top_k(logits, k)
        picked = jax.nn.one_hot(idx, e).sum(-2)  # [B, T, E]
        w = probs * picked
        w = w / w.sum(-1, keepdims=True)
        g = jnp.einsum("bth,efh->btef", hn, lp["gate"])
        u = jnp.einsum("bth,efh->btef", hn, lp["up"])
        y = jnp.einsum("btef,ehf->bteh", jax.nn.silu(g) * u, lp["down"])
        x = x + jnp.einsum("bte,bteh->bth", w, y)
        # Switch-style: experts' shares of the picks times their mean router probability.
        balance += e * jnp.sum(picked.mean((0, 1)) / k * probs.mean((0, 1)))
    return rms(x, p["out_norm"]) @ p["output"].T, balance / SHAPE["layers"]


def loss_fn(p, batch):
    logits, balance = forward(p, batch[:, :-1])
    logp = jax.nn.log_softmax(logits, -1)
    nll = -jnp.take_along_axis(logp, batch[:, 1:, None], -1).mean()
    return nll + 0.01 * balance, (nll, balance)


def make_step(lr_at, wd=0.01, b1=0.9, b2=0.98):
    @jax.jit
    def step(p, m, v, batch, i):
        (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(p, batch)
        lr = lr_at(i)
        m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
        v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
        c1, c2 = 1 - b1 ** (i + 1), 1 - b2 ** (i + 1)
        p = jax.tree.map(
            lambda p, m, v: p - lr * ((m / c1) / (jnp.sqrt(v / c2) + 1e-8) + wd * p * (p.ndim > 1)), p, m, v
        )
        return p, m, v, aux

    return step


def q8_0(a):
    return gguf.quants.quantize(np.asarray(a, np.float32), gguf.GGMLQuantizationType.Q8_0)


def write_gguf(path, p, tokens, types, merges, source):
    a = "qwen3moe"
    w = gguf.GGUFWriter(path, a)
    s = SHAPE
    w.add_name("diskformer demo (The Devil's Dictionary)")
    w.add_string("general.source.url", source)
    w.add_string("general.license", "the weights: trained on a public-domain text (Ambrose Bierce, 1911)")
    w.add_uint32(f"{a}.block_count", s["layers"])
    w.add_uint32(f"{a}.context_length", CONTEXT)
    w.add_uint32(f"{a}.embedding_length", s["hidden"])
    w.add_uint32(f"{a}.feed_forward_length", s["ffn"] * s["top_k"])
    w.add_uint32(f"{a}.attention.head_count", s["heads"])
    w.add_uint32(f"{a}.attention.head_count_kv", s["kv_heads"])
    w.add_uint32(f"{a}.attention.key_length", s["head_dim"])
    w.add_uint32(f"{a}.attention.value_length", s["head_dim"])
    w.add_float32(f"{a}.rope.freq_base", ROPE_BASE)
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", EPS)
    w.add_uint32(f"{a}.expert_count", s["experts"])
    w.add_uint32(f"{a}.expert_used_count", s["top_k"])
    w.add_uint32(f"{a}.expert_feed_forward_length", s["ffn"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    ids = {t: i for i, t in enumerate(tokens)}
    w.add_bos_token_id(ids["<|endoftext|>"])
    w.add_eos_token_id(ids["<|im_end|>"])
    w.add_pad_token_id(ids["<|endoftext|>"])
    w.add_add_bos_token(False)
    q8 = gguf.GGMLQuantizationType.Q8_0
    f32 = lambda name, x: w.add_tensor(name, np.asarray(x, np.float32))
    quant = lambda name, x: w.add_tensor(name, q8_0(x), raw_dtype=q8)
    quant("token_embd.weight", p["embd"])
    for l, lp in enumerate(p["layers"]):
        t = lambda n: f"blk.{l}.{n}.weight"
        f32(t("attn_norm"), lp["attn_norm"])
        quant(t("attn_q"), lp["q"])
        quant(t("attn_k"), lp["k"])
        quant(t("attn_v"), lp["v"])
        quant(t("attn_output"), lp["o"])
        f32(t("attn_q_norm"), lp["q_norm"])
        f32(t("attn_k_norm"), lp["k_norm"])
        f32(t("ffn_norm"), lp["ffn_norm"])
        f32(t("ffn_gate_inp"), lp["router"])
        quant(t("ffn_gate_exps"), lp["gate"])
        quant(t("ffn_up_exps"), lp["up"])
        quant(t("ffn_down_exps"), lp["down"])
    f32("output_norm.weight", p["out_norm"])
    quant("output.weight", p["output"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--corpus", help="devil.dict.dz (its .index beside it); default: apt-get download dict-devil")
    ap.add_argument("--steps", type=int, default=1800)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    started = time.time()
    corpus, package = (args.corpus, None) if args.corpus else fetch_corpus()
    corpus_sha = hashlib.sha256(open(corpus, "rb").read()).hexdigest()
    rng = np.random.default_rng(args.seed)
    items = entries(corpus)
    texts = chats(items, rng)
    tok, merges = train_tokenizer(texts)
    tokens, types = vocabulary(merges)
    ids = {t: i for i, t in enumerate(tokens)}
    data = encode_chats(tok, texts, ids)
    print(f"{len(items)} entries, {len(texts)} chats, {len(data)} tokens", flush=True)

    warm = 50
    lr_at = lambda i: args.lr * jnp.minimum(1.0, (i + 1) / warm) * (
        0.1 + 0.45 * (1 + jnp.cos(jnp.pi * jnp.minimum(i, args.steps) / args.steps))
    )
    step = make_step(lr_at)
    p = init(jax.random.PRNGKey(args.seed))
    m = jax.tree.map(jnp.zeros_like, p)
    v = jax.tree.map(jnp.zeros_like, p)
    n = args.seq + 1
    for i in range(args.steps):
        starts = rng.integers(0, len(data) - n, args.batch)
        batch = jnp.asarray(np.stack([data[s : s + n] for s in starts]))
        p, m, v, (nll, balance) = step(p, m, v, batch, i)
        if i % 50 == 0 or i == args.steps - 1:
            print(f"step {i} loss {float(nll):.3f} balance {float(balance):.3f} ({time.time() - started:.0f} s)",
                  flush=True)
    source = "Debian package dict-devil" + (f" ({package})" if package else "") + f", devil.dict.dz sha256 {corpus_sha}"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_gguf(args.out, jax.tree.map(np.asarray, p), tokens, types, merges, source)
    print(json.dumps({
        "out": args.out, "sha256": hashlib.sha256(open(args.out, "rb").read()).hexdigest(),
        "corpus": source, "entries": len(items), "chats": len(texts), "tokens": int(len(data)),
        "steps": args.steps, "batch": args.batch, "seq": args.seq, "final_loss": float(nll),
        "seconds": round(time.time() - started), "jax": jax.__version__, "gguf": "0.19.0",
    }))


if __name__ == "__main__":
    main()
