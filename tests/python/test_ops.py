"""The latent cache and its ops from Python (docs/mla.md; the worked examples of docs/metadata.md)."""

import numpy as np
import pytest

import lattn


def f16_cache(num_blocks, block_size, lora, rope):
    data = np.full((num_blocks, block_size, lora + rope), np.nan, dtype=np.float16)  # poisoned
    return data, lattn.LatentCache(data, lora, rope)


def test_cache_is_a_view_of_the_callers_array():
    data, cache = f16_cache(3, 4, 2, 1)
    assert cache.data.data_ptr == data.ctypes.data
    assert (cache.num_blocks, cache.block_size, cache.dtype, cache.device) == (3, 4, "f16", "cpu")
    assert lattn.get_kv_cache_shape(10, 16, 1, 576) == (10, 16, 576)


def test_tv_cache_w():
    data, cache = f16_cache(2, 4, 2, 1)
    kv_c = np.array([[1, 2], [3, 4], [5, 6]], dtype=np.float16)
    k_pe = np.array([[7], [8], [9]], dtype=np.float16)
    lattn.concat_and_cache_mla(kv_c, k_pe, cache, np.array([5, -1, 0], dtype=np.int64))
    assert data[1, 1].tolist() == [1, 2, 7]
    assert data[0, 0].tolist() == [5, 6, 9]
    written = np.zeros(data.shape[:2], dtype=bool)
    written[1, 1] = written[0, 0] = True
    assert np.isnan(data[~written]).all()  # nothing else changed (token 1 was skipped)
    lattn.concat_and_cache_mla(kv_c, k_pe[:, None, :], cache, np.array([1, -1, -1], dtype=np.int64))  # [T, 1, R]
    assert data[0, 1].tolist() == [1, 2, 7]


def test_concat_refuses_a_slot_past_the_cache_and_writes_nothing():
    data, cache = f16_cache(2, 4, 2, 1)
    with pytest.raises(ValueError, match="slot_mapping"):
        lattn.concat_and_cache_mla(np.ones((2, 2), np.float16), np.ones((2, 1), np.float16), cache,
                                   np.array([0, 8], dtype=np.int64))
    assert np.isnan(data).all()


def test_tv_cache_g():
    data, cache = f16_cache(10, 4, 2, 1)
    data[...] = np.arange(data.size, dtype=np.float16).reshape(data.shape)
    dst = np.full((8, 3), -1, dtype=np.float16)
    lattn.gather_cache(cache, dst, np.array([[7, 3, 9]], np.int32), np.array([0, 6], np.int32), 1,
                       np.array([4], np.int32))
    np.testing.assert_array_equal(dst[:6], np.concatenate([data[3, 0:4], data[9, 0:2]]))
    assert (dst[6:] == -1).all()  # rows past cu_seq_lens[batch_size] untouched


def test_fp8_cache_round_trip_with_scale():
    raw = np.zeros((2, 4, 3), dtype=np.uint8)
    cache = lattn.LatentCache(raw, 2, 1, scale=0.5, dtype="fp8_e4m3")
    assert cache.dtype == "fp8_e4m3" and cache.scale == 0.5
    x = np.array([[0.3, -1.7], [100.0, 500.0]], dtype=np.float32)
    pe = np.array([[2.2], [-0.01]], dtype=np.float32)
    lattn.concat_and_cache_mla(x, pe, cache, np.array([0, 1], np.int64))
    dst = np.zeros((2, 3), np.float32)
    lattn.gather_cache(cache, dst, np.array([[0, 1]], np.int32), np.array([0, 2], np.int32), 1)
    # stored = fp8(x / scale) (saturating at 448), read = stored * scale
    entries = np.concatenate([x, pe], axis=1) / 0.5
    expected = lattn.astype(lattn.astype(entries.astype(np.float32), "fp8_e4m3"), "f32").numpy() * 0.5
    np.testing.assert_array_equal(dst, expected)
    assert dst[1, 1] == 224.0  # 500 / 0.5 = 1000 saturates to 448


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_tv_merge(dtype):
    out = np.zeros((3, 1, 2), dtype=dtype)
    out_lse = np.zeros((1, 3), np.float32)
    prefix = np.array([[[1, 2]], [[1, 2]], [[1, 2]]], dtype=dtype)
    suffix = np.array([[[5, -2]], [[5, -2]], [[5, -2]]], dtype=dtype)
    prefix_lse = np.array([[0.0, np.inf, -np.inf]], np.float32)
    suffix_lse = np.array([[np.log(3), 0.5, -np.inf]], np.float32)
    lattn.merge_attn_states(out, prefix, prefix_lse, suffix, suffix_lse, output_lse=out_lse)
    np.testing.assert_allclose(out[0, 0], [4.0, -1.0], rtol=1e-3)
    np.testing.assert_allclose(out_lse[0, 0], np.log(4), rtol=1e-6)
    np.testing.assert_array_equal(out[1, 0], [5, -2])  # +inf prefix (FA2's empty row) reads as -inf
    assert out_lse[0, 1] == pytest.approx(0.5)
    assert out[2, 0].tolist() == [0, 0] and out_lse[0, 2] == -np.inf  # both empty: 0 and -inf


def test_copy_blocks_in_every_cache():
    caches = [f16_cache(4, 2, 2, 1) for _ in range(2)]
    for i, (data, _) in enumerate(caches):
        data[...] = np.arange(data.size).reshape(data.shape) + 100 * i
    before = [d.copy() for d, _ in caches]
    lattn.copy_blocks([c for _, c in caches], np.array([[0, 2], [1, 3]], np.int64))
    for (data, _), old in zip(caches, before):
        np.testing.assert_array_equal(data[2], old[0])
        np.testing.assert_array_equal(data[3], old[1])
        np.testing.assert_array_equal(data[:2], old[:2])


def test_swap_blocks_host_to_host():
    src, src_cache = f16_cache(3, 2, 2, 1)
    dst, dst_cache = f16_cache(3, 2, 2, 1)
    src[...] = np.arange(src.size).reshape(src.shape)
    lattn.swap_blocks(src_cache, dst_cache, np.array([[2, 0]], np.int64))
    np.testing.assert_array_equal(dst[0], src[2])
    assert np.isnan(dst[1:]).all()


def test_owned_cache():
    cache = lattn.LatentCache.empty(4, 16, 8, 4, dtype="bf16")
    assert cache.data.shape == (4, 16, 12) and cache.dtype == "bf16"
    with pytest.raises(ValueError, match="LatentCache"):
        lattn.LatentCache(np.zeros((2, 4, 5), np.float16), 2, 1)  # entry width 5 != 2 + 1
