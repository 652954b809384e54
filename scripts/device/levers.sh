#!/usr/bin/env bash
# Issue #32's levers at 4 GB (Q4_K_M 30B-A3B synthetic, store in the page cache), this build's rows
# alternating with an older build's (.device/bench-old, labels old-*), beside llama.cpp's best 4 GB
# configurations on the same GGUF, in two calls made back to back on one machine (it stays held 30 s after
# a call):
#   CALL=1  llama.cpp's build (~5.5 min) while the model and store are written, llama.cpp's rows, then the
#           first half of the rows until the call's time is nearly spent;
#   CALL=2  the second half, llama.cpp's rows again, then (SERVE=1, the default) the server's overhead
#           (serve.sh, resident and 4 GB).
# The levers against this build's defaults: 12 CPU-tier threads (`--cpu-threads 12`), the next layer's chunk
# prefetch queued after each layer's wait (`--no-early-chunk-prefetch`), demand loads in 4 pieces
# (`--read-split 4`), and unchecked rows (`--no-read-checks`, issue #37). Binaries in .device/ (bench,
# bench-old, synth-gguf, ingest, diskformer), .device/calibrated.jsonl, llama.cpp's source in .llama/;
# carry .gl, .device and .llama. Prints the rows' table (with llama.cpp's figures) last.
set -uo pipefail
source scripts/device/rows-4g.sh
t12=--cpu-threads,12
late=--no-early-chunk-prefetch
s4=--read-split,4
SECONDS=0
case "${CALL:-}" in
1)
    PHASES="build llama" bash scripts/device/tiers.sh
    left=$((575 - SECONDS)); [ $left -lt 30 ] && left=30
    ROWS="cal:$B,$cal old-cal:$B,$cal uni:$B,$uni old-uni:$B,$uni cal-t12:$B,$cal,$t12 uni-t12:$B,$uni,$t12"
    ROWS+=" cal-nochk:$B,$cal,$off uni-nochk:$B,$uni,$off cal-late-s4:$B,$cal,$late,$s4 cal-s4:$B,$cal,$s4"
    ROWS+=" old-cal2:$B,$cal cal2:$B,$cal old-uni2:$B,$uni uni2:$B,$uni"
    REUSE=1 PHASES=rows ROWS="$ROWS" timeout $left bash scripts/device/tiers.sh
    pkill -f 'device/bench' || true ;;
2)
    ROWS="uni-nochk2:$B,$uni,$off cal-nochk2:$B,$cal,$off uni-t12-2:$B,$uni,$t12 cal-t12-2:$B,$cal,$t12"
    ROWS+=" old-uni3:$B,$uni uni3:$B,$uni old-cal3:$B,$cal cal3:$B,$cal cal-late:$B,$cal,$late"
    ROWS+=" uni-late-s4:$B,$uni,$late,$s4 uni4:$B,$uni cal4:$B,$cal"
    REUSE=1 PHASES="rows llama" ROWS="$ROWS" timeout ${ROWS_TIMEOUT:-420} bash scripts/device/tiers.sh
    pkill -f 'device/bench' || true
    [ "${SERVE:-1}" = 1 ] && ROUNDS=3 MAX_TOKENS=64 timeout $((SECONDS < 560 ? 590 - SECONDS : 30)) bash scripts/device/serve.sh ;;
*) echo "usage: CALL=1|2 bash scripts/device/levers.sh"; exit 2 ;;
esac
