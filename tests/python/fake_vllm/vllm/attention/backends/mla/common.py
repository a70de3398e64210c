"""Stand-in for vllm.attention.backends.mla.common (lattn's seed 002): MLACommonBackend,
MLACommonMetadata with its prefill/decode views, and MLACommonImpl's constructor.

Reproduced from the seed where it runs without PyTorch and vLLM's model runner:
the backend's static methods, the metadata dataclass and its sliced views, the
Impl's __init__. The seed's torch-only bodies (the V0 builder and state, which
need a model runner; the Impl's own prefill/decode math; vllm._custom_ops) raise
NotImplementedError here: lattn's backend replaces the Impl's forward and
reuses vLLM's metadata as it is.
"""

from dataclasses import dataclass
from typing import Any, Dict, Generic, List, Optional, Tuple, Type

from vllm.attention.backends.abstract import (AttentionBackend, AttentionLayer, AttentionMetadata,
                                              AttentionMetadataBuilder, AttentionState, MLAAttentionImpl, T)


class MLACommonBackend(AttentionBackend):

    @staticmethod
    def get_name() -> str:
        return "TRITON_MLA"

    @staticmethod
    def get_metadata_cls() -> Type["AttentionMetadata"]:
        return MLACommonMetadata

    @staticmethod
    def get_builder_cls() -> Type["MLACommonMetadataBuilder"]:
        return MLACommonMetadataBuilder

    @staticmethod
    def get_state_cls() -> Type["MLACommonState"]:
        return MLACommonState

    @staticmethod
    def get_kv_cache_shape(
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,  # assumed to be 1 for MLA
        head_size: int,
    ) -> Tuple[int, ...]:
        return (num_blocks, block_size, head_size)

    @staticmethod
    def swap_blocks(src_kv_cache, dst_kv_cache, src_to_dst) -> None:
        raise NotImplementedError("stand-in: vllm._custom_ops.swap_blocks is not reproduced")

    @staticmethod
    def copy_blocks(kv_caches, src_to_dists) -> None:
        raise NotImplementedError("stand-in: vllm._custom_ops.copy_blocks_mla is not reproduced")

    @staticmethod
    def get_supported_head_sizes() -> List[int]:
        return [576]


@dataclass
class MLACommonMetadata(AttentionMetadata):
    """Metadata for MLACommon (V0 order: prefill rows first, then decodes)."""

    use_cuda_graph: bool
    seq_lens: Optional[List[int]]
    seq_lens_tensor: Optional[Any]
    max_prefill_seq_len: int
    max_decode_seq_len: int
    context_lens_tensor: Optional[Any]
    block_tables: Optional[Any]
    max_query_len: Optional[int] = None
    max_decode_query_len: Optional[int] = None
    query_start_loc: Optional[Any] = None
    seq_start_loc: Optional[Any] = None
    _cached_prefill_metadata: Optional[Any] = None
    _cached_decode_metadata: Optional[Any] = None
    num_prefill_tokens: int
    head_dim: Optional[int] = None
    is_profile_run: bool = False
    context_chunk_cu_seq_lens: Optional[Any] = None
    context_chunk_starts: Optional[Any] = None
    context_chunk_seq_tot: Optional[List[int]] = None
    context_chunk_max_seq_lens: Optional[List[int]] = None
    context_chunk_workspace: Optional[Any] = None

    def __post_init__(self):
        supported_head_sizes = MLACommonBackend.get_supported_head_sizes()
        if self.head_dim is not None and self.head_dim not in supported_head_sizes:
            raise ValueError(f"Only {supported_head_sizes} are supported for head_dim,",
                             f" received {self.head_dim}.")

    @property
    def prefill_metadata(self):
        if self.num_prefills == 0:
            return None
        if self._cached_prefill_metadata is not None:
            return self._cached_prefill_metadata
        assert self.seq_lens is not None
        assert self.seq_lens_tensor is not None

        def head(x, n):
            return None if x is None else x[:n]

        self._cached_prefill_metadata = self.__class__(
            use_cuda_graph=False,
            num_prefills=self.num_prefills,
            num_prefill_tokens=self.num_prefill_tokens,
            num_decode_tokens=0,
            slot_mapping=head(self.slot_mapping, self.num_prefill_tokens),
            multi_modal_placeholder_index_maps=None,
            enable_kv_scales_calculation=False,
            seq_lens=head(self.seq_lens, self.num_prefills),
            seq_lens_tensor=head(self.seq_lens_tensor, self.num_prefills),
            max_query_len=self.max_query_len,
            max_prefill_seq_len=self.max_prefill_seq_len,
            max_decode_query_len=0,
            max_decode_seq_len=0,
            query_start_loc=head(self.query_start_loc, self.num_prefills + 1),
            seq_start_loc=head(self.seq_start_loc, self.num_prefills + 1),
            context_lens_tensor=head(self.context_lens_tensor, self.num_prefills),
            block_tables=head(self.block_tables, self.num_prefills),
            head_dim=self.head_dim,
            is_profile_run=self.is_profile_run,
            context_chunk_cu_seq_lens=self.context_chunk_cu_seq_lens,
            context_chunk_starts=self.context_chunk_starts,
            context_chunk_seq_tot=self.context_chunk_seq_tot,
            context_chunk_max_seq_lens=self.context_chunk_max_seq_lens,
        )
        return self._cached_prefill_metadata

    @property
    def decode_metadata(self):
        if self.num_decode_tokens == 0:
            return None
        if self._cached_decode_metadata is not None:
            return self._cached_decode_metadata
        assert self.seq_lens_tensor is not None

        def tail(x, n):
            return None if x is None else x[n:]

        qsl = self.query_start_loc
        self._cached_decode_metadata = self.__class__(
            use_cuda_graph=self.use_cuda_graph,
            num_prefills=0,
            num_prefill_tokens=0,
            num_decode_tokens=self.num_decode_tokens,
            slot_mapping=tail(self.slot_mapping, self.num_prefill_tokens),
            multi_modal_placeholder_index_maps=None,
            enable_kv_scales_calculation=False,
            seq_lens=None,
            seq_lens_tensor=tail(self.seq_lens_tensor, self.num_prefills),
            max_decode_query_len=self.max_decode_query_len,
            max_query_len=self.max_query_len,
            max_prefill_seq_len=0,
            max_decode_seq_len=self.max_decode_seq_len,
            # Batch may be composed of prefill|decodes, adjust query start indices to refer to the start of decodes.
            query_start_loc=(None if qsl is None else qsl[self.num_prefills:] - qsl[self.num_prefills]),
            seq_start_loc=tail(self.seq_start_loc, self.num_prefills),
            context_lens_tensor=None,
            block_tables=tail(self.block_tables, self.num_prefills),
            head_dim=self.head_dim,
            is_profile_run=self.is_profile_run,
        )
        return self._cached_decode_metadata


