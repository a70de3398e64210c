"""The metadata builder and its views from Python (the worked examples of docs/metadata.md)."""

import numpy as np
import pytest

import lattn


def req(query_len, context_len, block_size=16, first_block=0):
    blocks = -(-(query_len + context_len) // block_size)
    return (query_len, context_len, list(range(first_block, first_block + blocks)))


def host(t):
    return np.from_dlpack(t)


def test_tv_chunk_1_full_vector():
    builder = lattn.MlaMetadataBuilder(block_size=16, context_chunk_workspace_size=1024)
    md = builder.build([req(2, 700), req(2, 256), req(2, 100), req(2, 513)])
    p = md.prefill
    assert (md.num_prefills, md.num_decodes, p.num_chunks) == (4, 0, 3)
    np.testing.assert_array_equal(
        host(p.chunk_cu_seq_lens_cpu), [[0, 256, 512, 612, 868], [0, 256, 256, 256, 512], [0, 188, 188, 188, 189]]
    )
    np.testing.assert_array_equal(host(p.chunk_starts_cpu), [[0] * 4, [256] * 4, [512] * 4])
    assert p.chunk_max_seq_lens == [256, 256, 188] and p.chunk_seq_tot == [868, 512, 189]


def test_decodes_first_views():
    builder = lattn.MlaMetadataBuilder(block_size=4, context_chunk_workspace_size=64)
    md = builder.build([lattn.RequestSpec(1, 5, [3, 1]), req(1, 9, 4, 5), req(5, 0, 4, 9)])
    assert (md.num_decodes, md.num_prefills, md.num_decode_tokens, md.num_prefill_tokens) == (2, 1, 2, 5)
    np.testing.assert_array_equal(host(md.query_start_loc_cpu), [0, 1, 2, 7])
    np.testing.assert_array_equal(host(md.prefill.query_start_loc_cpu), [0, 5])  # rebased
    np.testing.assert_array_equal(host(md.decode.seq_lens_cpu), [6, 10])
    # slot = block_table[pos // 4] * 4 + pos % 4: decode 0 at pos 5 -> block 1, decode 1 at pos 9 -> block 7
    np.testing.assert_array_equal(host(md.slot_mapping_cpu), [1 * 4 + 1, 7 * 4 + 1, 36, 37, 38, 39, 40])
    assert md.prefill.has_context() is False and md.device == "cpu"


def test_views_share_memory_with_the_metadata():
    md = lattn.MlaMetadataBuilder(block_size=16, context_chunk_workspace_size=64).build([req(3, 0)])
    a, b = md.query_start_loc_cpu, md.query_start_loc  # on the cpu the device view aliases the host one
    assert a.data_ptr == b.data_ptr == host(a).ctypes.data
    del md
    np.testing.assert_array_equal(host(a), [0, 3])  # the views keep the storage alive


def test_builder_errors_arrive_with_their_kind_and_text():
    builder = lattn.MlaMetadataBuilder(block_size=16, context_chunk_workspace_size=1024)
    with pytest.raises(AssertionError, match=r"^query_lens: \[0\]$"):
        builder.build([req(0, 1)])
    with pytest.raises(AssertionError, match=r"the batch is not reordered \(decodes first\)"):
        builder.build([req(5, 0), req(1, 3)])
    with pytest.raises(ValueError, match=r"request 0 has a block table of 1 blocks, but seq_len 42"):
        builder.build([(2, 40, [0])])


@pytest.mark.parametrize("args,expected", [((163840, 256, 16), 131072), ((4096, 128, 16), 32768),
                                           ((2048, 256, 16), 16384), ((1024, 1024, 64), 131072)])
def test_tv_ws(args, expected):
    assert lattn.mla_context_chunk_workspace_size(*args) == expected


def test_tv_ws_assertion():
    with pytest.raises(AssertionError, match=r"131072 < 4096 \* 64 = 262144"):
        lattn.mla_context_chunk_workspace_size(512, 4096, 64)


def test_common_attention_metadata_pads_the_callers_slot_mapping_in_place():
    slot_mapping = np.array([7, 8, 9, 10, 11, 12, 13, 14], dtype=np.int64)
    qsl = np.array([0, 1, 5], dtype=np.int32)
    seq_lens = np.array([3, 4], dtype=np.int32)
    common = lattn.CommonAttentionMetadata(qsl, qsl, seq_lens, seq_lens, np.array([2, 0], np.int32), 2, 5, 4,
                                           np.array([[0], [1]], np.int32), slot_mapping)
    assert slot_mapping.tolist() == [7, 8, 9, 10, 11, -1, -1, -1]  # TV-PAD, through the caller's own memory
    md = lattn.MlaMetadataBuilder(block_size=16, context_chunk_workspace_size=64).build_common(common)
    assert (md.num_decodes, md.num_prefills, md.num_actual_tokens) == (1, 1, 5)
    np.testing.assert_array_equal(host(md.slot_mapping_cpu)[:5], [7, 8, 9, 10, 11])
