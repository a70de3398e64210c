"""CUDA tensors in and out (PyTorch), zero-copy, on the caller's current stream.

Skipped with the reason where PyTorch, a GPU or a CUDA build of lattn is missing.
"""

import numpy as np
import pytest

import lattn
from conftest import cuda_torch_or_skip, torch_or_skip
from lattn._lattn import _testing


def test_cuda_tensor_round_trip_is_zero_copy():
    torch = cuda_torch_or_skip()
    x = torch.arange(24, device="cuda", dtype=torch.bfloat16).reshape(2, 3, 4)
    t = lattn.from_dlpack(x)
    assert t.device == "cuda:0" and t.dtype == "bf16" and t.data_ptr == x.data_ptr()
    y = torch.from_dlpack(t)
    assert y.device == x.device and y.data_ptr() == x.data_ptr()
    y[1, 2, 3] = -1
    assert float(x[1, 2, 3]) == -1.0


def test_lattn_cuda_memory_exported_to_torch():
    torch = cuda_torch_or_skip()
    t = lattn.empty((4, 8), "f32", "cuda")
    y = torch.from_dlpack(t)
    assert y.is_cuda and y.data_ptr() == t.data_ptr and y.shape == (4, 8)
    y.fill_(3.0)
    del t
    assert float(y.sum()) == 96.0  # the torch tensor keeps the lattn buffer alive


def test_calls_run_on_the_callers_current_stream():
    torch = cuda_torch_or_skip()
    x = torch.zeros(4, device="cuda")
    assert _testing.call_stream(x) == torch.cuda.current_stream().cuda_stream
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert _testing.call_stream(x) == side.cuda_stream
    assert _testing.call_stream(x, stream=1234) == 1234  # an explicit stream= wins
    assert _testing.call_stream(torch.zeros(4)) == 0  # host arrays: no stream


def test_host_arrays_never_ask_for_a_stream():
    torch = torch_or_skip()
    assert _testing.call_stream(torch.zeros(3)) == 0
    assert _testing.call_stream(np.zeros(3)) == 0
