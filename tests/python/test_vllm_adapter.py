"""lattn.vllm.LattnPrefillBackend driven the way vLLM drives an MLA prefill backend.

vLLM itself is not needed: fake_vllm/ reproduces the seeds' MLAPrefillBackend,
registry and selector, and vllm_mla_driver.py vLLM's MLA prefill path.
"""

import os
import subprocess
import sys
from dataclasses import dataclass

import numpy as np
import pytest
from vllm.v1.attention.backends.mla.prefill.base import MLADimensions, MLAPrefillBackend
from vllm.v1.attention.backends.mla.prefill.registry import MLAPrefillBackendEnum, register_mla_prefill_backend
from vllm.v1.attention.backends.mla.prefill.selector import (
    DeviceCapability,
    MLAPrefillSelectorConfig,
    get_mla_prefill_backend,
)

import lattn
import lattn_test_backends as tb
import mla_reference
import vllm_mla_driver as driver
from conftest import available_prefill_backends, torch_or_skip
from lattn.vllm import LattnPrefillBackend

R1 = MLADimensions(qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
CPU = None  # vLLM's "no device capability"


def rel_l2(actual, expected):
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    return float(np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-30))


TOLERANCE = {np.float32: 1e-5, np.float16: 1e-2}  # relative L2 against the float64 reference


# ---- the class side: what vLLM's registry and selector see ------------------------


def test_derives_from_vllms_base_and_is_concrete():
    assert issubclass(LattnPrefillBackend, MLAPrefillBackend)  # the stand-in is "vLLM" here
    backend = LattnPrefillBackend(4, 0.1, 64, 32, 16, 24, vllm_config=None)
    assert (backend.num_heads, backend.kv_lora_rank, backend.v_head_dim) == (4, 64, 24)
    assert LattnPrefillBackend.get_name() == "LATTN"


def test_imports_without_vllm_or_torch():
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['vllm'] = None\n"
        "import lattn.vllm as v\n"
        "assert v.LattnPrefillBackend.__bases__ == (object,), v.LattnPrefillBackend.__bases__\n"
        "assert v.LattnPrefillBackend.supported_dtypes == ['f16', 'bf16']\n"
        "print('ok')\n"
    )
    env = {k: val for k, val in os.environ.items()}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if "fake_vllm" not in p)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_registers_as_custom_with_the_seed_call():
    assert not MLAPrefillBackendEnum.CUSTOM.is_overridden()
    register_mla_prefill_backend(MLAPrefillBackendEnum.CUSTOM, "lattn.vllm.LattnPrefillBackend")
    try:
        assert MLAPrefillBackendEnum.CUSTOM.get_path() == "lattn.vllm.LattnPrefillBackend"
        assert MLAPrefillBackendEnum.CUSTOM.get_class() is LattnPrefillBackend
    finally:
        MLAPrefillBackendEnum.CUSTOM.clear_override()
    with pytest.raises(ValueError, match=r"^MLA prefill backend CUSTOM must be registered before use"):
        MLAPrefillBackendEnum.CUSTOM.get_path()


@dataclass
class ModelConfig:
    dtype: object
    hf_text_config: object


@dataclass
class HfConfig:
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass
class AttentionConfig:
    mla_prefill_backend: object


@dataclass
class VllmConfig:
    model_config: ModelConfig
    attention_config: AttentionConfig


def vllm_config(dtype="torch.float32", dims=(32, 16, 24), backend=MLAPrefillBackendEnum.CUSTOM):
    return VllmConfig(ModelConfig(dtype, HfConfig(*dims)), AttentionConfig(backend))


def test_vllm_selector_refuses_with_lattns_reasons_in_the_seed_text(example_plugin_as_custom):
    # The example plug-in runs host loops only: on a GPU it is refused, with the seed's sentence.
    register_mla_prefill_backend(MLAPrefillBackendEnum.CUSTOM, "lattn_test_backends.LattnCustomPrefill")
    try:
        with pytest.raises(ValueError) as info:
            get_mla_prefill_backend(vllm_config("torch.float64"), DeviceCapability(9, 0))
        assert str(info.value) == (
            "Selected MLA prefill backend CUSTOM is not valid for this configuration. "
            "Reason: ['compute capability 9.0 not supported', 'dtype torch.float64 not supported']"
        )
    finally:
        MLAPrefillBackendEnum.CUSTOM.clear_override()


