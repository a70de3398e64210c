"""Hostile arguments to the functional API (mla_decode_plan, mla_decode,
mla_prefill, sparse_mla, the indexer), the MlaAttention constructor, and
DLPack 1.0's read-only flag.

Before the fixes these gave pybind11's "incompatible function arguments"
dump (every argument printed, whole arrays included) or "Unable to cast
Python instance", and out= / lse= arrays marked read-only were written. Now
every refusal is a TypeError or ValueError that names the argument and what
it must be (docs/reliability.md, "No interpreter crash").
"""

import ctypes

import numpy as np
import pytest

import lattn

BIG = np.arange(100000, dtype=np.float32)  # printed whole, it would make a message of ~1 MB
ATTN_DIMS = (2, 64, 16, 8, 16)  # MlaAttention's N, L, P, R, V: a small layer


def decode_inputs():
    rng = np.random.default_rng(3)
    n, lora, rope, bs = 2, 32, 8, 4
    table = np.array([[1, 0]], np.int32)
    lens = np.array([6], np.int32)
    cache = rng.standard_normal((2, bs, lora + rope)).astype(np.float16)
    q = rng.standard_normal((1, n, lora + rope)).astype(np.float32)
    plan = lattn.mla_decode_plan(table, lens, bs, n, kv_lora_rank=lora, qk_rope_head_dim=rope, dtype="f32",
                                 kv_cache_dtype="f16")
    return q, cache, plan, table, lens


def prefill_inputs():
    rng = np.random.default_rng(4)
    q = rng.standard_normal((5, 2, 48)).astype(np.float32)
    k = rng.standard_normal((5, 2, 48)).astype(np.float32)
    v = rng.standard_normal((5, 2, 32)).astype(np.float32)
    cu = np.array([0, 2, 5], np.int32)
    return q, k, v, cu


def sparse_inputs():
    cache = lattn.LatentCache(np.zeros((2, 4, 72), np.float16), 64, 8)
    q = np.zeros((1, 2, 72), np.float16)
    idx = np.array([[0, 1]], np.int32)
    return q, cache, idx


def indexer_inputs():
    keys = lattn.IndexerKeyCache.empty(2, 4, 16)
    q = np.zeros((1, 2, 16), np.float32)
    w = np.ones((1, 2), np.float32)
    return q, w, keys, np.array([[0, 1]], np.int32), np.array([0, 1], np.int32), np.array([3], np.int32)


