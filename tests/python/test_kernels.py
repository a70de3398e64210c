"""What runs (docs/python.md, "What runs"): MlaAttention.kernels, cpu_isa,
cpu_kernel_label and backend_kernel_label; LATTN_CPU_ISA honoured and a bad
one refused by each; on a GPU, the CUDA backends' kernel, tiles and split-KV
parts (skipped with the reason without PyTorch, a GPU or a CUDA build)."""

import os
import re
import subprocess
import sys

import pytest

import lattn
from conftest import cuda_torch_or_skip


def run_with_isa(isa, code):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), LATTN_CPU_ISA=isa)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_cpu_layer_labels_are_the_isa_path_and_gemm():
    attn = lattn.MlaAttention(4, 64, 32, 16, 32, dtype="f32", device="cpu", prefill_backend="cpu",
                              decode_backend="reference")
    assert attn.kernels == {"prefill": "cpu: " + lattn.cpu_kernel_label("f32"),
                            "decode": "reference: plain loops, fp64 accumulation"}
    assert attn.kernels["prefill"].startswith(f"cpu: {lattn.cpu_isa()} kernels (")
    assert lattn.backend_kernel_label("cpu", "cpu", "bf16") == "cpu: " + lattn.cpu_kernel_label("bf16")
    # f32 projections never take the bf16 dot-product kernel.
    assert lattn.cpu_kernel_label("f32").endswith("projections: OpenBLAS sgemm")


def test_labels_without_an_instance_name_the_kernel_family():
    assert lattn.backend_kernel_label("reference") == "reference: plain loops, fp64 accumulation"
    cuda = lattn.backend_kernel_label("cuda", "cuda:0", "bf16")
    assert cuda.startswith("cuda: sm80 mma.sync kernels; tile configuration and split-KV parts chosen per")
    assert lattn.backend_kernel_label("hopper", "cuda:0").startswith("hopper: sm90a wgmma or sm80 mma.sync kernels")
    assert lattn.backend_kernel_label("CUSTOM") == "CUSTOM: a plug-in backend (it reports no kernel details)"


def test_lattn_cpu_isa_is_honoured():
    lines = run_with_isa("scalar", "import lattn\n"
                                   "a = lattn.MlaAttention(4, 64, 32, 16, 32, dtype='bf16')\n"
                                   "print(lattn.cpu_isa()); print(a.kernels['prefill']); print(a.kernels['decode'])")
    assert lines == ["scalar"] + ["cpu: scalar kernels (LATTN_CPU_ISA=scalar); projections: OpenBLAS sgemm"] * 2


def test_a_bad_lattn_cpu_isa_is_a_value_error_from_each_call():
    code = """
import lattn
calls = {
    "cpu_isa": lambda: lattn.cpu_isa(),
    "cpu_kernel_label": lambda: lattn.cpu_kernel_label("bf16"),
    "backend_kernel_label": lambda: lattn.backend_kernel_label("cpu"),
    "MlaAttention": lambda: lattn.MlaAttention(4, 64, 32, 16, 32, dtype="f32").kernels,
}
for name, call in calls.items():
    try:
        call()
        print(name, "no error")
    except Exception as e:
        print(name, type(e).__name__, str(e))
"""
    for line in run_with_isa("garbage", code):
        name, kind, message = line.split(" ", 2)
        assert kind == "ValueError", line
        assert "garbage" in message and "scalar, avx2, avx512, avx512bf16" in message, line


# ---------------------------------------------------------------------------
# CUDA (the GPU machine)

DECODE = re.compile(r"^(?P<backend>cuda|hopper): (?P<kernel>sm80 mma\.sync|sm90a wgmma \+ TMA) decode"
                    r"(?: \((?:(?P<schedule>serial|seesaw) schedule|(?P<fp8>fp8 cache, key-major)|(?P<km16>16-bit cache, key-major))\))?"
                    r"(?P<why> \(sm80 delegate: [^)]*\))?, tile m(?P<m>\d+)n(?P<n>\d+)w\d+s\d+ "
                    r"\((?P=m) head rows x (?P=n) keys, \d+ warps, \d+ stages\), (?P<tiles>\d+) row tiles? x "
                    r"(?P<parts>\d+) split-KV parts, (?:then the combine kernel|planned and combined in the same launch); "
                    r"projections: cuBLAS \(f32 accumulation\)$")


