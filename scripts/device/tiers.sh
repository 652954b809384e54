#!/usr/bin/env bash
# The three tiers on the H200 (issue #32): a Qwen3-30B-A3B-shaped synthetic Q8_0 GGUF in /dev/shm, its store on
# /tmp, then in one call the CPU expert kernels' bandwidth beside the host's read floor, examples/bench at a
# 4 GB budget with the store in the page cache under forced routing workloads (uniform; the calibrated trace
# .device/calibrated.jsonl, written here by `routing-trace`), and llama.cpp CUDA's best 4 GB configurations on
# the same GGUF. Binaries in .device/ (built here, gzipped: bench, synth-gguf, ingest, cpu-bench), llama.cpp's
# source in .llama/ (scripts/device/llama-cuda.sh pack). Writes JSON lines to $OUT/tiers.jsonl and prints a
# table last. PHASES picks what runs (default "cpu rows llama"); REUSE=1 keeps a model and store a call on the
# same machine left; PHASES "build" builds llama.cpp (waiting for it before measuring) without running it, for
# a next call on the same machine; ROWS and LLAMA_ROWS override the row lists; DECODE the decode tokens of a row. A row
# labelled cold-* (or NAME-cold-*, a variant's build) runs with the page cache dropped (COLD_DECODE tokens),
# between two reads of 384 whole records with O_DIRECT (record-read), whose mean rate over the bytes the row
# read a token is its bound.
# FTYPE (default q8_0) is synth-gguf's --ftype: q4_k_m writes the model as llama.cpp's quantizer types it.
# A row labelled gg-* (or NAME-gg-*, a variant's build) runs on a second store, $S-gguf, ingested with
# --experts-in-gguf (a K-quant file's experts read in place from the GGUF in /dev/shm, so from memory as the
# page-cache rows' store is; a cold-gg-* row reads them with O_DIRECT, which /dev/shm refuses: put the GGUF on
# disk, G=/tmp/..., for those).
set -uo pipefail
source scripts/device/call-setup.sh
FTYPE=${FTYPE:-q8_0}
# (-v: made with the real vocabulary, so that a machine holding one made without it makes it again)
G=${G:-/dev/shm/q3-$FTYPE${VOCAB:+-v}.gguf}
S=/tmp/q3-$FTYPE${VOCAB:+-v}.store
DECODE=${DECODE:-64}
COLD_DECODE=${COLD_DECODE:-32}
PHASES=${PHASES:-cpu rows llama}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
lscpu | grep -E "^Model name|^CPU\(s\)" | tee "$OUT/cpu.txt"

# llama.cpp builds in the background (~5.5 min) while the model is written and the rows run.
if [[ $PHASES == *llama* || $PHASES == *build* ]] && [ ! -x /tmp/ll/build/bin/llama-bench ] && [ ! -d /tmp/ll ]; then
    bash scripts/device/llama-cuda.sh build
fi
SECONDS=0
if [[ $PHASES != *rows* ]] && [[ $PHASES != *llama* ]]; then
    echo "no model needed"
elif [ -n "${REUSE:-}" ] && [ -s $G ] && [ -s $S/experts.bin ]; then
    echo "reusing $G and $S"
else
    $D/synth-gguf --shape qwen3-30b-a3b --ftype "$FTYPE" ${VOCAB:+--vocab-from "$VOCAB"} --out $G | tail -1
    $D/ingest $G --store $S | tail -1
fi
if [[ ${ROWS:-} == *gg-* ]] && [ ! -s $S-gguf/manifest.json ]; then
    $D/ingest $G --store $S-gguf --experts-in-gguf | tail -1
fi
echo "synth + ingest: $SECONDS s"

