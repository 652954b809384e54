#!/usr/bin/env bash
# Writes the tiny qwen3moe (and qwen35moe) fixtures with our GGUF writer (examples/synth-gguf; `--ftype q4_k_m`: random
# K-quant blocks, each tensor of the type llama.cpp's quantizer gives it; `uniform-TYPE`: every matrix TYPE) and records llama.cpp's
# greedy output on their F32 twins (scripts/qwen3moe/llama_golden.py) into crates/qwen3-moe/tests/data, and
# for the Q8_0-expert fixtures llama.cpp's prompt log-probabilities on the fixture itself
# (scripts/qwen3moe/llama_q8_prompt.py, the int8 prefill's reference).
# The fixtures are not committed: the test rebuilds each from the "synth_args" in its golden and checks
# the sha256. The exceptions are the files llama.cpp's own quantizer made (scripts/qwen3moe/quantize_fixture.py
# from an F32 synth-gguf file, each tensor of the type and with the values llama-quantize gives it): those are
# committed as tests/data/llamaq-*.gguf (0.8–1.7 MB each), as the quantizer is not part of the build.
# Needs llama-cpp-python in .venv (pip install llama-cpp-python: ~20 min compile on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=crates/qwen3-moe/tests/data
tmp=${TMPDIR:-/tmp}/diskformer-goldens
mkdir -p "$tmp" "$out"
cargo build --release --example synth-gguf

# name | synth-gguf args | prompt ids
fixtures=(
  "gqa2|--layers 2 --hidden 64 --heads 4 --kv-heads 2 --head-dim 32 --experts 8 --top-k 2 --ffn 32 --seed 11|256,257,72,101,108,108,111,44,32,119,111,114,108,100,33,258,10,256,257,97"
  "gqa4|--layers 3 --hidden 128 --heads 8 --kv-heads 2 --head-dim 64 --experts 16 --top-k 4 --ffn 64 --seed 12|84,104,101,32,113,117,105,99,107,32,98,114,111,119,110,32,102,111,120"
  "gqa16|--layers 2 --hidden 64 --heads 16 --kv-heads 1 --head-dim 32 --experts 8 --top-k 2 --ffn 32 --seed 15|256,257,72,101,108,108,111,44,32,119,111,114,108,100,33,258,10,256,257,97"
  "q4experts|--layers 2 --hidden 64 --heads 4 --kv-heads 2 --head-dim 32 --experts 8 --top-k 2 --ffn 64 --seed 14 --expert-type q4_0|256,257,87,104,97,116,32,105,115,32,81,52,95,48,63,258,10,256,257,97"
  "q4km|--layers 2 --hidden 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 8 --top-k 2 --ffn 256 --seed 21 --ftype q4_k_m|256,257,72,101,108,108,111,44,32,119,111,114,108,100,33,258,10,256,257,97"
  "q5km|--layers 2 --hidden 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 8 --top-k 2 --ffn 256 --seed 22 --ftype q5_k_m|84,104,101,32,113,117,105,99,107,32,98,114,111,119,110,32,102,111,120"
  "q3km|--layers 2 --hidden 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 8 --top-k 2 --ffn 256 --seed 23 --ftype q3_k_m|256,257,87,104,97,116,32,105,115,32,81,51,95,75,63,258,10,256,257,97"
  "q2k|--layers 2 --hidden 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 8 --top-k 2 --ffn 256 --seed 24 --ftype q2_k|84,104,101,32,113,117,105,99,107,32,98,114,111,119,110,32,102,111,120"
  "uiq4xs|--layers 2 --hidden 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 8 --top-k 2 --ffn 256 --seed 25 --ftype uniform-iq4_xs|256,257,72,101,108,108,111,44,32,119,111,114,108,100,33,258,10,256,257,97"
  "uq51|--layers 2 --hidden 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 8 --top-k 2 --ffn 256 --seed 26 --ftype uniform-q5_1|84,104,101,32,113,117,105,99,107,32,98,114,111,119,110,32,102,111,120"
  "uq40|--layers 2 --hidden 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 8 --top-k 2 --ffn 256 --seed 27 --ftype uniform-q4_0|256,257,87,104,97,116,32,105,115,32,81,52,95,48,63,258,10,256,257,97"
  "ubf16|--layers 2 --hidden 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 8 --top-k 2 --ffn 256 --seed 28 --ftype uniform-bf16|84,104,101,32,113,117,105,99,107,32,98,114,111,119,110,32,102,111,120"
  "qwen3vocab|--layers 2 --hidden 64 --heads 2 --kv-heads 2 --head-dim 32 --experts 32 --top-k 8 --ffn 32 --seed 13 --vocab-from .cache/qwen3-vocab.gguf|151644,872,198,9707,11,1246,525,498,30,151645,198,151644,77091,198"
)
for f in "${fixtures[@]}"; do
  IFS='|' read -r name args ids <<<"$f"
  # shellcheck disable=SC2086
  ./target/release/examples/synth-gguf --shape tiny $args --out "$tmp/$name.gguf"
  .venv/bin/python scripts/qwen3moe/llama_golden.py "$tmp/$name.gguf" --ids "$ids" -n 32 --top 5 \
    --out "$out/golden-$name.json" --synth-args "$args"
