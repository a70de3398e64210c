"""CUDA tensors in and out (PyTorch), zero-copy, on the caller's current stream.

Skipped with the reason where PyTorch, a GPU or a CUDA build of lattn is missing.
"""

import numpy as np
import pytest

import lattn
from conftest import cuda_torch_or_skip, torch_or_skip
from lattn._lattn import _testing


def test_cuda_tensor_round_trip_is_zero_copy():
    torch = cuda_torch_or_skip()
    x = torch.arange(24, device="cuda", dtype=torch.bfloat16).reshape(2, 3, 4)
    t = lattn.from_dlpack(x)
    assert t.device == "cuda:0" and t.dtype == "bf16" and t.data_ptr == x.data_ptr()
    y = torch.from_dlpack(t)
    assert y.device == x.device and y.data_ptr() == x.data_ptr()
    y[1, 2, 3] = -1
    assert float(x[1, 2, 3]) == -1.0


def test_lattn_cuda_memory_exported_to_torch():
    torch = cuda_torch_or_skip()
    t = lattn.empty((4, 8), "f32", "cuda")
    y = torch.from_dlpack(t)
    assert y.is_cuda and y.data_ptr() == t.data_ptr and y.shape == (4, 8)
    y.fill_(3.0)
    del t
    assert float(y.sum()) == 96.0  # the torch tensor keeps the lattn buffer alive


def test_calls_run_on_the_callers_current_stream():
    torch = cuda_torch_or_skip()
    x = torch.zeros(4, device="cuda")
    assert _testing.call_stream(x) == torch.cuda.current_stream().cuda_stream
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert _testing.call_stream(x) == side.cuda_stream
    other = torch.cuda.Stream()  # an explicit stream= wins (it must be a real stream:
    # the producer makes it wait on its own work through it)
    assert _testing.call_stream(x, stream=other.cuda_stream) == other.cuda_stream
    assert _testing.call_stream(torch.zeros(4)) == 0  # host arrays: no stream


def test_host_arrays_never_ask_for_a_stream():
    torch = torch_or_skip()
    assert _testing.call_stream(torch.zeros(3)) == 0
    assert _testing.call_stream(np.zeros(3, np.float32)) == 0


def test_forward_with_cuda_tensors():
    torch = cuda_torch_or_skip()
    import mla_reference as ref
    from test_forward import DIMS, Batch, rel_l2

    n, lora, p, r, v_dim = DIMS
    block_size = 16
    requests = [(1, 37), (1, 0), (6, 21), (3, 0)]  # decodes first
    rng = np.random.default_rng(3)
    batch = Batch(rng, requests, block_size, "bf16")
    try:
        attn = lattn.MlaAttention(n, lora, p, r, v_dim, dtype="bf16", kv_cache_dtype="bf16", device="cuda",
                                  block_size=block_size)
    except ValueError as e:  # the selector's refusal names every backend's reasons
        pytest.skip(f"no lattn backend of this build serves these dims on the GPU: {e}")

    def cuda(x, dtype=torch.bfloat16):
        return torch.from_numpy(np.ascontiguousarray(x)).to("cuda").to(dtype)

    cache_memory = torch.zeros((batch.num_blocks, block_size, lora + r), dtype=torch.bfloat16, device="cuda")
    cache = lattn.LatentCache(cache_memory, lora, r)
    ctx = [(i, pos) for i, (q, c) in enumerate(requests) for pos in range(c)]
    lattn.concat_and_cache_mla(cuda(np.stack([batch.kv_c[i][pos] for i, pos in ctx])),
                               cuda(np.stack([batch.k_pe[i][pos] for i, pos in ctx])), cache,
                               cuda(np.array([batch.slots(i, [pos], block_size)[0] for i, pos in ctx]), torch.int64))
    md = lattn.MlaMetadataBuilder(block_size=block_size, context_chunk_workspace_size=32).build(
        [(q, c, batch.tables[i]) for i, (q, c) in enumerate(requests)])
    md.to_device("cuda")
    attn.process_weights_after_loading(cuda(batch.w))
    kv_c, k_pe = batch.new_tokens()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # lattn runs on the caller's current stream
        out = attn.forward(cuda(batch.q), cuda(kv_c), cuda(k_pe), cache, md)
    side.synchronize()
    assert isinstance(out, torch.Tensor) and out.is_cuda and out.dtype == torch.bfloat16
    assert out.shape == (len(batch.q), n * v_dim)
    assert rel_l2(out.float().cpu().numpy(), batch.expected(ref.mha_request)) < 2e-2


def test_vllm_adapter_with_cuda_tensors():
    torch = cuda_torch_or_skip()
    import mla_reference as ref
    import vllm_mla_driver as driver
    from lattn.vllm import LattnPrefillBackend

    n, lora, p, r, v_dim = 4, 64, 32, 16, 24
    capability = lattn.device_capability(0)
    config = lattn.SelectorConfig(dtype="bf16", mla_dimensions=lattn.MLADimensions(p, r, v_dim), device="cuda")
    if not any(v.valid for v in lattn.explain_mla_prefill_backends(config, capability=capability)):
        pytest.skip("no lattn prefill backend of this build serves these dims on the GPU")
    rng = np.random.default_rng(4)
    cu = torch.tensor([0, 3, 8], dtype=torch.int32, device="cuda")
    q, k = (torch.from_numpy(rng.standard_normal((8, n, p + r)).astype(np.float32)).to("cuda", torch.bfloat16)
            for _ in range(2))
    v = torch.from_numpy(rng.standard_normal((8, n, v_dim)).astype(np.float32)).to("cuda", torch.bfloat16)
    backend = LattnPrefillBackend(n, 0.2, lora, p, r, v_dim, vllm_config=None)
    backend.prepare_metadata(driver.MLACommonPrefillMetadata(torch.zeros((2, 1), dtype=torch.int32, device="cuda"),
                                                             cu, 5))
    out, lse = backend.run_prefill_new_tokens(q, k, v, True)
    assert out.is_cuda and lse.is_cuda and lse.shape == (n, 8) and lse.dtype == torch.float32
    cu_h = cu.cpu().numpy()
    ref_out, ref_lse = ref.varlen_attention(q.float().cpu().numpy(), k.float().cpu().numpy(),
                                            v.float().cpu().numpy(), cu_h, cu_h, 0.2, causal=True)
    assert np.linalg.norm(out.float().cpu().numpy() - ref_out) / np.linalg.norm(ref_out) < 2e-2
    np.testing.assert_allclose(lse.cpu().numpy(), ref_lse, rtol=2e-2, atol=2e-2)