# Measurements wait for llama.cpp's build: its 15 compilers would share the host with them.
[[ $PHASES == *llama* || $PHASES == *build* ]] && { bash scripts/device/llama-cuda.sh wait || tail -5 /tmp/llama-build.log; }
echo "llama.cpp built: $SECONDS s"
if [[ $PHASES == *cpu* ]]; then
    # One layer's 128 experts rotating (641 MB, past the 300 MiB L3): the floor and the FFN on every path, on
    # each thread count of CPU_THREADS.
    # .device/cpu-bench-NAME: the bench built from a variant, run after the main one on each count.
    for t in ${CPU_THREADS:-16}; do
        for bin in $D/cpu-bench $D/cpu-bench-*; do
            [ -x "$bin" ] || continue
            echo "threads $t ${bin#$D/}" | tee -a "$OUT/cpu-bench.txt"
            DISKFORMER_CPU_THREADS=$t $bin --bench "${CPU_BENCH:-floor|/t1|q8_0/q8/avx512vnni/t4}" \
                --warm-up-time 1 --measurement-time 3 2>&1 | grep -E "^cpu/|thrpt:" | tee -a "$OUT/cpu-bench.txt"
        done
    done
fi

disk_rate() { # the disk's rate now: one thread, O_DIRECT, whole records, page cache dropped (GB/s)
    sync; echo 3 > /proc/sys/vm/drop_caches
    $D/record-read $S --threads 1 --pieces 1 --records 384 | tee -a "$OUT/disk.txt" |
        python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['gb_per_s'])"
}
run() { # label, bench args... (a label NAME-* runs .device/bench-NAME where it exists: a variant's build)
    local label=$1; shift
    local bin=$D/bench
    [ -x "$D/bench-${label%%-*}" ] && bin=$D/bench-${label%%-*}
    local line decode=$DECODE before=null after=null store=$S
    if [[ $label == gg-* || $label == *-gg-* ]]; then
        store=$S-gguf
        set -- "$@" --experts-in-gguf
    fi
    if [[ $label == cold-* || $label == *-cold-* ]]; then
        # A cold row: the page cache dropped, between two disk reads of the same kind (the bound's rate).
        decode=$COLD_DECODE
        before=$(disk_rate)
        sync; echo 3 > /proc/sys/vm/drop_caches
    else
        cat $S/experts.bin > /dev/null # the store in the page cache
    fi
    local cpu0; cpu0=$(head -1 /proc/stat)
    line=$(timeout 300 $bin --model $G --store $store --decode-tokens "$decode" "$@" 2> "/tmp/$label.err")
    if [ -z "$line" ]; then tail -3 "/tmp/$label.err"; line=null; fi
    # The share of the vCPUs' time the hypervisor gave to others during the row (/proc/stat's steal), and
    # the share busy here: a row slowed by the host's contention, not by the engine, shows there.
    local cpu; cpu=$(printf '%s\n%s\n' "$cpu0" "$(head -1 /proc/stat)" | awk '{for (i = 2; i <= 9; i++) { t[NR] += $i }
        s[NR] = $9; idle[NR] = $5 + $6} END {d = t[2] - t[1]; if (d <= 0) d = 1;
        printf "{\"steal\":%.4f,\"busy\":%.4f}", (s[2] - s[1]) / d, 1 - (idle[2] - idle[1]) / d}')
    [[ $label == cold-* || $label == *-cold-* ]] && after=$(disk_rate)
    echo "{\"label\":\"$label\",\"disk_before\":$before,\"disk_after\":$after,\"cpu\":$cpu,\"run\":$line}" >> "$OUT/tiers.jsonl"
    echo "$label: $(echo "$line" | cut -c1-100)"
}
T=$D/calibrated.jsonl
if [[ $PHASES == *rows* ]]; then
    # label:args (commas for spaces); $B: a 512-token prompt at a 4 GB budget.
    B=--budget,4g,--prompt-tokens,512
    for row in ${ROWS:-uni-default:$B,--routing,uniform uni-ra:$B,--routing,uniform,--no-prefetch \
        uni-cpu:$B,--routing,uniform,--cpu-experts,--no-prefetch \
        uni-cpu-noadmit:$B,--routing,uniform,--cpu-experts,--no-prefetch,--cpu-reuse-window,0 \
        cal-default:$B,--routing-trace,$T cal-ra:$B,--routing-trace,$T,--no-prefetch \
        cal-cpu:$B,--routing-trace,$T,--cpu-experts,--no-prefetch cal-cpu-pf:$B,--routing-trace,$T,--cpu-experts \
        resident:--budget,100g,--prompt-tokens,512}; do
        label=${row%%:*}; IFS=, read -r -a a <<< "${row#*:}"
        run "$label" "${a[@]}"
    done