def calls():
    q, cache, plan, table, lens = decode_inputs()
    pq, pk, pv, cu = prefill_inputs()
    sq, scache, sidx = sparse_inputs()
    iq, iw, keys, itable, iqsl, ilens = indexer_inputs()
    plan_args = (table, lens, 4, 2)
    return [
        # (what, call, exception, the message must match)
        ("decode scale str", lambda: lattn.mla_decode(q, cache, plan, "0.1"), TypeError,
         r"mla_decode: argument 'scale' must be a float, got <class 'str'>"),
        ("decode scale array", lambda: lattn.mla_decode(q, cache, plan, BIG), TypeError,
         r"argument 'scale' must be a float, got <class 'numpy.ndarray'>"),
        ("decode scale nan", lambda: lattn.mla_decode(q, cache, plan, float("nan")), ValueError,
         r"argument 'scale' must be finite"),
        ("decode return_lse", lambda: lattn.mla_decode(q, cache, plan, 0.1, None, "yes"), TypeError,
         r"argument 'return_lse' must be a bool"),
        ("decode backend", lambda: lattn.mla_decode(q, cache, plan, 0.1, backend=BIG), TypeError,
         r"argument 'backend' must be a str"),
        ("decode stream", lambda: lattn.mla_decode(q, cache, plan, 0.1, stream="s0"), TypeError,
         r"mla_decode: argument 'stream' must be an int"),
        ("plan block_size str", lambda: lattn.mla_decode_plan(table, lens, "4", 2), TypeError,
         r"mla_decode_plan: argument 'block_size' must be an int"),
        ("plan block_size 0", lambda: lattn.mla_decode_plan(table, lens, 0, 2), ValueError,
         r"argument 'block_size' must be in \[1, 2147483647\], got 0"),
        ("plan num_heads 2**40", lambda: lattn.mla_decode_plan(table, lens, 4, 2**40), ValueError,
         r"argument 'num_heads' must be in \[1, 2147483647\], got 1099511627776"),
        ("plan num_heads array", lambda: lattn.mla_decode_plan(table, lens, 4, BIG), TypeError,
         r"argument 'num_heads' must be an int"),
        ("plan query_len float", lambda: lattn.mla_decode_plan(*plan_args, query_len=1.5), TypeError,
         r"argument 'query_len' must be an int"),
        ("plan num_threads", lambda: lattn.mla_decode_plan(*plan_args, num_threads=-1), ValueError,
         r"argument 'num_threads' must be in \[0, "),
        ("plan dtype array", lambda: lattn.mla_decode_plan(*plan_args, dtype=BIG), TypeError,
         r"dtype must be a dtype name"),
        ("plan device int", lambda: lattn.mla_decode_plan(*plan_args, device=3), TypeError,
         r"device must be a str"),
        ("plan backend", lambda: lattn.mla_decode_plan(*plan_args, backend=None), TypeError,
         r"argument 'backend' must be a str, got <class 'NoneType'>"),
        ("prefill causal", lambda: lattn.mla_prefill(pq, pk, pv, cu, cu, "yes", 0.1), TypeError,
         r"mla_prefill: argument 'causal' must be a bool"),
        ("prefill scale array", lambda: lattn.mla_prefill(pq, pk, pv, cu, cu, True, BIG), TypeError,
         r"argument 'scale' must be a float"),
        ("prefill scale inf", lambda: lattn.mla_prefill(pq, pk, pv, cu, cu, True, float("inf")), ValueError,
         r"argument 'scale' must be finite"),
        ("prefill kv_lora_rank", lambda: lattn.mla_prefill(pq, pk, pv, cu, cu, True, 0.1, kv_lora_rank=2**33),
         ValueError, r"argument 'kv_lora_rank' must be in \[1, 2147483647\]"),
        ("prefill rope str", lambda: lattn.mla_prefill(pq, pk, pv, cu, cu, True, 0.1, qk_rope_head_dim="16"),
         TypeError, r"argument 'qk_rope_head_dim' must be an int"),
        ("prefill_backend_for", lambda: lattn.mla_prefill_backend_for("f32", "192", 128), TypeError,
         r"mla_prefill_backend_for: argument 'qk_head_dim' must be an int"),
        ("sparse cache array", lambda: lattn.sparse_mla(sq, BIG, sidx, 0.1), TypeError,
         r"sparse_mla: argument 'cache' must be a lattn.LatentCache, got <class 'numpy.ndarray'>"),
        ("sparse scale", lambda: lattn.sparse_mla(sq, scache, sidx, "0.1"), TypeError,
         r"sparse_mla: argument 'scale' must be a float"),
        ("sparse backend", lambda: lattn.sparse_mla(sq, scache, sidx, 0.1, backend=1), TypeError,
         r"argument 'backend' must be a str"),
        ("topk 2**40", lambda: lattn.indexer_topk(iq, iw, keys, itable, iqsl, ilens, 2**40), ValueError,
         r"indexer_topk: argument 'topk' must be in \[1, 2147483647\]"),
        ("topk str", lambda: lattn.indexer_topk(iq, iw, keys, itable, iqsl, ilens, "8"), TypeError,
         r"argument 'topk' must be an int"),
        ("topk cache", lambda: lattn.indexer_topk(iq, iw, 3, itable, iqsl, ilens, 8), TypeError,
         r"indexer_topk: argument 'cache' must be a lattn.IndexerKeyCache, got <class 'int'>"),
        ("logits cache", lambda: lattn.indexer_logits(iq, iw, None, itable, iqsl, ilens, np.zeros((1, 3))),
         TypeError, r"indexer_logits: argument 'cache' must be a lattn.IndexerKeyCache"),
        ("k_cache_write cache", lambda: lattn.indexer_k_cache_write(np.zeros((1, 16), np.float32), BIG,
                                                                    np.zeros(1, np.int64)),
         TypeError, r"indexer_k_cache_write: argument 'cache' must be a lattn.IndexerKeyCache"),
        ("IndexerKeyCache num_blocks", lambda: lattn.IndexerKeyCache.empty(2**70, 4), ValueError,
         r"IndexerKeyCache.empty: argument 'num_blocks' must be in \[0, "),
        ("IndexerKeyCache head_dim", lambda: lattn.IndexerKeyCache.empty(2, 4, "128"), TypeError,
         r"argument 'head_dim' must be an int"),
        ("fp8_ds_mla_entry_bytes", lambda: lattn.fp8_ds_mla_entry_bytes("512", 64), TypeError,
         r"fp8_ds_mla_entry_bytes: argument 'kv_lora_rank' must be an int"),
        ("builder block_size", lambda: lattn.MlaMetadataBuilder(block_size="16"), TypeError,
         r"MlaMetadataBuilder: argument 'block_size' must be an int"),
        ("builder workspace", lambda: lattn.MlaMetadataBuilder(context_chunk_workspace_size=2**70), ValueError,
         r"argument 'context_chunk_workspace_size' must be in"),
        ("builder batch_invariant", lambda: lattn.MlaMetadataBuilder(batch_invariant=BIG), TypeError,
         r"argument 'batch_invariant' must be a bool"),
        ("builder cudagraph", lambda: lattn.MlaMetadataBuilder(cudagraph=4), TypeError,
         r"argument 'cudagraph' must be a lattn.CudaGraphConfig"),
        ("build is_profile_run", lambda: lattn.MlaMetadataBuilder(context_chunk_workspace_size=64).build(
            [(1, 0, [0])], is_profile_run="no"), TypeError, r"MlaMetadataBuilder.build: argument 'is_profile_run'"),
        ("LatentCache scale", lambda: lattn.LatentCache(np.zeros((2, 4, 72), np.float16), 64, 8, "1"), TypeError,
         r"LatentCache: argument 'scale' must be a float"),
        ("LatentCache.empty scale", lambda: lattn.LatentCache.empty(2, 4, 64, 8, scale=BIG), TypeError,
         r"LatentCache.empty: argument 'scale' must be a float"),
        ("get_kv_cache_shape", lambda: lattn.get_kv_cache_shape(4, "16", 1, 576), TypeError,
         r"get_kv_cache_shape: argument 'block_size' must be an int"),
        ("MlaDims", lambda: lattn.MlaDims(16, 512, 128, 64, BIG), TypeError,
         r"MlaDims: argument 'v_head_dim' must be an int"),
        ("padded_batch_size", lambda: lattn.MlaMetadataBuilder(context_chunk_workspace_size=64).padded_batch_size(
            BIG), TypeError, r"padded_batch_size: argument 'num_reqs' must be an int"),
        ("MlaAttention num_heads str", lambda: lattn.MlaAttention("2", *ATTN_DIMS[1:]), TypeError,
         r"MlaAttention: argument 'num_heads' must be an int in \[-2147483648, 2147483647\], got <class 'str'>"),
        ("MlaAttention v_head_dim array", lambda: lattn.MlaAttention(*ATTN_DIMS[:4], BIG), TypeError,
         r"MlaAttention: argument 'v_head_dim' must be an int"),
        ("MlaAttention kv_lora_rank 2**40", lambda: lattn.MlaAttention(2, 2**40, 16, 8, 16), ValueError,
         r"MlaAttention: argument 'kv_lora_rank' must be in \[-2147483648, 2147483647\], got 1099511627776"),
        ("MlaAttention scale str", lambda: lattn.MlaAttention(*ATTN_DIMS, scale="0.1"), TypeError,
         r"MlaAttention: argument 'scale' must be a float, got <class 'str'>"),
        ("MlaAttention scale array", lambda: lattn.MlaAttention(*ATTN_DIMS, scale=BIG), TypeError,
         r"MlaAttention: argument 'scale' must be a float, got <class 'numpy.ndarray'>"),
        ("MlaAttention scale nan", lambda: lattn.MlaAttention(*ATTN_DIMS, scale=float("nan")), ValueError,
         r"MlaAttention: argument 'scale' must be finite"),
        ("MlaAttention stream str", lambda: lattn.MlaAttention(*ATTN_DIMS, stream="x"), TypeError,
         r"MlaAttention: argument 'stream' must be an int in \[0, 9223372036854775807\], got <class 'str'>"),
        ("MlaAttention stream -1", lambda: lattn.MlaAttention(*ATTN_DIMS, stream=-1), ValueError,
         r"MlaAttention: argument 'stream' must be in \[0, "),
        ("MlaAttention block_size float", lambda: lattn.MlaAttention(*ATTN_DIMS, block_size=16.0), TypeError,
         r"MlaAttention: argument 'block_size' must be an int"),
        ("MlaAttention max_query_tokens bool", lambda: lattn.MlaAttention(*ATTN_DIMS, max_query_tokens_per_request=True),
         TypeError, r"MlaAttention: argument 'max_query_tokens_per_request' must be an int"),
        ("MlaAttention batch_invariant str", lambda: lattn.MlaAttention(*ATTN_DIMS, batch_invariant="yes"), TypeError,
         r"MlaAttention: argument 'batch_invariant' must be a bool, got <class 'str'>"),
        ("MlaAttention prefill_backend int", lambda: lattn.MlaAttention(*ATTN_DIMS, prefill_backend=3), TypeError,
         r"MlaAttention: argument 'prefill_backend' must be a str, got <class 'int'>"),
        ("MlaAttention decode_backend None", lambda: lattn.MlaAttention(*ATTN_DIMS, decode_backend=None), TypeError,
         r"MlaAttention: argument 'decode_backend' must be a str, got <class 'NoneType'>"),
        ("MlaAttention kv_sharing int", lambda: lattn.MlaAttention(*ATTN_DIMS, kv_sharing_target_layer_name=5),
         TypeError, r"MlaAttention: argument 'kv_sharing_target_layer_name' must be a str"),
        ("MlaAttention index_topk array", lambda: lattn.MlaAttention(*ATTN_DIMS, index_topk=BIG), TypeError,
         r"MlaAttention: argument 'index_topk' must be an int"),
        ("MlaAttention index_n_heads str", lambda: lattn.MlaAttention(*ATTN_DIMS, index_n_heads="64"), TypeError,
         r"MlaAttention: argument 'index_n_heads' must be an int"),
        ("MlaAttention index_head_dim float", lambda: lattn.MlaAttention(*ATTN_DIMS, index_head_dim=1.5), TypeError,
         r"MlaAttention: argument 'index_head_dim' must be an int"),
        ("MlaAttention sparse_backend", lambda: lattn.MlaAttention(*ATTN_DIMS, sparse_backend=BIG), TypeError,
         r"MlaAttention: argument 'sparse_backend' must be a str"),
        ("MlaAttention indexer_backend", lambda: lattn.MlaAttention(*ATTN_DIMS, indexer_backend=b"cpu"), TypeError,
         r"MlaAttention: argument 'indexer_backend' must be a str, got <class 'bytes'>"),
    ]


