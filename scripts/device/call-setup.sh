# Sourced first by the device scripts: Vulkan's loader from .gl/, the NVIDIA ICD, the binaries in .device/
# unpacked ($D), and $OUT made.
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
D=.device
for z in $D/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done
chmod +x $D/* 2>/dev/null
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# A real vocabulary for the synthetic models where one travels (.device/qwen3-vocab.gguf, from the project's
# .cache/): their replies through `serve` then decode to text (a byte vocabulary's padding tokens, which
# random weights mostly pick, decode to none).
[ -s $D/qwen3-vocab.gguf ] && VOCAB=${VOCAB-$D/qwen3-vocab.gguf}