fi

if [[ $PHASES == *llama* ]]; then
    bash scripts/device/llama-cuda.sh wait || { tail -5 /tmp/llama-build.log; }
    LB=/tmp/ll/build/bin/llama-bench
    for row in ${LLAMA_ROWS:-exps-cpu:-ot,exps=CPU cpu-moe-44:--n-cpu-moe,44}; do
        label=${row%%:*}; IFS=, read -r -a a <<< "${row#*:}"
        timeout 400 $LB -m $G -ngl 99 "${a[@]}" -p 512 -n "$DECODE" -r 2 -t 16 -o json > "/tmp/llama-$label.json" 2> "/tmp/llama-$label.err" ||
            tail -3 "/tmp/llama-$label.err"
        python3 -c "import json,sys; r=json.load(open(sys.argv[1])); [print(sys.argv[2], 'pp' if x['n_prompt'] else 'tg', round(x['avg_ts'],2), '+-', round(x['stddev_ts'],2)) for x in r]" \
            "/tmp/llama-$label.json" "llama-$label" | tee -a "$OUT/llama.txt"
    done
fi

echo "== table (4 GB, store in the page cache; decode and prefill tok/s)"
[ -s "$OUT/tiers.jsonl" ] && python3 - "$OUT/tiers.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l); b = r["run"]
    if not b: print(r["label"], "failed"); continue
    c = b.get("cpu_experts") or {}
    if r.get("disk_before"):
        # Every byte read from the disk: the pool's reader (demand and speculative) and the host tier's.
        per_token = b["disk"]["bytes_per_token"] + (b.get("host_tier") or {}).get("bytes_per_token", 0)
        rate = (r["disk_before"] + r["disk_after"]) / 2
        bound = rate * 1e9 / max(per_token, 1)
        print(f'{r["label"]:18} decode {b["decode_tok_s"]:7.2f} disk {r["disk_before"]:.2f} -> {r["disk_after"]:.2f} GB/s '
              f'read/tok {per_token/1e9:5.2f} GB bound {bound:6.2f} tok/s = {100*b["decode_tok_s"]/bound:5.1f}% '
              f'host-tier held/read per tok {(b.get("host_tier") or {}).get("held_per_token", 0):6.1f} / '
              f'{(b.get("host_tier") or {}).get("reads_per_token", 0):6.1f} cpu ms/tok {c.get("ms_per_token", 0):6.2f}')
        continue
    print(f'{r["label"]:18} decode {b["decode_tok_s"]:7.2f} prefill {b["prefill_tok_s"]:8.1f} hits {100*(b["hit_rate"] or 0):5.1f}% '
          f'cpu/tok {c.get("per_token", 0):6.1f} cpu ms/tok {c.get("ms_per_token", 0):6.2f} '
          f'(recording {c.get("recording_ms_per_token", 0):5.2f}) first uses/tok {c.get("first_uses_per_token", 0):5.2f} ({c.get("first_use_ms_per_token", 0):5.2f} ms) GB loaded/tok {b["bytes_read_per_token"]/1e9:5.2f} '
          f'wait {b["gpu_wait_ms_per_token"]:5.2f} ensure {b["ensure_ms_per_token"]:5.2f} '
          f'host {b["host_ms_per_token"]:5.2f} record {b["record_ms_per_token"]:5.2f} submit {b["submit_ms_per_token"]:5.2f}')
    sp = b.get("split") or {}
    if sp.get("device_share") is not None:
        print(f'{"":18} split residency: {100*sp["device_share"]:5.1f}% of picks on the device, {sp["moves_per_token"]:5.2f} moves/tok, '
              f'arena {b.get("arena_bytes", 0)/1e9:5.2f} GB, load {b.get("load_s", 0):5.1f} s')
    q = c.get("pool")
    if q:
        host = r.get("cpu") or {}
        print(f'{"":18} vCPUs: stolen {100*host.get("steal", 0):4.1f}% busy {100*host.get("busy", 0):4.1f}%; pool ms/tok: busy {q["busy_ms_per_token"]:6.2f} tasks {q["task_ms_per_token"]:7.2f} (all threads) '
              f'meanwhile {q["meanwhile_ms_per_token"]:5.2f} join wait {q["join_wait_ms_per_token"]:5.2f}; '
              f'{q["tasks_per_job"]:5.1f} tasks a job ({q["caller_tasks_per_job"]:4.1f} on the caller), workers start '
              f'{q["worker_start_us_per_job"]:5.1f} us, longest task {q["longest_task_us"]:8.1f} us')
    p = b.get("prefill")
    if p:
        print(f'{"":18} prefill {p["seconds"]:6.2f} s: pool {p["pool_bytes"]/1e9:5.2f} GB at {p["pool_gb_s"]:5.2f} GB/s, '
              f'ensure {p["ensure_s"]:5.2f} s, GPU wait {p["gpu_wait_s"]:5.2f} s, misses {p["misses"]} late hits {p["late_hits"]} '
              f'ahead {p["prefetch_issued"]} used {p["prefetch_used"]}')
        rd = p.get("readers")
        if rd:
            # Seconds summed over the reader threads, and per staged piece.
            n = max(rd["pieces"], 1)
            print(f'{"":18} prefill host {p["host_s"]:5.2f} s (graph {p["graph_s"]:5.2f}, record {p["record_s"]:5.2f}, '
                  f'submit {p["submit_s"]:5.2f}); readers: read {rd["read_s"]:6.2f} s, {rd["pieces"]} pieces: ring wait '
                  f'{rd["ring_wait_s"]:6.2f} fill {rd["fill_s"]:6.2f} submit {rd["submit_s"]:6.2f} s '
                  f'({1e3*rd["ring_wait_s"]/n:5.2f} / {1e3*rd["fill_s"]/n:5.2f} / {1e3*rd["submit_s"]/n:5.2f} ms a piece)')
