#!/usr/bin/env python3
"""Writes crates/gguf/tests/data/tiny.gguf with the PyPI `gguf` package's GGUFWriter (a writer no one here
wrote): every metadata value type, arrays and an array of arrays, and small F32 / F16 / Q8_0 / Q4_0 tensors.
Beside it, tiny.json records the file's sha256, the generator's version, and each tensor's values as
gguf-py dequantises them, for crates/gguf/tests/foreign_file.rs. The file is also the README's bundled
example for `gguf-dump`.

Run: .venv/bin/python scripts/gguf/make_tiny_gguf.py   (needs `pip install gguf numpy`)
"""
import hashlib
import json
import pathlib
from importlib.metadata import version

import numpy as np
from gguf import GGMLQuantizationType as Q, GGUFValueType as V, GGUFWriter
from gguf.quants import dequantize, quantize

DATA = pathlib.Path(__file__).resolve().parents[2] / "crates/gguf/tests/data"


def main():
    path = DATA / "tiny.gguf"
    rng = np.random.default_rng(7)
    w = GGUFWriter(str(path), "qwen3moe")
    w.add_key_value("general.name", "tiny ☃ fixture", V.STRING)
    w.add_key_value("test.u8", 250, V.UINT8)
    w.add_key_value("test.i8", -120, V.INT8)
    w.add_key_value("test.u16", 65000, V.UINT16)
    w.add_key_value("test.i16", -32000, V.INT16)
    w.add_key_value("test.u32", 4_000_000_000, V.UINT32)
    w.add_key_value("test.i32", -2_000_000_000, V.INT32)
    w.add_key_value("test.f32", 0.1, V.FLOAT32)
    w.add_key_value("test.bool", True, V.BOOL)
    w.add_key_value("test.u64", 2**64 - 1, V.UINT64)
    w.add_key_value("test.i64", -(2**63), V.INT64)
    w.add_key_value("test.f64", 1e-300, V.FLOAT64)
    w.add_key_value("qwen3moe.block_count", 1, V.UINT32)
    w.add_key_value("qwen3moe.rope.freq_base", 1_000_000.0, V.FLOAT32)
    w.add_array("tokenizer.ggml.tokens", ["a", "Ġb", "ĊĊ", "<|im_end|>", "数"])
    w.add_array("tokenizer.ggml.token_type", [1, 1, 1, 3, 1])
    w.add_key_value("test.f32_array", [0.5, -1.25, 3e-8], V.ARRAY, sub_type=V.FLOAT32)
    w.add_key_value("test.u64_array", [0, 2**64 - 1], V.ARRAY, sub_type=V.UINT64)
    w.add_key_value("test.bool_array", [True, False, True], V.ARRAY, sub_type=V.BOOL)
    w.add_array("test.nested", [[1, 2, 3], [4]])

    tensors = {
        "output_norm.weight": (rng.normal(1, 0.1, size=(64,)).astype(np.float32), Q.F32),
        "blk.0.attn_q_norm.weight": (rng.normal(0, 1, size=(32,)).astype(np.float16), Q.F16),
        "token_embd.weight": (rng.normal(0, 0.5, size=(5, 64)).astype(np.float32), Q.Q8_0),
        "blk.0.ffn_gate_exps.weight": (rng.normal(0, 0.5, size=(2, 3, 64)).astype(np.float32), Q.Q4_0),
    }
    expected = {}
    for name, (values, qtype) in tensors.items():
        if qtype in (Q.F32, Q.F16):
            w.add_tensor(name, values)
            deq = values.astype(np.float32)
        else:
            q = quantize(values, qtype)
            w.add_tensor(name, q, raw_dtype=qtype)
            deq = dequantize(q, qtype)
        expected[name] = {
            "type": qtype.name,
            "dims": list(reversed(values.shape)),
            "values_f32_bits": [int(v) for v in deq.reshape(-1).astype(np.float32).view(np.uint32)],
        }
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    blob = path.read_bytes()
    doc = {
        "generator": "scripts/gguf/make_tiny_gguf.py",
        "reference": f"gguf {version('gguf')} (GGUFWriter, gguf.quants), numpy {version('numpy')}",
        "fixture": "tiny.gguf",
        "fixture_sha256": hashlib.sha256(blob).hexdigest(),
        "tensors": expected,
    }
    (DATA / "tiny.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path} ({len(blob)} bytes)")


if __name__ == "__main__":
    main()
