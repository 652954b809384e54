#!/usr/bin/env bash
# Runs every test: installs what is missing (scripts/setup.sh), checks our gguf-dump against the PyPI gguf
# package's on a gguf-py-written fixture and the real Qwen vocabularies, then `cargo test --workspace`, then
# `diskformer chat` once on its built-in model, then `diskformer serve` driven by the PyPI openai client and
# by the overhead script.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
# lavapipe warns on every device creation when this is unset.
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$(mktemp -d)}

cargo build --example gguf-dump
files=(crates/gguf/tests/data/tiny.gguf)
for f in .cache/qwen3-vocab.gguf .cache/qwen35-vocab.gguf; do
    [ -f "$f" ] && files+=("$f")
done
.venv/bin/python scripts/gguf/compare_dump.py target/debug/examples/gguf-dump "${files[@]}"

cargo test --workspace

# The README's main job, end to end on the built-in demo model (ingest, upload, streamed experts, generation).
reply=$(cargo run --bin diskformer -- chat --prompt "What is a cynic?" --max-tokens 40 --temperature 0)
echo "diskformer chat: ok: ${reply}"

# The server through a real OpenAI client, streamed and not, on a tiny random model.
cargo build --bin diskformer --example synth-gguf
SERVE_DIR=$(mktemp -d)
target/debug/examples/synth-gguf --shape tiny --out "$SERVE_DIR/tiny.gguf" > /dev/null
.venv/bin/python scripts/serve/openai_client.py target/debug/diskformer "$SERVE_DIR/tiny.gguf"
rm -rf "$SERVE_DIR"
# The overhead script the device runs at full size (scripts/device/serve.sh), once here so that it keeps
# reading what the server sends (a debug build: its figures say nothing).
.venv/bin/python scripts/serve/overhead.py target/debug/diskformer --rounds 1 --max-tokens 8 | grep '^medians'
