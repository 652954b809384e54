#!/usr/bin/env python3
"""Quantise an F32 GGUF with llama.cpp's own quantizer (llama-cpp-python's llama_model_quantize).

Usage:
  quantize_fixture.py SRC-F32.gguf OUT.gguf --ftype Q4_K_M

The fixtures it makes are the files a user downloads are made by: llama.cpp chooses each tensor's type
(its llama_tensor_get_type rules for the file type) and quantises the values with its reference
quantisers, no importance matrix. One thread, so the bytes do not depend on the machine's cores.
"""
import argparse, ctypes, sys

import llama_cpp


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--ftype", required=True, help="a llama-quantize file type: Q4_K_M, Q6_K, Q2_K, …")
    args = ap.parse_args()
    name = "LLAMA_FTYPE_MOSTLY_" + args.ftype.upper()
    if not hasattr(llama_cpp, name):
        sys.exit(f"{args.ftype}: not a llama.cpp file type (no {name} in llama_cpp {llama_cpp.__version__})")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, name)
    params.nthread = 1
    rc = llama_cpp.llama_model_quantize(args.src.encode(), args.out.encode(), ctypes.byref(params))
    if rc != 0:
        sys.exit(f"llama_model_quantize {args.src} -> {args.out} ({args.ftype}) failed: {rc}")
    print(f"quantised {args.src} to {args.out} as {args.ftype} (llama-cpp-python {llama_cpp.__version__})")


if __name__ == "__main__":
    main()
