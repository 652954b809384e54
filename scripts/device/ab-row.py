"""One line of a qwen35moe bench row (its JSON on stdin): the build, round and workload it ran, then its
decode and prefill speeds, chunk length, pool and CPU tier counters (scripts/device/qwen35moe-4g.sh)."""
import json
import sys

b = json.load(sys.stdin)
p = b.get("pool") or {}
pre = p.get("prefill") or {}
build, rnd, workload = sys.argv[1], sys.argv[2], sys.argv[3]
workload = "uniform" if "uniform" in workload else "calibrated" if workload else "own routing"
print(
    f"{build:9} r{rnd} {workload:11}: decode {b['decode_tok_s']:6.2f}  prefill {b['prefill_tok_s']:6.1f}"
    f" (first {b['first_prefill_tok_s']:6.1f})  chunks {b.get('max_chunk')}  slots {p.get('slots')}"
    f"  hits {p.get('hits_per_token', 0):.1f}  cpu {p.get('cpu_experts_per_token', 0):.1f} picks"
    f" (arena {(p.get('cpu') or {}).get('arena_per_token', 0):.1f})"
    f" {p.get('cpu_ms_per_token', 0):.2f} ms  gpu wait {p.get('gpu_wait_ms_per_token', 0):.2f} ms"
    f"  prefill read {pre.get('pool_gb', 0):.1f} GB" + ("  tensor cores" if b.get("tensor_prefill") else "")
)
