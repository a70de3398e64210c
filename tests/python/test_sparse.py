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
