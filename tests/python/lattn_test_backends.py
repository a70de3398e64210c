"""LattnPrefillBackend subclasses pinned to one lattn backend, importable by
qualname (vLLM's registry resolves 'module.Class'): lattn_test_backends.X."""

from vllm.v1.attention.backends.mla.prefill.base import MLADimensions  # the stand-in (tests/python/fake_vllm)

from lattn.vllm import LattnPrefillBackend


class LattnCustomPrefill(LattnPrefillBackend):
    """Runs lattn's CUSTOM member (the tests register the example plug-in there)."""

    lattn_backend = "CUSTOM"


class LattnReferencePrefill(LattnPrefillBackend):
    lattn_backend = "reference"


class LattnCpuPrefill(LattnPrefillBackend):
    lattn_backend = "cpu"


class LattnUnregisteredPrefill(LattnPrefillBackend):
    """Pinned to hopper, which a build without its kernels lists as unavailable."""

    lattn_backend = "hopper"


class LattnCustomUnavailable(LattnCustomPrefill):
    """As if its dependencies were missing: the adapter's reason order with every check failing."""

    @classmethod
    def is_available(cls) -> bool:
        return False


class R1Only(LattnCustomPrefill):
    """The older revision's gate (seed 001)."""

    requires_r1_mla_dimensions = True


class R1DimsOnly(LattnCustomPrefill):
    """The newer revision's gate (seed 000)."""

    supported_mla_dimensions = [MLADimensions(qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)]