@pytest.mark.parametrize("index", range(len(calls())))
def test_wrong_argument_types_and_ranges_name_the_argument(index):
    what, call, kind, pattern = calls()[index]
    with pytest.raises(kind, match=pattern) as info:
        call()
    message = str(info.value)
    assert len(message) < 400, f"{what}: {message[:400]}"
    assert "Unable to cast" not in message and "incompatible function arguments" not in message, what


class BadDevice:
    """A producer whose __dlpack_device__ answers nonsense."""

    def __dlpack__(self, stream=None):
        raise AssertionError("not reached")

    def __dlpack_device__(self):
        return "cpu"


def test_other_casts_are_type_errors_not_cast_errors():
    with pytest.raises(TypeError, match=r"__dlpack_device__\(\) must return a \(device_type, device_id\) pair"):
        lattn.from_dlpack(BadDevice())
    md = lattn.MlaMetadataBuilder(context_chunk_workspace_size=64).build([(1, 0, [0])])
    with pytest.raises(TypeError, match="MlaMetadata.to_device: argument 'stream' must be an int"):
        md.to_device("cpu", stream="default")
    config = lattn.SelectorConfig.for_dims(lattn.MlaDims.deepseek_v3(16), "bf16")
    with pytest.raises(TypeError, match="argument 'capability' must be a lattn.DeviceCapability"):
        lattn.get_mla_prefill_backend(config, capability=(9, 0))


