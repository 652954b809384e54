# Sourced first by the device scripts: Vulkan's loader from .gl/, the NVIDIA ICD, the binaries in .device/
# unpacked ($D), and $OUT made.
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
D=.device
for z in $D/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done
chmod +x $D/* 2>/dev/null
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
