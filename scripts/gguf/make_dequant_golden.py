#!/usr/bin/env python3
"""Writes crates/gguf/tests/data/dequant_golden.json: seeded random blocks of each type that
diskformer-gguf dequantises, with the values PyPI `gguf`'s dequantiser (gguf.quants) computes for them.

Run: .venv/bin/python scripts/gguf/make_dequant_golden.py   (needs `pip install gguf numpy`)
"""
import hashlib
import json
import pathlib
from importlib.metadata import version

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

OUT = pathlib.Path(__file__).resolve().parents[2] / "crates/gguf/tests/data/dequant_golden.json"

# type -> (block bytes, values per block, byte offsets of f16 scales inside a block)
LAYOUT = {
    "f16": (T.F16, 2, 1, [0]),
    "bf16": (T.BF16, 2, 1, []),
    "q8_0": (T.Q8_0, 34, 32, [0]),
    "q4_0": (T.Q4_0, 18, 32, [0]),
    "q4_K": (T.Q4_K, 144, 256, [0, 2]),
    "q6_K": (T.Q6_K, 210, 256, [208]),
    # Appended after the first six, so their blocks stay what they were.
    "q4_1": (T.Q4_1, 20, 32, [0, 2]),
    "q5_0": (T.Q5_0, 22, 32, [0]),
    "q5_1": (T.Q5_1, 24, 32, [0, 2]),
    "q2_K": (T.Q2_K, 84, 256, [80, 82]),
    "q3_K": (T.Q3_K, 110, 256, [108]),
    "q5_K": (T.Q5_K, 176, 256, [0, 2]),
    "iq4_nl": (T.IQ4_NL, 18, 32, [0]),
    "iq4_xs": (T.IQ4_XS, 136, 256, [0]),
}


def main():
    rng = np.random.default_rng(20261129)
    cases = []
    for name, (qtype, block_bytes, block_size, scale_offsets) in LAYOUT.items():
        n_blocks = max(4, 512 // block_size)
        raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
        # Finite scales of a realistic size (random bytes would often be NaN, inf or huge).
        for off in scale_offsets:
            scales = rng.normal(0, 0.05, size=n_blocks).astype(np.float16)
            raw[:, off:off + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
        if name in ("f16", "bf16"):
            vals = rng.normal(0, 3, size=n_blocks).astype(np.float32)
            if name == "f16":
                raw = vals.astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
            else:
                raw = (vals.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(n_blocks, 2)
        data = raw.reshape(1, -1)
        values = dequantize(data, qtype).reshape(-1).astype(np.float32)
        assert values.size == n_blocks * block_size
        blob = data.tobytes()
        cases.append({
            "type": name,
            "n_values": int(values.size),
            "blocks_hex": blob.hex(),
            "blocks_sha256": hashlib.sha256(blob).hexdigest(),
            "values_f32_bits": [int(v) for v in values.view(np.uint32)],
        })
    doc = {
        "generator": "scripts/gguf/make_dequant_golden.py",
        "reference": f"gguf {version('gguf')} (gguf.quants.dequantize), numpy {version('numpy')}",
        "seed": 20261129,
        "cases": cases,
    }
    OUT.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