class MLACommonMetadataBuilder(AttentionMetadataBuilder[T], Generic[T]):
    """The V0 builder reads vLLM's model-runner input builder; not reproduced."""

    def __init__(self, input_builder) -> None:
        self.input_builder = input_builder

    def build(self, seq_lens, query_lens, cuda_graph_pad_size, batch_size):
        raise NotImplementedError("stand-in: the V0 builder needs vLLM's model runner")


class MLACommonState(AttentionState, Generic[T]):
    """The V0 state holds the runner's CUDA-graph buffers; not reproduced."""

    def __init__(self, runner):
        self.runner = runner


class MLACommonImpl(MLAAttentionImpl[T], Generic[T]):
    """The seed's constructor; the seed's torch bodies are replaced by a subclass."""

    def __init__(
        self,
        num_heads: int,
        head_size: int,
        scale: float,
        num_kv_heads: int,
        alibi_slopes: Optional[List[float]],
        sliding_window: Optional[int],
        kv_cache_dtype: str,
        blocksparse_params: Optional[Dict[str, Any]],
        logits_soft_cap: Optional[float],
        attn_type: str,
        kv_sharing_target_layer_name: Optional[str],
        # MLA Specific Arguments
        q_lora_rank: Optional[int],
        kv_lora_rank: int,
        qk_nope_head_dim: int,
        qk_rope_head_dim: int,
        qk_head_dim: int,
        v_head_dim: int,
        kv_b_proj,
    ) -> None:
        if kv_sharing_target_layer_name is not None:
            raise NotImplementedError("KV sharing not supported in V0.")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads
        self.kv_cache_dtype = kv_cache_dtype

        self.q_lora_rank = q_lora_rank
        self.kv_lora_rank = kv_lora_rank
        self.qk_nope_head_dim = qk_nope_head_dim
        self.qk_rope_head_dim = qk_rope_head_dim
        self.qk_head_dim = qk_head_dim
        self.v_head_dim = v_head_dim
        self.kv_b_proj = kv_b_proj
        self.vllm_flash_attn_version = None  # no vllm_flash_attn in the stand-in
        self._pad_v = True

    def process_weights_after_loading(self, act_dtype):
        raise NotImplementedError("stand-in: the seed's torch weight split is not reproduced")

    def _forward_decode(self, ql_nope, q_pe, kv_c_and_k_pe_cache, attn_metadata: T):
        raise NotImplementedError

    def forward(self, layer: AttentionLayer, q, k_c_normed, k_pe, kv_cache, attn_metadata: T, output=None,
                output_scale=None, output_block_scale=None):
        raise NotImplementedError("stand-in: the seed's torch forward is not reproduced")
