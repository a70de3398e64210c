"""Stand-in for vllm.attention.backends.abstract: the generic backend abstractions
as lattn's seed 003 lists them (names, signatures, abstract methods)."""

from abc import ABC, abstractmethod
from dataclasses import dataclass, fields
from typing import Any, Dict, Generic, List, Optional, Protocol, Type, TypeVar


class AttentionType:
    """Attention type. Use string to be compatible with torch.compile."""

    DECODER = "decoder"
    ENCODER = "encoder"
    ENCODER_ONLY = "encoder_only"
    ENCODER_DECODER = "encoder_decoder"


class AttentionBackend(ABC):
    """Abstract class for attention backends."""

    accept_output_buffer: bool = False

    @staticmethod
    @abstractmethod
    def get_name() -> str:
        raise NotImplementedError

    @staticmethod
    @abstractmethod
    def get_impl_cls() -> Type["AttentionImpl"]:
        raise NotImplementedError

    @staticmethod
    @abstractmethod
    def get_metadata_cls() -> Type["AttentionMetadata"]:
        raise NotImplementedError

    @staticmethod
    @abstractmethod
    def get_state_cls() -> Type["AttentionState"]:
        raise NotImplementedError

    @classmethod
    def make_metadata(cls, *args, **kwargs) -> "AttentionMetadata":
        return cls.get_metadata_cls()(*args, **kwargs)

    @staticmethod
    @abstractmethod
    def get_builder_cls() -> Type["AttentionMetadataBuilder"]:
        raise NotImplementedError

    @staticmethod
    @abstractmethod
    def get_kv_cache_shape(num_blocks: int, block_size: int, num_kv_heads: int, head_size: int):
        raise NotImplementedError

    @staticmethod
    def get_kv_cache_stride_order():
        raise NotImplementedError

    @staticmethod
    @abstractmethod
    def swap_blocks(src_kv_cache, dst_kv_cache, src_to_dst) -> None:
        raise NotImplementedError

    @staticmethod
    @abstractmethod
    def copy_blocks(kv_caches, src_to_dists) -> None:
        raise NotImplementedError

    @classmethod
    def full_cls_name(cls) -> tuple:
        return (cls.__module__, cls.__qualname__)


@dataclass
class AttentionMetadata:
    """Attention metadata for prefill and decode batched together."""

    num_prefills: int
    num_prefill_tokens: int
    num_decode_tokens: int
    slot_mapping: Any
    multi_modal_placeholder_index_maps: Optional[Dict[str, Any]]
    enable_kv_scales_calculation: bool

    @property
    @abstractmethod
    def prefill_metadata(self) -> Optional["AttentionMetadata"]:
        pass

    @property
    @abstractmethod
    def decode_metadata(self) -> Optional["AttentionMetadata"]:
        pass

    def asdict_zerocopy(self, skip_fields=None) -> Dict[str, Any]:
        skip_fields = skip_fields or set()
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip_fields}


T = TypeVar("T", bound=AttentionMetadata)


class AttentionState(ABC, Generic[T]):
    """Holds attention backend-specific objects reused during the lifetime of the model runner."""

    @abstractmethod
    def __init__(self, runner):
        ...


class AttentionMetadataBuilder(ABC, Generic[T]):
    """Abstract class for attention metadata builders."""

    @abstractmethod
    def __init__(self, input_builder) -> None:
        raise NotImplementedError

    @abstractmethod
    def build(self, seq_lens: List[int], query_lens: List[int], cuda_graph_pad_size: int, batch_size: int) -> T:
        raise NotImplementedError


class AttentionLayer(Protocol):
    _k_scale: Any
    _v_scale: Any


class AttentionImpl(ABC, Generic[T]):

    @abstractmethod
    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: Optional[int] = None,
                 alibi_slopes: Optional[List[float]] = None, sliding_window: Optional[int] = None,
                 kv_cache_dtype: str = "auto", logits_soft_cap: Optional[float] = None,
                 attn_type: str = AttentionType.DECODER, kv_sharing_target_layer_name: Optional[str] = None) -> None:
        raise NotImplementedError

    @abstractmethod
    def forward(self, layer: AttentionLayer, query, key, value, kv_cache, attn_metadata: T, output=None,
                output_scale=None, output_block_scale=None):
        raise NotImplementedError

    def fused_output_quant_supported(self, quant_key) -> bool:
        """Does this attention implementation support fused output quantization."""
        return False


class MLAAttentionImpl(AttentionImpl[T], Generic[T]):

    @abstractmethod
    def forward(self, layer: AttentionLayer, hidden_states_or_cq, kv_c_normed, k_pe, kv_cache, attn_metadata: T,
                output=None, output_scale=None, output_block_scale=None):
        raise NotImplementedError
