#!/usr/bin/env bash
# Ingest throughput against `cp` of the same GGUF onto the same disk, in the same run.
#   scripts/store/bench_ingest.sh GGUF DEST_DIR [INGEST_BINARY]
# With root and a writable /proc/sys/vm/drop_caches the page cache is dropped before each (the source is
# then read cold); otherwise the source is read warm. Prints one table line per tool and the ratio.
set -euo pipefail
src=$1 dest=$2 bin=${3:-target/release/examples/ingest}
mkdir -p "$dest"
drop() { sync; if [ -w /proc/sys/vm/drop_caches ]; then echo 3 > /proc/sys/vm/drop_caches; echo cold; else echo warm; fi; }
size=$(stat -c %s "$src")
rm -rf "$dest/cp.gguf" "$dest/store"
cache=$(drop)
t0=$(date +%s.%N); cp "$src" "$dest/cp.gguf"; sync; t1=$(date +%s.%N)
rm -f "$dest/cp.gguf"
drop >/dev/null
t2=$(date +%s.%N); "$bin" "$src" --store "$dest/store" >/dev/null; sync; t3=$(date +%s.%N)
[ -n "${KEEP_STORE:-}" ] || rm -rf "$dest/store"
python3 - "$size" "$t0" "$t1" "$t2" "$t3" "$cache" <<'PY'
import sys
size, t0, t1, t2, t3, cache = int(sys.argv[1]), *map(float, sys.argv[2:6]), sys.argv[6]
cp, ing = t1 - t0, t3 - t2
print(f"| tool | seconds | GB/s | source cache |")
print(f"| cp + sync | {cp:.2f} | {size / cp / 1e9:.2f} | {cache} |")
print(f"| ingest + sync | {ing:.2f} | {size / ing / 1e9:.2f} | {cache} |")
print(f"ingest / cp throughput: {cp / ing:.2f}")
PY
