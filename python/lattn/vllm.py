"""lattn as a vLLM MLA prefill backend.

    from vllm.v1.attention.backends.mla.prefill.registry import (
        MLAPrefillBackendEnum, register_mla_prefill_backend)
    register_mla_prefill_backend(MLAPrefillBackendEnum.CUSTOM, "lattn.vllm.LattnPrefillBackend")

and select it with vLLM's attention config (mla_prefill_backend=CUSTOM).

Interface followed: vLLM's ``MLAPrefillBackend`` as documented at the two
revisions kept in lattn's seeds (docs/backends.md):
  * ``vllm.v1.attention.backends.mla.prefill`` (seed 001, the older revision:
    ``requires_r1_mla_dimensions``, ``MLAPrefillSelectorConfig.is_r1_compatible``,
    ``run_prefill_new_tokens(q, k, v, return_softmax_lse)``);
  * ``vllm.v1.attention.backends.mla.prefill.base`` (seed 000, the newer one:
    ``supported_mla_dimensions``, ``selector_config.mla_dimensions``,
    ``supports_quant_output(quant_key)``, and ``out=`` / ``output_scale=`` on
    ``run_prefill_new_tokens``).
The class answers both: whichever fields the selector config carries are
checked, and the extra arguments of the newer revision are optional.

Tensors: q, k [T, N, P+R]; v [T, N, V] (any strides lattn's backend takes;
vLLM passes the split view of kv_b_proj's output). Outputs are new tensors of
the caller's framework on the caller's device (torch.empty on q.device), or
``out`` when given, written on the caller's current CUDA stream.
Output [T, N, V] in q's dtype (fp8 e4m3 with ``output_scale``).
LSE [N, T] (num_heads first, as FlashAttention returns it), float32, natural
log of the softmax denominator; -inf for a row that attended to nothing (a
request with no keys in a context chunk), whose output is 0.

Which lattn backend runs: ``lattn_backend`` (a class attribute; "" by
default) names one of lattn's prefill backends ("cpu", "cuda", "hopper",
"reference", "CUSTOM"); empty means lattn's selector decides per device
(LATTN_MLA_PREFILL_BACKEND also pins it, see lattn's selector docs).
Subclass to pin one: ``class LattnCudaPrefill(LattnPrefillBackend): lattn_backend = "cuda"``.

Neither vLLM nor PyTorch is needed to import this module. When vLLM is
installed the class derives from its ``MLAPrefillBackend``, so isinstance
checks and any default added upstream keep working.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, ClassVar

import lattn

VLLM_PREFILL_BASE = "vllm.v1.attention.backends.mla.prefill.base"

# The seeds' S1 dimension reason (and DeepSeek-R1's dims, which it names).
R1_DIMENSIONS = (128, 64, 128)
R1_REASON = (
    "model does not have DeepSeek R1 MLA dimensions "
    "(qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)"
)

# lattn's name for the one output quantization the seeds' callers use.
FP8_STATIC_PER_TENSOR = "fp8_e4m3_static_per_tensor"


def _vllm_base() -> type:
    """vLLM's MLAPrefillBackend when vLLM is importable, else object."""
    try:
        return importlib.import_module(VLLM_PREFILL_BASE).MLAPrefillBackend
    except Exception:  # vLLM absent, or present but not importable here
        return object


def _torch():
    """The torch module when it is already importable, else None (never required)."""
    if "torch" in sys.modules:
        return sys.modules["torch"]
    try:
        import torch  # noqa: PLC0415  (optional dependency)

        return torch
    except ImportError:
        return None


def _lattn_dtype(dtype: Any) -> str | None:
    """lattn's name of a dtype in any spelling, or None when lattn has no such dtype."""
    try:
        return lattn.dtype_name(dtype)
    except (ValueError, TypeError):
        return None


def _lattn_capability(device_capability: Any):
    """vLLM's DeviceCapability (major, minor) as lattn's; None stays None (the CPU)."""
    if device_capability is None:
        return None
    return lattn.DeviceCapability(int(device_capability.major), int(device_capability.minor))


