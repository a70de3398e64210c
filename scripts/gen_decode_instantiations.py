#!/usr/bin/python3
"""Writes src/cuda/sm80/decode/instantiations/: one file per decode tile
configuration (LATTN_DECODE_CONFIGS in decode_config.h) x activation dtype x
cache dtype (same dtype, or fp8_e4m3), so the heavy kernels compile in parallel.

  gen_decode_instantiations.py           rewrite the folder from decode_config.h
  gen_decode_instantiations.py --check   exit 1 if the folder is out of step (CI)
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DECODE = ROOT / "src/cuda/sm80/decode"
OUT = DECODE / "instantiations"

# (file tag, C++ type, words in the comment)
ACTIVATIONS = [("bf16", "__nv_bfloat16"), ("f16", "__half")]
FP8 = ("fp8", "__nv_fp8_e4m3")


def configs():
    text = (DECODE / "decode_config.h").read_text()
    body = text[text.index("#define LATTN_DECODE_CONFIGS(X)"):]
    return [tuple(int(v) for v in m) for m in re.findall(r"X\((\d+), (\d+), (\d+), (\d+)\)", body)]


def expected():
    files = {}
    for m, n, w, s in configs():
        for act, act_type in ACTIVATIONS:
            for cache, cache_type in [(act, act_type), FP8]:
                name = f"decode_m{m}_n{n}_w{w}_s{s}_{act}_cache_{cache}.cu"
                files[name] = (
                    f"// Generated instantiation: decode kernel, {m}-row x {n}-key tiles, {w} warps, {s} stages, "
                    f"{act} activations, {cache} cache.\n"
                    f"// Written by scripts/gen_decode_instantiations.py from decode_config.h; do not edit.\n"
                    f'#include "cuda/sm80/decode/decode_kernel_launcher_impl.cuh"\n\n'
                    f"LATTN_INSTANTIATE_DECODE({m}, {n}, {w}, {s}, {act_type}, {cache_type})\n")
    return files


def main():
    want = expected()
    have = {p.name: p.read_text() for p in OUT.glob("decode_*.cu")}
    if "--check" in sys.argv[1:]:
        stale = sorted(set(want) ^ set(have)) + sorted(k for k in want if k in have and want[k] != have[k])
        if stale:
            print("src/cuda/sm80/decode/instantiations/ is out of step with decode_config.h; run "
                  "scripts/gen_decode_instantiations.py. Differs: " + ", ".join(stale))
            return 1
        print(f"{len(want)} decode instantiation files in step with decode_config.h")
        return 0
    OUT.mkdir(exist_ok=True)
    for name in set(have) - set(want):
        (OUT / name).unlink()
    for name, text in want.items():
        if have.get(name) != text:
            (OUT / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
