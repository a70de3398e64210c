"""torch.ops.lattn.mla_prefill / mla_decode (lattn.torch_ops): the same results as the
functional calls, meta/fake shapes without running, torch.compile (PyTorch >= 2) and
CUDA-graph capture (GPU machines)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: torch custom ops untested here")

import lattn  # noqa: E402
import lattn.torch_ops  # noqa: E402,F401  (registers torch.ops.lattn.*)
from conftest import cuda_torch_or_skip  # noqa: E402


def prefill_inputs(device="cpu", n=4, dqk=192, dv=128, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    cu = torch.tensor([0, 5, 12], dtype=torch.int32)
    q, k = (torch.randn(12, n, dqk, generator=g) for _ in range(2))
    v = torch.randn(12, n, dv, generator=g)
    return [x.to(device, dtype) for x in (q, k, v)] + [cu.to(device), cu.to(device)]


def decode_case(device="cpu", n=4, lora=64, rope=16, block=4, bf16=False):
    """f32 queries over an f16 cache; bf16=True: both bf16 (what the CUDA backends take)."""
    rng = np.random.default_rng(1)
    table = torch.tensor([[3, 0, 5], [1, 4, 2]], dtype=torch.int32)
    lens = torch.tensor([10, 7], dtype=torch.int32)
    cache = torch.tensor(rng.standard_normal((6, block, lora + rope)), dtype=torch.bfloat16 if bf16 else torch.float16)
    q = torch.tensor(rng.standard_normal((2, n, lora + rope)), dtype=torch.bfloat16 if bf16 else torch.float32)
    plan = lattn.mla_decode_plan(table.to(device), lens.to(device), block, n, kv_lora_rank=lora,
                                 qk_rope_head_dim=rope, dtype="bf16" if bf16 else "f32",
                                 kv_cache_dtype="bf16" if bf16 else "f16")
    return q.to(device), cache.to(device), plan


def test_prefill_op_matches_the_functional_call():
    q, k, v, cq, ck = prefill_inputs()
    out, lse = torch.ops.lattn.mla_prefill(q, k, v, cq, ck, True, 0.1)
    ref_out, ref_lse = lattn.mla_prefill(q, k, v, cq, ck, True, 0.1)
    assert isinstance(out, torch.Tensor) and out.shape == (12, 4, 128) and lse.shape == (4, 12)
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)


def test_decode_op_matches_the_functional_call():
    q, cache, plan = decode_case()
    plan_id = lattn.torch_ops.register_plan(plan)
    out, lse = torch.ops.lattn.mla_decode(q, cache, plan_id, 0.2)
    ref_out, ref_lse = lattn.mla_decode(q, lattn.LatentCache(cache, 64, 16), plan, 0.2)
    assert out.shape == (2, 4, 64) and lse.shape == (4, 2)
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)
    lattn.torch_ops.release_plan(plan_id)
    with pytest.raises(Exception, match="plan_id"):
        torch.ops.lattn.mla_decode(q, cache, plan_id, 0.2)


def test_meta_and_fake_tensors_give_the_shapes_without_running():
    q, k, v, cq, ck = prefill_inputs("meta")
    out, lse = torch.ops.lattn.mla_prefill(q, k, v, cq, ck, True, 0.1)
    assert out.device.type == "meta" and out.shape == (12, 4, 128) and lse.shape == (4, 12)
    assert lse.dtype == torch.float32
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        q, k, v, cq, ck = (mode.from_tensor(x) for x in prefill_inputs())
        out, lse = torch.ops.lattn.mla_prefill(q, k, v, cq, ck, False, 0.1)
        assert out.shape == (12, 4, 128) and lse.shape == (4, 12)
    qd, cache, plan = decode_case()
    plan_id = lattn.torch_ops.register_plan(plan)
    out, lse = torch.ops.lattn.mla_decode(qd.to("meta"), cache.to("meta"), plan_id, 0.2)
    assert out.shape == (2, 4, 64) and lse.shape == (4, 2)


def compile_backends(device):
    if not hasattr(torch, "compile"):
        pytest.skip(f"torch.compile needs PyTorch >= 2 (this is {torch.__version__})")
    backends = ["aot_eager"]  # the ops traced through their fake implementations, no code generation
    if device == "cuda":
        try:
            from torch.utils._triton import has_triton
        except ImportError:
            has_triton = None
        if has_triton is not None and has_triton():
            backends.append("inductor")  # torch.compile's default: the ops as extern calls beside Triton code
    return backends


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_torch_compile_traces_the_ops(device):
    if device == "cuda":
        cuda_torch_or_skip()
    for backend in compile_backends(device):
        torch._dynamo.reset()
        on_gpu = device == "cuda"  # the CUDA backends take bf16
        q, k, v, cq, ck = prefill_inputs(device, dtype=torch.bfloat16 if on_gpu else torch.float32)
        qd, cache, plan = decode_case(device, bf16=on_gpu)
        plan_id = lattn.torch_ops.register_plan(plan)

        def f(q, k, v, qd):
            out, lse = torch.ops.lattn.mla_prefill(q, k, v, cq, ck, True, 0.1)
            dout, dlse = torch.ops.lattn.mla_decode(qd, cache, plan_id, 0.2)
            return out * 2, lse, dout + 1, dlse

        compiled = torch.compile(f, fullgraph=True, backend=backend)
        got, want = compiled(q, k, v, qd), f(q, k, v, qd)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.device == w.device
            assert torch.equal(g, w), backend
        lattn.torch_ops.release_plan(plan_id)


@pytest.mark.parametrize("lora, rope", [(64, 16), (512, 64)])  # the generic kernel; the tensor-core one with its plan
def test_decode_op_inside_cuda_graph_capture(lora, rope):
    torch_ = cuda_torch_or_skip()
    q, cache, plan = decode_case("cuda", lora=lora, rope=rope, bf16=True)
    plan_id = lattn.torch_ops.register_plan(plan)
    eager, _ = torch_.ops.lattn.mla_decode(q, cache, plan_id, 0.2)
    stream = torch_.cuda.Stream()
    stream.wait_stream(torch_.cuda.current_stream())
    with torch_.cuda.stream(stream):
        torch_.ops.lattn.mla_decode(q, cache, plan_id, 0.2)  # warm up on the capture stream
    torch_.cuda.current_stream().wait_stream(stream)
    graph = torch_.cuda.CUDAGraph()
    with torch_.cuda.graph(graph):  # captures on its own stream: lattn must launch on the caller's current one
        captured, captured_lse = torch_.ops.lattn.mla_decode(q, cache, plan_id, 0.2)
    captured.zero_()
    graph.replay()
    torch_.cuda.synchronize()
    assert torch_.equal(captured, eager)
    # A replay reads the inputs' memory as it is then: new queries, new results.
    q.copy_(torch_.flip(q, dims=[0]))
    new_eager, new_lse = torch_.ops.lattn.mla_decode(q, cache, plan_id, 0.2)
    graph.replay()
    torch_.cuda.synchronize()
    assert not torch_.equal(new_eager, eager)
    assert torch_.equal(captured, new_eager) and torch_.equal(captured_lse, new_lse)
    lattn.torch_ops.release_plan(plan_id)
