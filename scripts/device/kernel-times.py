"""The heaviest kernels of a qwen35moe bench run with --kernel-times (its JSON on stdin): for the one-token
step and the longest chunk, each kernel's dispatches and milliseconds (each kernel's dispatches of one graph
timed alone), heaviest first, and the totals (scripts/device/qwen35moe-4g.sh, PART=kt)."""
import json
import sys

b = json.load(sys.stdin)
kt = b.get("kernel_times") or {}
top = int(sys.argv[1]) if len(sys.argv) > 1 else 10
for graph in ("step", "chunk"):
    rows = sorted(kt.get(graph) or [], key=lambda r: -r[2])
    total_n, total_ms = sum(r[1] for r in rows), sum(r[2] for r in rows)
    print(f"{graph}: {total_n} dispatches, {total_ms:.2f} ms" + ("  (tensor cores)" if b.get("tensor_prefill") else ""))
    for name, n, ms in rows[:top]:
        print(f"  {name:36} x{n:<4} {ms:8.3f} ms")
