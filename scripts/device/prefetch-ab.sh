#!/usr/bin/env bash
# The default streaming path (prefetch on, lookahead 2) in the page cache on the H200: .device/bench-old and
# .device/bench alternating at each budget:round of ROWS (default "16:1 8:1"), 48 tokens after 16. Needs
# .device/{bench,bench-old,synth-gguf,ingest}(.gz), built here; reuses a store a call on the same machine
# left. JSON lines to $OUT/ab.jsonl, one line a row printed.
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
D=.device; for z in $D/*.gz; do gunzip -f $z; done; chmod +x $D/*
G=/dev/shm/q3.gguf; S=/tmp/q3.store; SECONDS=0
if [ -s $S/experts.bin ]; then echo reuse; else $D/synth-gguf --shape qwen3-30b-a3b --expert-type q8_0 --out $G > /dev/null && $D/ingest $G --store $S | tail -1; fi
echo "synth + ingest: $SECONDS s"
cat $S/experts.bin > /dev/null
for row in ${ROWS:-16:1 8:1}; do b=${row%:*}; r=${row#*:}
  for bin in bench-old bench; do
    line=$(timeout 100 $D/$bin --model $G --store $S --decode-tokens 48 --budget ${b}g --prompt-tokens 16 2>/tmp/e.txt)
    [ -z "$line" ] && tail -2 /tmp/e.txt
    echo "$line" >> $OUT/ab.jsonl
    echo "$bin ${b}g r$r: $(echo "$line" | python3 -c 'import sys,json; d=json.load(sys.stdin); print({k:v for k,v in d.items() if "tok" in k or k in ("gpu_wait_ms","hit_rate")})' 2>/dev/null || echo "$line" | cut -c1-200) [$SECONDS s]"
  done
done
