#!/usr/bin/env python3
"""Same-run anchor for the prefill benchmarks: PyTorch SDPA with its cuDNN
backend on the MLA prefill shapes (q/k head dim 192, v head dim 128, bf16,
causal), and PyTorch's bf16 8192^3 GEMM as the ceiling of this run.

Run beside bench/cuda_prefill_bench on the same GPU; prints one line per
shape (median µs over CUDA-event-timed launches, TFLOP/s by the FLOP formula
of docs/perf.md, fraction of the GEMM rate). Exits 0 with a message when
torch or a GPU is missing, so scripts can call it unconditionally.

Usage: /usr/bin/python3 bench/sdpa_prefill_bench.py
"""
import sys

SHAPES = [  # (heads, batch, seq)
    (128, 1, 8192),
    (128, 4, 4096),
    (128, 16, 1024),
    (16, 8, 8192),
]
DQK, DV = 192, 128


def median_ms(fn, warmup, reps):
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def main():
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except Exception as e:  # noqa: BLE001 - any import failure means "no anchor"
        print(f"sdpa bench: torch not importable ({e}); skipped")
        return 0
    if not torch.cuda.is_available():
        print("sdpa bench: no CUDA device; skipped")
        return 0
    print(f"sdpa bench: torch {torch.__version__}, {torch.cuda.get_device_name(0)}, "
          f"cuDNN {torch.backends.cudnn.version()}")

    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = median_ms(lambda: a @ b, 5, 30)
    gemm = 2 * n**3 / (ms * 1e-3) / 1e12
    print(f"ceiling: torch bf16 GEMM 8192^3: {ms * 1e3:.1f} us, {gemm:.1f} TFLOP/s")
    del a, b

    for heads, batch, seq in SHAPES:
        q = torch.randn(batch, heads, seq, DQK, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(batch, heads, seq, DQK, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(batch, heads, seq, DV, device="cuda", dtype=torch.bfloat16)
        flops = 2 * heads * (DQK + DV) * batch * (seq * seq - seq * (seq - 1) / 2)
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
                    ms = median_ms(fn, 3, 15 if flops > 5e12 else 30)
            except Exception as e:  # noqa: BLE001 - a backend that refuses the shape
                print(f"sdpa {name} H{heads} B{batch} S{seq}: not run ({str(e).splitlines()[0][:120]})")
                continue
            tf = flops / (ms * 1e-3) / 1e12
            print(f"sdpa {name} causal H{heads} B{batch} S{seq}: {ms * 1e3:.1f} us, {tf:.1f} TFLOP/s, "
                  f"{tf / gemm:.3f} of torch GEMM")
        del q, k, v
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
