#!/usr/bin/env bash
# Qwen3-235B-A22B's shape on the H200 (issue #33): a synthetic Q4_K_M GGUF (synth-gguf --shape qwen3-235b-a22b
# --ftype q4_k_m: llama.cpp's per-tensor types) of as many layers as the disk holds, written to /tmp (the disk)
# and ingested with its experts read in place (the store holds only the dense tensors); then examples/bench at
# a 16 GB budget, 512-token prompt, from the page cache and from a cold disk (page cache dropped: in-place
# reads are buffered), each under `uniform` and the calibrated trace (routing-trace's Qwen3-30B-A3B statistics:
# the same 128 experts, top-8, over this file's layers); and llama.cpp CUDA's 16 GB configurations on the same
# GGUF. A cold row starts with the page cache dropped; what it reads from storage (bench's storage_read:
# /proc/self/io, the pool's reads and the CPU tier's page faults on the mapped GGUF with their readahead)
# over the disk's rate gives its bound: cold-decode-* rows (a one-token prompt) the steps' bytes a token,
# cold-prefill-* (a 512-token prompt) the prompt's bytes. The disk's rate: 8 threads of O_DIRECT reads of
# one expert tensor's size (3.5 MB) at random offsets of the GGUF, measured before and after the row.
# Binaries in .device/ (gzipped: bench, synth-gguf, ingest, routing-trace), llama.cpp's source in .llama/.
# PHASES (default "make pc llama cold"; "build" only builds llama.cpp) picks what runs; the model stays in /tmp for a next call on the same
# machine. LAYERS overrides the layer count; DECODE / COLD_DECODE the decode tokens of a row. JSON lines to
# $OUT/shape235.jsonl, a table last.
set -uo pipefail
source scripts/device/call-setup.sh
G=/tmp/q235.gguf
S=/tmp/q235.store
T=/tmp/q235-calibrated.jsonl
DECODE=${DECODE:-32}
COLD_DECODE=${COLD_DECODE:-16}
PHASES=${PHASES:-make pc llama cold}
BUDGET=16g
SECONDS=0

if [[ $PHASES == *llama* || $PHASES == *build* ]] && [ ! -d /tmp/ll ]; then
    bash scripts/device/llama-cuda.sh build
fi
if [[ $PHASES == *make* ]] && [ ! -s $S/manifest.json ]; then
    rm -rf $G $S
    df -h /tmp | tail -1 | tee "$OUT/disk-free.txt"
    # A layer of Q4_K_M: 128 experts of 10.6 MB (Q4_K down) or 12.2 MB (Q6_K down, half the layers), and 45 MB
    # of attention; 0.9 GB of embedding and output; 8 GB kept free (llama.cpp's build, the store).
    avail=$(df -B1 --output=avail /tmp | tail -1)
    LAYERS=${LAYERS:-$(python3 -c "print(min(94, int(($avail - 0.9e9 - 8e9) / 1.52e9)))")}
    $D/synth-gguf --shape qwen3-235b-a22b --ftype q4_k_m --layers "$LAYERS" --out $G | tail -1
    $D/ingest $G --store $S --experts-in-gguf | tail -1
    echo "$LAYERS" > /tmp/q235.layers
    echo "synth + ingest: $SECONDS s"
fi
LAYERS=$(cat /tmp/q235.layers)
[ -s $T ] || $D/routing-trace --layers "$LAYERS" --experts 128 --top-k 8 --tokens 1024 --out $T | tail -1
echo "layers $LAYERS, GGUF $(du -h $G | cut -f1), store $(du -sh $S | cut -f1)" | tee "$OUT/model.txt"

# Measurements wait for llama.cpp's build: its compilers would share the host with them.
[[ $PHASES == *llama* || $PHASES == *build* ]] && { bash scripts/device/llama-cuda.sh wait || tail -5 /tmp/llama-build.log; }