done

# Made by llama.cpp's quantizer: one F32 source (4 experts: llama.cpp's rules for 8-expert models differ,
# and the files stay small), each llama-quantize file type of it.
# name | llama-quantize file type | prompt ids
source_args="--layers 2 --hidden 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 4 --top-k 2 --ffn 256 --seed 31 --ftype f32"
quantized=(
  "llamaq-q4_k_m|Q4_K_M|256,257,72,101,108,108,111,44,32,119,111,114,108,100,33,258,10,256,257,97"
  "llamaq-q5_k_m|Q5_K_M|84,104,101,32,113,117,105,99,107,32,98,114,111,119,110,32,102,111,120"
  "llamaq-q3_k_m|Q3_K_M|256,257,87,104,97,116,32,105,115,32,81,51,95,75,63,258,10,256,257,97"
  "llamaq-q6_k|Q6_K|256,257,72,101,108,108,111,44,32,119,111,114,108,100,33,258,10,256,257,97"
  "llamaq-q2_k|Q2_K|84,104,101,32,113,117,105,99,107,32,98,114,111,119,110,32,102,111,120"
)
# shellcheck disable=SC2086
./target/release/examples/synth-gguf --shape tiny $source_args --out "$tmp/llamaq-f32.gguf"
for f in "${quantized[@]}"; do
  IFS='|' read -r name ftype ids <<<"$f"
  .venv/bin/python scripts/qwen3moe/quantize_fixture.py "$tmp/llamaq-f32.gguf" "$out/$name.gguf" --ftype "$ftype"
  .venv/bin/python scripts/qwen3moe/llama_golden.py "$out/$name.gguf" --ids "$ids" -n 32 --top 5 \
    --out "$out/golden-$name.json" --synth-args "$source_args" --quantized "$ftype"
done
# The int8 prefill's reference: llama.cpp on the Q8_0-expert fixtures themselves (it quantises activations
# as int8_prefill does), the prompt's log-probabilities.
for f in "${fixtures[@]}"; do
  IFS='|' read -r name args ids <<<"$f"
  [[ $args == *q4_0* || $args == *--ftype* ]] && continue
  .venv/bin/python scripts/qwen3moe/llama_q8_prompt.py "$tmp/$name.gguf" --ids "$ids" --top 20 \
    --out "$out/q8prompt-$name.json" --synth-args "$args"
done

# qwen35moe: the CPU reference's golden (crates/qwen3-moe/tests/qwen35moe.rs; in a directory of its own, since
# the engine's golden test runs every tests/data/golden-*.json and the engine does not run qwen35moe), every
# tensor F32.
args="--shape qwen35moe-tiny --seed 41"
mkdir -p "$out/qwen35moe"
# shellcheck disable=SC2086
./target/release/examples/synth-gguf $args --out "$tmp/qwen35moe-tiny.gguf"
.venv/bin/python scripts/qwen3moe/llama_golden.py "$tmp/qwen35moe-tiny.gguf" \
  --ids 256,257,72,101,108,108,111,44,32,119,111,114,108,100,33,258,10,256,257,97 -n 24 --top 5 \
  --out "$out/qwen35moe/golden-tiny.json" --synth-args "$args"
# The GPU engine's golden: the same layer pattern at sizes its block GEMVs take (every input a multiple of 256).
args="--shape qwen35moe-small --seed 42"
# shellcheck disable=SC2086
./target/release/examples/synth-gguf $args --out "$tmp/qwen35moe-small.gguf"
.venv/bin/python scripts/qwen3moe/llama_golden.py "$tmp/qwen35moe-small.gguf" \
  --ids 256,257,72,101,108,108,111,44,32,119,111,114,108,100,33,258,10,256,257,97 -n 24 --top 5 \
  --out "$out/qwen35moe/golden-small.json" --synth-args "$args"
