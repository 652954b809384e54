#!/usr/bin/env bash
# The streaming defaults at 4 GB in one call (Q4_K_M 30B-A3B synthetic with the real Qwen3 vocabulary, store
# in the page cache): llama.cpp's build (~5.5 min) while the model and store are written, llama.cpp CUDA's
# two best 4 GB configurations on the same GGUF, then rows alternating this build's defaults with an older
# build's (.device/bench-old, labels old-*), with the CPU tier's former thread count (--cpu-threads 14) and
# unchecked (issue #37's comparison at the default), then (SERVE=1, the default) the server's overhead
# (serve.sh, resident and 4 GB). Binaries in .device/ (bench, bench-old, synth-gguf, ingest, diskformer),
# .device/calibrated.jsonl and qwen3-vocab.gguf, llama.cpp's source in .llama/; carry .gl, .device and
# .llama. Prints the rows' table with llama.cpp's figures, then serve's medians.
set -uo pipefail
source scripts/device/rows-4g.sh
t14=--cpu-threads,14
SECONDS=0
ROWS="cal:$B,$cal old-cal:$B,$cal uni:$B,$uni old-uni:$B,$uni cal-t14:$B,$cal,$t14 uni-t14:$B,$uni,$t14"
ROWS+=" cal-nochk:$B,$cal,$off uni-nochk:$B,$uni,$off old-cal2:$B,$cal cal2:$B,$cal old-uni2:$B,$uni uni2:$B,$uni"
PHASES="build rows llama" ROWS="$ROWS" timeout ${ROWS_TIMEOUT:-480} bash scripts/device/tiers.sh
pkill -f 'device/bench' || true
[ "${SERVE:-1}" = 1 ] && ROUNDS=3 MAX_TOKENS=64 timeout $((SECONDS < 560 ? 590 - SECONDS : 30)) bash scripts/device/serve.sh
