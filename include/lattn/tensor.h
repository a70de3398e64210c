// lattn/tensor.h — a non-owning strided tensor view, and owning storage.
//
// Tensor is what every public entry point takes: a data pointer, a dtype, a
// device, and up to 6 dims of shape and strides in ELEMENTS (as DLPack and
// PyTorch count them). It never owns memory; slicing returns new views of the
// same memory, and every slicing call checks its bounds (ValueError).
//
// Buffer owns memory (64-byte aligned host memory, or cudaMalloc on a CUDA
// device) with RAII; OwnedTensor pairs a Buffer with a contiguous Tensor view.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "lattn/device.h"
#include "lattn/dtype.h"

namespace lattn {

constexpr int kMaxDims = 6;

class Tensor {
 public:
  // An undefined tensor (defined() == false): "no tensor" for optional arguments.
  Tensor() = default;
  // A contiguous (row-major) view of `shape` over `data`.
  Tensor(void* data, DType dtype, std::span<const int64_t> shape, Device device = Device::cpu());
  Tensor(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device = Device::cpu())
      : Tensor(data, dtype, std::span<const int64_t>(shape.begin(), shape.size()), device) {}
  // A strided view; shape and strides must have the same length (<= kMaxDims).
  Tensor(void* data, DType dtype, std::span<const int64_t> shape, std::span<const int64_t> strides,
         Device device = Device::cpu());

  bool defined() const { return defined_; }
  void* data() const { return data_; }
  template <class T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int dim() const { return ndim_; }
  // Size / stride of dim d; negative d counts from the end (-1 = last).
  int64_t size(int d) const { return shape_[norm_dim(d)]; }
  int64_t stride(int d) const { return strides_[norm_dim(d)]; }
  std::span<const int64_t> shape() const { return {shape_.data(), size_t(ndim_)}; }
  std::span<const int64_t> strides() const { return {strides_.data(), size_t(ndim_)}; }
  int64_t numel() const;
  int element_size() const { return dtype_size(dtype_); }
  // Bytes spanned by a contiguous tensor (numel * element size).
  size_t nbytes() const { return size_t(numel()) * size_t(element_size()); }
  bool is_contiguous() const;
  // True when the last dim has stride 1 (rows may be strided).
  bool is_last_dim_contiguous() const {
    return ndim_ == 0 || shape_[ndim_ - 1] <= 1 || strides_[ndim_ - 1] == 1 || numel() == 0;
  }

  // Pointer to element (i0, i1, ...) given as many indices as dims (or fewer: leading dims).
  void* ptr_at(std::initializer_list<int64_t> index) const;

  // Views (all checked, all share memory):
  Tensor narrow(int dim, int64_t start, int64_t length) const;  // [start, start+length) along dim
  Tensor select(int dim, int64_t index) const;                  // removes dim
  Tensor view(std::span<const int64_t> shape) const;            // contiguous only; one -1 allowed
  Tensor view(std::initializer_list<int64_t> shape) const {
    return view(std::span<const int64_t>(shape.begin(), shape.size()));
  }
  Tensor transpose(int d0, int d1) const;
  Tensor unsqueeze(int dim) const;
  // Same memory read as another dtype of the same element size (fp8 <-> u8).
  Tensor reinterpret(DType dtype) const;

  // "[2, 3, 4]"
  std::string shape_str() const;
  // "bf16[2, 3, 4] on cpu" (strides added when not contiguous)
  std::string describe() const;

 private:
  int norm_dim(int d) const;
  void* data_ = nullptr;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu();
  int ndim_ = 0;
  bool defined_ = false;
  std::array<int64_t, kMaxDims> shape_{};
  std::array<int64_t, kMaxDims> strides_{};
};

// Owning memory. Host allocations are 64-byte aligned; CUDA allocations use
// cudaMalloc (ValueError when lattn was built without CUDA). Move-only.
class Buffer {
 public:
  Buffer() = default;
  Buffer(size_t bytes, Device device);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  Device device() const { return device_; }
  void reset();

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_ = Device::cpu();
};

// A Buffer with a contiguous Tensor view over it.
class OwnedTensor {
 public:
  OwnedTensor() = default;
  // Uninitialized contents.
  static OwnedTensor empty(std::span<const int64_t> shape, DType dtype, Device device = Device::cpu());
  static OwnedTensor empty(std::initializer_list<int64_t> shape, DType dtype, Device device = Device::cpu()) {
    return empty(std::span<const int64_t>(shape.begin(), shape.size()), dtype, device);
  }
  // Zero-filled (host or device).
  static OwnedTensor zeros(std::initializer_list<int64_t> shape, DType dtype, Device device = Device::cpu());

  const Tensor& tensor() const { return view_; }
  operator const Tensor&() const { return view_; }
  void* data() const { return view_.data(); }
  template <class T>
  T* data_as() const {
    return view_.data_as<T>();
  }

 private:
  Buffer storage_;
  Tensor view_;
};

// Copies src into dst elementwise (same shape; any strides; dtypes may
// differ for floating types: converts through f32 with RNE). Host tensors
// only; for device tensors use copy_tensor (below).
void copy_host(const Tensor& src, const Tensor& dst);

// Copies between any devices (host<->device through cudaMemcpy); both
// tensors must be contiguous with the same dtype and numel. Synchronous.
void copy_tensor(const Tensor& src, const Tensor& dst);

// Fills a tensor (any device, any strides on host; contiguous on device)
// with a float value converted to its dtype (or a byte pattern for fill_bytes).
void fill(const Tensor& t, float value);
void fill_bytes(const Tensor& t, uint8_t byte);

}  // namespace lattn