def _dims_of(obj: Any) -> tuple[int, int, int] | None:
    """(qk_nope_head_dim, qk_rope_head_dim, v_head_dim) of an MLADimensions-like object."""
    if obj is None:
        return None
    try:
        return (int(obj.qk_nope_head_dim), int(obj.qk_rope_head_dim), int(obj.v_head_dim))
    except AttributeError:
        return None


def _host(x: Any) -> Any:
    """A host copy of an index array (torch: .cpu(), ordered on the current stream), or x itself."""
    if x is None:
        return None
    device = getattr(x, "device", None)
    if device is not None and getattr(device, "type", "cpu") != "cpu" and hasattr(x, "cpu"):
        return x.cpu()
    return x


def _quant_key_name(quant_key: Any) -> str | None:
    """lattn's name of vLLM's QuantKey for fp8 e4m3 with one static per-tensor scale, else None.

    vLLM's QuantKey(dtype, scale=ScaleDesc(dtype, static, group_shape), symmetric)
    is upstream code, not in the seeds; lattn's own name is accepted as well.
    """
    if isinstance(quant_key, str):
        return quant_key if quant_key == FP8_STATIC_PER_TENSOR else None
    dtype = str(getattr(quant_key, "dtype", ""))
    scale = getattr(quant_key, "scale", None)
    if "float8_e4m3" not in dtype or scale is None or not getattr(scale, "static", False):
        return None
    group_shape = getattr(scale, "group_shape", None)
    if group_shape is not None and tuple(group_shape) != (-1, -1):  # GroupShape.PER_TENSOR
        return None
    if not getattr(quant_key, "symmetric", True):
        return None
    return FP8_STATIC_PER_TENSOR


def _supported_dtypes() -> list:
    """torch.float16 and torch.bfloat16 as the seeds list them (lattn's names without PyTorch)."""
    torch = _torch()
    if torch is None:
        return ["f16", "bf16"]
    return [torch.float16, torch.bfloat16]