disk_rate() { # GB/s: 8 threads, O_DIRECT, 3.5 MB reads at random 4 KiB-aligned offsets of the GGUF
    python3 - "$G" <<'PY'
import mmap, os, random, sys, threading, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT)
size, n, total = os.fstat(fd).st_size, 3538944, [0] * 8
def reader(i):
    buf, rng = mmap.mmap(-1, n), random.Random(i)
    for _ in range(64):
        total[i] += os.preadv(fd, [buf], rng.randrange(0, size - n) // 4096 * 4096)
threads = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
t = time.time()
[x.start() for x in threads]; [x.join() for x in threads]
print(round(sum(total) / (time.time() - t) / 1e9, 3))
PY
}
sectors_read() { # sectors read from the whole disks since boot
    awk '$3 ~ /^(nvme[0-9]+n[0-9]+|sd[a-z]+|vd[a-z]+|xvd[a-z]+)$/ { s += $6 } END { print s + 0 }' /proc/diskstats
}
run() { # label, bench args... (the prompt and decode tokens: PROMPT, DECODE)
    local label=$1; shift
    local before=null after=null read=null s0
    if [[ $label == cold-* ]]; then
        before=$(disk_rate)
        sync; echo 3 > /proc/sys/vm/drop_caches
    fi
    s0=$(sectors_read)
    line=$(timeout 420 $D/bench --model $G --store $S --experts-in-gguf --budget $BUDGET --prompt-tokens "${PROMPT:-512}" \
        --decode-tokens "$DECODE" "$@" 2> "/tmp/$label.err")
    read=$(( ($(sectors_read) - s0) * 512 ))
    if [ -z "$line" ]; then tail -3 "/tmp/$label.err"; line=null; fi
    [[ $label == cold-* ]] && after=$(disk_rate)
    echo "{\"label\":\"$label\",\"disk_before\":$before,\"disk_after\":$after,\"disk_read\":$read,\"run\":$line}" >> "$OUT/shape235.jsonl"
    echo "$label ($SECONDS s): $(echo "$line" | cut -c1-100)"
}
if [[ $PHASES == *pc* ]]; then
    cat $G > /dev/null # the GGUF in the page cache
    run pc-cal --routing-trace $T
    run pc-uni --routing uniform
fi
if [[ $PHASES == *llama* ]]; then
    LB=/tmp/ll/build/bin/llama-bench
    # 16 GB on the GPU: ~2.2 GB of dense weights, KV and buffers, and the experts of 8 layers (1.46 GB each).
    for row in exps-cpu:-ot,exps=CPU cpu-moe:--n-cpu-moe,$((LAYERS - 8)); do
        label=${row%%:*}; IFS=, read -r -a a <<< "${row#*:}"
        timeout 400 $LB -m $G -ngl 99 "${a[@]}" -p 512 -n "$DECODE" -r 1 -t 16 -o json > "$OUT/llama-$label.json" \
            2> "/tmp/llama-$label.err" || tail -3 "/tmp/llama-$label.err"
        python3 -c "import json,sys; r=json.load(open(sys.argv[1])); [print(sys.argv[2], 'pp' if x['n_prompt'] else 'tg', round(x['avg_ts'],2), '+-', round(x['stddev_ts'],2)) for x in r]" \
            "$OUT/llama-$label.json" "llama-$label ${a[*]}" | tee -a "$OUT/llama.txt"
        echo "($SECONDS s)"
    done
fi
if [[ $PHASES == *cold* ]]; then
    PROMPT=1 DECODE=$COLD_DECODE run cold-decode-uni --routing uniform
    PROMPT=1 DECODE=$COLD_DECODE run cold-decode-cal --routing-trace $T
    DECODE=1 run cold-prefill-cal --routing-trace $T
fi

echo "== table ($LAYERS-layer 235B-A22B-shaped Q4_K_M, experts in the GGUF, 16 GB budget; tok/s)"
[ -s "$OUT/shape235.jsonl" ] && python3 - "$OUT/shape235.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l); b = r["run"]
    if not b: print(r["label"], "failed"); continue
    c = b.get("cpu_experts") or {}
    line = (f'{r["label"]:16} decode {b["decode_tok_s"]:6.2f} prefill {b["prefill_tok_s"]:7.1f} '
            f'hits {100*(b["hit_rate"] or 0):5.1f}% cpu/tok {c.get("per_token", 0):5.1f} '
            f'pool GB read/tok {b["bytes_read_per_token"]/1e9:5.2f} disk read {r["disk_read"]/1e9:6.2f} GB')
    if r.get("disk_before"):
        rate = (r["disk_before"] + r["disk_after"]) / 2 * 1e9
        sr = b["storage_read"]
        line += f' disk {r["disk_before"]:.2f}->{r["disk_after"]:.2f} GB/s'
        if "decode" in r["label"]:
            bound = rate / max(sr["decode_bytes_per_token"], 1)
            line += (f' read/tok {sr["decode_bytes_per_token"]/1e9:5.2f} GB bound {bound:6.2f} tok/s = '
                     f'{100*b["decode_tok_s"]/bound:5.1f}%')
        else:
            bound = b["prefill_tokens"] / (sr["prefill_bytes"] / rate)
            line += (f' prompt read {sr["prefill_bytes"]/1e9:5.1f} GB bound {bound:6.1f} tok/s = '
                     f'{100*b["prefill_tok_s"]/bound:5.1f}%')
    print(line)
PY
[ -s "$OUT/llama.txt" ] && cat "$OUT/llama.txt"
