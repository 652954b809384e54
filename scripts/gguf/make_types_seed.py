"""Writes a seed for the parse fuzz target (crates/gguf/fuzz/seeds/types.gguf): one 256-value tensor of every
block type the engine dequantises, random bytes, written by PyPI gguf's own writer, so that the fuzzer starts
from headers whose tensors reach every dequantiser (its inputs are capped at 4 KiB, which random search
rarely fills with a 256-value block). Run with the repository's .venv (pip install gguf numpy)."""
import sys

import gguf
import numpy as np

out = sys.argv[1] if len(sys.argv) > 1 else "crates/gguf/fuzz/seeds/types.gguf"
T = gguf.GGMLQuantizationType
types = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K,
         T.IQ4_NL, T.IQ4_XS]
rng = np.random.default_rng(3)
w = gguf.GGUFWriter(out, "qwen3moe")
for t in types:
    block, type_size = gguf.GGML_QUANT_SIZES[t]
    data = rng.integers(0, 256, size=256 // block * type_size, dtype=np.uint8)
    w.add_tensor(f"{t.name.lower()}.weight", data, raw_shape=(256 // block * type_size,), raw_dtype=t)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print(f"wrote {out}: {len(types)} tensors")
