"""A NumPy reference of MLA attention (float64), written from the seeds' design note.

Notation (seed 002): N heads, L = kv_lora_rank, P = qk_nope_head_dim,
R = qk_rope_head_dim, V = v_head_dim. kv_b_proj's weight (out, in) is
[N*(P+V), L]; per head h its rows [h*(P+V), h*(P+V)+P) are W_UK[h] and the
next V rows W_UV[h]. A cache entry is [kv_c (L) | k_pe (R)].

Two independent routes to the same numbers (docs/mla.md):
  * naive MHA: up-project every key, k = [kv_c W_UK^T | k_pe], v = kv_c W_UV^T;
  * absorbed (decode): q_nope W_UK -> latent queries, attend over [kv_c | k_pe]
    with V = kv_c, then W_UV.
LSE is the natural log of the softmax denominator, layout [N, T].
"""

import numpy as np


def split_kv_b_proj(w, n, p, v):
    """W_UK [N, P, L] and W_UV [N, V, L] from kv_b_proj's weight [N*(P+V), L]."""
    w = np.asarray(w, dtype=np.float64).reshape(n, p + v, -1)
    return w[:, :p, :], w[:, p:, :]


def attention(q, k, v, scale, mask=None):
    """q [Tq, N, D], k [Tk, N, D], v [Tk, N, Dv], mask [Tq, Tk] bool (True = attend).

    Returns out [Tq, N, Dv] and lse [N, Tq]; a row with no key gives 0 and -inf.
    """
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    s = np.einsum("qhd,khd->hqk", q, k) * scale
    if mask is not None:
        s = np.where(mask[None], s, -np.inf)
    m = s.max(axis=-1, keepdims=True) if s.shape[-1] else np.full(s.shape[:-1] + (1,), -np.inf)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m_safe)
    denom = e.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.einsum("hqk,khd->qhd", np.where(denom > 0, e / np.where(denom > 0, denom, 1), 0.0), v)
        lse = np.where(denom[..., 0] > 0, np.log(np.where(denom[..., 0] > 0, denom[..., 0], 1)) + m_safe[..., 0],
                       -np.inf)
    return out, lse


def varlen_attention(q, k, v, cu_q, cu_k, scale, causal):
    """Per request r: queries cu_q[r]:cu_q[r+1] against keys cu_k[r]:cu_k[r+1].

    causal: query j of a request sees keys [0, j] (only used with cu_q == cu_k).
    Returns out [Tq, N, Dv], lse [N, Tq].
    """
    tq, n, dv = q.shape[0], q.shape[1], v.shape[2]
    out = np.zeros((tq, n, dv))
    lse = np.full((n, tq), -np.inf)
    for r in range(len(cu_q) - 1):
        qs, qe, ks, ke = cu_q[r], cu_q[r + 1], cu_k[r], cu_k[r + 1]
        mask = None
        if causal:
            mask = np.tril(np.ones((qe - qs, ke - ks), dtype=bool))
        o, l = attention(q[qs:qe], k[ks:ke], v[ks:ke], scale, mask)
        out[qs:qe], lse[:, qs:qe] = o, l
    return out, lse


def merge_attn_states(prefix_out, prefix_lse, suffix_out, suffix_lse):
    """The robust merge (docs/mla.md): +inf reads as -inf, both -inf give 0 / -inf."""
    p = np.where(prefix_lse == np.inf, -np.inf, prefix_lse)
    s = np.where(suffix_lse == np.inf, -np.inf, suffix_lse)
    m = np.maximum(p, s)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    pe, se = np.exp(p - m_safe), np.exp(s - m_safe)
    tot = pe + se
    with np.errstate(divide="ignore", invalid="ignore"):
        ps = np.where(tot > 0, pe / tot, 0.0).T[..., None]
        ss = np.where(tot > 0, se / tot, 0.0).T[..., None]
        lse = np.where(tot > 0, np.log(np.where(tot > 0, tot, 1)) + m_safe, -np.inf)
    return prefix_out * ps + suffix_out * ss, lse


def mha_request(q, kv_c, k_pe, w_uk, w_uv, scale, context_len):
    """Naive MHA for one request: q [Tq, N, P+R] are the tokens at positions
    context_len .. context_len+Tq-1; kv_c [S, L], k_pe [S, R] cover positions
    0 .. S-1 (S = context_len + Tq). Query j sees keys [0, context_len + j].
    Returns [Tq, N, V]."""
    kv_c, k_pe = np.asarray(kv_c, np.float64), np.asarray(k_pe, np.float64)
    k_nope = np.einsum("sl,hpl->shp", kv_c, w_uk)
    k = np.concatenate([k_nope, np.broadcast_to(k_pe[:, None, :], k_nope.shape[:2] + (k_pe.shape[1],))], axis=-1)
    v = np.einsum("sl,hvl->shv", kv_c, w_uv)
    tq, s = q.shape[0], kv_c.shape[0]
    mask = np.arange(s)[None, :] <= (context_len + np.arange(tq))[:, None]
    out, _ = attention(q, k, v, scale, mask)
    return out


def absorbed_request(q, kv_c, k_pe, w_uk, w_uv, scale, context_len):
    """The absorbed (decode) formula for one request, same contract as mha_request."""
    q = np.asarray(q, np.float64)
    p = w_uk.shape[1]
    ql_nope = np.einsum("thp,hpl->thl", q[..., :p], w_uk)  # [Tq, N, L]
    q_lat = np.concatenate([ql_nope, q[..., p:]], axis=-1)  # [Tq, N, L+R]
    entries = np.concatenate([np.asarray(kv_c, np.float64), np.asarray(k_pe, np.float64)], axis=-1)  # [S, L+R]
    n = q.shape[1]
    k = np.broadcast_to(entries[:, None, :], (entries.shape[0], n, entries.shape[1]))
    v = np.broadcast_to(np.asarray(kv_c, np.float64)[:, None, :], (kv_c.shape[0], n, kv_c.shape[1]))
    tq, s = q.shape[0], entries.shape[0]
    mask = np.arange(s)[None, :] <= (context_len + np.arange(tq))[:, None]
    o_latent, _ = attention(q_lat, k, v, scale, mask)  # [Tq, N, L]
    return np.einsum("thl,hvl->thv", o_latent, w_uv)


def plan_context_chunks(context_lens, num_prefills, workspace_size, block_size):
    """Seed 002's context-chunk plan (docs/metadata.md) for the prefill rows.

    context_lens: every request's context (the batch-wide max sets num_chunks,
    as in the seed). Returns (cu_seq_lens [C, P+1], starts [C, P], seq_tot,
    max_seq_lens) as int32 arrays / int lists, or None without context."""
    ctx = np.asarray(context_lens, dtype=np.int64)
    pre = ctx[-num_prefills:] if num_prefills else ctx[:0]  # decodes first: prefills are the last rows
    if num_prefills == 0 or pre.max(initial=0) <= 0:
        return None
    with_context = int((pre > 0).sum())
    max_chunk = (workspace_size // with_context) // block_size * block_size
    assert max_chunk > 0
    num_chunks = -(-int(ctx.max()) // max_chunk)
    starts = (np.arange(num_chunks)[:, None] * max_chunk).repeat(num_prefills, axis=1)
    ends = np.minimum(pre[None, :], starts + max_chunk)
    lens = np.clip(ends - starts, 0, None)
    cu = np.concatenate([np.zeros((num_chunks, 1), np.int64), lens.cumsum(axis=1)], axis=1)
    return (cu.astype(np.int32), starts.astype(np.int32), [int(x) for x in lens.sum(axis=1)],
            [int(x) for x in lens.max(axis=1)])
