// DLPack import/export (see lattn/dlpack_interop.h).
#include "lattn/dlpack_interop.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "lattn/errors.h"

namespace lattn {

DLDataType to_dl_dtype(DType t) {
  switch (t) {
    case DType::f32:
      return {kDLFloat, 32, 1};
    case DType::f16:
      return {kDLFloat, 16, 1};
    case DType::bf16:
      return {kDLBfloat, 16, 1};
    case DType::fp8_e4m3:
      return {kDLUInt, 8, 1};  // DLPack 0.6 has no fp8 code
    case DType::i32:
      return {kDLInt, 32, 1};
    case DType::i64:
      return {kDLInt, 64, 1};
    case DType::u8:
      return {kDLUInt, 8, 1};
  }
  return {kDLUInt, 8, 1};
}

DType from_dl_dtype(DLDataType t) {
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return DType::f32;
    if (t.code == kDLFloat && t.bits == 16) return DType::f16;
    if (t.code == kDLBfloat && t.bits == 16) return DType::bf16;
    if (t.code == kDLInt && t.bits == 32) return DType::i32;
    if (t.code == kDLInt && t.bits == 64) return DType::i64;
    if (t.code == kDLUInt && t.bits == 8) return DType::u8;
  }
  throw ValueError("from_dlpack: unsupported DLPack dtype (code " + std::to_string(int(t.code)) + ", bits " +
                   std::to_string(int(t.bits)) + ", lanes " + std::to_string(int(t.lanes)) +
                   "); expected float32, float16, bfloat16, int32, int64 or uint8");
}

Tensor from_dlpack(const DLTensor& t) {
  // The device type as the integer the producer stored: a C producer may
  // store a code this header's enum does not list (reading that as the enum
  // would be undefined behaviour).
  int32_t device_type = 0;
  static_assert(sizeof(t.device.device_type) == sizeof(device_type));
  std::memcpy(&device_type, &t.device.device_type, sizeof device_type);
  Device device;
  if (device_type == kDLCPU || device_type == kDLCUDAHost) {
    device = Device::cpu();
  } else if (device_type == kDLCUDA && t.device.device_id >= 0) {
    device = Device::cuda(t.device.device_id);
  } else {
    throw ValueError("from_dlpack: unsupported device (type " + std::to_string(device_type) + ", id " +
                     std::to_string(t.device.device_id) + "); expected CPU or CUDA with an id >= 0");
  }
  if (t.ndim < 0 || t.ndim > kMaxDims) {
    throw ValueError("from_dlpack: 0 to " + std::to_string(kMaxDims) + " dims are supported, got " +
                     std::to_string(t.ndim));
  }
  if (t.ndim > 0 && t.shape == nullptr) throw ValueError("from_dlpack: the producer gave no shape array");
  const DType dtype = from_dl_dtype(t.dtype);
  std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
  // data + byte_offset in integer arithmetic: an offset past the address
  // space is refused instead of overflowing a pointer.
  const uintptr_t base = reinterpret_cast<uintptr_t>(t.data);
  if (t.byte_offset > UINTPTR_MAX - base) {
    throw ValueError("from_dlpack: byte_offset " + std::to_string(t.byte_offset) + " overflows the data pointer");
  }
  void* data = reinterpret_cast<void*>(base + t.byte_offset);
  if (t.strides == nullptr) return Tensor(data, dtype, std::span<const int64_t>(shape), device);
  std::vector<int64_t> strides(t.strides, t.strides + t.ndim);
  return Tensor(data, dtype, std::span<const int64_t>(shape), std::span<const int64_t>(strides), device);
}

namespace {

struct ExportContext {
  std::shared_ptr<void> owner;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
};

void delete_export(DLManagedTensor* m) {
  delete static_cast<ExportContext*>(m->manager_ctx);
  delete m;
}

}  // namespace

DLManagedTensor* to_dlpack(const Tensor& t, std::shared_ptr<void> owner) {
  if (!t.defined()) throw ValueError("to_dlpack: argument 't' must be a tensor, got no tensor");
  auto* ctx = new ExportContext{
      std::move(owner), {t.shape().begin(), t.shape().end()}, {t.strides().begin(), t.strides().end()}};
  auto* m = new DLManagedTensor{};
  m->dl_tensor.data = t.data();
  m->dl_tensor.device = t.device().is_cpu() ? DLDevice{kDLCPU, 0} : DLDevice{kDLCUDA, t.device().index};
  m->dl_tensor.ndim = t.dim();
  m->dl_tensor.dtype = to_dl_dtype(t.dtype());
  m->dl_tensor.shape = ctx->shape.data();
  m->dl_tensor.strides = ctx->strides.data();
  m->dl_tensor.byte_offset = 0;
  m->manager_ctx = ctx;
  m->deleter = delete_export;
  return m;
}

}  // namespace lattn
