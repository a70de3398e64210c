"""Version, build options, dtypes and device information."""

import pathlib
import re

import numpy as np

import lattn

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_version_matches_the_cmake_project():
    cmake = (ROOT / "CMakeLists.txt").read_text()
    assert lattn.version() == re.search(r"project\(lattn VERSION ([0-9.]+)", cmake).group(1)
    assert lattn.__version__ == lattn.version()


def test_build_options_agree_with_built_with_cuda():
    options = lattn.build_options()
    assert ("cuda=on" in options) == lattn.built_with_cuda()
    assert ("cuda=off" in options) == (not lattn.built_with_cuda())


def test_devices_are_listed_or_the_reason_is_given():
    devices = lattn.cuda_devices()
    if devices:
        assert lattn.cuda_unavailable_reason() == ""
        d = devices[0]
        assert d.index == 0 and d.sm_count > 0 and d.total_memory_bytes > 0
        assert lattn.device_capability(0) == d.capability
    else:
        assert lattn.cuda_unavailable_reason() != ""
        assert lattn.device_capability(0) is None
    if not lattn.built_with_cuda():
        assert devices == [] and lattn.cuda_unavailable_reason() == "lattn was built without CUDA"
    assert lattn.device_capability(99) is None


def test_device_capability_value():
    c = lattn.DeviceCapability(9, 0)
    assert (c.major, c.minor, c.as_int()) == (9, 0, 90)
    assert c == lattn.DeviceCapability(9, 0) and c != lattn.DeviceCapability(8, 0)
    assert repr(c) == "DeviceCapability(major=9, minor=0)"


def test_dtype_spellings():
    assert lattn.dtypes() == ["f32", "f16", "bf16", "fp8_e4m3", "i32", "i64", "u8"]
    assert lattn.dtype_name("bfloat16") == "bf16"
    assert lattn.dtype_name("torch.float16") == "f16"
    assert lattn.dtype_name(np.float32) == "f32"
    assert lattn.dtype_name(np.dtype("int64")) == "i64"
    assert lattn.dtype_torch_name("bf16") == "torch.bfloat16"
    assert lattn.dtype_torch_name("fp8") == "torch.float8_e4m3fn"
