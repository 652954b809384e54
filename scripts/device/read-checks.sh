#!/usr/bin/env bash
# Issue #37's device figures: what checked reads cost decode at a 4 GB budget (Q4_K_M 30B-A3B synthetic, page
# cache and cold, calibrated and uniform; rows alternating checked, unchecked and, where .device/bench-old
# exists, an older build's checked rows), and the 10-minute soak from a cold store, on one machine in three
# calls made back to back (a machine stays held 30 s after a call):
#   CALL=1  the model and store, the rows (two with 12 CPU-tier threads, issue #32's lever for a host whose
#           vCPUs stall; two with the next layer's chunk prefetch queued before a layer's wait, its prefill
#           lever), then the soak started (it outlives the call) and llama.cpp's build beside it
#           (SOAK=0: the rows only);
#   CALL=2  waits for the soak and prints its end;
#   CALL=3  three more page-cache rows, four of issue #32's levers (2 pool readers, 12 CPU-tier threads:
#           fewer threads than vCPUs, for a host whose vCPUs stall), and llama.cpp's best 4 GB configuration.
# Binaries in .device/ (bench, synth-gguf, ingest, record-read, soak; bench-old optional), .device/calibrated.jsonl
# (routing-trace), llama.cpp's source in .llama/; carry .gl, .device and .llama.
set -uo pipefail
B=--budget,4g,--prompt-tokens,512
C=--budget,4g,--prompt-tokens,4,--direct-io
T=.device/calibrated.jsonl
cal="--routing-trace,$T"
uni="--routing,uniform"
off="--no-read-checks"
case "${CALL:-}" in
1)
    ROWS="cal-chk:$B,$cal cal-nochk:$B,$cal,$off old-cal-chk:$B,$cal uni-chk:$B,$uni uni-nochk:$B,$uni,$off"
    ROWS+=" old-uni-chk:$B,$uni cal-t12:$B,$cal,--cpu-threads,12 cal-nochk2:$B,$cal,$off cal-chk2:$B,$cal"
    ROWS+=" uni-t12:$B,$uni,--cpu-threads,12 uni-nochk2:$B,$uni,$off uni-chk2:$B,$uni"
    ROWS+=" cal-early:$B,$cal,--early-chunk-prefetch uni-early:$B,$uni,--early-chunk-prefetch"
    ROWS+=" cold-cal-chk:$C,$cal cold-cal-nochk:$C,$cal,$off cold-uni-nochk:$C,$uni,$off cold-uni-chk:$C,$uni"
    FTYPE=q4_k_m DECODE=128 PHASES=rows ROWS="$ROWS" timeout 500 bash scripts/device/tiers.sh
    pkill -f 'device/bench' || true
    [ "${SOAK:-1}" = 0 ] && exit 0 # rows only, where the device time left holds no second call
    # The soak (a reliability run, not a speed one) shares the host with llama.cpp's build for its first minutes.
    PHASE=start MINUTES=10.2 bash scripts/device/soak.sh
    bash scripts/device/llama-cuda.sh build ;;
2) PHASE=wait WAIT=585 bash scripts/device/soak.sh ;;
3)
    PHASE=wait WAIT=60 bash scripts/device/soak.sh | tail -3
    REUSE=1 FTYPE=q4_k_m DECODE=128 PHASES="rows llama" LLAMA_ROWS="cpu-moe-40:--n-cpu-moe,40" \
        ROWS="cal-nochk3:$B,$cal,$off cal-chk3:$B,$cal uni-chk3:$B,$uni cal-r2:$B,$cal,--readers,2 \
        uni-r2:$B,$uni,--readers,2 cal-t12:$B,$cal,--cpu-threads,12 uni-t12:$B,$uni,--cpu-threads,12" \
        bash scripts/device/tiers.sh ;;
*) echo "usage: CALL=1|2|3 bash scripts/device/read-checks.sh"; exit 2 ;;
esac