PY
# Rows of one kind (labels that differ only in a trailing number: cal, cal2, cal3): the median of each.
[ -s "$OUT/tiers.jsonl" ] && python3 - "$OUT/tiers.jsonl" <<'PY'
import json, re, statistics, sys
groups = {}
for l in open(sys.argv[1]):
    r = json.loads(l); b = r["run"]
    if b:
        groups.setdefault(re.sub(r"\d+$", "", r["label"]), []).append((b["decode_tok_s"], b["prefill_tok_s"]))
for name, rows in groups.items():
    if len(rows) > 1:
        print(f'{name:18} median of {len(rows)}: decode {statistics.median(d for d, _ in rows):7.2f} '
              f'prefill {statistics.median(p for _, p in rows):8.1f}')
PY
[ -s "$OUT/llama.txt" ] && cat "$OUT/llama.txt"
[ -s "$OUT/cpu-bench.txt" ] && python3 - "$OUT/cpu-bench.txt" <<'PY'
import re, sys
name = None
for l in open(sys.argv[1]):
    if l.startswith("threads"): print(l.strip())
    m = re.match(r"(cpu/\S+)", l)
    if m: name = m.group(1)
    t = re.search(r"thrpt:\s*\[\S+ \S+ (\S+ \S+)", l)
    if t and name and "%" not in l: print(" ", name, t.group(1)); name = None
PY
