"""MlaAttention.forward on mixed batches against the NumPy reference (mla_reference.py).

Decode rows are checked against both the absorbed formula and naive MHA (which
must agree: TV-MATH-1); prefill rows attend over a chunked context gathered
from a paged cache with permuted block tables and NaN-poisoned unused pages.
"""

import numpy as np
import pytest

import lattn
import mla_reference as ref

DIMS = (3, 64, 32, 16, 24)  # N (odd), L, P, R, V: not DeepSeek's, V != P


def rel_l2(actual, expected):
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    return float(np.linalg.norm(actual - expected) / np.linalg.norm(expected))


def through(x, dtype):
    """x rounded to a lattn dtype and back to float32 (what a store then load gives)."""
    return np.asarray(lattn.astype(lattn.astype(np.ascontiguousarray(x, np.float32), dtype), "f32"))


class Batch:
    """A mixed batch (decodes first), its paged cache contents and the reference output."""

    def __init__(self, rng, requests, block_size, dtype, cache_dtype=None):
        n, lora, p, r, v_dim = DIMS
        self.requests = requests  # (query_len, context_len)
        blocks = [-(-(q + c) // block_size) for q, c in requests]
        self.num_blocks = sum(blocks) + 2
        ids = rng.permutation(self.num_blocks)
        self.tables, used = [], 0
        for b in blocks:
            self.tables.append([int(i) for i in ids[used:used + b]])
            used += b
        # Latents representable in both the activation and the cache dtype
        # (weights in the activation dtype), so the reference sees exactly the
        # values lattn reads, from the activations or from the cache.
        cache_dtype = cache_dtype or dtype
        self.kv_c = [through(through(rng.standard_normal((q + c, lora)), cache_dtype), dtype) for q, c in requests]
        self.k_pe = [through(through(rng.standard_normal((q + c, r)), cache_dtype), dtype) for q, c in requests]
        t = sum(q for q, _ in requests)
        self.q = through(rng.standard_normal((t, n, p + r)), dtype)
        self.w = through(rng.standard_normal((n * (p + v_dim), lora)) / np.sqrt(lora), dtype)
        self.scale = 1.0 / np.sqrt(p + r)

    def slots(self, i, positions, block_size):
        return [self.tables[i][pos // block_size] * block_size + pos % block_size for pos in positions]

    def new_tokens(self):
        kv = np.concatenate([k[c:] for k, (q, c) in zip(self.kv_c, self.requests)])
        pe = np.concatenate([k[c:] for k, (q, c) in zip(self.k_pe, self.requests)])
        return kv, pe

    def expected(self, formula):
        n, lora, p, r, v_dim = DIMS
        w_uk, w_uv = ref.split_kv_b_proj(self.w, n, p, v_dim)
        rows, start = [], 0
        for kv, pe, (q, c) in zip(self.kv_c, self.k_pe, self.requests):
            rows.append(formula(self.q[start:start + q], kv, pe, w_uk, w_uv, self.scale, c))
            start += q
        return np.concatenate(rows).reshape(start, -1)


def fill_context(batch, cache_data, block_size):
    """The context tokens, already in the cache before the step (written straight into the array)."""
    for i, (q, c) in enumerate(batch.requests):
        for pos, slot in enumerate(batch.slots(i, range(c), block_size)):
            cache_data[slot // block_size, slot % block_size] = np.concatenate([batch.kv_c[i][pos], batch.k_pe[i][pos]])


MIXED = [(1, 37), (1, 5), (1, 0), (6, 21), (3, 0), (9, 2)]  # 3 decodes (one with no context), then 3 prefills


@pytest.mark.parametrize("block_size,workspace", [(4, 16), (1, 7), (16, 1024)])
def test_mixed_batch_f32(block_size, workspace):
    rng = np.random.default_rng(block_size * 1000 + workspace)
    n, lora, p, r, v_dim = DIMS
    batch = Batch(rng, MIXED, block_size, "f32", cache_dtype="f16")
    cache_data = np.full((batch.num_blocks, block_size, lora + r), np.nan, dtype=np.float16)  # poisoned
    fill_context(batch, cache_data, block_size)
    cache = lattn.LatentCache(cache_data, lora, r)

    builder = lattn.MlaMetadataBuilder(block_size=block_size, context_chunk_workspace_size=workspace)
    md = builder.build([(q, c, batch.tables[i]) for i, (q, c) in enumerate(MIXED)])
    assert md.num_decodes == 3 and md.prefill.num_chunks >= (2 if workspace < 64 else 1)

    attn = lattn.MlaAttention(n, lora, p, r, v_dim, scale=batch.scale, dtype="f32", kv_cache_dtype="f16")
    attn.process_weights_after_loading(batch.w)
    kv_c, k_pe = batch.new_tokens()
    out = attn.forward(batch.q, kv_c, k_pe, cache, md)
    assert isinstance(out, np.ndarray) and out.shape == (len(batch.q), n * v_dim) and out.dtype == np.float32

    naive = batch.expected(ref.mha_request)
    absorbed = batch.expected(ref.absorbed_request)
    assert rel_l2(absorbed, naive) < 1e-10  # the two routes are the same math
    t_dec = md.num_decode_tokens
    assert rel_l2(out[:t_dec], absorbed[:t_dec]) < 1e-5
    assert rel_l2(out[t_dec:], naive[t_dec:]) < 1e-5

    # The forward wrote every new token into its slot.
    for i, (q, c) in enumerate(MIXED):
        for pos, slot in zip(range(c, c + q), batch.slots(i, range(c, c + q), block_size)):
            entry = cache_data[slot // block_size, slot % block_size]
            np.testing.assert_array_equal(entry, np.concatenate([batch.kv_c[i][pos], batch.k_pe[i][pos]]).astype(np.float16))


def test_mixed_batch_bf16_with_lattn_tensors():
    rng = np.random.default_rng(5)
    n, lora, p, r, v_dim = DIMS
    block_size = 4
    batch = Batch(rng, MIXED, block_size, "bf16")
    cache = lattn.LatentCache.empty(batch.num_blocks, block_size, lora, r, dtype="bf16")
    # Write the context with the op itself (bf16 has no NumPy dtype: lattn tensors carry it).
    ctx = [(i, pos) for i, (q, c) in enumerate(MIXED) for pos in range(c)]
    lattn.concat_and_cache_mla(
        lattn.astype(np.stack([batch.kv_c[i][pos] for i, pos in ctx]), "bf16"),
        lattn.astype(np.stack([batch.k_pe[i][pos] for i, pos in ctx]), "bf16"),
        cache,
        np.array([batch.slots(i, [pos], block_size)[0] for i, pos in ctx], np.int64),
    )
    md = lattn.MlaMetadataBuilder(block_size=block_size, context_chunk_workspace_size=24).build(
        [(q, c, batch.tables[i]) for i, (q, c) in enumerate(MIXED)])
    attn = lattn.MlaAttention(n, lora, p, r, v_dim, dtype="bf16", kv_cache_dtype="bf16")
    attn.load_kv_b_proj(lattn.astype(batch.w, "bf16"))
    kv_c, k_pe = batch.new_tokens()
    out = attn.forward(lattn.astype(batch.q, "bf16"), lattn.astype(kv_c, "bf16"), lattn.astype(k_pe, "bf16"), cache, md)
    assert isinstance(out, lattn.Tensor) and out.dtype == "bf16"
    got = lattn.astype(out, "f32").numpy()
    assert rel_l2(got, batch.expected(ref.mha_request)) < 1e-2


def test_out_argument_is_written_in_place():
    rng = np.random.default_rng(11)
    n, lora, p, r, v_dim = DIMS
    batch = Batch(rng, [(1, 3), (4, 0)], 4, "f32", cache_dtype="f16")
    cache_data = np.zeros((batch.num_blocks, 4, lora + r), np.float16)
    fill_context(batch, cache_data, 4)
    md = lattn.MlaMetadataBuilder(block_size=4, context_chunk_workspace_size=16).build(
        [(q, c, batch.tables[i]) for i, (q, c) in enumerate(batch.requests)])
    attn = lattn.MlaAttention(n, lora, p, r, v_dim, dtype="f32", kv_cache_dtype="f16")
    attn.process_weights_after_loading(batch.w)
    out = np.full((5, n * v_dim), np.nan, np.float32)
    kv_c, k_pe = batch.new_tokens()
    returned = attn.forward(batch.q, kv_c, k_pe[:, None, :], lattn.LatentCache(cache_data, lora, r), md, out=out)
    assert returned is out and np.isfinite(out).all()
    assert rel_l2(out, batch.expected(ref.mha_request)) < 1e-5


def test_seed_errors():
    n, lora, p, r, v_dim = DIMS
    with pytest.raises(NotImplementedError, match=r"^KV sharing not supported in V0\.$"):
        lattn.MlaAttention(n, lora, p, r, v_dim, kv_sharing_target_layer_name="layers.0.attn")
    attn = lattn.MlaAttention(n, lora, p, r, v_dim, dtype="f32", kv_cache_dtype="f16")
    with pytest.raises(AssertionError, match=r"^kv_b_proj_weight\.shape=.*self\.kv_lora_rank=64, self\.num_heads=3"):
        attn.process_weights_after_loading(np.zeros((10, lora), np.float32))
    with pytest.raises(TypeError, match=r"forward: argument 'q' must be a DLPack array"):
        attn.forward("q", None, None, lattn.LatentCache.empty(1, 4, lora, r, "f16"),
                     lattn.MlaMetadataBuilder(block_size=4, context_chunk_workspace_size=8).build([(1, 0, [0])]))


def test_weights_views():
    n, lora, p, r, v_dim = DIMS
    w = np.arange(n * (p + v_dim) * lora, dtype=np.float32).reshape(n * (p + v_dim), lora)
    attn = lattn.MlaAttention(n, lora, p, r, v_dim, dtype="f32", kv_cache_dtype="f16")
    attn.process_weights_after_loading(w)
    w_uk, w_uv = ref.split_kv_b_proj(w, n, p, v_dim)
    np.testing.assert_array_equal(attn.W_UK_T.numpy(), w_uk)  # [N, P, L]
    np.testing.assert_array_equal(attn.W_UV.numpy(), w_uv.transpose(0, 2, 1))  # [N, L, V]


def run_invariant(batch, requests, block_size):
    """Forward of `requests` in batch-invariant mode (layer and metadata builder)."""
    n, lora, p, r, v_dim = DIMS
    cache_data = np.full((batch.num_blocks, block_size, lora + r), np.nan, dtype=np.float16)
    fill_context(batch, cache_data, block_size)
    cache = lattn.LatentCache(cache_data, lora, r)
    builder = lattn.MlaMetadataBuilder(block_size=block_size, context_chunk_workspace_size=16, batch_invariant=True,
                                       batch_invariant_context_chunk=8)
    md = builder.build([(q, c, batch.tables[i]) for i, (q, c) in enumerate(requests)])
    attn = lattn.MlaAttention(n, lora, p, r, v_dim, scale=batch.scale, dtype="f32", kv_cache_dtype="f16",
                              batch_invariant=True)
    attn.process_weights_after_loading(batch.w)
    kv_c, k_pe = batch.new_tokens()
    return attn.forward(batch.q, kv_c, k_pe, cache, md)


def test_batch_invariant_mode():
    # The last prefill (9 new tokens over a 30-token context) alone and after
    # the other requests: bit-identical rows, and the math still holds.
    requests = [(1, 37), (1, 5), (6, 21), (9, 30)]
    block_size = 4
    batch = Batch(np.random.default_rng(21), requests, block_size, "f32", cache_dtype="f16")
    out = run_invariant(batch, requests, block_size)
    naive = batch.expected(ref.mha_request)
    t_dec = 2
    assert rel_l2(out[t_dec:], naive[t_dec:]) < 1e-5
    alone = Batch(np.random.default_rng(21), requests, block_size, "f32", cache_dtype="f16")
    # Keep only the last request (its data and block table) and run it alone.
    alone.requests = [requests[-1]]
    alone.kv_c, alone.k_pe, alone.tables = [alone.kv_c[-1]], [alone.k_pe[-1]], [alone.tables[-1]]
    alone.q = alone.q[-9:]
    out_alone = run_invariant(alone, alone.requests, block_size)
    np.testing.assert_array_equal(out_alone, out[-9:])