def test_read_only_out_and_lse_of_the_functional_api_are_refused_and_unchanged():
    q, cache, plan, _, _ = decode_inputs()
    out = np.full((1, 2, 32), 7.0, np.float32)
    lse = np.full((2, 1), 7.0, np.float32)
    for ro in (out, lse):
        ro.flags.writeable = False
    with pytest.raises(ValueError, match="mla_decode: argument 'out' is read-only"):
        lattn.mla_decode(q, cache, plan, 0.1, out)
    with pytest.raises(ValueError, match="mla_decode: argument 'lse' is read-only"):
        lattn.mla_decode(q, cache, plan, 0.1, out.copy(), lse=lse)
    pq, pk, pv, cu = prefill_inputs()
    pout = np.full((5, 2, 32), 7.0, np.float32)
    pout.flags.writeable = False
    with pytest.raises(ValueError, match="mla_prefill: argument 'out' is read-only"):
        lattn.mla_prefill(pq, pk, pv, cu, cu, True, 0.1, out=pout)
    sq, scache, sidx = sparse_inputs()
    sout = np.full((1, 2, 64), 7.0, np.float16)
    sout.flags.writeable = False
    with pytest.raises(ValueError, match="sparse_mla: argument 'out' is read-only"):
        lattn.sparse_mla(sq, scache, sidx, 0.1, out=sout)
    for a in (out, lse, pout):
        assert (a == 7.0).all()
    assert (sout == 7.0).all()
    # The same arrays, writable, are written.
    w = out.copy()
    lattn.mla_decode(q, cache, plan, 0.1, w)
    assert not (w == 7.0).all()