class LattnPrefillBackend(_vllm_base()):
    """lattn's prefill attention behind vLLM's MLAPrefillBackend interface."""

    # The seeds' ClassVars. lattn's backends decide the rest (see supports_dtype).
    supported_dtypes: ClassVar[list] = _supported_dtypes()
    supported_mla_dimensions: ClassVar[list] = []  # newer revision: empty = any
    requires_r1_mla_dimensions: ClassVar[bool] = False  # older revision

    # The lattn backend to run; "" = lattn's selector (see the module docs).
    lattn_backend: ClassVar[str] = ""

    # ---- class side: what vLLM's selector asks --------------------------------

    @staticmethod
    def get_name() -> str:
        return "LATTN"

    @classmethod
    def _candidates(cls, capability) -> list:
        """lattn backend classes that could serve a device of this capability, best first."""
        if cls.lattn_backend:
            return [lattn.prefill_backend_class(cls.lattn_backend)]
        device = "cpu" if capability is None else "cuda"
        names = lattn.mla_backend_priorities(device, capability)
        return [lattn.prefill_backend_class(name) for name in names]

    @classmethod
    def _available_classes(cls) -> list:
        """The pinned lattn backend class, or every registered one that can run in this build."""
        if cls.lattn_backend:
            return [lattn.prefill_backend_class(cls.lattn_backend)]
        classes = []
        for name in lattn.prefill_backends():
            try:
                c = lattn.prefill_backend_class(name)
            except (ImportError, ValueError):  # an unregistered CUSTOM, a plug-in that does not load
                continue
            if c.is_available():
                classes.append(c)
        return classes

    @classmethod
    def supports_compute_capability(cls, device_capability) -> bool:
        capability = _lattn_capability(device_capability)
        return any(c.supports_compute_capability(capability) for c in cls._candidates(capability))

    @classmethod
    def supports_dtype(cls, dtype) -> bool:
        name = _lattn_dtype(dtype)
        if name is None:
            return False
        return any(c.supports_dtype(name) for c in cls._available_classes())

    @classmethod
    def is_available(cls) -> bool:
        """lattn's library loaded (this module imported it) and a chosen backend can run here."""
        try:
            return any(c.is_available() for c in cls._available_classes())
        except (ImportError, ValueError):  # the pinned backend cannot be resolved
            return False

    @classmethod
    def validate_configuration(cls, device_capability, selector_config) -> list[str]:
        """The seeds' checks and texts, in their order, then lattn's own reasons.

        Reads selector_config.dtype, and .mla_dimensions (newer revision) or
        .is_r1_compatible (older revision), whichever it has.
        """
        reasons: list[str] = []
        if not cls.supports_compute_capability(device_capability):
            reasons.append(
                f"compute capability {device_capability.major}.{device_capability.minor} not supported"
            )
        if not cls.supports_dtype(selector_config.dtype):
            reasons.append(f"dtype {selector_config.dtype} not supported")
        if not cls.is_available():
            reasons.append("required dependencies not available")
        dims = _dims_of(getattr(selector_config, "mla_dimensions", None))
        is_r1 = getattr(selector_config, "is_r1_compatible", None)
        if is_r1 is None and dims is not None:
            is_r1 = dims == R1_DIMENSIONS
        if cls.requires_r1_mla_dimensions and not is_r1:
            reasons.append(R1_REASON)
        supported = [_dims_of(d) for d in cls.supported_mla_dimensions]
        if supported and dims not in supported:
            text = ", ".join(str(d) for d in cls.supported_mla_dimensions)
            reasons.append(
                "Model does not have supported MLA dimensions "
                f"(got {selector_config.mla_dimensions}; supported: {text})"
            )
        if not reasons:
            reasons.extend(cls._lattn_reasons(device_capability, selector_config, dims, bool(is_r1)))
        return reasons

    @classmethod
    def _lattn_reasons(cls, device_capability, selector_config, dims, is_r1) -> list[str]:
        """Why lattn itself cannot serve the configuration ([] when a backend can)."""
        capability = _lattn_capability(device_capability)
        config = lattn.SelectorConfig(
            dtype=_lattn_dtype(selector_config.dtype),
            mla_dimensions=lattn.MLADimensions(*dims) if dims else None,
            is_r1_compatible=is_r1,
            device="cpu" if capability is None else "cuda",
        )
        verdicts = [c.validate_configuration(capability, config) for c in cls._candidates(capability)]
        if any(not v for v in verdicts):
            return []
        return verdicts[0]  # the reasons of the backend lattn prefers on this device

    # ---- instance side: what vLLM's MLA attention calls -----------------------

    def __init__(
        self,
        num_heads: int,
        scale: float,
        kv_lora_rank: int,
        qk_nope_head_dim: int,
        qk_rope_head_dim: int,
        v_head_dim: int,
        vllm_config: Any,
    ) -> None:
        self.num_heads = num_heads
        self.scale = scale
        self.kv_lora_rank = kv_lora_rank
        self.qk_nope_head_dim = qk_nope_head_dim
        self.qk_rope_head_dim = qk_rope_head_dim
        self.v_head_dim = v_head_dim
        self.vllm_config = vllm_config
        self._prefill_metadata = None
        self._lattn_metadata = None
        self._prepared_for = None  # (backend instance, metadata) last passed to prepare_metadata
        self._instances: dict = {}  # (device, dtype) -> lattn PrefillBackend

    def supports_quant_output(self, quant_key) -> bool:
        """True when lattn's backend for this layer writes fp8 (static per-tensor scale) itself."""
        name = _quant_key_name(quant_key)
        if name is None:
            return False
        dtype = _lattn_dtype(getattr(getattr(self.vllm_config, "model_config", None), "dtype", None)) or "bf16"
        try:
            backend_class = self._backend_class(self._config_device(), dtype)
        except ValueError:  # no lattn backend can serve this layer here: nothing to fuse
            return False
        return backend_class.supports_quant_output(name)

    def prepare_metadata(self, prefill_metadata) -> None:
        """Keeps the step's prefill metadata (the seeds' default) and its lattn view.

        Accepts vLLM v1's MLACommonPrefillMetadata (query_start_loc,
        max_query_len, chunked_context.{cu_seq_lens, starts, seq_tot,
        max_seq_lens}), the V0 field names of seed 002 (context_chunk_*), or a
        lattn.PrefillMetadata. Index arrays are viewed, not copied, except one
        host copy of each device array (planning reads lengths on the host).
        """
        self._prefill_metadata = prefill_metadata
        self._lattn_metadata = _lattn_prefill_metadata(prefill_metadata)
        self._prepared_for = None

    def run_prefill_new_tokens(self, q, k, v, return_softmax_lse, out=None, output_scale=None):
        """Causal attention of the new tokens of each prefill: out, or (out, lse)."""
        backend = self._prepared_backend(q)
        result, lse = backend.run_prefill_new_tokens(
            q, k, v, bool(return_softmax_lse), out=out, output_scale=output_scale
        )
        return (result, lse) if return_softmax_lse else result

    def run_prefill_context_chunk(self, chunk_idx, q, k, v):
        """Non-causal attention of the new tokens against context chunk chunk_idx: (out, lse)."""
        backend = self._prepared_backend(q)
        return backend.run_prefill_context_chunk(int(chunk_idx), q, k, v)

    # ---- helpers ----------------------------------------------------------------

    def _config_device(self) -> str:
        device = getattr(getattr(self.vllm_config, "device_config", None), "device", None)
        if device is None:
            return "cuda" if lattn.cuda_devices() else "cpu"
        return "cpu" if str(device) == "cpu" else "cuda"

    def _backend_class(self, device: str, dtype: str):
        config = lattn.SelectorConfig(
            dtype=dtype,
            mla_dimensions=lattn.MLADimensions(self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim),
            device=device,
            prefill_backend=type(self).lattn_backend,
        )
        return lattn.get_mla_prefill_backend(config)

    def _prepared_backend(self, q):
        if self._lattn_metadata is None:
            raise AssertionError("prepare_metadata() must be called before running prefill attention")
        tensor = lattn.from_dlpack(q)
        key = (tensor.device, tensor.dtype)
        backend = self._instances.get(key)
        if backend is None:
            backend = self._backend_class(key[0], key[1]).create(
                num_heads=self.num_heads,
                scale=float(self.scale),
                kv_lora_rank=self.kv_lora_rank,
                qk_nope_head_dim=self.qk_nope_head_dim,
                qk_rope_head_dim=self.qk_rope_head_dim,
                v_head_dim=self.v_head_dim,
                dtype=key[1],
                device=key[0],
            )
            self._instances[key] = backend
        if self._prepared_for != (backend, self._lattn_metadata):
            backend.prepare_metadata(self._lattn_metadata)
            self._prepared_for = (backend, self._lattn_metadata)
        return backend


