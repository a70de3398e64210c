"""vLLM's MLA prefill path, reproduced in NumPy to drive a prefill backend as vLLM does.

What vLLM's MLA common code does around an MLAPrefillBackend (docs/mla.md,
"One forward", in the v1 form where attention is delegated to a prefill backend):
  * the metadata builder plans context chunks, builds the prefill metadata
    (query_start_loc rebased to 0; chunked_context with cu_seq_lens, starts,
    seq_tot, max_seq_lens, workspace) and calls backend.prepare_metadata;
  * _forward_prefill up-projects the new latents (kv_b_proj), splits k_nope/v,
    appends k_pe to every head, calls run_prefill_new_tokens with
    return_softmax_lse=has_context;
  * _compute_prefill_context gathers each chunk from the paged cache into the
    workspace, up-projects it, calls run_prefill_context_chunk(i, q, k, v) and
    merges the chunks' results by LSE; the final merge joins context and new.
vLLM runs this on torch tensors; NumPy here, so it needs neither vLLM nor torch.
"""

from dataclasses import dataclass, field

import numpy as np

import mla_reference


@dataclass
class ChunkedContextMetadata:
    cu_seq_lens: np.ndarray  # [num_chunks, num_prefills + 1] int32
    starts: np.ndarray  # [num_chunks, num_prefills] int32
    seq_tot: list
    max_seq_lens: list
    workspace: np.ndarray  # [workspace_size, L + R]


@dataclass
class MLACommonPrefillMetadata:
    block_table: np.ndarray  # [num_prefills, max_blocks] int32
    query_start_loc: np.ndarray  # [num_prefills + 1] int32, from 0
    max_query_len: int
    chunked_context: ChunkedContextMetadata = None


@dataclass
class PagedBatch:
    """Prefill requests whose context sits in a paged latent cache (block tables permuted)."""

    cache: np.ndarray  # [num_blocks, block_size, L + R]
    block_table: np.ndarray  # [num_prefills, max_blocks]
    context_lens: list  # per prefill
    query_lens: list  # per prefill
    extra_context_lens: list = field(default_factory=list)  # decodes' contexts (they only set num_chunks)


def build_prefill_metadata(batch, block_size, workspace_size, dtype):
    query_start_loc = np.concatenate([[0], np.cumsum(batch.query_lens)]).astype(np.int32)
    plan = mla_reference.plan_context_chunks(
        list(batch.extra_context_lens) + list(batch.context_lens), len(batch.query_lens), workspace_size, block_size
    )
    chunked = None
    if plan is not None:
        cu, starts, seq_tot, max_seq_lens = plan
        workspace = np.zeros((workspace_size, batch.cache.shape[-1]), dtype=dtype)
        chunked = ChunkedContextMetadata(cu, starts, seq_tot, max_seq_lens, workspace)
    return MLACommonPrefillMetadata(batch.block_table, query_start_loc, int(max(batch.query_lens)), chunked)


def up_project(kv_c, k_pe, w_kv_b, n, p, v_dim):
    """kv_b_proj then split, as vLLM: k = [k_nope | k_pe for every head] [T, N, P+R], v [T, N, V] (a strided view)."""
    kv_nope = (kv_c @ w_kv_b.T).reshape(-1, n, p + v_dim)
    k_nope, v = kv_nope[..., :p], kv_nope[..., p:]
    k = np.concatenate([k_nope, np.broadcast_to(k_pe[:, None, :], k_nope.shape[:2] + (k_pe.shape[-1],))], axis=-1)
    return k, v


def gather_cache(cache, block_table, cu_seq_lens, starts, out):
    """ops.gather_cache: request b's tokens starts[b] .. + len from its pages into out rows cu[b] .. cu[b+1]."""
    block_size = cache.shape[1]
    for b in range(block_table.shape[0]):
        for j in range(cu_seq_lens[b + 1] - cu_seq_lens[b]):
            pos = starts[b] + j
            out[cu_seq_lens[b] + j] = cache[block_table[b, pos // block_size], pos % block_size]


def forward_prefill(backend, q, kv_c_normed, k_pe, batch, md, w_kv_b, dims):
    """MLACommonImpl._forward_prefill with a prefill backend. Returns [T, N*V] and the raw (out, lse) calls made."""
    n, lora, p, r, v_dim = dims
    has_context = md.chunked_context is not None
    k, v = up_project(kv_c_normed, k_pe, w_kv_b, n, p, v_dim)
    result = backend.run_prefill_new_tokens(q=q, k=k, v=v, return_softmax_lse=has_context)
    if has_context:
        suffix_output, suffix_lse = result
        context_output, context_lse = compute_prefill_context(backend, q, batch, md, w_kv_b, dims)
        output, _ = mla_reference.merge_attn_states(context_output, context_lse, suffix_output, suffix_lse)
    else:
        output = result
    return np.asarray(output)[..., :v_dim].reshape(output.shape[0], -1)


def compute_prefill_context(backend, q, batch, md, w_kv_b, dims):
    n, lora, p, r, v_dim = dims
    cc = md.chunked_context
    output = output_lse = None
    for i in range(len(cc.seq_tot)):
        toks = cc.seq_tot[i]
        gather_cache(batch.cache, md.block_table, cc.cu_seq_lens[i], cc.starts[i], cc.workspace)
        kv_c_normed = cc.workspace[:toks][..., :lora]
        k_pe = cc.workspace[:toks][..., lora:]
        k, v = up_project(kv_c_normed, k_pe, w_kv_b, n, p, v_dim)
        attn_output, attn_softmax_lse = backend.run_prefill_context_chunk(chunk_idx=i, q=q, k=k, v=v)
        if output is None:
            output, output_lse = np.asarray(attn_output, np.float64), np.asarray(attn_softmax_lse)
        else:
            output, output_lse = mla_reference.merge_attn_states(output, output_lse, np.asarray(attn_output),
                                                                 np.asarray(attn_softmax_lse))
    return output, output_lse
