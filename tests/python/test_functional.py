"""Kernel-level calls with LSE: lattn.mla_decode_plan / mla_decode and mla_prefill,
on every CPU backend, against the NumPy float64 reference (mla_reference.py).

Hostile data as everywhere: permuted block tables, NaN in every cache slot no
request owns, partial last blocks, an empty context, block size 1, odd head
counts, non-DeepSeek dims; outputs are NaN-poisoned before the call and must
be fully written.
"""

import numpy as np
import pytest

import lattn
from mla_reference import attention, varlen_attention

DECODE_BACKENDS = ["reference", "cpu"]
PREFILL_BACKENDS = ["reference", "cpu"]
F32_BOUND = 1e-5  # relative L2 error of f32 activations against the float64 reference


def rel_err(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert np.isfinite(got).all(), "output not fully written (NaN / inf left)"
    return np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)


def make_decode_case(rng, n, lora, rope, block_size, seq_lens, query_len=1, num_blocks=None):
    """A NaN-poisoned f16 cache whose requests own permuted blocks, and their tables."""
    blocks_per = [-(-s // block_size) for s in seq_lens]
    total = sum(blocks_per)
    num_blocks = num_blocks or total + 3
    ids = rng.permutation(num_blocks)[:total]
    width = max(blocks_per) + 1  # tables wider than needed, the tail is junk
    table = np.full((len(seq_lens), width), 10_000, dtype=np.int32)
    cache = np.full((num_blocks, block_size, lora + rope), np.nan, dtype=np.float16)
    at = 0
    for r, (s, nb) in enumerate(zip(seq_lens, blocks_per)):
        table[r, :nb] = ids[at:at + nb]
        at += nb
        for pos in range(s):
            cache[table[r, pos // block_size], pos % block_size] = rng.standard_normal(lora + rope)
    q = rng.standard_normal((len(seq_lens) * query_len, n, lora + rope)).astype(np.float32)
    return q, cache, table, np.array(seq_lens, dtype=np.int32)


def decode_reference(q, cache, table, seq_lens, lora, block_size, scale, query_len=1):
    n = q.shape[1]
    out = np.zeros((q.shape[0], n, lora))
    lse = np.full((n, q.shape[0]), -np.inf)
    for r, s in enumerate(seq_lens):
        entries = np.stack([cache[table[r, p // block_size], p % block_size] for p in range(s)]).astype(np.float64)
        k = np.broadcast_to(entries[:, None, :], (s, n, entries.shape[1]))
        v = k[..., :lora]
        rows = slice(r * query_len, (r + 1) * query_len)
        mask = np.arange(s)[None, :] <= (s - query_len + np.arange(query_len))[:, None]
        o, l = attention(q[rows], k, v, scale, mask)
        out[rows], lse[:, rows] = o, l
    return out, lse


@pytest.mark.parametrize("backend", DECODE_BACKENDS)
@pytest.mark.parametrize("n,lora,rope,block_size,seq_lens", [
    (16, 512, 64, 16, [30, 1, 47, 16]),   # DeepSeek latent dims, a 1-token context-free request
    (3, 64, 16, 1, [5, 9]),               # odd heads, block size 1
    (5, 256, 32, 64, [70, 3]),            # MiniCPM3's dims, partial last blocks
])
def test_decode_matches_the_reference(backend, n, lora, rope, block_size, seq_lens):
    rng = np.random.default_rng(1)
    q, cache, table, lens = make_decode_case(rng, n, lora, rope, block_size, seq_lens)
    scale = lattn.mla_softmax_scale(192, 40, 1.0)  # DeepSeek-V3's, not the plain 1/sqrt
    plan = lattn.mla_decode_plan(table, lens, block_size, n, kv_lora_rank=lora, qk_rope_head_dim=rope,
                                 dtype="f32", kv_cache_dtype="f16", backend=backend)
    assert plan.backend == backend and plan.num_tokens == len(seq_lens)
    out = np.full((len(seq_lens), n, lora), np.nan, np.float32)
    got, lse = lattn.mla_decode(q, lattn.LatentCache(cache, lora, rope), plan, scale, out=out)
    assert got is out
    ref, ref_lse = decode_reference(q, cache, table, lens, lora, block_size, scale)
    assert rel_err(got, ref) < F32_BOUND
    assert rel_err(lse, ref_lse) < F32_BOUND


def test_decode_speculative_query_len_2():
    rng = np.random.default_rng(2)
    n, lora, rope, bs = 4, 64, 16, 8
    q, cache, table, lens = make_decode_case(rng, n, lora, rope, bs, [9, 2, 17], query_len=2)
    plan = lattn.mla_decode_plan(table, lens, bs, n, kv_lora_rank=lora, qk_rope_head_dim=rope, query_len=2,
                                 dtype="f32", kv_cache_dtype="f16", backend="reference")
    out, lse = lattn.mla_decode(q, lattn.LatentCache(cache, lora, rope), plan, 0.1)
    ref, ref_lse = decode_reference(q, cache, table, lens, lora, bs, 0.1, query_len=2)
    assert rel_err(out, ref) < F32_BOUND and rel_err(lse, ref_lse) < F32_BOUND


def test_decode_takes_flashinfer_split_cache_adjacent_or_not():
    rng = np.random.default_rng(3)
    n, lora, rope, bs = 4, 64, 16, 4
    q, cache, table, lens = make_decode_case(rng, n, lora, rope, bs, [6, 11])
    plan = lattn.mla_decode_plan(table, lens, bs, n, kv_lora_rank=lora, qk_rope_head_dim=rope, dtype="f32",
                                 kv_cache_dtype="f16")
    expect, expect_lse = lattn.mla_decode(q, cache, plan, 0.2)  # a bare [.., L+R] array
    # The two halves of one buffer (zero-copy) ...
    halves = lattn.mla_decode(q, (cache[..., :lora], cache[..., lora:]), plan, 0.2)
    # ... and two separate arrays, FlashInfer's usual layout (copied into a combined cache).
    ckv, kpe = np.ascontiguousarray(cache[..., :lora]), np.ascontiguousarray(cache[..., lora:])
    split = lattn.mla_decode(q, (ckv, kpe), plan, 0.2)
    for out, lse in (halves, split):
        np.testing.assert_array_equal(out, expect)
        np.testing.assert_array_equal(lse, expect_lse)
    ref, _ = decode_reference(q, cache, table, lens, lora, bs, 0.2)
    assert rel_err(expect, ref) < F32_BOUND


def test_decode_from_builder_metadata_and_without_lse():
    rng = np.random.default_rng(4)
    n, lora, rope, bs = 2, 32, 8, 4
    q, cache, table, lens = make_decode_case(rng, n, lora, rope, bs, [5, 8])
    builder = lattn.MlaMetadataBuilder(block_size=bs, chunked_prefill_enabled=False)
    md = builder.build([(1, int(s) - 1, table[r, :-(-int(s) // bs)].tolist()) for r, s in enumerate(lens)])
    out = lattn.mla_decode(q, lattn.LatentCache(cache, lora, rope), md, 0.3, return_lse=False)
    assert isinstance(out, np.ndarray) and out.shape == (2, n, lora)
    ref, _ = decode_reference(q, cache, table, lens, lora, bs, 0.3)
    assert rel_err(out, ref) < F32_BOUND


def test_decode_errors_name_the_argument():
    rng = np.random.default_rng(5)
    q, cache, table, lens = make_decode_case(rng, 2, 32, 8, 4, [5])
    plan = lattn.mla_decode_plan(table, lens, 4, 2, kv_lora_rank=32, qk_rope_head_dim=8, dtype="f32",
                                 kv_cache_dtype="f16")
    with pytest.raises(ValueError, match="q_absorbed"):
        lattn.mla_decode(q[:, :1], cache, plan, 0.1)
    with pytest.raises(ValueError, match="scale"):
        lattn.mla_decode(q, cache, plan, 0.0)
    with pytest.raises(ValueError, match="seq_lens"):
        lattn.mla_decode_plan(table, np.array([0], np.int32), 4, 2, kv_lora_rank=32, qk_rope_head_dim=8)
    with pytest.raises(ValueError, match="block_table"):
        lattn.mla_decode_plan(table[:, :1], np.array([9], np.int32), 4, 2, kv_lora_rank=32, qk_rope_head_dim=8)
    with pytest.raises(ValueError, match="block_table"):
        lattn.mla_decode_plan(table.astype(np.int64), lens, 4, 2)
    with pytest.raises(TypeError, match="plan_or_metadata"):
        lattn.mla_decode(q, cache, "plan", 0.1)
    with pytest.raises(ValueError, match="nope"):
        lattn.mla_decode_plan(table, lens, 4, 2, backend="nope")


def prefill_case(rng, n, dqk, dv, q_lens, k_lens):
    cu_q = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(k_lens)]).astype(np.int32)
    q = rng.standard_normal((cu_q[-1], n, dqk)).astype(np.float32)
    k = rng.standard_normal((cu_k[-1], n, dqk)).astype(np.float32)
    v = rng.standard_normal((cu_k[-1], n, dv)).astype(np.float32)
    return q, k, v, cu_q, cu_k


@pytest.mark.parametrize("backend", PREFILL_BACKENDS)
@pytest.mark.parametrize("n,dqk,dv", [(4, 192, 128), (3, 96, 64), (1, 48, 32)])
def test_prefill_causal_matches_the_reference(backend, n, dqk, dv):
    rng = np.random.default_rng(6)
    q, k, v, cu_q, cu_k = prefill_case(rng, n, dqk, dv, [5, 1, 17], [5, 1, 17])
    scale = dqk ** -0.5
    out = np.full((q.shape[0], n, dv), np.nan, np.float32)
    lse = np.full((n, q.shape[0]), np.nan, np.float32)
    got, got_lse = lattn.mla_prefill(q, k, v, cu_q, cu_k, True, scale, out=out, lse=lse, backend=backend)
    assert got is out and got_lse is lse
    ref, ref_lse = varlen_attention(q, k, v, cu_q, cu_k, scale, causal=True)
    assert rel_err(got, ref) < F32_BOUND and rel_err(got_lse, ref_lse) < F32_BOUND


@pytest.mark.parametrize("backend", PREFILL_BACKENDS)
def test_prefill_non_causal_with_an_empty_key_sequence(backend):
    rng = np.random.default_rng(7)
    q, k, v, cu_q, cu_k = prefill_case(rng, 2, 192, 128, [3, 4, 2], [7, 0, 12])
    got, lse = lattn.mla_prefill(q, k, v, cu_q, cu_k, False, 0.1, backend=backend)
    ref, ref_lse = varlen_attention(q, k, v, cu_q, cu_k, 0.1, causal=False)
    assert np.array_equal(got[3:7], np.zeros_like(got[3:7]))  # no keys: output 0 ...
    assert np.isneginf(lse[:, 3:7]).all()                       # ... and LSE -inf
    finite = np.isfinite(ref_lse)
    assert rel_err(got, ref) < F32_BOUND and rel_err(lse[finite], ref_lse[finite]) < F32_BOUND
    assert lattn.mla_prefill(q, k, v, cu_q, cu_k, False, 0.1, return_lse=False, backend=backend).shape == got.shape


def test_prefill_selector_and_errors():
    rng = np.random.default_rng(8)
    q, k, v, cu_q, cu_k = prefill_case(rng, 2, 192, 128, [3, 2], [4, 2])
    assert lattn.mla_prefill_backend_for("f32", 192, 128) in PREFILL_BACKENDS
    with pytest.raises(ValueError, match="cu_seqlens_k"):  # causal needs the same tokens as keys
        lattn.mla_prefill(q, k, v, cu_q, cu_k, True, 0.1)
    with pytest.raises(ValueError, match="cu_seqlens_q"):
        lattn.mla_prefill(q, k, v, cu_q.astype(np.int64), cu_k, False, 0.1)
    with pytest.raises(ValueError, match="cu_seqlens_q"):
        lattn.mla_prefill(q, k, v, cu_q[::-1].copy(), cu_k, False, 0.1)
    with pytest.raises(ValueError, match="'v'"):
        lattn.mla_prefill(q, k, v[:, :1], cu_q, cu_k, False, 0.1)


# ---------------------------------------------------------------------------
# The CUDA backends (the GPU machine; skipped with the reason elsewhere)

BF16_BOUND = 1e-2  # relative L2 error of bf16 activations


def cuda_backend_or_skip(backend):
    from conftest import cuda_torch_or_skip

    torch = cuda_torch_or_skip()
    major, minor = torch.cuda.get_device_capability()
    if backend == "hopper" and (major, minor) != (9, 0):
        pytest.skip(f"hopper needs compute capability 9.0, this GPU has {major}.{minor}")
    return torch


@pytest.mark.parametrize("backend", ["cuda", "hopper"])
@pytest.mark.parametrize("n,lora,rope,block_size,seq_lens", [
    (16, 512, 64, 64, [130, 1, 47, 64]),   # DeepSeek dims: the tensor-core kernels, a 1-token context
    (128, 512, 64, 64, [300, 9]),          # 128 rows per request: hopper's wgmma kernel
    (5, 256, 32, 16, [70, 3]),             # MiniCPM3's dims: the generic kernel
])
def test_cuda_decode_matches_the_reference(backend, n, lora, rope, block_size, seq_lens):
    torch = cuda_backend_or_skip(backend)
    rng = np.random.default_rng(11)
    q, cache, table, lens = make_decode_case(rng, n, lora, rope, block_size, seq_lens)  # NaN in unowned slots
    q16 = torch.from_numpy(q).to("cuda", torch.bfloat16)
    cache16 = torch.from_numpy(cache.astype(np.float32)).to("cuda", torch.bfloat16)
    scale = lattn.mla_softmax_scale(192, 40, 1.0)
    plan = lattn.mla_decode_plan(torch.from_numpy(table).cuda(), torch.from_numpy(lens).cuda(), block_size, n,
                                 kv_lora_rank=lora, qk_rope_head_dim=rope, dtype="bf16", kv_cache_dtype="bf16",
                                 backend=backend)
    assert plan.backend == backend
    out = torch.full((len(seq_lens), n, lora), float("nan"), device="cuda", dtype=torch.bfloat16)
    got, lse = lattn.mla_decode(q16, lattn.LatentCache(cache16, lora, rope), plan, scale, out=out)
    torch.cuda.synchronize()
    assert got.data_ptr() == out.data_ptr() and lse.is_cuda
    # The reference on the bf16-rounded inputs the kernel read.
    ref, ref_lse = decode_reference(q16.float().cpu().numpy(), cache16.float().cpu().numpy(), table, lens, lora,
                                    block_size, scale)
    assert rel_err(got.float().cpu().numpy(), ref) < BF16_BOUND
    assert rel_err(lse.cpu().numpy(), ref_lse) < BF16_BOUND


@pytest.mark.parametrize("backend", ["cuda", "hopper"])
@pytest.mark.parametrize("n,dqk,dv", [(4, 192, 128), (3, 96, 64)])
def test_cuda_prefill_matches_the_reference(backend, n, dqk, dv):
    torch = cuda_backend_or_skip(backend)
    rng = np.random.default_rng(12)
    for causal, k_lens in ((True, [5, 1, 130]), (False, [7, 0, 200])):
        q, k, v, cu_q, cu_k = prefill_case(rng, n, dqk, dv, [5, 1, 130], k_lens)
        q16, k16, v16 = (torch.from_numpy(x).to("cuda", torch.bfloat16) for x in (q, k, v))
        got, lse = lattn.mla_prefill(q16, k16, v16, torch.from_numpy(cu_q).cuda(), torch.from_numpy(cu_k).cuda(),
                                     causal, dqk ** -0.5, backend=backend)
        torch.cuda.synchronize()
        ref, ref_lse = varlen_attention(*(x.float().cpu().numpy() for x in (q16, k16, v16)), cu_q, cu_k,
                                        dqk ** -0.5, causal=causal)
        finite = np.isfinite(ref_lse)
        assert rel_err(got.float().cpu().numpy(), ref) < BF16_BOUND
        assert rel_err(lse.cpu().numpy()[finite], ref_lse[finite]) < BF16_BOUND
        assert np.isneginf(lse.cpu().numpy()[~finite]).all()
