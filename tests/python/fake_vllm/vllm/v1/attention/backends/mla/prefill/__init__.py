"""Stand-in for vllm.v1.attention.backends.mla.prefill (seed 001): re-exports as vLLM does."""

from vllm.v1.attention.backends.mla.prefill.base import MLAPrefillBackend  # noqa: F401
from vllm.v1.attention.backends.mla.prefill.registry import (  # noqa: F401
    MLAPrefillBackendEnum,
    register_mla_prefill_backend,
)
from vllm.v1.attention.backends.mla.prefill.selector import get_mla_prefill_backend  # noqa: F401
