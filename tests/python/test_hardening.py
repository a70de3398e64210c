"""Hostile input from Python: nothing crashes the interpreter, nothing is
written where it must not be, and every refusal is a Python error that names
the argument (docs/reliability.md lists the promises these tests hold).

Each test here reproduced a crash or a silent corruption before its fix:
an abort on the buffer protocol of a bf16 tensor, wrapped size products,
a use-after-free of a weight view, writes into read-only arrays, a shared
layer giving different outputs on two threads, and C++ internals in errors.
"""

import subprocess
import sys
import threading

import numpy as np
import pytest

import lattn

DIMS = (3, 64, 32, 16, 24)  # N, L, P, R, V


def in_subprocess(code):
    """Runs code in a fresh interpreter: a crash there fails the test instead of killing pytest."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


# ---- buffer protocol on dtypes NumPy has no format for ----------------------------------------


@pytest.mark.parametrize("dtype", ["bf16", "fp8_e4m3"])
@pytest.mark.parametrize("how", ["numpy.asarray(t)", "numpy.array(t)", "memoryview(t)", "bytes(t)", "t.numpy()"])
def test_buffer_protocol_of_bf16_and_fp8_raises_not_aborts(dtype, how):
    code = (
        "import numpy, lattn\n"
        f"t = lattn.zeros([2, 3], dtype='{dtype}')\n"
        "try:\n"
        f"    r = {how}\n"
        "    print('RESULT', type(r).__name__, getattr(r, 'dtype', None))\n"
        "except (BufferError, TypeError) as e:\n"
        "    print('RAISED', type(e).__name__, e)\n"
    )
    p = in_subprocess(code)
    assert p.returncode == 0, f"the interpreter died (rc {p.returncode}): {p.stderr[-2000:]}"
    assert "RAISED" in p.stdout, p.stdout
    assert "lattn.astype" in p.stdout and dtype in p.stdout


def test_cache_data_of_bf16_cache_to_numpy_raises():
    cache = lattn.LatentCache.empty(2, 4, 64, 16)
    with pytest.raises((BufferError, TypeError), match="lattn.astype"):
        np.asarray(cache.data)
    # and the documented way works
    assert np.asarray(lattn.astype(cache.data, "f32")).shape == (2, 4, 80)


def test_buffer_protocol_of_f32_still_zero_copy():
    t = lattn.zeros([2, 3])
    a = np.asarray(t)
    a[1, 2] = 5.0
    assert np.asarray(t)[1, 2] == 5.0
    assert memoryview(t).shape == (2, 3)


# ---- size products --------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [[2**62, 576], [2**40, 2**40], [2**31, 2**31, 2**2]])
def test_empty_with_overflowing_shape_is_value_error(shape):
    with pytest.raises(ValueError, match="does not fit in 64 bits"):
        lattn.empty(shape)


def test_latent_cache_with_overflowing_size_is_value_error():
    with pytest.raises(ValueError, match="does not fit in 64 bits"):
        lattn.LatentCache.empty(2**62, 1024, 512, 64)
    with pytest.raises(ValueError, match="num_blocks"):
        lattn.LatentCache.empty(2**70, 16, 512, 64)
    with pytest.raises(ValueError, match="block_size"):
        lattn.LatentCache.empty(4, 0, 512, 64)


def test_allocation_failure_is_memory_error():
    # 2^60 bytes: representable, but no machine has them.
    with pytest.raises(MemoryError, match="allocation"):
        lattn.empty([2**58], dtype="f32")
    with pytest.raises(MemoryError):
        lattn.LatentCache.empty(2**40, 64, 512, 64)


def test_shape_arguments_are_checked():
    with pytest.raises(ValueError, match="'shape'"):
        lattn.empty([-1, 3])
    with pytest.raises(ValueError, match="'shape'"):
        lattn.empty([2**64])
    with pytest.raises(TypeError, match="'shape'"):
        lattn.empty(["a"])
    with pytest.raises(TypeError, match="'shape'"):
        lattn.empty(1.5)


def test_workspace_size_overflow_is_value_error():
    with pytest.raises(ValueError, match="does not fit in 64 bits"):
        lattn.mla_context_chunk_workspace_size(2**62, 4, 16)


# ---- views keep their storage alive -----------------------------------------------------------


def loaded_layer(seed=0):
    n, lora, p, r, v = DIMS
    attn = lattn.MlaAttention(n, lora, p, r, v, dtype="f32", kv_cache_dtype="f16")
    w = np.random.default_rng(seed).standard_normal((n * (p + v), lora)).astype(np.float32)
    attn.process_weights_after_loading(w)
    return attn, w


def test_weight_views_survive_reloading():
    attn, w = loaded_layer()
    uk_t = np.asarray(attn.W_UK_T)
    uv = np.asarray(attn.W_UV)
    before_uk, before_uv = uk_t.copy(), uv.copy()
    for seed in range(1, 4):  # reload: new storage each time; the old views stay valid
        attn.process_weights_after_loading(w * seed + 1)
        junk = [np.full((1 << 16,), 7.0, np.float32) for _ in range(8)]  # reuse freed memory, if any
        del junk
    np.testing.assert_array_equal(uk_t, before_uk)
    np.testing.assert_array_equal(uv, before_uv)
    # and the layer shows the new weights
    assert not np.array_equal(np.asarray(attn.W_UK_T), before_uk)


def test_weight_view_outlives_the_layer():
    attn, _ = loaded_layer()
    view = attn.W_UV
    expected = np.asarray(view).copy()
    del attn
    np.testing.assert_array_equal(np.asarray(view), expected)


# ---- read-only memory is never written --------------------------------------------------------


def small_step(cache_block_size=4):
    n, lora, p, r, v = DIMS
    rng = np.random.default_rng(1)
    t = 3
    q = rng.standard_normal((t, n, p + r)).astype(np.float32)
    kv = rng.standard_normal((t, lora)).astype(np.float32)
    pe = rng.standard_normal((t, r)).astype(np.float32)
    builder = lattn.MlaMetadataBuilder(block_size=cache_block_size, context_chunk_workspace_size=64)
    md = builder.build([(1, 2, [0]), (1, 0, [1]), (1, 5, [2, 3])])
    return q, kv, pe, md


def test_read_only_out_is_refused_and_unchanged():
    attn, _ = loaded_layer()
    q, kv, pe, md = small_step()
    cache = lattn.LatentCache.empty(4, 4, 64, 16, dtype="f16")
    out = np.full((3, DIMS[0] * DIMS[4]), 9.0, np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="argument 'out' is read-only"):
        attn.forward(q, kv, pe, cache, md, out=out)
    assert (out == 9.0).all()


def test_cache_over_immutable_bytes_is_refused_and_unchanged():
    attn, _ = loaded_layer()
    q, kv, pe, md = small_step()
    raw = bytes(4 * 4 * 80 * 2)
    data = np.frombuffer(raw, dtype=np.float16).reshape(4, 4, 80)
    cache = lattn.LatentCache(data, 64, 16)
    with pytest.raises(ValueError, match="argument 'cache' is read-only"):
        attn.forward(q, kv, pe, cache, md)
    with pytest.raises(ValueError, match="argument 'cache' is read-only"):
        lattn.concat_and_cache_mla(kv.astype(np.float16), pe.astype(np.float16), cache,
                                   np.array([0, 1, 2], np.int64))
    with pytest.raises(ValueError, match="argument 'caches' is read-only"):
        lattn.copy_blocks([cache], np.array([[0, 1]], np.int64))
    assert raw == bytes(len(raw))
    # reading a read-only cache is fine
    dst = np.zeros((2, 80), np.float16)
    lattn.gather_cache(cache, dst, np.array([[0]], np.int32), np.array([0, 2], np.int32), 1)


def test_read_only_outputs_of_ops_are_refused():
    out = np.zeros((2, 3, 8), np.float32)
    lse = np.zeros((3, 2), np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="argument 'output' is read-only"):
        lattn.merge_attn_states(out, out.copy(), lse, out.copy(), lse)
    cache = lattn.LatentCache.empty(2, 4, 64, 16, dtype="f16")
    dst = np.zeros((2, 80), np.float16)
    dst.flags.writeable = False
    with pytest.raises(ValueError, match="argument 'dst' is read-only"):
        lattn.gather_cache(cache, dst, np.array([[0]], np.int32), np.array([0, 2], np.int32), 1)


def test_read_only_flag_travels_through_from_dlpack():
    a = np.zeros((3, 24 * 3), np.float32)
    a.flags.writeable = False
    t = lattn.from_dlpack(a)
    assert t.read_only
    assert memoryview(t).readonly  # the buffer protocol carries the flag on
    assert not np.asarray(t).flags.writeable
    attn, _ = loaded_layer()
    q, kv, pe, md = small_step()
    cache = lattn.LatentCache.empty(4, 4, 64, 16, dtype="f16")
    with pytest.raises(ValueError, match="argument 'out' is read-only"):
        attn.forward(q, kv, pe, cache, md, out=t)


# ---- one layer, several threads ---------------------------------------------------------------


def zero_cache(num_blocks, block_size):
    """A cache whose unwritten context reads as 0 (not whatever empty() memory holds)."""
    _, lora, _, r, _ = DIMS
    return lattn.LatentCache(np.zeros((num_blocks, block_size, lora + r), np.float16), lora, r)


def test_shared_layer_across_threads_is_refused_or_correct():
    """Two threads call forward on one layer, each with its own queries: every
    call either returns that thread's single-threaded result or is refused
    with RuntimeError; none returns a wrong output (before: about 40% of the
    calls of this test did, the threads sharing the layer's scratch)."""
    n, lora, p, r, v = DIMS
    attn, _ = loaded_layer()
    rng = np.random.default_rng(3)
    block_size = 16
    # decodes with context, a chunked prefill with context, a fresh prefill
    requests = [(1, 50, [0, 1, 2, 3]), (1, 30, [4, 5]), (120, 40, list(range(6, 17))), (100, 0, list(range(17, 24)))]
    t = sum(q for q, _, _ in requests)
    md = lattn.MlaMetadataBuilder(block_size=block_size, context_chunk_workspace_size=64).build(requests)
    kv = rng.standard_normal((t, lora)).astype(np.float32)
    pe = rng.standard_normal((t, r)).astype(np.float32)
    cache = zero_cache(24, block_size)
    queries = [rng.standard_normal((t, n, p + r)).astype(np.float32) for _ in range(2)]
    expected = [np.asarray(attn.forward(q, kv, pe, cache, md)).copy() for q in queries]

    results = {"ok": 0, "refused": 0, "wrong": 0}
    lock = threading.Lock()
    start = threading.Barrier(2)

    def worker(i):
        start.wait()
        for _ in range(30):
            try:
                out = np.asarray(attn.forward(queries[i], kv, pe, cache, md))
                kind = "ok" if np.allclose(out, expected[i], rtol=1e-5, atol=1e-6) else "wrong"
            except RuntimeError as e:
                assert "another thread" in str(e)
                kind = "refused"
            with lock:
                results[kind] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results["wrong"] == 0, results
    assert results["ok"] > 0, results


def test_separate_layers_on_threads_agree():
    """Two layers on two threads at once (each its own cache and queries)
    give their single-threaded outputs on every call (before: OpenBLAS's
    process-wide thread count, changed by one layer mid-GEMM of the other,
    could corrupt some of them)."""
    n, lora, p, r, v = DIMS
    layers = [loaded_layer()[0] for _ in range(2)]
    rng = np.random.default_rng(4)
    block_size = 16
    requests = [(1, 50, [0, 1, 2, 3]), (120, 40, list(range(4, 15))), (100, 0, list(range(15, 22)))]
    t = sum(q for q, _, _ in requests)
    md = lattn.MlaMetadataBuilder(block_size=block_size, context_chunk_workspace_size=64).build(requests)
    kv = rng.standard_normal((t, lora)).astype(np.float32)
    pe = rng.standard_normal((t, r)).astype(np.float32)
    caches = [zero_cache(22, block_size) for _ in range(2)]
    queries = [rng.standard_normal((t, n, p + r)).astype(np.float32) for _ in range(2)]
    expected = [np.asarray(layers[i].forward(queries[i], kv, pe, caches[i], md)).copy() for i in range(2)]
    wrong = [0, 0]
    start = threading.Barrier(2)

    def run(i):
        start.wait()
        for _ in range(30):
            out = np.asarray(layers[i].forward(queries[i], kv, pe, caches[i], md))
            wrong[i] += not np.allclose(out, expected[i], rtol=1e-5, atol=1e-6)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert wrong == [0, 0]


# ---- errors name the argument, not C++ internals ----------------------------------------------


def test_forward_with_wrong_metadata_type_is_type_error():
    attn, _ = loaded_layer()
    q, kv, pe, md = small_step()
    cache = lattn.LatentCache.empty(4, 4, 64, 16, dtype="f16")
    with pytest.raises(TypeError, match="argument 'metadata' must be a lattn.MlaMetadata or lattn.DcpDecodePlan, got <class 'int'>"):
        attn.forward(q, kv, pe, cache, 3)
    with pytest.raises(TypeError, match="argument 'cache' must be a lattn.LatentCache"):
        attn.forward(q, kv, pe, np.zeros((4, 4, 80), np.float16), md)


def test_metadata_builder_request_errors_name_the_request():
    builder = lattn.MlaMetadataBuilder(block_size=4, context_chunk_workspace_size=64)
    with pytest.raises(ValueError, match=r"requests\[0\]' must have 3 items"):
        builder.build([(1, 0)])
    with pytest.raises(ValueError, match=r"requests\[1\]\[2\] \(block_table\)\[0\]' must be in"):
        builder.build([(1, 0, [0]), (1, 0, [2**31])])
    with pytest.raises(TypeError, match=r"requests\[0\]' must be a lattn.RequestSpec"):
        builder.build([5])
    with pytest.raises(TypeError, match="argument 'requests'"):
        builder.build(7)
    with pytest.raises(ValueError, match="query_len"):
        lattn.RequestSpec(2**40)


def test_errors_do_not_dump_arrays():
    big = np.arange(100000, dtype=np.float32)
    cache = lattn.LatentCache.empty(4, 4, 64, 16, dtype="f16")
    calls = [
        lambda: lattn.gather_cache(big, big, big, big, 1),
        lambda: lattn.gather_cache(cache, big, big, big, big),
        lambda: lattn.swap_blocks(big, cache, big),
        lambda: lattn.copy_blocks(big, big),
        lambda: lattn.LatentCache(big, big, 16),
    ]
    for call in calls:
        with pytest.raises((TypeError, ValueError)) as info:
            call()
        message = str(info.value)
        assert len(message) < 400, message[:400]
        assert "Unable to cast" not in message and "incompatible function arguments" not in message


# ---- device-resident indices (GPU; skips without one) ----------------------------------------


def test_device_slot_past_the_cache_is_value_error_on_gpu(monkeypatch):
    from conftest import cuda_torch_or_skip

    torch = cuda_torch_or_skip()
    monkeypatch.setenv("LATTN_CHECK_INDICES", "1")
    data = torch.zeros((6, 4, 80), dtype=torch.bfloat16, device="cuda")
    cache = lattn.LatentCache(data[1:5], 64, 16)  # blocks 0 and 5 of data are guards
    kv = torch.ones((3, 64), dtype=torch.bfloat16, device="cuda")
    pe = torch.ones((3, 16), dtype=torch.bfloat16, device="cuda")
    slots = torch.tensor([0, 16, 10**9], dtype=torch.int64, device="cuda")  # 16 slots in the cache
    with pytest.raises(ValueError, match="argument 'slot_mapping' must hold slots < num_blocks \\* block_size = 16"):
        lattn.concat_and_cache_mla(kv, pe, cache, slots)
    torch.cuda.synchronize()
    assert not data[0].any() and not data[5].any()


def test_device_block_id_outside_the_cache_is_value_error_on_gpu(monkeypatch):
    from conftest import cuda_torch_or_skip

    torch = cuda_torch_or_skip()
    monkeypatch.setenv("LATTN_CHECK_INDICES", "1")
    cache = lattn.LatentCache(torch.zeros((4, 4, 80), dtype=torch.bfloat16, device="cuda"), 64, 16)
    dst = torch.zeros((8, 80), dtype=torch.bfloat16, device="cuda")
    table = torch.tensor([[1, 7]], dtype=torch.int32, device="cuda")
    cu = torch.tensor([0, 8], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="argument 'block_table' must hold block ids in \\[0, num_blocks = 4\\)"):
        lattn.gather_cache(cache, dst, table, cu, 1)
