"""Stand-in for vllm.v1.attention.backends.mla.prefill.registry (seed 001)."""

import importlib
from enum import Enum, EnumMeta


def resolve_obj_by_qualname(qualname: str):
    """Upstream's helper: 'pkg.mod.Name' -> the object (ImportError/AttributeError when absent)."""
    module_name, obj_name = qualname.rsplit(".", 1)
    module = importlib.import_module(module_name)
    return getattr(module, obj_name)


class _MLAPrefillBackendEnumMeta(EnumMeta):
    """Upstream's metaclass: Enum[name] with a helpful message (docs/backends.md)."""

    def __getitem__(cls, name):
        try:
            return super().__getitem__(name)
        except KeyError:
            members = cls.__members__.keys()
            raise ValueError(
                f"Unknown MLA prefill backend: '{name}'. Valid options are: {', '.join(members)}"
            ) from None


class MLAPrefillBackendEnum(Enum, metaclass=_MLAPrefillBackendEnumMeta):
    """Enumeration of all supported MLA prefill backends."""

    FLASH_ATTN = "vllm.v1.attention.backends.mla.prefill.flash_attn.FlashAttnPrefillBackend"
    FLASHINFER = "vllm.v1.attention.backends.mla.prefill.flashinfer.FlashInferPrefillBackend"
    TRTLLM_RAGGED = "vllm.v1.attention.backends.mla.prefill.trtllm_ragged.TrtllmRaggedPrefillBackend"
    TOKENSPEED_MLA = "vllm.v1.attention.backends.mla.prefill.tokenspeed_mla.TokenspeedMLAPrefillBackend"
    # Placeholder for third-party/custom backends - must be registered before use
    # set to None to avoid alias with other backend, whose value is an empty string
    CUSTOM = None

    def get_path(self) -> str:
        path = _MLA_PREFILL_OVERRIDES.get(self, self.value)
        if not path:
            raise ValueError(
                f"MLA prefill backend {self.name} must be registered before "
                f"use. Use register_mla_prefill_backend("
                f"MLAPrefillBackendEnum.{self.name}, "
                f"'your.module.YourClass')"
            )
        return path

    def get_class(self):
        return resolve_obj_by_qualname(self.get_path())

    def is_overridden(self) -> bool:
        return self in _MLA_PREFILL_OVERRIDES

    def clear_override(self) -> None:
        _MLA_PREFILL_OVERRIDES.pop(self, None)


_MLA_PREFILL_OVERRIDES: dict = {}


def register_mla_prefill_backend(backend, class_path=None):
    def decorator(cls):
        _MLA_PREFILL_OVERRIDES[backend] = f"{cls.__module__}.{cls.__qualname__}"
        return cls

    if class_path is not None:
        _MLA_PREFILL_OVERRIDES[backend] = class_path
        return lambda x: x

    return decorator
