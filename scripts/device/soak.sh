#!/usr/bin/env bash
# The soak at full size (issue #37): examples/soak on the store of the Qwen3-30B-A3B-shaped synthetic GGUF that
# tiers.sh wrote on this machine (/tmp/q3-$FTYPE.store), every record read with O_DIRECT after the page cache
# is dropped, under uniform routing, engines reopened with random budgets and host tiers, replies cancelled
# and contexts reset, for MINUTES minutes. A device call lasts 10 minutes at most, so the soak runs in its own
# process session and outlives the call that starts it:
#   PHASE=start  drops the page cache, starts the soak and a sampler of the GPU's used memory (every 15 s);
#   PHASE=wait   waits up to WAIT seconds for it to end, then prints its progress lines, the GPU memory it
#                sampled and its JSON line (all also in $OUT).
# Binaries in .device/ (soak, built here, gzipped).
set -uo pipefail
source scripts/device/call-setup.sh
FTYPE=${FTYPE:-q4_k_m}
S=/tmp/q3-$FTYPE${VOCAB:+-v}.store # as tiers.sh names it
MINUTES=${MINUTES:-10.5}
case "${PHASE:-}" in
start)
    [ -s $S/experts.bin ] || { echo "no store at $S: run tiers.sh on this machine first"; exit 1; }
    rm -f /tmp/soak.done /tmp/soak.log /tmp/soak.json /tmp/soak-gpu.txt
    # Its own copy: a later call's .device replaces the file the running soak was started from.
    cp $D/soak /tmp/soak-bin
    sync; echo 3 > /proc/sys/vm/drop_caches
    setsid nohup bash -c "/tmp/soak-bin --store $S --direct-io --minutes $MINUTES --tokens 100000000 \
        --replies-per-engine ${REPLIES:-12} --budgets ${BUDGETS:-4g,6g,12g} --ram-budgets ${RAM_BUDGETS:-2g,8g,16g} \
        > /tmp/soak.json 2> /tmp/soak.log; echo \$? > /tmp/soak.done" > /dev/null 2>&1 &
    setsid nohup bash -c 'while [ ! -f /tmp/soak.done ]; do
        echo "$(date +%s) $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits)" >> /tmp/soak-gpu.txt
        sleep 15; done' > /dev/null 2>&1 &
    sleep 20
    echo "started; after 20 s:"; cat /tmp/soak.log ;;
wait)
    for _ in $(seq 1 "${WAIT:-580}"); do [ -f /tmp/soak.done ] && break; sleep 1; done
    cp /tmp/soak.log /tmp/soak-gpu.txt /tmp/soak.json "$OUT/" 2>/dev/null
    [ -f /tmp/soak.done ] || { echo "still running:"; tail -3 /tmp/soak.log; exit 3; }
    echo "exit status $(cat /tmp/soak.done)"
    tail -25 /tmp/soak.log
    awk '{print $2}' /tmp/soak-gpu.txt | sort -n | awk 'NR == 1 {min = $1} {max = $1; n++} END {
        printf "GPU memory used (MiB), %d samples: min %d max %d\n", n, min, max}'
    echo "first and last samples: $(head -1 /tmp/soak-gpu.txt) / $(tail -1 /tmp/soak-gpu.txt)"
    cat /tmp/soak.json ;;
*) echo "usage: PHASE=start|wait bash scripts/device/soak.sh"; exit 2 ;;
esac
