"""lattn.vllm.LattnMLABackend / LattnMLAImpl driven as vLLM's V0 MLA layer drives an
MLACommonImpl, against the stand-in of vllm.attention.backends.mla.common
(fake_vllm/, reproduced from the seeds) and the NumPy float64 reference."""

import numpy as np
import pytest

import lattn
from lattn.vllm import LattnMLABackend, LattnMLAImpl
from mla_reference import mha_request, split_kv_b_proj
from vllm.attention.backends.abstract import AttentionBackend, MLAAttentionImpl
from vllm.attention.backends.mla.common import MLACommonBackend, MLACommonImpl, MLACommonMetadata

N, L, P, R, V = 4, 32, 16, 8, 16
BLOCK = 4
F32_BOUND = 1e-5


class KvBProj:
    """What the Impl reads of vLLM's ColumnParallelLinear: its weight [N*(P+V), L]."""

    def __init__(self, weight):
        self.weight = weight


class Layer:
    _k_scale = 1.0
    _v_scale = 1.0


def f16_exact(rng, shape):
    """Random values that f16 holds exactly (so the cache round trip loses nothing)."""
    return rng.standard_normal(shape).astype(np.float16).astype(np.float32)


def make_impl(rng, scale, **kw):
    weight = (rng.standard_normal((N * (P + V), L)) / np.sqrt(L)).astype(np.float32)
    args = dict(num_heads=N, head_size=L + R, scale=scale, num_kv_heads=1, alibi_slopes=None, sliding_window=None,
                kv_cache_dtype="auto", blocksparse_params=None, logits_soft_cap=None, attn_type="decoder",
                kv_sharing_target_layer_name=None, q_lora_rank=None, kv_lora_rank=L, qk_nope_head_dim=P,
                qk_rope_head_dim=R, qk_head_dim=P + R, v_head_dim=V, kv_b_proj=KvBProj(weight))
    args.update(kw)
    impl = LattnMLABackend.get_impl_cls()(**args)
    return impl, weight


