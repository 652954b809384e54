#!/usr/bin/env bash
# Issue #37's device figures: what checked reads cost decode at a 4 GB budget (Q4_K_M 30B-A3B synthetic with
# the real Qwen3 vocabulary, page cache and cold, calibrated and uniform; rows alternating checked and
# unchecked), and the 10-minute soak from a cold store, on one machine in three calls made back to back (a
# machine stays held 30 s after a call):
#   CALL=1  the model and store, the rows, then the soak started (it outlives the call) and llama.cpp's build
#           started beside it (the soak is a reliability run, not a speed one); SOAK=0: the rows only;
#   CALL=2  waits for the soak and prints its end;
#   CALL=3  llama.cpp's best 4 GB configurations, and this build's page-cache rows alternating with a
#           variant's (.device/bench-NAME, labels NAME-*; NAME from VARIANT, default new) where one exists.
#   CALL=5  cold rows (checked, both workloads) alternating this build's and a variant's (.device/bench-NAME,
#           labels NAME-cold-*; NAME from VARIANT, default old), three pairs each: an older build beside
#           this one's O_DIRECT loads hashed piece by piece (the disk's rate moves between rows, so pairs).
# The soak alone, on a machine of its own, in two calls back to back:
#   CALL=4  the model's store (the GGUF removed after ingest: the soak reads the store only), the soak
#           started, then waited for until the call's time is nearly spent; then CALL=2.
# Binaries in .device/ (bench, synth-gguf, ingest, record-read, soak; bench-NAME optional),
# .device/calibrated.jsonl (routing-trace), llama.cpp's source in .llama/; carry .gl, .device and .llama.
set -uo pipefail
source scripts/device/rows-4g.sh
C=--budget,4g,--prompt-tokens,4,--direct-io
case "${CALL:-}" in
1)
    ROWS="cal-chk:$B,$cal cal-nochk:$B,$cal,$off uni-chk:$B,$uni uni-nochk:$B,$uni,$off"
    ROWS+=" cal-nochk2:$B,$cal,$off cal-chk2:$B,$cal uni-nochk2:$B,$uni,$off uni-chk2:$B,$uni"
    ROWS+=" cold-cal-chk:$C,$cal cold-cal-nochk:$C,$cal,$off cold-uni-nochk:$C,$uni,$off cold-uni-chk:$C,$uni"
    DECODE=128 PHASES=rows ROWS="$ROWS" timeout ${ROWS_TIMEOUT:-520} bash scripts/device/tiers.sh
    pkill -f 'device/bench' || true
    [ "${SOAK:-1}" = 0 ] && exit 0
    PHASE=start MINUTES=${MINUTES:-10.2} bash scripts/device/soak.sh
    bash scripts/device/llama-cuda.sh build ;;
2) PHASE=wait WAIT=${WAIT:-585} bash scripts/device/soak.sh ;;
3)
    PHASE=wait WAIT=60 bash scripts/device/soak.sh | tail -3
    n=${VARIANT:-new}
    ROWS="cal:$B,$cal $n-cal:$B,$cal uni:$B,$uni $n-uni:$B,$uni $n-cal-nochk:$B,$cal,$off cal-nochk:$B,$cal,$off"
    ROWS+=" $n-cal2:$B,$cal cal2:$B,$cal $n-uni2:$B,$uni uni2:$B,$uni"
    [ -x .device/bench-$n ] || ROWS="cal:$B,$cal uni:$B,$uni cal-nochk:$B,$cal,$off cal2:$B,$cal uni2:$B,$uni"
    REUSE=1 PHASES="rows llama" ROWS="$ROWS" timeout ${ROWS_TIMEOUT:-560} bash scripts/device/tiers.sh ;;
5)
    n=${VARIANT:-old}
    [ -x .device/bench-$n ] || { echo "no .device/bench-$n"; exit 2; }
    ROWS=""
    for i in 1 2 3; do
        ROWS+=" cold-cal$i:$C,$cal $n-cold-cal$i:$C,$cal $n-cold-uni$i:$C,$uni cold-uni$i:$C,$uni"
    done
    REUSE=1 PHASES=rows ROWS="$ROWS" timeout ${ROWS_TIMEOUT:-560} bash scripts/device/tiers.sh ;;
4)
    source scripts/device/call-setup.sh
    G=/dev/shm/q3-$FTYPE${VOCAB:+-v}.gguf S=/tmp/q3-$FTYPE${VOCAB:+-v}.store
    SECONDS=0
    if [ ! -s $S/experts.bin ]; then
        $D/synth-gguf --shape qwen3-30b-a3b --ftype $FTYPE ${VOCAB:+--vocab-from "$VOCAB"} --out $G | tail -1
        $D/ingest $G --store $S | tail -1
        rm -f $G
    fi
    PHASE=start MINUTES=${MINUTES:-10.2} bash scripts/device/soak.sh
    PHASE=wait WAIT=$((575 - SECONDS)) bash scripts/device/soak.sh ;;
*) echo "usage: CALL=1|2|3|4|5 bash scripts/device/read-checks.sh"; exit 2 ;;
esac
