"""Stand-in for vllm.v1.attention.backends.mla.prefill.selector (seed 001).

The seed reads the device capability from vllm.platforms.current_platform;
here the caller passes it (None = no device), the only change.
"""

from typing import Any, NamedTuple

from vllm.v1.attention.backends.mla.prefill.base import MLADimensions
from vllm.v1.attention.backends.mla.prefill.registry import MLAPrefillBackendEnum


class DeviceCapability(NamedTuple):
    major: int
    minor: int


class MLAPrefillSelectorConfig(NamedTuple):
    """Upstream's hashable selector config: both revisions' fields (docs/backends.md)."""

    dtype: Any
    is_r1_compatible: bool = False
    mla_dimensions: MLADimensions = MLADimensions(qk_nope_head_dim=0, qk_rope_head_dim=0, v_head_dim=0)


def is_deepseek_r1_mla_compatible(vllm_config) -> bool:
    if vllm_config.model_config is None:
        return False
    hf = vllm_config.model_config.hf_text_config
    dims = (getattr(hf, "qk_nope_head_dim", 1), getattr(hf, "qk_rope_head_dim", 1), getattr(hf, "v_head_dim", 1))
    return dims == (128, 64, 128)


def get_mla_prefill_backend(vllm_config, device_capability):
    if device_capability is None:
        return MLAPrefillBackendEnum.FLASH_ATTN.get_class()

    attention_config = vllm_config.attention_config
    hf = vllm_config.model_config.hf_text_config
    selector_config = MLAPrefillSelectorConfig(
        dtype=vllm_config.model_config.dtype,
        is_r1_compatible=is_deepseek_r1_mla_compatible(vllm_config),
        mla_dimensions=MLADimensions(
            qk_nope_head_dim=hf.qk_nope_head_dim, qk_rope_head_dim=hf.qk_rope_head_dim, v_head_dim=hf.v_head_dim
        ),
    )

    if attention_config.mla_prefill_backend is not None:
        selected_backend = attention_config.mla_prefill_backend
        backend_cls = None
        try:
            backend_cls = selected_backend.get_class()
            invalid_reasons = backend_cls.validate_configuration(device_capability, selector_config)
        except ImportError:
            invalid_reasons = ["ImportError"]
        if invalid_reasons:
            raise ValueError(
                f"Selected MLA prefill backend {selected_backend.name} "
                f"is not valid for this configuration. "
                f"Reason: {invalid_reasons}"
            )
        assert backend_cls is not None
        return backend_cls

    raise NotImplementedError("the stand-in selector has no automatic choice: name a backend")
