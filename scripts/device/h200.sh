#!/usr/bin/env bash
# One measurement call on the H200 device machine (see DEVELOPERS' guide): runs with the binaries copied into
# .device/ (built here with `cargo build --release --examples` and `cargo bench --no-run`), writes logs to
# $OUT and prints a short table last. Nothing is built there.
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
D=.device
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
nproc; free -g | head -2; df -h /tmp /dev/shm | tail -2

if [ -x $D/kernels-bench ] && [ -z "${SKIP_KERNELS:-}" ]; then
    echo "== kernels (criterion)"
    $D/kernels-bench --bench --warm-up-time 1 --measurement-time 2 > "$OUT/kernels.txt" 2>&1
    grep -E "^[a-z_0-9/]+ +time:|thrpt:|adapter|copy" "$OUT/kernels.txt" | head -80
fi

if [ -x $D/synth-gguf ] && [ -z "${SKIP_STORE:-}" ]; then
    echo "== store"
    $D/synth-gguf --shape qwen3-30b-a3b --out /dev/shm/q3.gguf | tee "$OUT/synth.txt"
    KEEP_STORE=1 bash scripts/store/bench_ingest.sh /dev/shm/q3.gguf /tmp/bench $D/ingest | tee "$OUT/ingest.txt"
    sync; echo 3 > /proc/sys/vm/drop_caches
    $D/record-read /tmp/bench/store --threads 1,4,8,16 --records 384 | tee "$OUT/record-read.txt"
    $D/record-read /tmp/bench/store --threads 1,4,8 --records 384 --buffered | tee -a "$OUT/record-read.txt"
fi
