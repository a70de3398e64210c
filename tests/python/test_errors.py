"""lattn's C++ exception kinds arrive as the matching Python exceptions, same messages."""

import numpy as np
import pytest

import lattn
from lattn._lattn import _testing

KINDS = [
    ("ValueError", ValueError),
    ("NotImplementedError", NotImplementedError),
    ("ImportError", ImportError),
    ("BackendUnavailableError", lattn.BackendUnavailableError),
    ("AssertionError", AssertionError),
    ("AttributeError", AttributeError),
    ("RuntimeError", RuntimeError),
    ("OutOfMemoryError", MemoryError),
]


@pytest.mark.parametrize("kind,exc", KINDS)
def test_each_kind_translates_with_its_message(kind, exc):
    message = f"{kind}: the exact text, with 'quotes' and ünïcode"
    with pytest.raises(exc) as info:
        _testing.raise_cpp(kind, message)
    assert str(info.value) == message
    assert type(info.value) is exc  # the kind itself, not a RuntimeError wrapper


def test_backend_unavailable_is_an_import_error():
    assert issubclass(lattn.BackendUnavailableError, ImportError)
    with pytest.raises(ImportError):
        _testing.raise_cpp("BackendUnavailableError", "required dependencies not available")


def test_value_error_from_a_real_call():
    with pytest.raises(ValueError, match=r"^unknown dtype 'f64'; expected one of f32, f16, bf16, fp8_e4m3"):
        lattn.empty((2,), "f64")
    with pytest.raises(ValueError, match=r"^unknown device 'gpu'; expected cpu, cuda or cuda:N$"):
        lattn.empty((2,), "f32", "gpu")


@pytest.mark.skipif(lattn.built_with_cuda(), reason="checks the CPU-only build's refusal of CUDA memory")
def test_cuda_memory_in_a_cpu_build_is_refused_with_a_reason():
    with pytest.raises(Exception) as info:
        lattn.empty((2,), "f32", "cuda")
    assert "CUDA" in str(info.value)
    assert type(info.value) in (ValueError, RuntimeError, lattn.BackendUnavailableError)


def test_astype_refuses_what_it_cannot_read():
    with pytest.raises(TypeError, match=r"astype: argument 'x' must be a DLPack array"):
        lattn.astype("text", "f32")
    with pytest.raises(ValueError, match=r"astype: argument 'x': from_dlpack: unsupported DLPack dtype"):
        lattn.astype(np.zeros(2, dtype=np.complex64), "f32")


def test_a_failed_allocation_is_a_memory_error():
    # 2**50 bytes: no host here can hold it, so the allocation itself fails.
    with pytest.raises(MemoryError, match="allocation"):
        lattn.empty((1 << 50,), "u8")
