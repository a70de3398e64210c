"""DLPack in and out without copies: the same memory on both sides."""

import ctypes
import gc

import numpy as np
import pytest

import lattn
from conftest import torch_or_skip

def writable_alias(t, np_dtype, count):
    """A writable NumPy array over t's memory. NumPy 1.x marks every array it
    imports through DLPack read-only, so the tests write through this alias to
    show that two views share one memory."""
    size = np.dtype(np_dtype).itemsize
    raw = (ctypes.c_char * (size * count)).from_address(t.data_ptr)
    return np.frombuffer(raw, dtype=np_dtype)


NUMPY_DTYPES = [(np.float32, "f32"), (np.float16, "f16"), (np.int32, "i32"), (np.int64, "i64"), (np.uint8, "u8")]


@pytest.mark.parametrize("np_dtype,name", NUMPY_DTYPES)
def test_numpy_view_is_zero_copy(np_dtype, name):
    x = np.arange(24).astype(np_dtype).reshape(2, 3, 4)
    t = lattn.from_dlpack(x)
    assert t.data_ptr == x.ctypes.data
    assert t.shape == (2, 3, 4) and t.strides == (12, 4, 1) and t.dtype == name and t.device == "cpu"
    back = np.from_dlpack(t)
    assert back.ctypes.data == x.ctypes.data
    x[1, 2, 3] = 7
    assert back[1, 2, 3] == 7  # one memory, seen from both sides


def test_strided_numpy_view_keeps_strides_and_offset():
    x = np.arange(60, dtype=np.float32).reshape(5, 12)
    view = x[1:, 2::3]  # offset start, non-unit last stride
    t = lattn.from_dlpack(view)
    assert t.data_ptr == view.ctypes.data
    assert t.shape == (4, 4) and t.strides == (12, 3) and not t.is_contiguous()
    np.testing.assert_array_equal(np.from_dlpack(t), view)


def test_lattn_owned_tensor_exports_its_memory():
    t = lattn.empty((3, 5), "f32")
    a = np.from_dlpack(t)
    assert a.ctypes.data == t.data_ptr and a.shape == (3, 5) and a.dtype == np.float32
    writable_alias(t, np.float32, 15)[:] = 2.5
    del t
    gc.collect()
    # The NumPy array keeps the lattn buffer alive after the lattn.Tensor is gone.
    assert float(a.sum()) == 2.5 * 15
    z = lattn.zeros((4,), "i64")
    assert np.from_dlpack(z).tolist() == [0, 0, 0, 0]


def test_imported_view_keeps_the_producer_alive():
    x = np.arange(8, dtype=np.float32)
    ptr = x.ctypes.data
    t = lattn.from_dlpack(x)
    del x
    gc.collect()
    again = np.from_dlpack(t)
    assert again.ctypes.data == ptr
    assert again.tolist() == list(range(8))


def test_unconsumed_capsule_is_freed_and_tensor_stays_valid():
    t = lattn.zeros((2,), "f32")
    for _ in range(100):
        t.__dlpack__()  # dropped at once: the capsule's destructor frees the export
    assert t.__dlpack_device__() == (1, 0)
    assert np.from_dlpack(t).tolist() == [0.0, 0.0]


def bf16_round(x):
    """Round-to-nearest-even to bfloat16, returned as float32 (NumPy has no bf16)."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32)


def test_astype_bf16_and_back():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(1000).astype(np.float32)
    b = lattn.astype(x, "bf16")
    assert isinstance(b, lattn.Tensor) and b.dtype == "bf16"  # NumPy cannot hold bf16
    back = lattn.astype(b, "f32").numpy()
    np.testing.assert_array_equal(back, bf16_round(x))


def test_astype_fp8_saturates_and_exports_as_uint8():
    x = np.array([0.0, 1.0, -2.0, 448.0, 1000.0, -1e9], dtype=np.float32)
    f8 = lattn.astype(x, "fp8_e4m3")
    assert f8.dtype == "fp8_e4m3"
    raw = np.from_dlpack(f8)  # DLPack 0.6 has no fp8 code: the bytes, as uint8
    assert raw.dtype == np.uint8
    assert lattn.astype(f8, "f32").numpy().tolist() == [0.0, 1.0, -2.0, 448.0, 448.0, -448.0]


def test_astype_to_a_numpy_dtype_returns_numpy():
    x = np.linspace(-1, 1, 7, dtype=np.float32)
    h = lattn.astype(x, np.float16)
    assert isinstance(h, np.ndarray) and h.dtype == np.float16
    np.testing.assert_array_equal(h, x.astype(np.float16))


def test_unsupported_dtype_names_the_argument():
    with pytest.raises(ValueError, match=r"from_dlpack: argument 'x': from_dlpack: unsupported DLPack dtype"):
        lattn.from_dlpack(np.zeros(3, dtype=np.float64))


def test_non_array_is_a_type_error_naming_the_argument():
    with pytest.raises(TypeError, match=r"argument 'x' must be a DLPack array .* got builtins.list"):
        lattn.from_dlpack([1.0, 2.0])


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32", "int64"])
def test_torch_cpu_round_trip_is_zero_copy(dtype):
    torch = torch_or_skip()
    x = torch.arange(12).to(getattr(torch, dtype)).reshape(3, 4)
    t = lattn.from_dlpack(x)
    assert t.data_ptr == x.data_ptr()
    assert t.dtype == lattn.dtype_name(getattr(torch, dtype))
    y = torch.from_dlpack(t)
    assert y.data_ptr() == x.data_ptr() and y.dtype == x.dtype
    y[0, 0] = 5
    assert int(x[0, 0]) == 5


def test_torch_strided_view():
    torch = torch_or_skip()
    x = torch.arange(30, dtype=torch.float32).reshape(5, 6).t()  # transposed: strides (1, 6)
    t = lattn.from_dlpack(x)
    assert t.strides == (1, 6) and t.data_ptr == x.data_ptr()
    assert torch.equal(torch.from_dlpack(t), x)


def test_read_only_numpy_arrays_are_viewed_through_the_buffer_protocol():
    # NumPy 1.x refuses __dlpack__ on read-only arrays; lattn still views them without a copy.
    base = np.arange(4, dtype=np.float32)
    x = np.broadcast_to(base, (3, 4))  # read-only, stride 0 on the first dim
    t = lattn.from_dlpack(x)
    assert t.data_ptr == base.ctypes.data and t.strides == (0, 1) and t.shape == (3, 4)
    np.testing.assert_array_equal(lattn.astype(x, "f16"), x.astype(np.float16))


def test_numpy_method_gives_a_writable_view():
    t = lattn.zeros((2, 3), "f32")
    a = t.numpy()
    assert a.flags.writeable and a.ctypes.data == t.data_ptr
    a[1, 2] = 4.0
    assert np.asarray(t)[1, 2] == 4.0
    with pytest.raises(BufferError, match="bf16 has no buffer format"):
        lattn.zeros((2,), "bf16").numpy()
