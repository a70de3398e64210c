"""Sparse MLA from Python: docs/sparse.md's example runs and prints what the
page shows; sparse_mla and indexer_topk against NumPy float64 formulas;
bad input raises ValueError naming the argument."""

import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import lattn

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "sparse.md"


def test_docs_example_output_matches_the_page():
    text = DOC.read_text()
    section = text[text.index("## Python"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    shown = re.search(r"Output:\n\n```text\n(.*?)```", section, re.S).group(1)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == shown


def _bf16_cache(rng, num_blocks, block_size, L, R):
    cache = lattn.LatentCache.empty(num_blocks, block_size, L, R, dtype="bf16")
    n = num_blocks * block_size
    lattn.concat_and_cache_mla(rng.standard_normal((n, L), dtype=np.float32),
                               rng.standard_normal((n, R), dtype=np.float32), cache, np.arange(n, dtype=np.int64))
    rows = np.empty((n, L + R), np.float32)
    lattn.gather_cache(cache, rows, np.arange(num_blocks, dtype=np.int32)[None, :], np.array([0, n], np.int32), 1)
    return cache, rows.astype(np.float64)


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_sparse_mla_matches_numpy(backend):
    rng = np.random.default_rng(1)
    L, R, N, T, k = 128, 32, 5, 3, 40
    cache, rows = _bf16_cache(rng, 6, 16, L, R)
    q = rng.standard_normal((T, N, L + R), dtype=np.float32) / 4
    idx = rng.integers(0, 96, size=(T, k)).astype(np.int32)
    idx[0, ::3] = -1
    idx[2, :] = -1
    sink = rng.standard_normal(N).astype(np.float32)
    scale = 0.1
    out, lse = lattn.sparse_mla(q, cache, idx, scale, attn_sink=sink, backend=backend)
    for t in range(T):
        valid = idx[t][idx[t] >= 0]
        for h in range(N):
            if len(valid) == 0:
                assert lse[h, t] == -np.inf and not out[t, h].any()
                continue
            s = scale * rows[valid] @ q[t, h].astype(np.float64)
            m = s.max()
            p = np.exp(s - m)
            ref_lse = m + np.log(p.sum())
            ref = (p / p.sum()) @ rows[valid, :L] / (1 + np.exp(sink[h] - ref_lse))
            np.testing.assert_allclose(out[t, h], ref, rtol=1e-4, atol=1e-5)
            assert abs(lse[h, t] - ref_lse) < 1e-4 * max(1, abs(ref_lse))


def test_indexer_topk_matches_a_sort_of_numpy_logits():
    rng = np.random.default_rng(2)
    D, H, bs, n = 128, 4, 16, 70
    keys = lattn.IndexerKeyCache.empty(5, bs, D)
    table = np.array([[4, 2, 0, 1, 3]], np.int32)
    pos = np.arange(n)
    slots = (table[0, pos // bs] * bs + pos % bs).astype(np.int64)
    lattn.indexer_k_cache_write(rng.standard_normal((n, D), dtype=np.float32), keys, slots)
    q = rng.standard_normal((2, H, D), dtype=np.float32)
    w = rng.standard_normal((2, H), dtype=np.float32)
    qsl, lens = np.array([0, 2], np.int32), np.array([n], np.int32)
    logits = np.empty((2, n), np.float32)
    lattn.indexer_logits(q, w, keys, table, qsl, lens, logits, backend="reference")
    got = lattn.indexer_topk(q, w, keys, table, qsl, lens, topk=80)
    for t, visible in enumerate([n - 1, n]):
        order = sorted(range(visible), key=lambda p: (-logits[t, p], p))
        want = [int(table[0, p // bs] * bs + p % bs) for p in order] + [-1] * (80 - visible)
        assert got[t].tolist() == want
    assert logits[0, n - 1] == -np.inf  # causal: token 0 sits at position n - 2


def test_bad_input_names_the_argument():
    rng = np.random.default_rng(3)
    cache, _ = _bf16_cache(rng, 2, 16, 128, 32)
    q = np.zeros((1, 2, 160), np.float32)
    with pytest.raises(ValueError, match="argument 'indices' must hold slots in \\[0, num_blocks \\* block_size = 32\\) or -1, got 32"):
        lattn.sparse_mla(q, cache, np.array([[0, 32]], np.int32), 0.1)
    with pytest.raises(ValueError, match="argument 'indices' must have dtype i32, got i64"):
        lattn.sparse_mla(q, cache, np.array([[0, 1]], np.int64), 0.1)
    with pytest.raises(ValueError, match="topk >= 1"):
        lattn.sparse_mla(q, cache, np.zeros((1, 0), np.int32), 0.1)


def test_sparse_layer_with_topk_covering_every_token_equals_the_dense_layer():
    # MlaAttention(..., index_topk=k): the indexer and sparse attention inside the layer.
    rng = np.random.default_rng(9)
    N, L, P, R, V, H, D, bs = 4, 128, 16, 16, 24, 8, 32, 16
    specs = [(1, 30), (1, 0), (12, 0), (7, 25)]  # (query_len, context): decodes first
    num_blocks = 16
    tables, nxt = [], 0
    for q, c in specs:
        blocks = -(-(q + c) // bs)
        tables.append(list(range(nxt, nxt + blocks))[::-1])  # reversed: not contiguous in the cache
        nxt += blocks
    md = lattn.MlaMetadataBuilder(block_size=bs, context_chunk_workspace_size=64).build(
        [(q, c, t) for (q, c), t in zip(specs, tables)])
    T = sum(q for q, _ in specs)
    # float32 throughout: NumPy 2 promotes float32 / np.float64 to float64.
    w = (rng.standard_normal((N * (P + V), L)) / np.sqrt(L)).astype(np.float32)
    q = rng.standard_normal((T, N, P + R)).astype(np.float32)
    kv_c = rng.standard_normal((T, L)).astype(np.float32)
    k_pe = rng.standard_normal((T, R)).astype(np.float32)
    iq = rng.standard_normal((T, H, D)).astype(np.float32)
    ik = rng.standard_normal((T, D)).astype(np.float32)
    iw = (rng.standard_normal((T, H)) / 8).astype(np.float32)

    def caches():
        cache = lattn.LatentCache.empty(num_blocks, bs, L, R, dtype="f16")
        keys = lattn.IndexerKeyCache.empty(num_blocks, bs, D)
        # Context of every request, written as earlier steps would have.
        for (qn, c), t in zip(specs, tables):
            if c == 0:
                continue
            pos = np.arange(c)
            slots = (np.array(t)[pos // bs] * bs + pos % bs).astype(np.int64)
            r = np.random.default_rng(c)
            lattn.concat_and_cache_mla(r.standard_normal((c, L), dtype=np.float32),
                                       r.standard_normal((c, R), dtype=np.float32), cache, slots)
            lattn.indexer_k_cache_write(r.standard_normal((c, D), dtype=np.float32), keys, slots)
        return cache, keys

    sparse = lattn.MlaAttention(N, L, P, R, V, dtype="f32", kv_cache_dtype="f16", index_topk=64,
                                index_n_heads=H, index_head_dim=D)
    assert sparse.sparse_backend == "cpu" and sparse.kernels == {"sparse": "cpu"}
    sparse.process_weights_after_loading(w)
    cache, keys = caches()
    out = sparse.forward(q, kv_c, k_pe, cache, md, indexer_q=iq, indexer_k=ik, indexer_weights=iw,
                         indexer_cache=keys)
    dense = lattn.MlaAttention(N, L, P, R, V, dtype="f32", kv_cache_dtype="f16")
    assert dense.sparse_backend is None
    dense.process_weights_after_loading(w)
    cache2, _ = caches()
    want = dense.forward(q, kv_c, k_pe, cache2, md)
    # The f16 cache bounds the difference (the dense prefill reads this step's unrounded latents).
    assert np.linalg.norm(out - want) / np.linalg.norm(want) < 2e-3

    # A smaller top-k changes the prefill rows (they see fewer tokens) but not a decode of one token.
    small = lattn.MlaAttention(N, L, P, R, V, dtype="f32", kv_cache_dtype="f16", index_topk=1, index_n_heads=H,
                               index_head_dim=D)
    small.process_weights_after_loading(w)
    cache3, keys3 = caches()
    out1 = small.forward(q, kv_c, k_pe, cache3, md, indexer_q=iq, indexer_k=ik, indexer_weights=iw,
                         indexer_cache=keys3)
    np.testing.assert_allclose(out1[1], out[1], rtol=1e-5, atol=1e-6)  # decode with no context: one token either way
    assert np.linalg.norm(out1[2:] - out[2:]) > 1e-2 * np.linalg.norm(out[2:])

    with pytest.raises(ValueError, match="needs the indexer's inputs"):
        sparse.forward(q, kv_c, k_pe, cache, md)
    with pytest.raises(ValueError, match="indexer.q"):
        sparse.forward(q, kv_c, k_pe, cache, md, indexer_q=iq[:, :, :5], indexer_k=ik, indexer_weights=iw,
                       indexer_cache=keys)