def run_cuda_layer(torch, backend, n, lora=512, rope=64, p=128, v=128, cache_dtype="bf16"):
    """One forward of a mixed batch (two decodes, one prefill) on `backend`; its kernels before and after."""
    try:
        attn = lattn.MlaAttention(n, lora, p, rope, v, dtype="bf16", kv_cache_dtype=cache_dtype, device="cuda",
                                  prefill_backend=backend, decode_backend=backend, block_size=64)
    except (ValueError, ImportError) as e:  # e.g. hopper on a device that is not 9.0
        pytest.skip(f"{backend} cannot serve this layer here: {e}")
    before = attn.kernels
    g = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, device="cuda", generator=g).to(torch.bfloat16)

    attn.process_weights_after_loading(randn(n * (p + v), lora) / lora ** 0.5)
    workspace = lattn.mla_context_chunk_workspace_size(max_model_len=1024, max_num_seqs=4, block_size=64)
    md = lattn.MlaMetadataBuilder(block_size=64, context_chunk_workspace_size=workspace).build(
        [(1, 40, [0]), (1, 70, [2, 1]), (5, 0, [3])])
    md.to_device("cuda")
    if cache_dtype == "fp8_e4m3":
        cache = lattn.LatentCache(torch.zeros((4, 64, lora + rope), dtype=torch.uint8, device="cuda"), lora, rope,
                                  dtype="fp8_e4m3")
    else:
        cache = lattn.LatentCache(torch.zeros((4, 64, lora + rope), dtype=torch.bfloat16, device="cuda"), lora, rope)
    t = md.num_actual_tokens
    out = attn.forward(randn(t, n, p + rope), randn(t, lora), randn(t, rope), cache, md)
    torch.cuda.synchronize()
    assert bool(torch.isfinite(out.float()).all())
    return before, attn.kernels


@pytest.mark.parametrize("backend", ["cuda", "hopper"])
@pytest.mark.parametrize("n", [16, 128])
def test_cuda_kernels_name_the_kernel_tiles_and_splits(backend, n):
    torch = cuda_torch_or_skip()
    before, after = run_cuda_layer(torch, backend, n)
    assert before["decode"].endswith("chosen by each step's plan (none yet); projections: cuBLAS (f32 accumulation)")
    m = DECODE.match(after["decode"])
    assert m, after["decode"]
    rows = n  # heads x 1 query token
    assert int(m["tiles"]) == -(-rows // int(m["m"])) and 1 <= int(m["parts"]) <= 1024, after["decode"]
    if backend == "hopper":
        # The wgmma kernel from 17 rows per request; at most 16 in a batch of two keep the sm80 kernel's
        # 16-row tiles in the one-launch kernel (the key-major 16-bit kernel takes larger batches).
        assert (m["kernel"] == "sm90a wgmma + TMA") == (rows > 16), after["decode"]
        if rows <= 16:
            assert m["why"] in (
                " (sm80 delegate: at most 16 rows per request in a batch the one-launch kernel takes: 16-row tiles)",
                " (sm80 delegate: at most 16 rows per request: 16-row tiles)"), after["decode"]
        assert after["prefill"].startswith("hopper: sm90a wgmma + TMA prefill, qk192_v128_m128_n128_s2_"), after
    else:
        assert m["kernel"] == "sm80 mma.sync" and m["why"] is None, after["decode"]
        assert after["prefill"].startswith("cuda: sm80 mma.sync prefill, qk192_v128_m128_n64_w4 (128 query rows x "
                                           "64 keys per tile, 4 warps)"), after
    assert after["prefill"] == before["prefill"]  # the prefill kernel follows the head dims only


def test_cuda_fp8_cache_and_other_dims_say_which_kernel():
    torch = cuda_torch_or_skip()
    _, fp8 = run_cuda_layer(torch, "cuda", 16, cache_dtype="fp8_e4m3")
    assert DECODE.match(fp8["decode"]), fp8["decode"]
    _, other = run_cuda_layer(torch, "cuda", 8, lora=256, rope=32, p=64, v=64)  # MiniCPM3's dims
    assert other["decode"].startswith("cuda: generic SIMT decode kernel, no tensor cores (those serve (L, R) = "
                                      "(512, 64) with a cache of the activation dtype or fp8; this layer: (256, 32)")
    assert other["prefill"].startswith("cuda: sm80 mma.sync prefill, qk96_v64_"), other["prefill"]


def test_hopper_fp8_cache_runs_the_key_major_kernel():
    torch = cuda_torch_or_skip()
    _, fp8 = run_cuda_layer(torch, "hopper", 16, cache_dtype="fp8_e4m3")  # skips where hopper cannot run
    m = DECODE.match(fp8["decode"])
    assert m and m["kernel"] == "sm90a wgmma + TMA" and m["fp8"] and m["why"] is None, fp8["decode"]
    assert (int(m["m"]), int(m["n"])) == (16, 64), fp8["decode"]
