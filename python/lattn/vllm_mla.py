"""lattn as a vLLM MLA attention backend (the whole layer: prefill and decode).

    from lattn.vllm import LattnMLABackend      # also lattn.vllm_mla
    LattnMLABackend.get_impl_cls()              # LattnMLAImpl, an MLACommonImpl

Interface followed: vLLM's V0 MLA backend layer, ``vllm.attention.backends.mla.common``
(``MLACommonBackend``, ``MLACommonImpl``, ``MLACommonMetadata``), at the revision
whose ``MLACommonImpl.__init__`` takes both ``blocksparse_params`` and
``kv_sharing_target_layer_name`` (vLLM 0.9.x), with the ``forward(layer, q,
k_c_normed, k_pe, kv_cache, attn_metadata, output=None, output_scale=None,
output_block_scale=None)`` of ``vllm.attention.backends.abstract``.

* ``LattnMLABackend`` derives from vLLM's ``MLACommonBackend``: it keeps vLLM's
  metadata, builder and state classes and KV-cache shape ``(num_blocks,
  block_size, head_size)``, and answers ``get_name() == "LATTN_MLA"`` and
  ``get_impl_cls() is LattnMLAImpl``.
* ``LattnMLAImpl`` derives from vLLM's ``MLACommonImpl`` (same constructor).
  ``process_weights_after_loading(act_dtype)`` hands ``kv_b_proj``'s weight to a
  ``lattn.MlaAttention``; ``forward`` runs that layer: the cache write, lattn's
  decode backend for the decode rows and its prefill backend (with chunked
  context) for the prefill rows, out ``[T, N*V]``. vLLM's V0 metadata lists
  prefills first; lattn runs decodes first, so a mixed batch's rows are
  permuted in and out (one gather each way, no change for a batch of one kind).

Which lattn backends run: ``lattn_prefill_backend`` / ``lattn_decode_backend``
(class attributes, "" = lattn's selector) or LATTN_MLA_PREFILL_BACKEND /
LATTN_MLA_DECODE_BACKEND. Unsupported vLLM features are refused as vLLM's own
MLA backends refuse them: ALiBi, sliding window, logits soft-capping, block
sparsity, attention types other than decoder, KV sharing.

Importable without vLLM and PyTorch (the classes then derive from object and
the metadata classes come from wherever the caller's metadata comes from).
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

import lattn

VLLM_MLA_COMMON = "vllm.attention.backends.mla.common"


def _vllm_common():
    try:
        return importlib.import_module(VLLM_MLA_COMMON)
    except Exception:  # vLLM absent, or present but not importable here
        return None


_COMMON = _vllm_common()
_BackendBase: type = _COMMON.MLACommonBackend if _COMMON else object
_ImplBase: type = _COMMON.MLACommonImpl if _COMMON else object


def _host_list(x: Any) -> list[int]:
    """An index array (NumPy, torch on any device, list) as a list of ints."""
    if x is None:
        return []
    if hasattr(x, "tolist"):
        return [int(v) for v in x.tolist()]
    return [int(v) for v in x]


def _host_rows(x: Any) -> list[list[int]]:
    return [[int(v) for v in row] for row in x.tolist()] if hasattr(x, "tolist") else [list(map(int, r)) for r in x]


def _scalar(x: Any, default: float = 1.0) -> float:
    if x is None:
        return default
    try:
        return float(x)
    except TypeError:
        return float(x.item())


class LattnMLABackend(_BackendBase):
    """vLLM's MLACommonBackend with lattn's Impl (see the module docstring)."""

    @staticmethod
    def get_name() -> str:
        return "LATTN_MLA"

    @staticmethod
    def get_impl_cls() -> type:
        return LattnMLAImpl

    @staticmethod
    def get_kv_cache_shape(num_blocks: int, block_size: int, num_kv_heads: int, head_size: int) -> tuple:
        return (num_blocks, block_size, head_size)  # num_kv_heads is 1 for MLA

    @staticmethod
    def get_supported_head_sizes() -> list[int]:
        # vLLM's MLA metadata accepts 576 (512 + 64) only; lattn's own API takes any L + R.
        return [576]

    # What lattn adds to vLLM's backend facts (its own selector decides per device).
    supported_dtypes: ClassVar[list[str]] = ["float16", "bfloat16"]
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto", "float16", "bfloat16", "fp8", "fp8_e4m3"]

    @staticmethod
    def get_supported_block_sizes() -> list[int]:
        return []  # any block size


class LattnMLAImpl(_ImplBase):
    """vLLM's MLACommonImpl whose forward runs lattn's MlaAttention (prefill and decode)."""

    lattn_prefill_backend: ClassVar[str] = ""
    lattn_decode_backend: ClassVar[str] = ""

    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: int, alibi_slopes,
                 sliding_window, kv_cache_dtype: str, blocksparse_params, logits_soft_cap, attn_type: str,
                 kv_sharing_target_layer_name, q_lora_rank, kv_lora_rank: int, qk_nope_head_dim: int,
                 qk_rope_head_dim: int, qk_head_dim: int, v_head_dim: int, kv_b_proj, **kwargs) -> None:
        args = (num_heads, head_size, scale, num_kv_heads, alibi_slopes, sliding_window, kv_cache_dtype,
                blocksparse_params, logits_soft_cap, attn_type, kv_sharing_target_layer_name, q_lora_rank,
                kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, qk_head_dim, v_head_dim, kv_b_proj)
        if _ImplBase is not object:
            super().__init__(*args, **kwargs)
        else:
            if kv_sharing_target_layer_name is not None:
                raise NotImplementedError("KV sharing not supported in V0.")
            self.num_heads, self.head_size, self.scale = num_heads, head_size, float(scale)
            self.num_kv_heads, self.kv_cache_dtype = num_kv_heads, kv_cache_dtype
            self.q_lora_rank, self.kv_lora_rank = q_lora_rank, kv_lora_rank
            self.qk_nope_head_dim, self.qk_rope_head_dim = qk_nope_head_dim, qk_rope_head_dim
            self.qk_head_dim, self.v_head_dim, self.kv_b_proj = qk_head_dim, v_head_dim, kv_b_proj
        unsupported = [alibi_slopes, sliding_window, blocksparse_params, logits_soft_cap]
        if any(x is not None for x in unsupported):
            raise NotImplementedError("LattnMLAImpl does not support one of the following: alibi_slopes, "
                                      "sliding_window, blocksparse_params, logits_soft_cap")
        if attn_type != "decoder":
            raise NotImplementedError("Encoder self-attention and encoder/decoder cross-attention are not "
                                      "implemented for LattnMLAImpl")
        self._layer = None      # lattn.MlaAttention, made by process_weights_after_loading
        self._builders = {}     # (block_size, threshold) -> (lattn.MlaMetadataBuilder, its workspace rows)

    # ---- weights ---------------------------------------------------------------

    def process_weights_after_loading(self, act_dtype) -> None:
        """Loads kv_b_proj's weight [N*(P+V), L] into lattn (split into W_UK_T, W_UV)."""
        layer = self.kv_b_proj
        weight = None
        for attr in ("weight", "qweight", "weight_packed"):
            if hasattr(layer, attr):
                weight = getattr(layer, attr)
                break
        if weight is None:
            raise AttributeError(f"Layer '{layer}' has no recognized weight attribute: "
                                 "('weight', 'qweight', 'weight_packed').")
        quant = getattr(layer, "quant_method", None)
        if quant is not None and type(quant).__name__ != "UnquantizedLinearMethod":
            raise NotImplementedError("LattnMLAImpl loads unquantized kv_b_proj weights only "
                                      f"(got {type(quant).__name__})")
        self._weight = weight
        self._act_dtype = lattn.dtype_name(act_dtype)
        # "auto" stores the cache in the activation dtype (bf16 under f32 activations,
        # which no cache holds); forward remakes the layer if the cache it gets differs.
        auto = self._act_dtype if self._act_dtype in ("f16", "bf16") else "bf16"
        self._make_layer(self._lattn_cache_dtype(auto))

    def _make_layer(self, cache_dtype: str) -> None:
        self._layer = lattn.MlaAttention(
            self.num_heads, self.kv_lora_rank, self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim,
            scale=self.scale, dtype=self._act_dtype, kv_cache_dtype=cache_dtype,
            device=lattn.from_dlpack(self._weight).device, prefill_backend=self.lattn_prefill_backend,
            decode_backend=self.lattn_decode_backend)
        self._layer.process_weights_after_loading(self._weight)
        self._cache_dtype = cache_dtype
        self.W_UK_T, self.W_UV = self._layer.W_UK_T, self._layer.W_UV

    def _lattn_cache_dtype(self, auto: str) -> str:
        name = str(self.kv_cache_dtype)
        if name == "auto":
            return auto
        if name.startswith("fp8"):
            return "fp8_e4m3"
        return lattn.dtype_name(name)

    @property
    def prefill_backend(self) -> str:
        return self._require_layer().prefill_backend

    @property
    def decode_backend(self) -> str:
        return self._require_layer().decode_backend

    def _require_layer(self):
        if self._layer is None:
            raise RuntimeError("LattnMLAImpl: call process_weights_after_loading(act_dtype) before forward")
        return self._layer

    # ---- forward ---------------------------------------------------------------

    def forward(self, layer, q, k_c_normed, k_pe, kv_cache, attn_metadata, output=None, output_scale=None,
                output_block_scale=None):
        """q [T, N*(P+R)] or [T, N, P+R], k_c_normed [T, L], k_pe [T, R] or [T, 1, R];
        kv_cache [num_blocks, block_size, L+R]; rows as vLLM's V0 metadata orders them
        (prefills first). Writes the cache; returns out [T, N*V] (``output`` when given)."""
        if output_block_scale is not None:
            raise NotImplementedError("fused output quantization with block scales is not supported by lattn")
        self._require_layer()
        fp8 = str(self.kv_cache_dtype).startswith("fp8")
        cache_dtype = "fp8_e4m3" if fp8 else self._lattn_cache_dtype(lattn.dtype_name(kv_cache.dtype))
        if cache_dtype != self._cache_dtype:
            self._make_layer(cache_dtype)
        attn = self._layer
        md, perm, inverse = self._lattn_step(attn_metadata, int(kv_cache.shape[1]), lattn.from_dlpack(q).device)
        cache = lattn.LatentCache(kv_cache, self.kv_lora_rank, self.qk_rope_head_dim,
                                  scale=_scalar(getattr(layer, "_k_scale", None)) if fp8 else 1.0,
                                  dtype="fp8_e4m3" if fp8 else None)
        if perm is None:
            return attn.forward(q, k_c_normed, k_pe, cache, md, out=output, output_scale=output_scale)
        out = attn.forward(q[perm], k_c_normed[perm], k_pe[perm], cache, md, output_scale=output_scale)
        if output is None:
            return out[inverse]
        output[...] = out[inverse]
        return output

    def _forward_decode(self, ql_nope, q_pe, kv_c_and_k_pe_cache, attn_metadata):
        """The seed's decode hook: latent attention of the decode rows with lattn.mla_decode,
        returned in the latent space [B, N, L] (forward does the whole layer instead)."""
        dec = attn_metadata.decode_metadata
        block_size = int(kv_c_and_k_pe_cache.shape[1])
        cache = lattn.LatentCache(kv_c_and_k_pe_cache, self.kv_lora_rank, self.qk_rope_head_dim)
        plan = lattn.mla_decode_plan(
            dec.block_tables, dec.seq_lens_tensor, block_size, self.num_heads, kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim, query_len=int(dec.max_decode_query_len or 1),
            dtype=lattn.dtype_name(ql_nope.dtype), kv_cache_dtype=cache.dtype, backend=self.lattn_decode_backend)
        return lattn.mla_decode((ql_nope, q_pe), cache, plan, self.scale, return_lse=False)

    def _lattn_step(self, md, block_size: int, device: str):
        """vLLM's V0 MLACommonMetadata (prefills first) as lattn's MlaMetadata (decodes
        first), with the token permutation into lattn's order and back (None: identity)."""
        qsl = _host_list(md.query_start_loc)
        seq_lens = _host_list(md.seq_lens_tensor)
        tables = _host_rows(md.block_tables)
        num_reqs = len(seq_lens)
        requests = []
        for r in range(num_reqs):
            query_len = qsl[r + 1] - qsl[r]
            blocks = -(-seq_lens[r] // block_size)
            requests.append((query_len, seq_lens[r] - query_len, tables[r][:blocks]))
        threshold = max(1, int(getattr(md, "max_decode_query_len", None) or 1))
        # lattn's order: requests it treats as decodes (query_len <= threshold) first, stable.
        order = [r for r in range(num_reqs) if requests[r][0] <= threshold]
        order += [r for r in range(num_reqs) if requests[r][0] > threshold]
        builder = self._builder(block_size, threshold, max(seq_lens), num_reqs)
        lattn_md = builder.build([requests[r] for r in order])
        lattn_md.to_device(device)
        if order == list(range(num_reqs)):
            return lattn_md, None, None
        perm = [t for r in order for t in range(qsl[r], qsl[r + 1])]
        inverse = [0] * len(perm)
        for new, old in enumerate(perm):
            inverse[old] = new
        return lattn_md, perm, inverse

    def _builder(self, block_size: int, threshold: int, max_seq_len: int, num_reqs: int):
        # The chunked-context workspace as vLLM sizes it, grown when a batch needs more.
        workspace = max(lattn.mla_context_chunk_workspace_size(max_model_len=max(max_seq_len, 1),
                                                               max_num_seqs=max(num_reqs, 1),
                                                               block_size=block_size),
                        num_reqs * block_size)
        key = (block_size, threshold)
        held = self._builders.get(key)
        if held is None or held[1] < workspace:
            builder = lattn.MlaMetadataBuilder(block_size=block_size, context_chunk_workspace_size=workspace,
                                               reorder_batch_threshold=threshold)
            held = self._builders[key] = (builder, workspace)
        return held[0]
