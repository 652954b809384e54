#!/usr/bin/env bash
# Kernel benches alone on the H200 (no model, no store): .device/kernels-bench and each
# .device/kernels-bench-NAME (a variant build) in the order BINS names them (default: the main binary, every
# variant, the main binary again), each with the criterion filter F (the main binary) or FA (the variants).
# Binaries built here (cargo bench -p diskformer-kernels --bench kernels --no-run), stripped and gzipped into
# .device/; run with carry [".gl", ".device"]. Writes $OUT/kb-raw.txt (criterion's output) and $OUT/kb.txt,
# and prints one line a bench (name, mean time) last.
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
D=.device
for z in $D/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done
chmod +x $D/kernels-bench* 2>/dev/null
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
F=${F:-'copy/|q8_gemv/lm_head_151936x2048/subgroup_rows4$|expert_q8_gemv/(xq/|i8/)?(gate_up|down)_8x[0-9x]*/(subgroup|independent)'}
FA=${FA:-$F}
if [ -z "${BINS:-}" ]; then
    BINS=kernels-bench
    for alt in $D/kernels-bench-*; do [ -x "$alt" ] && BINS="$BINS ${alt#$D/}"; done
    [ "$BINS" = kernels-bench ] || BINS="$BINS kernels-bench"
fi
for b in $BINS; do
    f=$FA; [ "$b" = kernels-bench ] && f=$F
    echo "=== $b" | tee -a "$OUT/kb.txt" "$OUT/kb-raw.txt" > /dev/null
    $D/$b --bench "$f" --warm-up-time 1 --measurement-time 2 2>&1 | tee -a "$OUT/kb-raw.txt" |
        grep -E "^[a-z_0-9/]+|time:" | grep -vE "^Benchmarking|^Found|^ *[0-9]+ \(" >> "$OUT/kb.txt"
done
# One line a bench: criterion prints the name on its own line when it is long, then "time: [low mean high]";
# the "change:" lines' times are percentages.
awk '/^===/ { print; next }
     /time:/ { if ($0 ~ /%/) next; if ($1 != "time:") name = $1;
               match($0, /\[[^]]*\]/); split(substr($0, RSTART + 1, RLENGTH - 2), t, " ");
               printf "%-70s %s %s\n", name, t[3], t[4]; next }
     /^[a-z]/ { name = $1 }' "$OUT/kb.txt"