def v0_step(rng, requests, num_prefills):
    """A V0 step (prefills first): a NaN-poisoned f16 cache holding each request's
    context in permuted blocks, the new tokens' inputs and MLACommonMetadata."""
    seq_lens = [c + q for q, c in requests]
    blocks = [-(-s // BLOCK) for s in seq_lens]
    num_blocks = sum(blocks) + 2
    ids = rng.permutation(num_blocks)
    tables = np.zeros((len(requests), max(blocks)), np.int32)
    at = 0
    for r, nb in enumerate(blocks):
        tables[r, :nb] = ids[at:at + nb]
        at += nb
    cache = np.full((num_blocks, BLOCK, L + R), np.nan, np.float16)
    latent = [f16_exact(rng, (s, L)) for s in seq_lens]
    rope = [f16_exact(rng, (s, R)) for s in seq_lens]

    def slot(r, pos):
        return int(tables[r, pos // BLOCK]) * BLOCK + pos % BLOCK

    cache_view = lattn.LatentCache(cache, L, R)
    for r, (q, c) in enumerate(requests):
        if c:
            lattn.concat_and_cache_mla(latent[r][:c], rope[r][:c], cache_view,
                                       np.array([slot(r, p) for p in range(c)], np.int64))
    qsl = np.concatenate([[0], np.cumsum([q for q, _ in requests])]).astype(np.int32)
    T = int(qsl[-1])
    kv_c = np.concatenate([latent[r][c:] for r, (q, c) in enumerate(requests)])
    k_pe = np.concatenate([rope[r][c:] for r, (q, c) in enumerate(requests)])
    slots = np.array([slot(r, c + j) for r, (q, c) in enumerate(requests) for j in range(q)], np.int64)
    num_prefill_tokens = int(qsl[num_prefills])
    md = MLACommonMetadata(
        num_prefills=num_prefills, num_prefill_tokens=num_prefill_tokens, num_decode_tokens=T - num_prefill_tokens,
        slot_mapping=slots, multi_modal_placeholder_index_maps=None, enable_kv_scales_calculation=False,
        use_cuda_graph=False, seq_lens=seq_lens, seq_lens_tensor=np.array(seq_lens, np.int32),
        max_prefill_seq_len=max(seq_lens[:num_prefills], default=0),
        max_decode_seq_len=max(seq_lens[num_prefills:], default=0),
        context_lens_tensor=np.array([c for _, c in requests], np.int32), block_tables=tables,
        max_query_len=max(q for q, _ in requests), max_decode_query_len=1, query_start_loc=qsl,
        seq_start_loc=np.concatenate([[0], np.cumsum(seq_lens)]).astype(np.int32), head_dim=None)
    return cache, md, kv_c, k_pe, latent, rope, qsl


def reference(q, weight, latent, rope, requests, qsl, scale):
    w_uk, w_uv = split_kv_b_proj(weight, N, P, V)
    out = np.zeros((q.shape[0], N * V))
    for r, (ql, c) in enumerate(requests):
        o = mha_request(q[qsl[r]:qsl[r + 1]], latent[r], rope[r], w_uk, w_uv, scale, c)
        out[qsl[r]:qsl[r + 1]] = o.reshape(ql, N * V)
    return out


def rel_err(got, ref):
    got = np.asarray(got, np.float64)
    assert np.isfinite(got).all()
    return np.linalg.norm(got - ref) / np.linalg.norm(ref)


def test_backend_is_vllms_mla_common_backend():
    assert issubclass(LattnMLABackend, MLACommonBackend) and issubclass(LattnMLABackend, AttentionBackend)
    assert issubclass(LattnMLAImpl, MLACommonImpl) and issubclass(LattnMLAImpl, MLAAttentionImpl)
    assert LattnMLABackend.get_name() == "LATTN_MLA"
    assert LattnMLABackend.get_impl_cls() is LattnMLAImpl
    assert LattnMLABackend.get_metadata_cls() is MLACommonMetadata  # vLLM's own metadata, as it is
    assert LattnMLABackend.get_kv_cache_shape(10, 16, 1, 576) == (10, 16, 576)
    assert LattnMLABackend.get_supported_head_sizes() == [576]
    assert LattnMLABackend.full_cls_name() == ("lattn.vllm_mla", "LattnMLABackend")


@pytest.mark.parametrize("requests,num_prefills", [
    ([(5, 6), (3, 0), (1, 9), (1, 2)], 2),  # mixed: prefills (one with context) then decodes
    ([(4, 0), (7, 5)], 2),                  # prefills only
    ([(1, 0), (1, 13), (1, 4)], 0),         # decodes only (one without context)
])
def test_forward_matches_the_reference(requests, num_prefills):
    rng = np.random.default_rng(11)
    scale = lattn.MlaDims.deepseek_v3().softmax_scale
    impl, weight = make_impl(rng, scale)
    impl.process_weights_after_loading(np.float32)
    cache, md, kv_c, k_pe, latent, rope, qsl = v0_step(rng, requests, num_prefills)
    q = rng.standard_normal((kv_c.shape[0], N, P + R)).astype(np.float32)
    out = impl.forward(Layer(), q, kv_c, k_pe, cache, md)
    assert out.shape == (q.shape[0], N * V)
    assert rel_err(out, reference(q, weight, latent, rope, requests, qsl, scale)) < F32_BOUND
    # The new tokens were written to the cache at their slots.
    for t, s in enumerate(md.slot_mapping):
        np.testing.assert_array_equal(cache[s // BLOCK, s % BLOCK, :L], kv_c[t].astype(np.float16))
    assert impl.prefill_backend in ("cpu", "reference") and impl.decode_backend in ("cpu", "reference")


def test_forward_writes_the_callers_output():
    rng = np.random.default_rng(12)
    requests = [(3, 4), (1, 6)]
    impl, weight = make_impl(rng, 0.2)
    impl.process_weights_after_loading(np.float32)
    cache, md, kv_c, k_pe, latent, rope, qsl = v0_step(rng, requests, 1)
    q = rng.standard_normal((kv_c.shape[0], N * (P + R))).astype(np.float32)  # flat heads, as vLLM passes them
    output = np.full((q.shape[0], N * V), np.nan, np.float32)
    assert impl.forward(Layer(), q, kv_c, k_pe, cache, md, output=output) is output
    assert rel_err(output, reference(q.reshape(-1, N, P + R), weight, latent, rope, requests, qsl, 0.2)) < F32_BOUND


def test_decode_hook_runs_lattn_decode():
    rng = np.random.default_rng(13)
    requests = [(1, 5), (1, 9)]
    impl, weight = make_impl(rng, 0.3)
    impl.process_weights_after_loading(np.float32)
    cache, md, kv_c, k_pe, latent, rope, qsl = v0_step(rng, requests, 0)
    lattn.concat_and_cache_mla(kv_c, k_pe, lattn.LatentCache(cache, L, R), md.slot_mapping)
    ql_nope = rng.standard_normal((2, N, L)).astype(np.float32)
    q_pe = rng.standard_normal((2, N, R)).astype(np.float32)
    latent_out = impl._forward_decode(ql_nope, q_pe, cache, md)
    assert latent_out.shape == (2, N, L)
    for r, (_, c) in enumerate(requests):
        keys = np.concatenate([latent[r], rope[r]], axis=1).astype(np.float64)  # [S, L+R]
        s = np.concatenate([ql_nope[r], q_pe[r]], axis=1) @ keys.T * 0.3      # [N, S]
        p = np.exp(s - s.max(axis=1, keepdims=True))
        expect = (p / p.sum(axis=1, keepdims=True)) @ latent[r]
        assert rel_err(latent_out[r], expect) < F32_BOUND


def test_refusals_follow_vllms_mla_backends():
    rng = np.random.default_rng(14)
    with pytest.raises(NotImplementedError, match="KV sharing not supported in V0."):
        make_impl(rng, 0.1, kv_sharing_target_layer_name="layers.0")
    with pytest.raises(NotImplementedError, match="sliding_window"):
        make_impl(rng, 0.1, sliding_window=128)
    with pytest.raises(NotImplementedError, match="Encoder"):
        make_impl(rng, 0.1, attn_type="encoder")
    impl, _ = make_impl(rng, 0.1)
    with pytest.raises(RuntimeError, match="process_weights_after_loading"):
        impl.forward(Layer(), None, None, None, np.zeros((1, BLOCK, L + R), np.float16), None)
