"""Shared pytest setup for lattn's Python tests.

The tests run against the package in <build>/python (tests/CMakeLists.txt
sets PYTHONPATH). PyTorch is optional: tests that need it skip with a reason
when it is absent, and CUDA tests also skip without a GPU or a CUDA build.
"""

import importlib.util
import os
import pathlib
import sys

import pytest

# The seeds' vLLM stand-in (fake_vllm/README.md) comes first on the path, so
# `import vllm...` finds it and lattn.vllm derives from its MLAPrefillBackend,
# as it would from the real one.
FAKE_VLLM = pathlib.Path(__file__).resolve().parent / "fake_vllm"
sys.path.insert(0, str(FAKE_VLLM))

# The example prefill plug-in (examples/plugin), built by lattn's build with
# the tests; tests/CMakeLists.txt says where.
EXAMPLE_PLUGIN = pathlib.Path(os.environ.get("LATTN_TEST_PLUGIN_DIR", "")) / "libexample_naive_prefill.so"


def torch_or_skip():
    """The torch module, or skip the calling test saying why."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("PyTorch is not installed for this interpreter")
    import torch

    return torch


def cuda_torch_or_skip():
    """torch, when it and lattn can both run on a GPU here; else skip with the reason."""
    torch = torch_or_skip()
    import lattn

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to PyTorch")
    if not lattn.built_with_cuda():
        pytest.skip("liblattn was built without CUDA")
    if not lattn.cuda_devices():
        pytest.skip(f"liblattn sees no CUDA device: {lattn.cuda_unavailable_reason()}")
    return torch


@pytest.fixture(scope="session")
def example_plugin_as_custom():
    """lattn's CUSTOM prefill member set to the example plug-in for the session ('example_naive')."""
    import lattn

    if not EXAMPLE_PLUGIN.is_file():
        pytest.skip(f"the example plug-in is not built ({EXAMPLE_PLUGIN}; set LATTN_TEST_PLUGIN_DIR)")
    lattn.register_mla_prefill_backend("CUSTOM", f"{EXAMPLE_PLUGIN}:lattn_example_naive_plugin")
    yield lattn.prefill_backend_class("CUSTOM")
    lattn.mla_prefill_backend_registry().clear_override("CUSTOM")


def available_prefill_backends():
    """lattn's built-in prefill backends that can run on the CPU in this build."""
    import lattn

    names = []
    for name in ("reference", "cpu"):
        c = lattn.prefill_backend_class(name)
        if c.is_available() and c.supports_compute_capability(None):
            names.append(name)
    return names
