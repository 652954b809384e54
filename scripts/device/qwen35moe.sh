#!/usr/bin/env bash
# qwen35moe on the H200 (issue #34): a Qwen3.6-35B-A3B-shaped synthetic GGUF (synth-gguf --shape qwen36-35b-a3b,
# every matrix of MATRICES, default q8_0) in /dev/shm, then examples/bench on it (qwen35moe::Model: every
# weight on the GPU unless BUDGET is smaller, the prompt in chunks of up to 512, greedy decode with the argmax
# on the GPU) and llama.cpp CUDA (llama-bench, placed as LLAMA_ARGS say) on the same file, in one call.
# Binaries in .device/ (bench, synth-gguf), llama.cpp's source in .llama/ (scripts/device/llama-cuda.sh
# pack). Writes $OUT/*.json and prints a table last. LAYERS cuts the model (default all 40); DECODE the decode
# tokens (default 64);
# KERNEL_TIMES=1 has the first run time each kernel (bench --kernel-times); LLAMA=0 leaves llama.cpp out;
# RUNS the runs of ours (default "1 2"). BUDGET is ours (default 120g: every weight on the GPU); a smaller one
# streams the routed experts, under the workload BENCH_ARGS names (e.g. "--routing uniform", or
# "--routing-trace FILE" of a trace for 256 experts and 40 layers, long enough for the prompt twice and the
# decode); LLAMA_ARGS are llama-bench's placement (default "-ngl 99"; e.g. "-ngl 99 --n-cpu-moe 36").
set -uo pipefail
source scripts/device/call-setup.sh
MATRICES=${MATRICES:-q8_0}
DECODE=${DECODE:-64}
G=/dev/shm/q36-$MATRICES.gguf
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
LLAMA=${LLAMA:-1}
[ "$LLAMA" = 0 ] || [ -x /tmp/ll/build/bin/llama-bench ] || [ -d /tmp/ll ] || bash scripts/device/llama-cuda.sh build
SECONDS=0
[ -s $G ] || $D/synth-gguf --shape qwen36-35b-a3b --matrices "$MATRICES" ${LAYERS:+--layers $LAYERS} --out $G | tail -1
echo "synth: $SECONDS s"
if [ "$LLAMA" != 0 ]; then
    bash scripts/device/llama-cuda.sh wait || tail -5 /tmp/llama-build.log
    echo "llama.cpp built: $SECONDS s"
fi
for run in ${RUNS:-1 2}; do
    extra=()
    [ "$run" = 1 ] && [ -n "${KERNEL_TIMES:-}" ] && extra=(--kernel-times)
    timeout 400 $D/bench --model $G --budget "${BUDGET:-120g}" --prompt-tokens 512 --decode-tokens "$DECODE" \
        --warmup-tokens 4 ${BENCH_ARGS:-} "${extra[@]}" \
        > "$OUT/bench-$run.json" 2> "/tmp/bench-$run.err" || tail -5 "/tmp/bench-$run.err"
done
[ "$LLAMA" = 0 ] || timeout 400 /tmp/ll/build/bin/llama-bench -m $G ${LLAMA_ARGS:--ngl 99} -p 512 -n "$DECODE" -r 2 -t 16 -o json \
    > "$OUT/llama.json" 2> /tmp/llama.err || tail -5 /tmp/llama.err
echo "== table (qwen35moe $MATRICES, budget ${BUDGET:-120g} ${BENCH_ARGS:-}; llama.cpp ${LLAMA_ARGS:--ngl 99}; tok/s)"
python3 - "$OUT" ${RUNS:-1 2} <<'PY'
import json, os, sys
out = sys.argv[1]
for run in sys.argv[2:]:
    p = f"{out}/bench-{run}.json"
    if os.path.getsize(p) if os.path.exists(p) else 0:
        b = json.load(open(p))
        print(f'diskformer run {run}: decode {b["decode_tok_s"]:8.2f}  prefill 512 {b["prefill_tok_s"]:8.1f} (first {b.get("first_prefill_tok_s", 0):.1f})  load {b["load_s"]:.1f} s  chunks of {b.get("max_chunk")}  routing {b.get("routing")}  pool {b.get("pool") or "none: every weight resident"}')
        for what, rows in (b.get("kernel_times") or {}).items():
            # [kernel, dispatches, ms]: the whole graph first, then each kernel alone, costliest first.
            print(f"  {what}: " + ", ".join(f"{k} x{n} {ms:.2f} ms" for k, n, ms in rows[:1] + sorted(rows[1:], key=lambda r: -r[2])))
    else:
        print(f"diskformer run {run}: failed")
try:
    for x in json.load(open(f"{out}/llama.json")):
        print(f'llama.cpp {os.environ.get("LLAMA_ARGS", "-ngl 99")}: {"pp" if x["n_prompt"] else "tg"} {x["avg_ts"]:.2f} +- {x["stddev_ts"]:.2f}')
except Exception as e:
    print("llama.cpp failed:", e)
PY
