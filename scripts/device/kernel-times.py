"""The heaviest kernels of a qwen35moe bench run with --kernel-times (its JSON on stdin): for the one-token
step and the longest chunk, the whole graph's time, then each kernel's dispatches and milliseconds (each
kernel's dispatches of one graph timed alone), heaviest first (scripts/device/qwen35moe-4g.sh, PART=kt)."""
import json
import sys

b = json.load(sys.stdin)
kt = b.get("kernel_times") or {}
top = int(sys.argv[1]) if len(sys.argv) > 1 else 10
for graph in ("step", "chunk"):
    # The first row is the whole graph in one submission, the others each kernel's dispatches alone.
    whole, *kernels = kt.get(graph) or [["none", 0, 0.0]]
    rows = sorted(kernels, key=lambda r: -r[2])
    alone = sum(r[2] for r in rows)
    cores = "  (tensor cores)" if b.get("tensor_prefill") else ""
    print(f"{graph}: {whole[1]} dispatches, {whole[2]:.2f} ms whole ({alone:.2f} ms the kernels alone){cores}")
    for name, n, ms in rows[:top]:
        print(f"  {name:36} x{n:<4} {ms:8.3f} ms")
