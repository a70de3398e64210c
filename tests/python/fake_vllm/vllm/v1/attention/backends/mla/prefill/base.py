"""Stand-in for vllm.v1.attention.backends.mla.prefill.base: MLAPrefillBackend, seed 000's revision."""

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

try:
    import torch

    FLOAT16, BFLOAT16 = torch.float16, torch.bfloat16
except ImportError:  # the tests also run without PyTorch: dtypes print the same
    torch = None
    FLOAT16, BFLOAT16 = "torch.float16", "torch.bfloat16"


@dataclass(frozen=True, kw_only=True)
class MLADimensions:
    """Upstream's MLADimensions (docs/backends.md): compared by value."""

    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    def __str__(self):
        return (f"(qk_nope_head_dim={self.qk_nope_head_dim}, qk_rope_head_dim={self.qk_rope_head_dim}, "
                f"v_head_dim={self.v_head_dim})")


class MLAPrefillBackend(ABC):
    """Abstract base class for MLA prefill backends."""

    supported_dtypes: ClassVar[list] = [
        FLOAT16,
        BFLOAT16,
    ]
    supported_mla_dimensions: ClassVar[list[MLADimensions]] = []

    @staticmethod
    @abstractmethod
    def get_name() -> str:
        raise NotImplementedError

    @classmethod
    def supports_compute_capability(cls, device_capability) -> bool:
        return True

    @classmethod
    def supports_dtype(cls, dtype) -> bool:
        return dtype in cls.supported_dtypes

    @classmethod
    def is_available(cls) -> bool:
        return True

    def supports_quant_output(self, quant_key) -> bool:
        return False

    @classmethod
    def validate_configuration(cls, device_capability, selector_config) -> list[str]:
        invalid_reasons: list[str] = []

        if not cls.supports_compute_capability(device_capability):
            invalid_reasons.append(
                f"compute capability {device_capability.major}."
                f"{device_capability.minor} not supported"
            )

        if not cls.supports_dtype(selector_config.dtype):
            invalid_reasons.append(f"dtype {selector_config.dtype} not supported")

        if not cls.is_available():
            invalid_reasons.append("required dependencies not available")

        if (
            cls.supported_mla_dimensions
            and selector_config.mla_dimensions not in cls.supported_mla_dimensions
        ):
            supported = ", ".join(str(dims) for dims in cls.supported_mla_dimensions)
            invalid_reasons.append(
                "Model does not have supported MLA dimensions "
                f"(got {selector_config.mla_dimensions}; supported: {supported})"
            )

        return invalid_reasons

    def __init__(self, num_heads, scale, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, vllm_config):
        self.num_heads = num_heads
        self.scale = scale
        self.kv_lora_rank = kv_lora_rank
        self.qk_nope_head_dim = qk_nope_head_dim
        self.qk_rope_head_dim = qk_rope_head_dim
        self.v_head_dim = v_head_dim
        self.vllm_config = vllm_config

    def prepare_metadata(self, prefill_metadata) -> None:
        self._prefill_metadata = prefill_metadata

    @abstractmethod
    def run_prefill_new_tokens(self, q, k, v, return_softmax_lse, out=None, output_scale=None):
        raise NotImplementedError

    @abstractmethod
    def run_prefill_context_chunk(self, chunk_idx, q, k, v):
        raise NotImplementedError
