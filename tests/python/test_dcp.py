"""Decode context parallelism from Python (docs/dcp.md): MlaAttention.set_dcp with
the in-process communicator, one thread per rank, each rank's cache holding only its
token-interleaved shard (NaN-poisoned elsewhere), against the same decode step on
one rank and the NumPy reference."""

import threading

import numpy as np
import pytest

import lattn
import mla_reference as ref

DIMS = (4, 64, 32, 16, 24)  # N, L, P, R, V
BLOCK = 4
CONTEXTS = [0, 1, 2, 5, 37, 64]


def rel_l2(actual, expected):
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    return float(np.linalg.norm(actual - expected) / np.linalg.norm(expected))


def test_shard_arithmetic():
    dcp = lattn.DcpConfig(world_size=3, rank=1, interleave=2)
    owned = [p for p in range(40) if dcp.owner(p) == 1]
    assert owned[:4] == [2, 3, 8, 9]
    assert [dcp.local_position(p) for p in owned] == list(range(len(owned)))
    assert dcp.local_count(40) == len(owned)
    with pytest.raises(ValueError, match="rank"):
        lattn.DcpConfig(world_size=2, rank=2)


def run_rank(comm, interleave, method, data, results, errors):
    try:
        n, lora, p, r, v_dim = DIMS
        attn = lattn.MlaAttention(n, lora, p, r, v_dim, scale=data["scale"], dtype="f32", kv_cache_dtype="f16")
        attn.process_weights_after_loading(data["w"])
        if comm is not None:
            attn.set_dcp(comm, interleave=interleave, method=method)
        dcp = attn.dcp_config
        # This rank's cache: its tokens at local positions of permuted blocks, NaN elsewhere.
        rng = np.random.default_rng(100 + dcp.rank)
        local = [dcp.local_count(c + 1) for c in CONTEXTS]
        blocks = [-(-n_local // BLOCK) for n_local in local]
        ids = rng.permutation(sum(blocks) + 1)
        tables, used = [], 0
        for b in blocks:
            tables.append([int(i) for i in ids[used:used + b]])
            used += b
        cache_data = np.full((len(ids), BLOCK, lora + r), np.nan, np.float16)
        for i, c in enumerate(CONTEXTS):
            for pos in range(c):
                if dcp.owner(pos) != dcp.rank:
                    continue
                lp = dcp.local_position(pos)
                cache_data[tables[i][lp // BLOCK], lp % BLOCK] = np.concatenate([data["kv"][i][pos], data["pe"][i][pos]])
        cache = lattn.LatentCache(cache_data, lora, r)
        builder = lattn.MlaMetadataBuilder(block_size=BLOCK, chunked_prefill_enabled=False)
        requests = [(1, c, tables[i]) for i, c in enumerate(CONTEXTS)]
        kv_new = np.stack([data["kv"][i][c] for i, c in enumerate(CONTEXTS)])
        pe_new = np.stack([data["pe"][i][c] for i, c in enumerate(CONTEXTS)])
        if comm is None:
            md = builder.build(requests)
        else:
            md = lattn.build_dcp_decode_metadata(builder, requests, dcp)
            assert md.metadata.num_decodes == len(CONTEXTS)
        results[dcp.rank if comm is not None else "single"] = attn.forward(data["q"], kv_new, pe_new, cache, md)
        # The new token of each request this rank owns is in its local slot; the
        # others are not written here: the slots past the rank's tokens stay NaN.
        for i, c in enumerate(CONTEXTS):
            n_local = dcp.local_count(c + 1)
            if dcp.owner(c) == dcp.rank:
                lp = dcp.local_position(c)
                np.testing.assert_array_equal(cache_data[tables[i][lp // BLOCK], lp % BLOCK],
                                              np.concatenate([data["kv"][i][c], data["pe"][i][c]]))
            for lp in range(n_local, len(tables[i]) * BLOCK):
                assert np.isnan(cache_data[tables[i][lp // BLOCK], lp % BLOCK]).all()
    except BaseException as e:  # noqa: BLE001 - reported by the test thread
        errors.append(e)


@pytest.mark.parametrize("world,interleave,method", [(1, 1, "all_gather_reduce_scatter"), (2, 1, "all_gather_reduce_scatter"),
                                                     (3, 2, "all_gather_reduce_scatter"), (4, 1, "all_to_all")])
def test_dcp_decode_matches_one_rank(world, interleave, method):
    rng = np.random.default_rng(world * 10 + interleave)
    n, lora, p, r, v_dim = DIMS
    data = {
        # Latents exact in the f16 cache, so every rank and the reference see the same values.
        "kv": [rng.standard_normal((c + 1, lora)).astype(np.float16).astype(np.float32) for c in CONTEXTS],
        "pe": [rng.standard_normal((c + 1, r)).astype(np.float16).astype(np.float32) for c in CONTEXTS],
        "q": rng.standard_normal((len(CONTEXTS), n, p + r)).astype(np.float32),
        "w": (rng.standard_normal((n * (p + v_dim), lora)) / np.sqrt(lora)).astype(np.float32),
        "scale": 1.0 / np.sqrt(p + r),
    }
    results, errors = {}, []
    run_rank(None, 1, method, data, results, errors)
    comms = lattn.make_in_process_group(world)
    assert [c.rank for c in comms] == list(range(world)) and comms[0].kind == "in-process"
    threads = [threading.Thread(target=run_rank, args=(c, interleave, method, data, results, errors)) for c in comms]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    w_uk, w_uv = ref.split_kv_b_proj(data["w"].astype(np.float64), n, p, v_dim)
    expected = np.concatenate([
        ref.absorbed_request(data["q"][i:i + 1], data["kv"][i], data["pe"][i], w_uk, w_uv, data["scale"], c)
        for i, c in enumerate(CONTEXTS)]).reshape(len(CONTEXTS), -1)
    assert rel_l2(results["single"], expected) < 1e-5
    for rank in range(world):
        assert rel_l2(results[rank], results["single"]) < 1e-5, f"rank {rank}"
    if world == 1:
        np.testing.assert_array_equal(results[0], results["single"])


def test_plan_without_set_dcp_is_refused():
    n, lora, p, r, v_dim = DIMS
    attn = lattn.MlaAttention(n, lora, p, r, v_dim, dtype="f32", kv_cache_dtype="f16")
    attn.process_weights_after_loading(np.zeros((n * (p + v_dim), lora), np.float32))
    plan = lattn.build_dcp_decode_metadata(lattn.MlaMetadataBuilder(block_size=BLOCK, chunked_prefill_enabled=False), [(1, 3, [0])],
                                           lattn.DcpConfig(2, 0))
    cache = lattn.LatentCache(np.zeros((2, BLOCK, lora + r), np.float16), lora, r)
    z = np.zeros
    with pytest.raises(ValueError, match="set_dcp"):
        attn.forward(z((1, n, p + r), np.float32), z((1, lora), np.float32), z((1, r), np.float32), cache, plan)
    with pytest.raises(ValueError, match="method"):
        attn.set_dcp(lattn.make_in_process_group(3)[0], method="all_to_all")  # 4 heads over 3 ranks


def test_dcp_metadata_plans_the_ranks_share_of_a_prefills_context():
    # Context 7 over 2 ranks (rank 0: positions 0, 2, 4, 6; rank 1: 1, 3, 5); new tokens 7..10.
    builder = lattn.MlaMetadataBuilder(block_size=BLOCK, context_chunk_workspace_size=64)
    for rank, local_context in ((0, 4), (1, 3)):
        plan = lattn.build_dcp_metadata(builder, [(1, 2, [9]), (4, 7, [5, 2])], lattn.DcpConfig(2, rank))
        assert plan.prefill_has_context
        assert plan.metadata.num_decodes == 1 and plan.metadata.num_prefills == 1
        assert np.from_dlpack(plan.metadata.context_lens_cpu).tolist()[1] == local_context
    with pytest.raises(ValueError, match="build_dcp_metadata"):
        lattn.build_dcp_decode_metadata(builder, [(4, 7, [5, 2])], lattn.DcpConfig(2, 0))