def _lattn_prefill_metadata(md):
    """A lattn.PrefillMetadata viewing the arrays of vLLM's prefill metadata."""
    if isinstance(md, lattn.PrefillMetadata):
        return md
    chunked = getattr(md, "chunked_context", None)
    if chunked is not None:  # vLLM v1
        cu_seq_lens, starts = chunked.cu_seq_lens, chunked.starts
        seq_tot, max_seq_lens = chunked.seq_tot, chunked.max_seq_lens
    else:  # seed 002's V0 names (None when the step has no context)
        cu_seq_lens = getattr(md, "context_chunk_cu_seq_lens", None)
        starts = getattr(md, "context_chunk_starts", None)
        seq_tot = getattr(md, "context_chunk_seq_tot", None)
        max_seq_lens = getattr(md, "context_chunk_max_seq_lens", None)
    query_start_loc = md.query_start_loc
    return lattn.PrefillMetadata.from_arrays(
        query_start_loc=query_start_loc,
        query_start_loc_cpu=_host(query_start_loc),
        max_query_len=int(md.max_query_len),
        chunk_cu_seq_lens=cu_seq_lens,
        chunk_cu_seq_lens_cpu=_host(cu_seq_lens),
        chunk_starts=starts,
        chunk_starts_cpu=_host(starts),
        chunk_seq_tot=None if seq_tot is None else [int(x) for x in seq_tot],
        chunk_max_seq_lens=None if max_seq_lens is None else [int(x) for x in max_seq_lens],
    )


# The whole-layer backend (vLLM's MLACommonBackend / MLACommonImpl interface).
from lattn.vllm_mla import LattnMLABackend, LattnMLAImpl  # noqa: E402,F401
