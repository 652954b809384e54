#!/usr/bin/env python3
"""Record llama.cpp's greedy output for a tiny qwen3moe or qwen35moe GGUF as a golden file.

Usage:
  llama_golden.py MODEL.gguf --ids 1,2,3 -n 32 --top 5 --out golden.json [--keep-twin PATH]
  llama_golden.py MODEL.gguf --check-twin [--keep-twin PATH]   # self-test, no llama.cpp

Why an "F32 twin": llama.cpp's CPU backend quantises the *activations* to Q8_0
before every matmul whose weights are Q8_0 (vec_dot_type of Q8_0 is Q8_0), which
moves the logits by ~0.1 and makes it useless as a reference for an engine that
multiplies dequantised weights with F32 activations.  So we first write a twin
of MODEL.gguf: identical metadata (every key/value, in order, byte-for-byte,
incl. tokenizer arrays and empty arrays) and identical tensors in the same order
with the same ggml dims, but every non-F32 tensor replaced by gguf-py's
dequantisation stored as F32.  llama.cpp then runs the twin with an F32 KV
cache and flash attention off; the golden file records, per greedy step, the
argmax id, the top-k (id, log-softmax in float64) and the top-2 logit margin.
"""
import argparse, hashlib, importlib.metadata, json, os, sys, tempfile

import numpy as np
import gguf
from gguf import GGUFReader, GGUFWriter, GGMLQuantizationType as QT, GGUFValueType as VT


class RawKV:
    """A metadata value kept as its original bytes (type tag + payload)."""
    def __init__(self, raw: bytes):
        self.raw = raw


class RawKVWriter(GGUFWriter):
    # GGUFWriter refuses empty arrays and cannot express nested arrays; writing
    # the original bytes keeps every key/value exactly as it was.
    def _pack_val(self, val, vtype, add_vtype, sub_type=None):
        if isinstance(val, RawKV):
            assert add_vtype
            return val.raw
        return super()._pack_val(val, vtype, add_vtype, sub_type)


def meta_fields(r: GGUFReader):
    return [f for f in r.fields.values() if not f.name.startswith("GGUF.")]


def field_raw(f) -> bytes:  # parts = [key_len, key, type, value parts...]
    return b"".join(p.tobytes() for p in f.parts[2:])


def as_f32(t) -> np.ndarray:
    """Tensor values as F32 in numpy order (last axis = ggml ne[0])."""
    if t.tensor_type == QT.F32:
        return np.asarray(t.data, dtype=np.float32)
    return np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)


