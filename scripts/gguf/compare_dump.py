#!/usr/bin/env python3
"""Checks that diskformer's `gguf-dump --json --json-array` and the PyPI `gguf` package's own `gguf-dump
--json --json-array` agree on a GGUF file: the same keys in the same order, value types, array element
types and lengths, every value (floats compared as f32), and the same tensor names, shapes and types.

Usage: compare_dump.py OUR_GGUF_DUMP_BINARY FILE...
Exit status 0 when every file agrees; prints one line per file and an `N passed, N failed` summary.
"""
import json
import pathlib
import struct
import subprocess
import sys

VENV_DUMP = pathlib.Path(__file__).resolve().parents[2] / ".venv/bin/gguf-dump"


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def flatten(v):
    # gguf-py's dump flattens arrays of arrays into one list.
    if isinstance(v, list):
        out = []
        for x in v:
            out.extend(flatten(x) if isinstance(x, list) else [x])
        return out
    return v


def same(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and f32(a) == f32(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b and type(a) is type(b)


def compare(ours, theirs):
    problems = []
    ok, tk = list(ours["metadata"]), list(theirs["metadata"])
    if ok != tk:
        problems.append(f"keys differ: ours {ok[:8]}..., gguf-py {tk[:8]}...")
    for key in [k for k in ok if k in theirs["metadata"]]:
        o, t = ours["metadata"][key], theirs["metadata"][key]
        if o["type"] != t["type"]:
            problems.append(f"{key}: type {o['type']} vs {t['type']}")
            continue
        if o["type"] == "ARRAY":
            if o["array_types"][0] != t["array_types"][0]:
                problems.append(f"{key}: array types {o['array_types']} vs {t['array_types']}")
            ov, tv = flatten(o["value"]), t["value"]
            if len(ov) != len(tv):
                problems.append(f"{key}: array length {len(ov)} vs {len(tv)}")
            elif not same(ov, tv):
                i = next(i for i, (x, y) in enumerate(zip(ov, tv)) if not same(x, y))
                problems.append(f"{key}: element {i} is {ov[i]!r} vs {tv[i]!r}")
        elif not same(o["value"], t["value"]):
            problems.append(f"{key}: value {o['value']!r} vs {t['value']!r}")
    ot, tt = ours["tensors"], theirs["tensors"]
    if list(ot) != list(tt):
        problems.append(f"tensor names differ: {list(ot)[:5]} vs {list(tt)[:5]}")
    for name in [n for n in ot if n in tt]:
        if ot[name]["shape"] != tt[name]["shape"] or ot[name]["type"] != tt[name]["type"]:
            problems.append(f"{name}: {ot[name]['shape']} {ot[name]['type']} vs {tt[name]['shape']} {tt[name]['type']}")
    return problems


def main():
    ours_bin, files = sys.argv[1], sys.argv[2:]
    passed = failed = 0
    for f in files:
        ours = json.loads(subprocess.run([ours_bin, "--json", "--json-array", f], check=True, capture_output=True).stdout)
        theirs = json.loads(subprocess.run([str(VENV_DUMP), "--json", "--json-array", f], check=True, capture_output=True).stdout)
        problems = compare(ours, theirs)
        n_keys, n_tensors = len(theirs["metadata"]), len(theirs["tensors"])
        if problems:
            failed += 1
            print(f"FAIL {f}: " + "; ".join(problems[:10]))
        else:
            passed += 1
            print(f"ok   {f}: {n_keys} keys and {n_tensors} tensors agree with gguf-py's gguf-dump")
    print(f"gguf-dump: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
