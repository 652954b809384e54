#!/usr/bin/env bash
# Issue #32's levers at 4 GB (Q4_K_M 30B-A3B synthetic, store in the page cache, read checks on), alternating
# with the defaults: 12 CPU-tier threads (`--cpu-threads 12`: the sixteenth session's first H100 call had it
# well ahead of the default 14), whole-record demand loads (`--read-split 1`: a checked load stages its
# pieces one after another, each paying a ring wait and a submit), and the next layer's chunk prefetch
# queued before each layer's wait (`--early-chunk-prefetch`). Then (SERVE=1, the default) the server's
# overhead at full size (serve.sh, resident and 4 GB). Binaries in .device/ (bench, synth-gguf, ingest,
# diskformer), .device/calibrated.jsonl. Prints the rows' table, then serve's medians.
set -uo pipefail
B=--budget,4g,--prompt-tokens,512
cal="--routing-trace,.device/calibrated.jsonl"
uni="--routing,uniform"
t12=--cpu-threads,12
s1=--read-split,1
early=--early-chunk-prefetch
ROWS="cal:$B,$cal cal-t12:$B,$cal,$t12 cal-s1:$B,$cal,$s1 cal-early:$B,$cal,$early cal-s1-early:$B,$cal,$s1,$early"
ROWS+=" uni:$B,$uni uni-t12:$B,$uni,$t12 uni-s1-early:$B,$uni,$s1,$early cal-all:$B,$cal,$t12,$s1,$early"
ROWS+=" cal2:$B,$cal cal-t12-2:$B,$cal,$t12 uni-all:$B,$uni,$t12,$s1,$early uni2:$B,$uni"
FTYPE=q4_k_m DECODE=${DECODE:-64} PHASES=rows ROWS="$ROWS" timeout ${ROWS_TIMEOUT:-400} bash scripts/device/tiers.sh
pkill -f 'device/bench' || true
[ "${SERVE:-1}" = 1 ] && ROUNDS=3 MAX_TOKENS=64 bash scripts/device/serve.sh