def write_twin(src: str, dst: str) -> None:
    r = GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = RawKVWriter(dst, arch)
    w.kv_data[0].clear()  # drop the writer's own general.architecture; copy as written, in order
    w.data_alignment = r.alignment
    for f in meta_fields(r):
        w.add_key_value(f.name, RawKV(field_raw(f)), VT(int(f.parts[2][0])))
    for t in r.tensors:
        a = as_f32(t)
        ne = [int(x) for x in t.shape]
        if list(a.shape[::-1]) != ne:
            a = a.reshape(ne[::-1])
        w.add_tensor(t.name, np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def check_twin(src: str, dst: str) -> list:
    """Return a list of mismatches between the original and its twin (empty = OK)."""
    a, b = GGUFReader(src), GGUFReader(dst)
    errs = []
    fa, fb = meta_fields(a), meta_fields(b)
    if [f.name for f in fa] != [f.name for f in fb]:
        errs.append(f"metadata keys/order differ: {[f.name for f in fa]} vs {[f.name for f in fb]}")
    for x, y in zip(fa, fb):
        if x.types != y.types or field_raw(x) != field_raw(y):
            errs.append(f"metadata {x.name}: types {x.types} vs {y.types} or value differs")
        elif x.types and x.types[-1] != VT.ARRAY and x.contents() != y.contents():
            errs.append(f"metadata {x.name}: contents differ")
    if [t.name for t in a.tensors] != [t.name for t in b.tensors]:
        errs.append("tensor names/order differ")
    for x, y in zip(a.tensors, b.tensors):
        if list(map(int, x.shape)) != list(map(int, y.shape)):
            errs.append(f"{x.name}: ne {list(x.shape)} vs {list(y.shape)}")
            continue
        if y.tensor_type != QT.F32:
            errs.append(f"{x.name}: twin type {y.tensor_type.name}")
            continue
        want = np.asarray(gguf.quants.dequantize(x.data, x.tensor_type), dtype=np.float32).reshape(-1)
        got = np.asarray(y.data, dtype=np.float32).reshape(-1)
        if want.shape != got.shape or not np.array_equal(want.view(np.uint32), got.view(np.uint32)):
            errs.append(f"{x.name}: values differ from gguf-py dequantisation")
    return errs


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def run_llama(twin: str, prompt: list, n: int, top: int, seed: int):
    import llama_cpp
    llm = llama_cpp.Llama(
        model_path=twin, n_ctx=max(512, len(prompt) + n + 1), n_batch=max(512, len(prompt)),
        n_ubatch=max(512, len(prompt)), n_threads=2, n_threads_batch=2, n_gpu_layers=0,
        type_k=0, type_v=0, flash_attn=False, logits_all=True, seed=seed, verbose=False)
    llm.eval(prompt)
    ids, tops, margins = [], [], []
    for _ in range(n):
        logits = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        if not np.all(np.isfinite(logits)):
            sys.exit(f"non-finite logits at step {len(ids)}")
        m = logits.max()
        lp = logits - (m + np.log(np.exp(logits - m).sum()))
        order = np.argsort(-logits, kind="stable")  # ties -> lower id first
        best = int(order[0])
        ids.append(best)
        tops.append([{"id": int(i), "logprob": float(lp[i])} for i in order[:top]])
        margins.append(float(logits[order[0]] - logits[order[1]]))
        llm.eval([best])
    return llama_cpp.__version__, ids, tops, margins


def neox_rope(x: np.ndarray, pos: np.ndarray, base: float) -> np.ndarray:
    """NeoX RoPE of x [T, heads, head_dim] at positions pos [T]: pairs (i, i + head_dim / 2)."""
    half = x.shape[-1] // 2
    ang = pos[:, None] * (base ** (-np.arange(half) * 2 / x.shape[-1]))[None]
    c, s = np.cos(ang)[:, None], np.sin(ang)[:, None]
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * c - b * s, a * s + b * c], -1)


def check_steps(forward, prompt: list, ids: list, tops: list) -> list:
    """Runs `forward` (tokens -> last logits, router gap) over the prompt and each greedy id after it,
    checks llama.cpp's top log-probabilities against it (|diff| <= 1e-5), and returns the gaps."""
    toks, margins = list(prompt), []
    for step, want in enumerate(ids):
        lg, gap = forward(toks)
        lp = lg - lg.max() - np.log(np.exp(lg - lg.max()).sum())
        worst = max(abs(lp[e["id"]] - e["logprob"]) for e in tops[step])
        if worst > 1e-5:
            sys.exit(f"step {step}: llama.cpp and the numpy reference differ by {worst:.2e} in log-probability")
        margins.append(float(gap))
        toks.append(want)
    return margins


