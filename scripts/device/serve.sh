#!/usr/bin/env bash
# Issue #35's server overhead at full size: `diskformer serve` on the Qwen3-30B-A3B-shaped synthetic GGUF
# (FTYPE, default q4_k_m; made and ingested unless a call on this machine left them: tiers.sh's paths; with
# the real Qwen3 vocabulary, .device/qwen3-vocab.gguf, without which its replies decode to no text), every
# expert resident (--budget 100g) and at 4 GB (experts streaming, the engine's defaults), each driven by
# scripts/serve/overhead.py: streamed greedy chat replies whose finish chunk carries the engine's own timings,
# beside the client's times for the same reply. Binaries in .device/ (diskformer, synth-gguf, ingest).
# Prints each budget's medians last; JSON lines in $OUT/serve.jsonl (the replies' lines in /tmp: a call
# brings 8 files back).
set -uo pipefail
source scripts/device/call-setup.sh
FTYPE=${FTYPE:-q4_k_m}
# (-v: made with the real vocabulary, so that a machine holding one made without it makes it again)
G=${G:-/dev/shm/q3-$FTYPE${VOCAB:+-v}.gguf}
S=/tmp/q3-$FTYPE${VOCAB:+-v}.store
if [ ! -s $G ] || [ ! -s $S/experts.bin ]; then
    $D/synth-gguf --shape qwen3-30b-a3b --ftype "$FTYPE" ${VOCAB:+--vocab-from "$VOCAB"} --out $G | tail -1
    $D/ingest $G --store $S | tail -1
fi
for budget in ${BUDGETS:-100g 4g}; do
    echo "budget $budget"
    python3 scripts/serve/overhead.py $D/diskformer --rounds ${ROUNDS:-5} --max-tokens ${MAX_TOKENS:-128} \
        --prompt-words ${PROMPT_WORDS:-300} -- --model $G --store $S --budget $budget --ctx 4096 \
        2>"/tmp/serve-$budget.err" | tee "/tmp/serve-$budget.txt" | grep -v '^{'
    tail -1 "/tmp/serve-$budget.txt" | python3 -c "import json,sys; d=json.load(sys.stdin); d['budget']='$budget'; print(json.dumps(d))" \
        >> "$OUT/serve.jsonl" 2>/dev/null
done
for budget in ${BUDGETS:-100g 4g}; do
    echo "$budget: $(grep '^medians' "/tmp/serve-$budget.txt" || tail -n 2 "/tmp/serve-$budget.err")"
done
