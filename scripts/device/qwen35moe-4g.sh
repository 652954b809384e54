#!/usr/bin/env bash
# qwen35moe at a small GPU budget (issue #34's streaming goal), beside llama.cpp at the same GPU memory.
#   PART=ours:  makes the Qwen3.6-35B-A3B-shaped synthetic (scripts/device/qwen35moe.sh), then runs ours at
#               BUDGET (default 4g) under the calibrated trace .device/calibrated-256.jsonl (routing-trace
#               --layers 40 --experts 256 --top-k 8 --tokens 1300) and under `--routing uniform`; RUNS_CAL /
#               RUNS_UNI runs of each (default "1 2" / "1"); EXTRA adds bench options to both.
#   PART=llama: builds llama.cpp (scripts/device/llama-cuda.sh: ~5.5 min on 16 cores, never beside our runs,
#               whose CPU tier it would slow), then llama-bench on the same file with each placement of
#               LLAMA_PLACEMENTS (default: the experts of 40, 39 and 38 layers on the CPU), sampling the GPU's
#               memory while each runs, so that the table says which of them fits the budget.
#   PART=ab:    makes the synthetic, then the builds BINS names (default "bench-old bench", in .device/)
#               alternating at BUDGET, ROUNDS rounds (default 2), under the calibrated trace (and under
#               `--routing uniform` with UNIFORM=1; with RESIDENT=1 the model's own routing, for a BUDGET
#               that holds every weight, e.g. 120g), EXTRA added to each: older builds' rows beside this
#               one's on the same machine.
#   PART=kt:    the builds BINS names (default "bench") with every weight resident (BUDGET, default 120g) and
#               --kernel-times: the heaviest TOP kernels (default 10) of the one-token step and of a 512-token
#               chunk (scripts/device/kernel-times.py); EXTRA added to each.
# Prints a table last; the JSON lands in $OUT/{cal,uni}/, $OUT/ab.jsonl and $OUT/llama-*.json.
set -uo pipefail
OUT=${OUT:-/tmp/out}
MATRICES=${MATRICES:-q8_0}
G=/dev/shm/q36-$MATRICES.gguf
case "${PART:-ours}" in
ours)
    for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
    OUT=$OUT/cal LLAMA=0 RUNS="${RUNS_CAL:-1 2}" BUDGET=${BUDGET:-4g} \
        BENCH_ARGS="--routing-trace .device/calibrated-256.jsonl ${EXTRA:-}" bash scripts/device/qwen35moe.sh
    OUT=$OUT/uni LLAMA=0 RUNS="${RUNS_UNI:-1}" BUDGET=${BUDGET:-4g} \
        BENCH_ARGS="--routing uniform ${EXTRA:-}" bash scripts/device/qwen35moe.sh
    ;;
ab)
    source scripts/device/call-setup.sh
    SECONDS=0
    [ -s $G ] || $D/synth-gguf --shape qwen36-35b-a3b --matrices "$MATRICES" --out $G | tail -1
    echo "synth: $SECONDS s"
    workloads=("--routing-trace $D/calibrated-256.jsonl")
    [ "${UNIFORM:-0}" = 1 ] && workloads+=("--routing uniform")
    [ "${RESIDENT:-0}" = 1 ] && workloads=("")
    for round in $(seq "${ROUNDS:-2}"); do
        for w in "${workloads[@]}"; do
            for bin in ${BINS:-bench-old bench}; do
                line=$(timeout 200 $D/$bin --model $G --budget "${BUDGET:-4g}" --prompt-tokens 512 --decode-tokens 64 \
                    --warmup-tokens 4 $w ${EXTRA:-} 2> /tmp/ab.err) || tail -3 /tmp/ab.err
                echo "$line" >> "$OUT/ab.jsonl"
                echo "$line" | python3 scripts/device/ab-row.py "$bin" "$round" "$w" || echo "$bin r$round $w: no result"
            done
        done
    done
    ;;
kt)
    source scripts/device/call-setup.sh
    [ -s $G ] || $D/synth-gguf --shape qwen36-35b-a3b --matrices "$MATRICES" --out $G | tail -1
    for bin in ${BINS:-bench}; do
        timeout 300 $D/$bin --model $G --budget "${BUDGET:-120g}" --prompt-tokens 512 --decode-tokens 16 \
            --warmup-tokens 2 --kernel-times ${EXTRA:-} > "$OUT/kt-$bin.json" 2> /tmp/kt.err || tail -3 /tmp/kt.err
        echo "== $bin"
        python3 scripts/device/kernel-times.py "${TOP:-10}" < "$OUT/kt-$bin.json"
    done
    ;;
llama)
    [ -d /tmp/ll ] || bash scripts/device/llama-cuda.sh build
    bash scripts/device/llama-cuda.sh wait || { tail -5 /tmp/llama-build.log; exit 1; }
    IFS=';' read -ra placements <<< "${LLAMA_PLACEMENTS:--ngl 99 --n-cpu-moe 40;-ngl 99 --n-cpu-moe 39;-ngl 99 --n-cpu-moe 38}"
    i=0
    for p in "${placements[@]}"; do
        i=$((i + 1))
        nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > "/tmp/mem-$i.txt" &
        smi=$!
        timeout 300 /tmp/ll/build/bin/llama-bench -m $G $p -p 512 -n 64 -r 2 -t 16 -o json \
            > "$OUT/llama-$i.json" 2> "/tmp/llama-$i.err" || tail -3 "/tmp/llama-$i.err"
        kill $smi
        peak=$(sort -n "/tmp/mem-$i.txt" | tail -1)
        python3 - "$OUT/llama-$i.json" "$p" "$peak" <<'PY'
import json, sys
try:
    rows = json.load(open(sys.argv[1]))
    print(f'llama.cpp {sys.argv[2]} (GPU peak {sys.argv[3]} MiB): ' + ", ".join(
        f'{"pp512" if x["n_prompt"] else "tg64"} {x["avg_ts"]:.2f} +- {x["stddev_ts"]:.2f}' for x in rows))
except Exception as e:
    print(f"llama.cpp {sys.argv[2]} failed: {e}")
PY
    done
    ;;
esac
