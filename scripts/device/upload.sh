#!/usr/bin/env bash
# Expert upload and streaming measurements on the H200 (binaries in .device/, see h200.sh): RAM -> pool
# upload bandwidth, then miss latency and streaming from a 4-layer full-width store on /tmp, O_DIRECT with the
# page cache dropped, then buffered with the store in the page cache.
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
D=.device
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
$D/synth-gguf --shape qwen3-30b-a3b --layers 4 --out /dev/shm/q3-4l.gguf
$D/ingest /dev/shm/q3-4l.gguf --store /tmp/s4
echo "== RAM -> pool"
$D/upload-bench --slots 256 --threads 1,4,8 --records 512 | tee "$OUT/upload-ram.txt"
echo "== store, O_DIRECT, cold"
sync; echo 3 > /proc/sys/vm/drop_caches
$D/upload-bench --store /tmp/s4 --direct --slots 256 --threads 1,4,8 --records 384 | tee "$OUT/upload-direct.txt"
echo "== store, buffered, warm"
cat /tmp/s4/experts.bin > /dev/null
$D/upload-bench --store /tmp/s4 --slots 256 --threads 1,4,8 --records 384 | tee "$OUT/upload-warm.txt"