def test_vllm_selector_accepts_a_valid_configuration():
    usable = [n for n in available_prefill_backends() if lattn.prefill_backend_class(n).supports_compute_capability(
        lattn.DeviceCapability(9, 0))]
    if not usable:
        pytest.skip("no lattn prefill backend in this build accepts a 9.0 device from the CPU test machine")
    cls = {"reference": tb.LattnReferencePrefill, "cpu": tb.LattnCpuPrefill}[usable[0]]
    register_mla_prefill_backend(MLAPrefillBackendEnum.CUSTOM, f"lattn_test_backends.{cls.__name__}")
    try:
        assert get_mla_prefill_backend(vllm_config("torch.bfloat16"), DeviceCapability(9, 0)) is cls
    finally:
        MLAPrefillBackendEnum.CUSTOM.clear_override()


def test_validate_configuration_texts_and_order(example_plugin_as_custom):
    ok = MLAPrefillSelectorConfig(dtype="torch.float32", mla_dimensions=MLADimensions(
        qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=24))
    assert tb.LattnCustomPrefill.validate_configuration(CPU, ok) == []
    assert tb.LattnCustomPrefill.validate_configuration(CPU, ok._replace(dtype=np.float16)) == []
    assert tb.LattnCustomPrefill.validate_configuration(DeviceCapability(8, 0), ok._replace(dtype="torch.float64")) == [
        "compute capability 8.0 not supported",
        "dtype torch.float64 not supported",
    ]
    # All three class checks failing: the seed's reasons in the seed's order.
    assert tb.LattnCustomUnavailable.validate_configuration(
        DeviceCapability(8, 0), ok._replace(dtype="torch.float64")
    ) == ["compute capability 8.0 not supported", "dtype torch.float64 not supported",
          "required dependencies not available"]


@pytest.mark.skipif(lattn.prefill_backend_class("hopper").is_available(), reason="this build has the hopper backend")
def test_a_backend_missing_from_this_build_is_unavailable():
    config = MLAPrefillSelectorConfig(dtype="torch.bfloat16", mla_dimensions=R1, is_r1_compatible=True)
    assert tb.LattnUnregisteredPrefill.is_available() is False
    assert "required dependencies not available" in tb.LattnUnregisteredPrefill.validate_configuration(
        DeviceCapability(9, 0), config)


def test_dimension_gates_of_both_seed_revisions(example_plugin_as_custom):
    not_r1 = MLAPrefillSelectorConfig(dtype="torch.float32", is_r1_compatible=False,
                                      mla_dimensions=MLADimensions(qk_nope_head_dim=192, qk_rope_head_dim=64,
                                                                   v_head_dim=256))
    assert tb.R1Only.validate_configuration(CPU, not_r1) == [
        "model does not have DeepSeek R1 MLA dimensions (qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)"
    ]
    assert tb.R1DimsOnly.validate_configuration(CPU, not_r1) == [
        "Model does not have supported MLA dimensions (got (qk_nope_head_dim=192, qk_rope_head_dim=64, "
        "v_head_dim=256); supported: (qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128))"
    ]
    r1 = not_r1._replace(is_r1_compatible=True, mla_dimensions=R1)
    assert tb.R1Only.validate_configuration(CPU, r1) == []
    assert tb.R1DimsOnly.validate_configuration(CPU, r1) == []


def test_supports_dtype_accepts_every_spelling(example_plugin_as_custom):
    for dtype in ("torch.float32", "torch.bfloat16", np.float16, "f16"):
        assert tb.LattnCustomPrefill.supports_dtype(dtype), dtype
    for dtype in ("torch.float64", np.int8, "no such dtype"):
        assert not tb.LattnCustomPrefill.supports_dtype(dtype), dtype


@dataclass(frozen=True)
class ScaleDesc:
    dtype: str
    static: bool
    group_shape: tuple


@dataclass(frozen=True)
class QuantKey:
    dtype: str
    scale: ScaleDesc
    symmetric: bool = True


