"""Writes the split fuzz target's seed (crates/gguf/fuzz/seeds/split/two-shards.bin): a 2-shard gguf-split set
made by PyPI gguf's own writer (split_max_tensors=2 over three tensors), as `[u32 LE length of the first
shard][first shard][second shard]`. Run with the repository's .venv (pip install gguf numpy)."""
import os
import struct
import sys
import tempfile

import gguf
import numpy as np

out = sys.argv[1] if len(sys.argv) > 1 else "crates/gguf/fuzz/seeds/split/two-shards.bin"
with tempfile.TemporaryDirectory() as tmp:
    w = gguf.GGUFWriter(os.path.join(tmp, "s.gguf"), "qwen3moe", split_max_tensors=2)
    w.add_block_count(1)
    rng = np.random.default_rng(1)
    w.add_tensor("a.weight", rng.standard_normal(64).astype(np.float32))
    w.add_tensor("b.weight", rng.standard_normal(32).astype(np.float16))
    q8 = gguf.quants.quantize(rng.standard_normal((2, 64)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("c.weight", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    first, second = (open(os.path.join(tmp, f"s-0000{i}-of-00002.gguf"), "rb").read() for i in (1, 2))
with open(out, "wb") as f:
    f.write(struct.pack("<I", len(first)) + first + second)
print(f"wrote {out}: shards of {len(first)} and {len(second)} bytes")
