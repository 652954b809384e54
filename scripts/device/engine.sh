#!/usr/bin/env bash
# The full-size engine run on the H200 (issue #8): a Qwen3-30B-A3B-shaped synthetic Q8_0 GGUF in /dev/shm,
# ingested into a store on /tmp, then examples/bench at several GPU budgets, prefetch settings and page-cache
# states, with the disk rate and the compute-copy bandwidth measured in the same call. Binaries in .device/ (built
# here: cargo build --release --examples; cargo bench -p diskformer-kernels --bench kernels --no-run). Writes JSON
# lines to $OUT/bench.jsonl and prints a table last. Nothing is built there. QUICK=1 runs the final matrix of
# BENCHMARKS.md instead of the earlier one; RESIDENT_ONLY=1 only the resident row; BRACKET=1 cold 4 GB rows each
# between two same-kind disk reads; STREAM=1 the 4 GB rows with records read in pieces (--read-split) and
# upload-bench's miss latency; LOOKAHEAD=1 the 4 GB prefetch rows; PREFILL=1 the 4 GB rows after a 512-token
# prompt; ROUTE=1 route-ahead against per-layer readbacks (warm 16/8/4 GB and cold 4 GB rows); KERNELS=1 the resident and 4 GB rows after a 512-token prompt with .device/bench and each
# .device/bench-NAME built from a variant, and with CLOCKS=1 4 GB rows warm and cold with the GPU's clocks sampled
# (nvidia-smi, read only) into $OUT/clocks-LABEL.csv; COLD=1 the disk's rate for records read in pieces
# (record-read --pieces), a lone miss's read and upload (upload-bench), and the 4 GB cold rows over readers and
# pieces (COLD_READERS_SPLITS; WARM_ROWS=1 adds the resident and 4 GB page-cache rows). KBENCH is the
# kernels-bench filter run first (default: the compute copy alone). AB=1 alternates .device/bench and each
# .device/bench-NAME over AB_ROUNDS rounds of the resident row (after an AB_PROMPT-token prompt, 16 by default),
# then (unless AB_RESIDENT_ONLY=1) one 4 GB page-cache row each, and the 16 GB and 8 GB rows of .device/bench;
# each binary first runs once unrecorded (AB_WARMUP=0 skips that). REUSE=1 keeps a model and store that a call
# on the same machine left behind. SPEC=1: speculative reads against none, warm rows then cold 4 GB rows bracketed
# by disk reads. TENSOR=1: resident prefill after a 512-token prompt with f32, int8 and
# tensor-core chunks in turn (TENSOR_ROUNDS), then 4 GB rows. EXPERTS=q4_0 makes the synthetic model's experts Q4_0 (default q8_0).
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
D=.device
for z in $D/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done # binaries sent compressed (the 64 MiB carry)
chmod +x $D/* 2>/dev/null
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
G=/dev/shm/q3.gguf
S=/tmp/q3.store
DECODE=${DECODE:-48}

SECONDS=0
if [ -n "${REUSE:-}" ] && [ -s $G ] && [ -s $S/experts.bin ]; then
    echo "reusing $G and $S"
else
    $D/synth-gguf --shape qwen3-30b-a3b --expert-type "${EXPERTS:-q8_0}" --out $G | tee "$OUT/synth.txt"
    $D/ingest $G --store $S | tail -2 | tee "$OUT/ingest.txt"
fi
echo "synth + ingest: $SECONDS s"

if [ -x $D/kernels-bench ]; then
    $D/kernels-bench --bench "${KBENCH:-copy/compute}" --warm-up-time 1 --measurement-time 2 2>&1 | grep -E "time:|thrpt:|^[a-z_0-9]+/" | tee "$OUT/copy.txt"
fi
# Bench binaries built from variants (experiments: .device/kernels-bench-NAME), each run with KBENCH_ALT.
for alt in $D/kernels-bench-*; do
    [ -x "$alt" ] || continue
    echo "--- ${alt#$D/}"
    $alt --bench "${KBENCH_ALT:-expert}" --warm-up-time 1 --measurement-time 2 2>&1 | grep -E "time:|thrpt:|^[a-z_0-9]+/" | tee -a "$OUT/alt.txt"
done
sync; echo 3 > /proc/sys/vm/drop_caches
[ -n "${RESIDENT_ONLY:-}${LOOKAHEAD:-}${PREFILL:-}" ] || $D/record-read $S --threads ${DISK_THREADS:-1,8,16} --pieces ${DISK_PIECES:-1} --records 384 | tee "$OUT/disk.txt"

run() { # label, page cache (warm|cold), bench args...; BIN=path runs another bench binary
    local label=$1 cache=$2; shift 2
    if [ "$cache" = cold ]; then sync; echo 3 > /proc/sys/vm/drop_caches; else cat $S/experts.bin > /dev/null; fi
    local line
    line=$(timeout 200 "${BIN:-$D/bench}" --model $G --store $S --decode-tokens "$DECODE" "$@" 2> "/tmp/$label.err")
    if [ -z "$line" ]; then tail -3 "/tmp/$label.err"; line=null; fi
    echo "{\"label\":\"$label\",\"cache\":\"$cache\",\"run\":$line}" >> "$OUT/bench.jsonl"
    echo "$label $cache: $line" | cut -c1-120
}
# As run, with the SM and memory clocks sampled every 50 ms while it runs; prints their median and range.
clocked() { # label, page cache, bench args...
    nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw --format=csv,noheader,nounits -lms 50 > "$OUT/clocks-$1.csv" &
    local smi=$!
    run "$@"
    kill $smi; wait $smi 2>/dev/null
    python3 -c "import sys,statistics as s; r=[l.split(',') for l in open(sys.argv[1]) if l.strip()]; sm=[float(x[0]) for x in r]; p=[float(x[2]) for x in r]; print(sys.argv[2], 'SM MHz median', s.median(sm), 'min', min(sm), 'max', max(sm), '| W median', s.median(p), '| samples', len(r))" "$OUT/clocks-$1.csv" "$1"
}
if [ -n "${COLD:-}" ]; then
sync; echo 3 > /proc/sys/vm/drop_caches
$D/upload-bench --store $S --direct --threads 1 --records 64 --misses 32 --pieces 1,2,4 > "$OUT/upload.json" 2> /tmp/upload.err &&
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); [print('miss', m['method'], m['pieces'], 'read us', round(m['read_us']['mean']), 'upload us', round(m['upload_us']['mean']), 'total us p50', round(m['total_us']['p50']), 'mean', round(m['total_us']['mean'])) for m in d['miss']]" "$OUT/upload.json"
if [ -n "${WARM_ROWS:-}" ]; then
run resident warm --budget 100g --prompt-tokens 512
run b4g-cyc-off warm --budget 4g --no-prefetch --prompt-tokens 16
fi
# readers:pieces; readers "p" leaves the count to the engine's disk probe.
for rs in ${COLD_READERS_SPLITS:-p:4 8:4 2:4 2:2 2:1 1:1 1:4}; do
r=${rs%%:*}; readers=(--readers "$r"); [ "$r" = p ] && readers=()
DECODE=32 run b4g-off-direct-r$r-s${rs#*:} cold --budget 4g --no-prefetch --direct-io --prompt-tokens 4 "${readers[@]}" --read-split ${rs#*:}
done
elif [ -n "${BRACKET:-}" ]; then
# Cold 4 GB rows, each between two disk reads of the same kind (record-read: one thread, O_DIRECT, whole
# records, page cache dropped), so each row's I/O bound comes from the disk's rate just before and after it.
# BRACKET_READERS: the rows' reader counts ("p" leaves the count to the engine's disk probe); BRACKET_ARGS
# more bench arguments for every row, BRACKET_LABEL a suffix for their labels.
for r in ${BRACKET_READERS:-p 1 p 1}; do
    sync; echo 3 > /proc/sys/vm/drop_caches
    $D/record-read $S --threads 1 --pieces 1 --records 384 | tee -a "$OUT/disk.txt"
    readers=(--readers "$r"); [ "$r" = p ] && readers=()
    # shellcheck disable=SC2086
    DECODE=32 run b4g-off-direct-r$r${BRACKET_LABEL:-} cold --budget 4g --no-prefetch --direct-io --prompt-tokens 4 "${readers[@]}" ${BRACKET_ARGS:-}
done
sync; echo 3 > /proc/sys/vm/drop_caches
$D/record-read $S --threads 1 --pieces 1 --records 384 | tee -a "$OUT/disk.txt"
elif [ -n "${ROUTE:-}" ]; then
# Route-ahead (EngineOptions::route_ahead) against reading each layer's picks back first (0): the page-cache
# rows at 16, 8 and 4 GB alternating over ROUTE_ROUNDS rounds, other windows at 8 GB, then cold 4 GB rows
# alternating, each between two disk reads of the same kind (as BRACKET=1). Each .device/bench-NAME runs
# beside the warm rows; ROUTE_AB, ROUTE_BUDGETS, ROUTE_WINDOWS and ROUTE_COLD choose the rows.
run resident warm --budget 100g --prompt-tokens 16
for round in $(seq ${ROUTE_ROUNDS:-2}); do
    for ra in ${ROUTE_AB:-0 2}; do
        for b in ${ROUTE_BUDGETS:-16 8 4}; do
            run b${b}g-off-ra$ra-r$round warm --budget ${b}g --no-prefetch --prompt-tokens 16 --route-ahead $ra
            for alt in $D/bench-*; do
                [ -x "$alt" ] || continue
                BIN=$alt run b${b}g-off-ra$ra-r$round-${alt#$D/bench-} warm --budget ${b}g --no-prefetch --prompt-tokens 16 --route-ahead $ra
            done
        done
    done
done
for ra in ${ROUTE_WINDOWS:-1 2 8}; do run b8g-off-ra$ra warm --budget 8g --no-prefetch --prompt-tokens 16 --route-ahead $ra; done
for ra in ${ROUTE_COLD:-0 2 0 2}; do
    sync; echo 3 > /proc/sys/vm/drop_caches
    $D/record-read $S --threads 1 --pieces 1 --records 384 | tee -a "$OUT/disk.txt"
    DECODE=32 run b4g-off-direct-r1-ra$ra cold --budget 4g --no-prefetch --direct-io --prompt-tokens 4 --readers 1 --route-ahead $ra
done
sync; echo 3 > /proc/sys/vm/drop_caches
$D/record-read $S --threads 1 --pieces 1 --records 384 | tee -a "$OUT/disk.txt"
elif [ -n "${SPEC:-}" ]; then
# Speculative reads (EngineOptions::speculative_reads) against none, route-ahead 2, one reader: page-cache
# rows at SPEC_BUDGETS, then cold 4 GB rows alternating, each between two disk reads of the same kind (as
# BRACKET=1). SPEC_WARM: the warm rows' route-ahead windows and buffer counts alternated, window:buffers[:NAME]
# (0 is off; NAME runs .device/bench-NAME).
for round in $(seq ${SPEC_ROUNDS:-2}); do
    for b in ${SPEC_BUDGETS:-8 4}; do
        for wn in ${SPEC_WARM:-2:0 2:16}; do
            IFS=: read -r w n name <<< "$wn"
            BIN=$D/bench${name:+-$name} run b${b}g-ra$w-spec$n${name:+-$name}-r$round warm --budget ${b}g --no-prefetch --prompt-tokens 16 --route-ahead $w --speculative-reads $n
        done
    done
done
# SPEC_COLD: the cold rows' route-ahead windows, buffer counts, read splits and bench binaries,
# window:buffers[:split[:NAME]] (NAME runs .device/bench-NAME).
for round in $(seq ${SPEC_COLD_ROUNDS:-4}); do
    for wns in ${SPEC_COLD:-2:0 2:16}; do
        IFS=: read -r w n split name <<< "$wns"
        sync; echo 3 > /proc/sys/vm/drop_caches
        $D/record-read $S --threads 1 --pieces 1 --records 384 | tee -a "$OUT/disk.txt"
        BIN=$D/bench${name:+-$name} DECODE=32 run b4g-direct-r1-ra$w-spec$n-s${split:-4}${name:+-$name}-r$round cold --budget 4g --no-prefetch --direct-io --prompt-tokens 4 --readers 1 --route-ahead $w --speculative-reads $n --read-split ${split:-4}
    done
done
sync; echo 3 > /proc/sys/vm/drop_caches
$D/record-read $S --threads 1 --pieces 1 --records 384 | tee -a "$OUT/disk.txt"
# Each cold row's I/O bound: the bytes its demands needed a token over the mean disk rate around it.
python3 - "$OUT/bench.jsonl" "$OUT/disk.txt" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rows = [d for d in rows if d["cache"] == "cold"]
disk = [json.loads(l)["gb_per_s"] for l in open(sys.argv[2]) if l.startswith("{")][-len(rows) - 1:]
for i, d in enumerate(rows):
    r = d["run"]
    if r is None or i + 1 >= len(disk):
        print(d["label"], "no run"); continue
    rate = (disk[i] + disk[i + 1]) / 2
    bound = rate * 1e9 / r["bytes_read_per_token"]
    sp = r.get("speculative") or {}
    # The same bound from the rate the disk served the row's own reads at while it had one in flight.
    dk = r.get("disk") or {}
    inrun = dk.get("gb_per_s_busy", 0) * 1e9 / r["bytes_read_per_token"]
    print(f"{d['label']:26} {r['decode_tok_s']:6.2f} tok/s, disk {disk[i]:.3f} -> {disk[i+1]:.3f} GB/s, bound {bound:6.2f}, "
          f"{100 * r['decode_tok_s'] / bound:5.1f} % | in-run {dk.get('gb_per_s_busy', 0):.3f} GB/s busy "
          f"{100 * dk.get('busy_fraction', 0):5.1f} %, bound {inrun:6.2f}, {100 * r['decode_tok_s'] / max(inrun, 1e-9):5.1f} % | "
          f"stall {r['stall_ms_per_token']:6.1f} gpu {r['gpu_wait_ms_per_token']:5.1f} host {r['host_ms_per_token']:5.1f} ms/tok, "
          f"spec used {sp.get('used', '-')}/{sp.get('read', '-')}, dropped {sp.get('dropped', '-')}, "
          # The share of the demand loads a guess had read or was reading.
          f"{100 * sp.get('used', 0) / max(r['loads_per_token'] * r['decode_tokens'], 1):.0f} % of loads")
PY
elif [ -n "${KERNELS:-}" ]; then
run resident warm --budget 100g --prompt-tokens 512
run b4g-cyc-off-p512 warm --budget 4g --no-prefetch --prompt-tokens 512
for alt in $D/bench-*; do
    [ -x "$alt" ] || continue
    b=${alt#$D/bench-}
    BIN=$alt run resident-$b warm --budget 100g --prompt-tokens 512
    BIN=$alt run b4g-cyc-off-p512-$b warm --budget 4g --no-prefetch --prompt-tokens 512
done
if [ -n "${CLOCKS:-}" ]; then
clocked b4g-cyc-off warm --budget 4g --no-prefetch --prompt-tokens 16
DECODE=32 clocked b4g-cyc-off-direct-r2 cold --budget 4g --no-prefetch --direct-io --prompt-tokens 4 --readers 2
DECODE=32 clocked b4g-cyc-off-direct cold --budget 4g --no-prefetch --direct-io --prompt-tokens 4
fi
elif [ -n "${AB:-}" ]; then
# The first run of each executable file on a fresh machine is slow (prefill 1.1-1.8k against 2.6-4.4k tok/s
# on 2026-12-01, decode a few % lower; BENCHMARKS.md, fourth session): run each once, unrecorded, first.
if [ "${AB_WARMUP:-1}" = 1 ]; then
    for bin in $D/bench $D/bench-*; do
        [ -x "$bin" ] || continue
        timeout 200 "$bin" --model $G --store $S --budget 100g --prompt-tokens 64 --decode-tokens 8 > /dev/null 2>&1
        echo "warm-up: ${bin#$D/} done"
    done
fi
for round in $(seq ${AB_ROUNDS:-2}); do
    run resident-r$round warm --budget 100g --prompt-tokens "${AB_PROMPT:-16}"
    for alt in $D/bench-*; do
        [ -x "$alt" ] || continue
        BIN=$alt run resident-r$round-${alt#$D/bench-} warm --budget 100g --prompt-tokens "${AB_PROMPT:-16}"
    done
done
if [ -z "${AB_RESIDENT_ONLY:-}" ]; then
run b4g-cyc-off warm --budget 4g --no-prefetch --prompt-tokens 16
for alt in $D/bench-*; do
    [ -x "$alt" ] || continue
    BIN=$alt run b4g-cyc-off-${alt#$D/bench-} warm --budget 4g --no-prefetch --prompt-tokens 16
done
run b16g-cyc-off warm --budget 16g --no-prefetch --prompt-tokens 16
run b8g-cyc-off warm --budget 8g --no-prefetch --prompt-tokens 16
fi
elif [ -n "${TENSOR:-}" ]; then
# Prefill with every expert resident after a 512-token prompt: f32, int8 and tensor-core chunks in turn
# over TENSOR_ROUNDS rounds, after one unrecorded run.
timeout 200 $D/bench --model $G --store $S --budget 100g --prompt-tokens 64 --decode-tokens 8 > /dev/null 2>&1
for round in $(seq ${TENSOR_ROUNDS:-2}); do
    run resident-f32-r$round warm --budget 100g --prompt-tokens 512
    run resident-int8-r$round warm --budget 100g --prompt-tokens 512 --int8-prefill
    run resident-tensor-r$round warm --budget 100g --prompt-tokens 512 --tensor-prefill
done
run b4g-tensor warm --budget 4g --no-prefetch --prompt-tokens 512 --tensor-prefill
run b4g-f32 warm --budget 4g --no-prefetch --prompt-tokens 512
elif [ -n "${RESIDENT_ONLY:-}" ]; then
run resident warm --budget 100g --prompt-tokens 512
run resident-no-run-ahead warm --budget 100g --prompt-tokens 16 --no-run-ahead
elif [ -n "${STREAM:-}" ]; then
# One miss at a time (read, upload, device done), O_DIRECT, records in 1 or 8 pieces; raw reads from 1-8 threads.
sync; echo 3 > /proc/sys/vm/drop_caches
[ -x $D/upload-bench ] && $D/upload-bench --store $S --direct --threads 1,4,8 --records 64 --misses 48 --pieces ${MISS_PIECES:-1,8} > "$OUT/upload.json" 2> /tmp/upload.err &&
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); [print('read', r['threads'], 'threads', round(r['gb_per_s'], 2), 'GB/s') for r in d['read']]; [print('miss', m['method'], m['pieces'], 'read us', round(m['read_us']['mean']), 'upload us', round(m['upload_us']['mean']), 'total us p50', round(m['total_us']['p50']), 'mean', round(m['total_us']['mean'])) for m in d['miss']]" "$OUT/upload.json"
run resident warm --budget 100g --prompt-tokens 512
for n in ${WARM_SPLITS:-1 2 4 8}; do
run b4g-off-split$n warm --budget 4g --no-prefetch --prompt-tokens 16 --read-split $n
done
for rs in ${COLD_READERS_SPLITS:-8:1 8:4 8:8 1:1 1:8 2:4 4:2}; do
DECODE=16 run b4g-off-direct-r${rs%%:*}-s${rs#*:} cold --budget 4g --no-prefetch --direct-io --prompt-tokens 4 --readers ${rs%%:*} --read-split ${rs#*:}
done
elif [ -n "${PREFILL:-}" ]; then
# 4 GB, a 512-token prompt: records in pieces (default) and whole (-s1).
run b4g-cyc-off warm --budget 4g --no-prefetch --prompt-tokens 512
run b4g-cyc-off-s1 warm --budget 4g --no-prefetch --prompt-tokens 512 --read-split 1
elif [ -n "${LOOKAHEAD:-}" ]; then
# Prefetch at 4 GB with records in pieces (default) and whole (-s1), and prefetch off for reference.
run b4g-cyc-la1 warm --budget 4g --lookahead 1 --prompt-tokens 16
run b4g-cyc-la1-s1 warm --budget 4g --lookahead 1 --prompt-tokens 16 --read-split 1
run b4g-cyc-la2 warm --budget 4g --lookahead 2 --prompt-tokens 16
run b4g-cyc-la2-s1 warm --budget 4g --lookahead 2 --prompt-tokens 16 --read-split 1
run b4g-cyc-off warm --budget 4g --no-prefetch --prompt-tokens 16
elif [ -n "${QUICK:-}" ]; then
# The final matrix of BENCHMARKS.md (defaults: cyclic eviction, staging counted in the budget, chunks of 256,
# records in 4 pieces, 8 readers); the -s1 rows are whole records (the default before 2026-12-01), -r1/-r2
# fewer readers.
run resident warm --budget 100g --prompt-tokens 512
run resident-no-run-ahead warm --budget 100g --prompt-tokens 16 --no-run-ahead
run b16g-cyc-off warm --budget 16g --no-prefetch --prompt-tokens 16
run b8g-cyc-off warm --budget 8g --no-prefetch --prompt-tokens 16
run b4g-cyc-off warm --budget 4g --no-prefetch --prompt-tokens 512
run b4g-cyc-off-s1 warm --budget 4g --no-prefetch --prompt-tokens 512 --read-split 1
run b4g-cyc-la1 warm --budget 4g --lookahead 1 --prompt-tokens 16
run b4g-lru-off warm --budget 4g --no-prefetch --policy lru --prompt-tokens 16
DECODE=32 run b4g-cyc-off-direct cold --budget 4g --no-prefetch --direct-io --prompt-tokens 4
DECODE=32 run b4g-cyc-off-direct-s1 cold --budget 4g --no-prefetch --direct-io --prompt-tokens 4 --read-split 1
DECODE=32 run b4g-cyc-off-direct-r2 cold --budget 4g --no-prefetch --direct-io --prompt-tokens 4 --readers 2
DECODE=32 run b4g-cyc-off-direct-r1 cold --budget 4g --no-prefetch --direct-io --prompt-tokens 4 --readers 1
run b4g-cyc-off-ctx1k warm --budget 4g --no-prefetch --ctx 1024 --prompt-tokens 16
else
run resident warm --budget 100g --prompt-tokens 512 --policy lru
run resident-readback warm --budget 100g --no-gpu-routing --prompt-tokens 16 --policy lru
run b16g-la2 warm --budget 16g --prompt-tokens 16 --policy lru
run b8g-la2 warm --budget 8g --prompt-tokens 16 --policy lru
run b4g-off warm --budget 4g --no-prefetch --prompt-tokens 16 --policy lru
run b4g-off-cyclic warm --budget 4g --no-prefetch --policy cyclic --prompt-tokens 16
run b4g-la1 warm --budget 4g --lookahead 1 --prompt-tokens 16 --policy lru
run b4g-la2 warm --budget 4g --lookahead 2 --prompt-tokens 512 --policy lru
run b4g-la4 warm --budget 4g --lookahead 4 --prompt-tokens 16 --policy lru
DECODE=16 run b4g-off-direct cold --budget 4g --no-prefetch --direct-io --prompt-tokens 4 --policy lru
DECODE=16 run b4g-la1-direct cold --budget 4g --lookahead 1 --direct-io --prompt-tokens 4 --policy lru

fi

python3 - "$OUT/bench.jsonl" <<'PY' 2>/dev/null || cat "$OUT/bench.jsonl"
import json, sys
print(f"{'run':22} {'cache':5} {'slots':>5} {'dec tok/s':>9} {'pre tok/s':>9} {'hit':>6} {'MB/tok':>7} {'stall ms':>8} {'gpuwait':>7} {'host ms':>7} {'rec ms':>6} {'sub ms':>6} {'ld/tok':>6} {'rd/ld':>6} {'up/ld':>6} {'GPU GB':>6} {'rdrs':>4} {'ra':>3} {'rerun/tok':>9}")
for l in open(sys.argv[1]):
    d = json.loads(l); r = d["run"]
    if r is None:
        print(f"{d['label']:22} {d['cache']:5} failed"); continue
    hit = r["hit_rate"]; hit = "-" if hit is None else f"{100*hit:.1f}%"
    print(f"{d['label']:22} {d['cache']:5} {r['pool_slots']:5} {r['decode_tok_s']:9.2f} {r['prefill_tok_s']:9.1f} {hit:>6} "
          f"{r['bytes_read_per_token']/1e6:7.1f} {r['stall_ms_per_token']:8.2f} {r['gpu_wait_ms_per_token']:7.2f} {r['host_ms_per_token']:7.2f} "
          f"{r.get('record_ms_per_token', 0):6.2f} {r.get('submit_ms_per_token', 0):6.2f} "
          f"{r.get('loads_per_token', 0):6.1f} {r.get('read_ms_per_load', 0):6.2f} {r.get('upload_ms_per_load', 0):6.2f} {r['gpu_bytes']['total']/1e9:6.2f} {r.get('readers', 0):4} "
          f"{r.get('route_ahead', {}).get('layers', 0):3} {r.get('route_ahead', {}).get('rerun', 0) / max(r.get('decode_tokens', 1), 1):9.2f}")
    sp = r.get("speculative")
    if sp:
        print(f"{'':22} speculative: {sp['used']}/{sp['read']} used ({sp['waited']} waited), {sp['wasted']} wasted, "
              f"{sp['dropped']} dropped, disk MB/tok {sp['disk_bytes_per_token']/1e6:.1f}, yielded ms/tok {sp['yielded_ms_per_token']:.2f}")
    if r.get("reader_probe_gb_s"):
        print(f"{'':22} disk probe (threads, GB/s): " + ", ".join(f"{t}: {g:.2f}" for t, g in r["reader_probe_gb_s"]))
PY