def test_supports_quant_output_asks_lattns_backend(example_plugin_as_custom):
    backend = tb.LattnCustomPrefill(4, 0.1, 64, 32, 16, 24, vllm_config=None)
    fp8_static = QuantKey("torch.float8_e4m3fn", ScaleDesc("torch.float32", True, (-1, -1)))
    # example_naive does not fuse quantization; a dynamic or per-token key is never taken.
    assert backend.supports_quant_output(fp8_static) is False
    assert backend.supports_quant_output(QuantKey("torch.float8_e4m3fn", ScaleDesc("torch.float32", False, (-1, -1)))) is False
    assert backend.supports_quant_output(QuantKey("torch.int8", ScaleDesc("torch.float32", True, (-1, -1)))) is False


# ---- the instance side: vLLM's MLA prefill path -----------------------------------

DIMS = (3, 64, 32, 16, 24)  # N (odd), L, P, R, V: not DeepSeek's, V != P


def make_batch(rng, dtype, context_lens, query_lens, block_size, extra_context_lens=()):
    n, lora, p, r, v_dim = DIMS
    blocks_per_req = [-(-(c + q) // block_size) for c, q in zip(context_lens, query_lens)]
    num_blocks = sum(blocks_per_req) + 3
    cache = np.full((num_blocks, block_size, lora + r), np.nan, dtype=dtype)  # unused pages poisoned
    ids = rng.permutation(num_blocks)  # permuted block tables
    table = np.zeros((len(query_lens), max(blocks_per_req)), dtype=np.int32)
    latents, ropes = [], []
    used = 0
    for i, (c, q) in enumerate(zip(context_lens, query_lens)):
        table[i, : blocks_per_req[i]] = ids[used: used + blocks_per_req[i]]
        used += blocks_per_req[i]
        kv_c = rng.standard_normal((c + q, lora)).astype(dtype)
        k_pe = rng.standard_normal((c + q, r)).astype(dtype)
        for pos in range(c):  # only the context is in the cache before the step
            cache[table[i, pos // block_size], pos % block_size] = np.concatenate([kv_c[pos], k_pe[pos]])
        latents.append(kv_c)
        ropes.append(k_pe)
    batch = driver.PagedBatch(cache, table, list(context_lens), list(query_lens), list(extra_context_lens))
    return batch, latents, ropes


def expected_output(q, latents, ropes, w, context_lens, query_lens, scale):
    n, lora, p, r, v_dim = DIMS
    w_uk, w_uv = mla_reference.split_kv_b_proj(w, n, p, v_dim)
    rows, start = [], 0
    for kv_c, k_pe, c, ql in zip(latents, ropes, context_lens, query_lens):
        rows.append(mla_reference.mha_request(q[start:start + ql], kv_c, k_pe, w_uk, w_uv, scale, c))
        start += ql
    return np.concatenate(rows).reshape(sum(query_lens), -1)


def work_dtype(adapter_class):
    """float32 where the backend runs it (the tightest check), else float16."""
    return np.float32 if adapter_class.supports_dtype(np.float32) else np.float16


def prefill_backends_under_test():
    return ["CUSTOM"] + available_prefill_backends()


@pytest.fixture(params=prefill_backends_under_test())
def adapter_class(request, example_plugin_as_custom):
    return {"CUSTOM": tb.LattnCustomPrefill, "reference": tb.LattnReferencePrefill, "cpu": tb.LattnCpuPrefill}[
        request.param]


CASES = {
    # name: (context_lens, query_lens, block_size, workspace, decodes' contexts)
    "no_context": ([0, 0], [5, 3], 4, 64, []),
    "chunked_context": ([37, 0, 9], [4, 6, 1], 4, 24, []),
    "block_size_1": ([5, 3], [2, 3], 1, 4, []),
    "trailing_empty_chunks": ([6, 3], [3, 2], 4, 8, [40]),  # a decode's long context adds all-empty chunks
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_forward_prefill_as_vllm_runs_it(adapter_class, case, dtype):
    context_lens, query_lens, block_size, workspace, extra = CASES[case]
    if not adapter_class.supports_dtype(dtype):
        pytest.skip(f"{adapter_class.lattn_backend} does not run {np.dtype(dtype).name}")
    rng = np.random.default_rng(hash(case) % 2**32)
    n, lora, p, r, v_dim = DIMS
    scale = 1.0 / np.sqrt(p + r)
    batch, latents, ropes = make_batch(rng, dtype, context_lens, query_lens, block_size, extra)
    t = sum(query_lens)
    q = rng.standard_normal((t, n, p + r)).astype(dtype)
    w = (rng.standard_normal((n * (p + v_dim), lora)) / np.sqrt(lora)).astype(dtype)
    new_kv_c = np.concatenate([kv[c:] for kv, c in zip(latents, context_lens)])
    new_k_pe = np.concatenate([kp[c:] for kp, c in zip(ropes, context_lens)])

    backend = adapter_class(n, scale, lora, p, r, v_dim, vllm_config=None)
    md = driver.build_prefill_metadata(batch, block_size, workspace, dtype)
    if case == "trailing_empty_chunks":
        assert md.chunked_context.seq_tot[-1] == 0  # the hostile case is really there
    backend.prepare_metadata(md)  # "called by the metadata builder"
    assert backend._prefill_metadata is md
    out = driver.forward_prefill(backend, q, new_kv_c, new_k_pe, batch, md, w, DIMS)

    expected = expected_output(q, latents, ropes, w, context_lens, query_lens, scale)
    assert out.shape == (t, n * v_dim) and np.isfinite(out).all()
    assert rel_l2(out, expected) < TOLERANCE[dtype]


def test_new_tokens_output_and_lse_layout(adapter_class):
    rng = np.random.default_rng(7)
    n, lora, p, r, v_dim = DIMS
    query_lens = [4, 1, 6]
    t = sum(query_lens)
    dtype = work_dtype(adapter_class)
    q = rng.standard_normal((t, n, p + r)).astype(dtype)
    k = rng.standard_normal((t, n, p + r)).astype(dtype)
    v = rng.standard_normal((t, n, v_dim)).astype(dtype)
    cu = np.concatenate([[0], np.cumsum(query_lens)]).astype(np.int32)
    backend = adapter_class(n, 0.2, lora, p, r, v_dim, vllm_config=None)
    backend.prepare_metadata(driver.MLACommonPrefillMetadata(np.zeros((3, 1), np.int32), cu, max(query_lens)))

    out, lse = backend.run_prefill_new_tokens(q, k, v, return_softmax_lse=True)
    ref_out, ref_lse = mla_reference.varlen_attention(q, k, v, cu, cu, 0.2, causal=True)
    tol = TOLERANCE[dtype]
    assert isinstance(out, np.ndarray) and out.shape == (t, n, v_dim) and out.dtype == dtype
    assert isinstance(lse, np.ndarray) and lse.shape == (n, t) and lse.dtype == np.float32  # [num_heads, num_tokens]
    assert rel_l2(out, ref_out) < tol
    np.testing.assert_allclose(lse, ref_lse, rtol=tol, atol=tol)  # natural log

    # The newer revision's out=: written in place and returned.
    buffer = np.full((t, n, v_dim), np.nan, dtype=dtype)
    same = backend.run_prefill_new_tokens(q, k, v, return_softmax_lse=False, out=buffer)
    assert same is buffer
    assert rel_l2(buffer, ref_out) < tol


def test_context_chunk_with_an_empty_request_gives_zero_and_minus_inf(adapter_class):
    rng = np.random.default_rng(8)
    n, lora, p, r, v_dim = DIMS
    cu_q = np.array([0, 2, 5], np.int32)
    cu_k = np.array([[0, 0, 7]], np.int32)  # prefill 0 has no key in this chunk
    dtype = work_dtype(adapter_class)
    q = rng.standard_normal((5, n, p + r)).astype(dtype)
    k = rng.standard_normal((7, n, p + r)).astype(dtype)
    v = rng.standard_normal((7, n, v_dim)).astype(dtype)
    md = driver.MLACommonPrefillMetadata(np.zeros((2, 1), np.int32), cu_q, 3, driver.ChunkedContextMetadata(
        cu_k, np.zeros((1, 2), np.int32), [7], [7], np.zeros((7, lora + r), dtype)))
    backend = adapter_class(n, 0.3, lora, p, r, v_dim, vllm_config=None)
    backend.prepare_metadata(md)
    out, lse = backend.run_prefill_context_chunk(0, q, k, v)
    assert np.all(out[:2] == 0) and np.all(lse[:, :2] == -np.inf)
    ref_out, ref_lse = mla_reference.varlen_attention(q, k, v, cu_q, cu_k[0], 0.3, causal=False)
    tol = TOLERANCE[dtype]
    assert rel_l2(out, ref_out) < tol
    np.testing.assert_allclose(lse[:, 2:], ref_lse[:, 2:], rtol=tol, atol=tol)


def test_running_before_prepare_metadata_is_an_assertion():
    backend = LattnPrefillBackend(3, 0.1, 64, 32, 16, 24, vllm_config=None)
    x = np.zeros((1, 3, 48), np.float32)
    with pytest.raises(AssertionError, match="prepare_metadata"):
        backend.run_prefill_new_tokens(x, x, np.zeros((1, 3, 24), np.float32), False)


def test_bad_metadata_is_refused_with_the_argument_named():
    backend = LattnPrefillBackend(3, 0.1, 64, 32, 16, 24, vllm_config=None)
    bad = driver.MLACommonPrefillMetadata(np.zeros((1, 1), np.int32), np.array([0, 3], np.int64), 3)
    with pytest.raises(ValueError, match=r"argument 'query_start_loc' must have dtype i32, got i64"):
        backend.prepare_metadata(bad)


def test_torch_cpu_tensors_in_and_out(adapter_class):
    torch = torch_or_skip()
    rng = np.random.default_rng(9)
    n, lora, p, r, v_dim = DIMS
    cu = torch.tensor([0, 3, 7], dtype=torch.int32)
    q, k = (torch.from_numpy(rng.standard_normal((7, n, p + r)).astype(np.float32)).to(torch.bfloat16)
            for _ in range(2))
    v = torch.from_numpy(rng.standard_normal((7, n, v_dim)).astype(np.float32)).to(torch.bfloat16)
    backend = adapter_class(n, 0.2, lora, p, r, v_dim, vllm_config=None)
    if not adapter_class.supports_dtype(torch.bfloat16):
        pytest.skip(f"{adapter_class.lattn_backend} does not run bf16")
    backend.prepare_metadata(driver.MLACommonPrefillMetadata(torch.zeros((2, 1), dtype=torch.int32), cu, 4))
    out, lse = backend.run_prefill_new_tokens(q, k, v, True)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16 and out.shape == (7, n, v_dim)
    assert lse.dtype == torch.float32 and lse.shape == (n, 7)
    ref_out, ref_lse = mla_reference.varlen_attention(q.float().numpy(), k.float().numpy(), v.float().numpy(),
                                                      cu.numpy(), cu.numpy(), 0.2, causal=True)
    assert rel_l2(out.float().numpy(), ref_out) < 1e-2
    np.testing.assert_allclose(lse.numpy(), ref_lse, rtol=1e-2, atol=1e-2)


def test_prepare_metadata_takes_lattns_own_prefill_view(adapter_class):
    rng = np.random.default_rng(12)
    n, lora, p, r, v_dim = DIMS
    md = lattn.MlaMetadataBuilder(block_size=4, context_chunk_workspace_size=16).build(
        [(1, 3, [0]), (4, 0, [1]), (3, 0, [2])])
    dtype = work_dtype(adapter_class)
    q = rng.standard_normal((7, n, p + r)).astype(dtype)  # the two prefills' 7 tokens
    v = rng.standard_normal((7, n, v_dim)).astype(dtype)
    backend = adapter_class(n, 0.25, lora, p, r, v_dim, vllm_config=None)
    backend.prepare_metadata(md.prefill)
    out = backend.run_prefill_new_tokens(q, q, v, False)
    cu = np.array([0, 4, 7], np.int32)
    assert rel_l2(out, mla_reference.varlen_attention(q, q, v, cu, cu, 0.25, causal=True)[0]) < TOLERANCE[dtype]