# ---- DLPack 1.0: versioned capsules and their read-only flag ---------------------------------
# Debian's NumPy (1.x) only makes DLPack 0.6 capsules, so the producer here is
# built by hand with ctypes: the structs of DLPack 1.0 (dlpack.h).


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


READ_ONLY = 1 << 0  # DLPACK_FLAG_BITMASK_READ_ONLY
CAPSULE_NAME = b"dltensor_versioned"  # must outlive the capsules
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class VersionedProducer:
    """A float32 NumPy array exported only as a DLPack 1.x capsule (as NumPy 2
    and recent PyTorch do when asked with max_version), read-only or not.
    Counts the exports and the deleter calls."""

    def __init__(self, array, read_only, major=1):
        assert array.dtype == np.float32
        self.array, self.read_only, self.major = array, read_only, major
        self.exports, self.deleted, self.asked = 0, 0, []
        self._keep = []
        self._deleter = DELETER(self._delete)

    def _delete(self, _):
        self.deleted += 1

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU

    def __dlpack__(self, stream=None, max_version=None):
        self.asked.append(max_version)
        if max_version is None or max_version[0] < 1:
            raise BufferError("this producer only exports DLPack 1.x")
        a = self.array
        shape = (ctypes.c_int64 * a.ndim)(*a.shape)
        strides = (ctypes.c_int64 * a.ndim)(*(s // a.itemsize for s in a.strides))
        m = DLManagedTensorVersioned()
        m.version = DLPackVersion(self.major, 0)
        m.deleter = self._deleter
        m.flags = READ_ONLY if self.read_only else 0
        m.dl_tensor = DLTensor(a.ctypes.data, DLDevice(1, 0), a.ndim, DLDataType(2, 32, 1), shape, strides, 0)
        self._keep.append((m, shape, strides))
        self.exports += 1
        return _capsule_new(ctypes.addressof(m), CAPSULE_NAME, None)


def merge_inputs():
    rng = np.random.default_rng(9)
    p, s = (rng.standard_normal((2, 3, 8)).astype(np.float32) for _ in range(2))
    pl, sl = (rng.standard_normal((3, 2)).astype(np.float32) for _ in range(2))
    return p, pl, s, sl


def test_versioned_capsule_read_only_output_is_refused_and_unchanged():
    p, pl, s, sl = merge_inputs()
    target = np.full((2, 3, 8), 5.0, np.float32)
    producer = VersionedProducer(target, read_only=True)
    with pytest.raises(ValueError, match="merge_attn_states: argument 'output' is read-only"):
        lattn.merge_attn_states(producer, p, pl, s, sl)
    assert (target == 5.0).all()
    assert producer.asked[0] == (1, 0)
    assert producer.deleted == producer.exports == 1  # the consumed export was released
    assert lattn.from_dlpack(producer).read_only


def test_versioned_capsule_inputs_are_read_and_writable_output_is_written():
    p, pl, s, sl = merge_inputs()
    want = np.zeros_like(p)
    lattn.merge_attn_states(want, p, pl, s, sl)
    out = np.zeros_like(p)
    inputs = [VersionedProducer(a, read_only=True) for a in (p, pl, s, sl)]
    writable = VersionedProducer(out, read_only=False)
    lattn.merge_attn_states(writable, *inputs)
    assert np.array_equal(out, want)
    assert all(x.deleted == x.exports == 1 for x in inputs + [writable])
    assert not lattn.from_dlpack(writable).read_only


def test_versioned_capsule_of_an_unknown_major_version_is_refused():
    producer = VersionedProducer(np.zeros((2, 3), np.float32), read_only=False, major=2)
    with pytest.raises(ValueError, match=r"returned DLPack 2\.0; lattn reads DLPack 1\.x"):
        lattn.from_dlpack(producer)
    assert producer.deleted == 1


def test_unversioned_producers_still_work():
    # NumPy 1.x's __dlpack__ has no max_version: lattn asks again the 0.6 way.
    p, pl, s, sl = merge_inputs()
    out = np.zeros_like(p)
    lattn.merge_attn_states(out, p, pl, s, sl)
    assert np.isfinite(out).all() and not (out == 0).all()


def test_mla_attention_takes_numpy_scalars_and_states_its_signature():
    # Anything with __index__ / __float__ / numpy.bool_ converts as before the by-name conversion.
    attn = lattn.MlaAttention(np.int64(2), np.int32(64), 16, 8, 16, scale=np.float32(0.25), block_size=np.int64(4),
                              batch_invariant=np.bool_(True), stream=None, kv_sharing_target_layer_name=None)
    assert attn.dims.num_heads == 2 and attn.dims.kv_lora_rank == 64
    assert attn.scale == 0.25
    # The signature the docstring (and so the stubs) state, not pybind11's "handle".
    first = lattn.MlaAttention.__init__.__doc__.strip().splitlines()[0]
    assert first.startswith("__init__(self: MlaAttention, num_heads: int, kv_lora_rank: int,"), first
    assert "stream: int | None = None" in first and "batch_invariant: bool = False" in first, first
    assert "handle" not in first, first