def reference_router_margins(model: str, prompt: list, ids: list, tops: list) -> list:
    """An independent float64 numpy forward pass over gguf-py's dequantised weights (llama.cpp's op order:
    RMSNorm, per-head QK-norm, NeoX RoPE, GQA softmax attention, softmax router, top-k renormalised, SiLU
    experts). Checks llama.cpp's top log-probabilities against it (|diff| <= 1e-5) and returns, per step, the
    smallest gap over layers between the k-th and (k+1)-th router logit of the step's token: where it is tiny,
    rounding anywhere (an f16 KV cache) may swap an expert, a routing near-tie."""
    r = GGUFReader(model)
    W = {t.name: as_f32(t).astype(np.float64) for t in r.tensors}
    f = lambda k: r.fields["qwen3moe." + k].contents()
    L, NH, NKV, HD = f("block_count"), f("attention.head_count"), f("attention.head_count_kv"), f("attention.key_length")
    K, eps, base = f("expert_used_count"), f("attention.layer_norm_rms_epsilon"), f("rope.freq_base")
    rms = lambda x, w: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    rope = lambda x, pos: neox_rope(x, pos, base)

    def forward(toks):
        T, gaps = len(toks), []
        pos, x = np.arange(T, dtype=np.float64), W["token_embd.weight"][toks]
        for l in range(L):
            w = lambda n: W[f"blk.{l}.{n}.weight"]
            h = rms(x, w("attn_norm"))
            q = rope(rms((h @ w("attn_q").T).reshape(T, NH, HD), w("attn_q_norm")), pos)
            k = rope(rms((h @ w("attn_k").T).reshape(T, NKV, HD), w("attn_k_norm")), pos)
            v = (h @ w("attn_v").T).reshape(T, NKV, HD)
            k, v = np.repeat(k, NH // NKV, 1), np.repeat(v, NH // NKV, 1)
            sc = np.einsum("thd,shd->hts", q, k) / np.sqrt(HD) + np.triu(np.full((T, T), -np.inf), 1)
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            sc /= sc.sum(-1, keepdims=True)
            x = x + np.einsum("hts,shd->thd", sc, v).reshape(T, NH * HD) @ w("attn_output").T
            h = rms(x, w("ffn_norm"))
            gl = h @ w("ffn_gate_inp").T
            srt = -np.sort(-gl[-1])
            gaps.append(srt[K - 1] - srt[K])
            pr = np.exp(gl - gl.max(-1, keepdims=True))
            pr /= pr.sum(-1, keepdims=True)
            out = np.zeros_like(x)
            for t in range(T):
                top = np.argsort(-pr[t], kind="stable")[:K]
                for e, wt in zip(top, pr[t, top] / pr[t, top].sum()):
                    a, u = w("ffn_gate_exps")[e] @ h[t], w("ffn_up_exps")[e] @ h[t]
                    out[t] += wt * (w("ffn_down_exps")[e] @ (a / (1 + np.exp(-a)) * u))
            x = x + out
        return rms(x[-1], W["output_norm.weight"]) @ W["output.weight"].T, min(gaps)

    return check_steps(forward, prompt, ids, tops)


def reference_router_margins_qwen35moe(model: str, prompt: list, ids: list, tops: list) -> list:
    """As reference_router_margins, for qwen35moe (../shared/QWEN35MOE.md section 3): Gated DeltaNet layers
    (projections, causal conv over the saved inputs, SiLU, L2-normalised q/k, the delta rule per v head with
    q/k head h mod H_k, the gated RMSNorm, the output projection) and gated attention layers (per-head
    [q | gate] rows, q/k norms, partial NeoX RoPE on the first R dims with IMROPE's sections, sigmoid gate),
    softmax top-k routed experts plus the sigmoid-gated shared expert; one token at a time, float64."""
    r = GGUFReader(model)
    W = {t.name: as_f32(t).astype(np.float64) for t in r.tensors}
    f = lambda k, d=None: r.fields["qwen35moe." + k].contents() if "qwen35moe." + k in r.fields else d
    L, NH, E = f("block_count"), f("attention.head_count"), f("embedding_length")
    NKV, HD = f("attention.head_count_kv", NH), f("attention.key_length", E // NH)
    R, sec, base = f("rope.dimension_count", HD), list(f("rope.dimension_sections")), f("rope.freq_base", 1e4)
    K, eps, interval = f("expert_used_count"), f("attention.layer_norm_rms_epsilon"), f("full_attention_interval", 4)
    KC, S, HK, HV = f("ssm.conv_kernel"), f("ssm.state_size"), f("ssm.group_count"), f("ssm.time_step_rank")
    KD, VD = HK * S, HV * S
    rms = lambda x, w: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w
    sig = lambda x: 1 / (1 + np.exp(-x))
    silu = lambda x: x * sig(x)
    recurrent = [(i + 1) % interval != 0 for i in range(L)]

    def rotates(i):
        s_ = i % sum(sec)
        return s_ < 3 * sec[s_ % 3]

    def rope(x, pos):  # x [heads, HD]
        x = x.copy()
        for i in range(R // 2):
            if rotates(i):
                th = pos * base ** (-2 * i / R)
                a, b = x[:, i].copy(), x[:, i + R // 2].copy()
                x[:, i], x[:, i + R // 2] = a * np.cos(th) - b * np.sin(th), a * np.sin(th) + b * np.cos(th)
        return x

    def forward(toks):
        gaps = []
        kv = {l: ([], []) for l in range(L)}
        conv = {l: np.zeros((KC - 1, 2 * KD + VD)) for l in range(L)}
        M = {l: np.zeros((HV, S, S)) for l in range(L)}
        for pos, tok in enumerate(toks):
            x = W["token_embd.weight"][tok].copy()
            for l in range(L):
                w = lambda n: W[f"blk.{l}.{n}.weight"]
                a = rms(x, w("attn_norm"))
                if recurrent[l]:
                    X, z = w("attn_qkv") @ a, w("attn_gate") @ a
                    beta = sig(w("ssm_beta") @ a)
                    al = w("ssm_alpha") @ a + W[f"blk.{l}.ssm_dt.bias"]
                    gamma = W[f"blk.{l}.ssm_a"] * np.where(al > 20, al, np.log1p(np.exp(np.minimum(al, 20))))
                    win = np.vstack([conv[l], X[None]])  # [KC, C], oldest first
                    u = silu((win.T * w("ssm_conv1d")).sum(-1))
                    conv[l] = win[1:]
                    q = u[:KD].reshape(HK, S)
                    k = u[KD:2 * KD].reshape(HK, S)
                    v = u[2 * KD:].reshape(HV, S)
                    q = q / np.sqrt((q * q).sum(-1, keepdims=True) + eps)
                    k = k / np.sqrt((k * k).sum(-1, keepdims=True) + eps)
                    y = []
                    for h in range(HV):
                        j = h % HK
                        M[l][h] *= np.exp(gamma[h])
                        delta = beta[h] * (v[h] - M[l][h] @ k[j])
                        M[l][h] += np.outer(delta, k[j])
                        o = M[l][h] @ q[j] / np.sqrt(S)
                        y.append(rms(o, w("ssm_norm")) * silu(z[h * S:(h + 1) * S]))
                    x = x + w("ssm_out") @ np.concatenate(y)
                else:
                    qg = (w("attn_q") @ a).reshape(NH, 2 * HD)
                    q = rope(rms(qg[:, :HD], w("attn_q_norm")), pos)
                    g = qg[:, HD:]
                    k = rope(rms((w("attn_k") @ a).reshape(NKV, HD), w("attn_k_norm")), pos)
                    v = (w("attn_v") @ a).reshape(NKV, HD)
                    kv[l][0].append(k)
                    kv[l][1].append(v)
                    Ks, Vs = np.stack(kv[l][0]), np.stack(kv[l][1])  # [T, NKV, HD]
                    o = np.zeros((NH, HD))
                    for h in range(NH):
                        j = h // (NH // NKV)
                        sc = Ks[:, j] @ q[h] / np.sqrt(HD)
                        p = np.exp(sc - sc.max())
                        o[h] = (p / p.sum()) @ Vs[:, j]
                    x = x + w("attn_output") @ (o * sig(g)).reshape(-1)
                uu = rms(x, w("post_attention_norm"))
                gl = w("ffn_gate_inp") @ uu
                if pos == len(toks) - 1:
                    srt = -np.sort(-gl)
                    gaps.append(srt[K - 1] - srt[K])
                pr = np.exp(gl - gl.max())
                pr /= pr.sum()
                top = np.argsort(-pr, kind="stable")[:K]
                out = np.zeros(E)
                for e, wt in zip(top, pr[top] / max(pr[top].sum(), 6.103515625e-5)):
                    ga, up = w("ffn_gate_exps")[e] @ uu, w("ffn_up_exps")[e] @ uu
                    out += wt * (w("ffn_down_exps")[e] @ (silu(ga) * up))
                ga, up = w("ffn_gate_shexp") @ uu, w("ffn_up_shexp") @ uu
                out += sig(w("ffn_gate_inp_shexp") @ uu) * (w("ffn_down_shexp") @ (silu(ga) * up))
                x = x + out
        head = W.get("output.weight", W["token_embd.weight"])
        return head @ rms(x, W["output_norm.weight"]), min(gaps)

    return check_steps(forward, prompt, ids, tops)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--ids", help="comma-separated prompt token ids (fed as-is, no BOS)")
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out")
    ap.add_argument("--keep-twin", metavar="PATH", help="write the F32 twin here and keep it")
    ap.add_argument("--check-twin", action="store_true", help="self-test the twin writer only")
    ap.add_argument("--synth-args", default="", help="the synth-gguf arguments that made MODEL (kept in the golden)")
    ap.add_argument("--quantized", metavar="FTYPE",
                    help="MODEL is llama.cpp's quantisation (quantize_fixture.py) to FTYPE of the F32 file that "
                         "--synth-args make, committed beside the golden as its \"fixture\"")
    args = ap.parse_args()

    tmpdir = None
    twin = args.keep_twin
    if twin is None:
        tmpdir = tempfile.TemporaryDirectory()
        twin = os.path.join(tmpdir.name, "twin-f32.gguf")
    write_twin(args.model, twin)
    errs = check_twin(args.model, twin)
    for e in errs:
        print("twin mismatch:", e, file=sys.stderr)
    if errs:
        sys.exit(1)
    if args.check_twin:
        print(f"twin OK: {len(GGUFReader(twin).tensors)} tensors, metadata identical, values == gguf-py dequantisation")
        return
    if not args.ids or not args.out:
        ap.error("--ids and --out are required unless --check-twin")
    prompt = [int(x) for x in args.ids.split(",") if x.strip()]
    version, ids, tops, margins = run_llama(twin, prompt, args.n, args.top, args.seed)
    arch = GGUFReader(args.model).fields["general.architecture"].contents()
    reference = reference_router_margins_qwen35moe if arch == "qwen35moe" else reference_router_margins
    router_margins = reference(args.model, prompt, ids, tops)
    out = {
        "generator": f"llama-cpp-python {version} (llama.cpp via PyPI), F32 twin, F32 KV, flash attention off",
        "llama_cpp_python": version,
        "gguf_py": importlib.metadata.version("gguf"),
        "fixture": os.path.basename(args.model),
        "fixture_sha256": sha256(args.model),
        "twin": "f32",
        "synth_args": args.synth_args,
        **({"quantized": f"llama_model_quantize {args.quantized.upper()} (llama-cpp-python {version}, one "
                         "thread, no imatrix) of the synth_args file"} if args.quantized else {}),
        "prompt_ids": prompt,
        "ids": ids,
        "tops": tops,
        "margins": margins,
        "router_margins": router_margins,
        "reference": "numpy float64 forward pass in this script: llama.cpp's top log-probabilities within 1e-5",
    }
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)
        fh.write("\n")
    print(f"wrote {args.out}: ids={ids}")


if __name__ == "__main__":
    main()
