"""Shared pytest setup for lattn's Python tests.

The tests run against the package in <build>/python (tests/CMakeLists.txt
sets PYTHONPATH). PyTorch is optional: tests that need it skip with a reason
when it is absent, and CUDA tests also skip without a GPU or a CUDA build.
"""

import importlib.util

import pytest


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
