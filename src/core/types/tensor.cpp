// Tensor views, owning buffers and host copies (see lattn/tensor.h).
#include "lattn/tensor.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/ops/device_ops.h"
#include "lattn/errors.h"
#include "lattn/overflow.h"

namespace lattn {
namespace {

std::string join_dims(std::span<const int64_t> dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

// Refuses a shape whose element count or byte count (or, for a strided view,
// whose farthest element's byte offset) does not fit in int64: every later
// offset computation (ptr_at, kernels' row * stride) is then free of
// overflow.
void check_extent(std::span<const int64_t> shape, std::span<const int64_t> strides, int element_size) {
  const std::string what = "Tensor: shape " + join_dims(shape);
  int64_t numel = 1, last_offset = 0, contiguous_span = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    numel = checked_mul(numel, shape[d], what + " (element count)");
    contiguous_span = checked_mul(contiguous_span, std::max<int64_t>(shape[d], 1), what + " (element count)");
  }
  checked_mul(numel, element_size, what + " (bytes)");
  if (numel == 0) return;
  for (size_t d = 0; d < strides.size(); ++d) {
    const int64_t stride = strides[d] == INT64_MIN ? INT64_MAX : (strides[d] < 0 ? -strides[d] : strides[d]);
    last_offset = checked_add(last_offset, checked_mul(shape[d] - 1, stride, what + " (strided extent)"),
                              what + " (strided extent)");
  }
  checked_mul(checked_add(last_offset, 1, what + " (strided extent)"), element_size,
              what + " (strided extent in bytes)");
}

}  // namespace

Tensor::Tensor(void* data, DType dtype, std::span<const int64_t> shape, Device device)
    : data_(data), dtype_(dtype), device_(device), ndim_(int(shape.size())), defined_(true) {
  if (shape.size() > size_t(kMaxDims)) {
    throw ValueError("Tensor: at most " + std::to_string(kMaxDims) + " dims are supported, got " +
                     std::to_string(shape.size()));
  }
  for (int64_t s : shape) {
    if (s < 0) throw ValueError("Tensor: negative size in shape " + join_dims(shape));
  }
  check_extent(shape, {}, element_size());
  int64_t stride = 1;
  for (int d = ndim_ - 1; d >= 0; --d) {
    shape_[d] = shape[d];
    strides_[d] = stride;
    stride *= std::max<int64_t>(shape[d], 1);
  }
}

Tensor::Tensor(void* data, DType dtype, std::span<const int64_t> shape, std::span<const int64_t> strides, Device device)
    : data_(data), dtype_(dtype), device_(device), ndim_(int(shape.size())), defined_(true) {
  if (shape.size() > size_t(kMaxDims)) {
    throw ValueError("Tensor: at most " + std::to_string(kMaxDims) + " dims are supported, got " +
                     std::to_string(shape.size()));
  }
  if (strides.size() != shape.size()) {
    throw ValueError("Tensor: shape " + join_dims(shape) + " and strides " + join_dims(strides) +
                     " must have the same length");
  }
  for (int d = 0; d < ndim_; ++d) {
    if (shape[d] < 0) throw ValueError("Tensor: negative size in shape " + join_dims(shape));
    shape_[d] = shape[d];
    strides_[d] = strides[d];
  }
  check_extent(shape, strides, element_size());
}

int Tensor::norm_dim(int d) const {
  const int nd = d < 0 ? d + ndim_ : d;
  if (nd < 0 || nd >= ndim_) {
    throw ValueError("Tensor: dim " + std::to_string(d) + " out of range for a " + std::to_string(ndim_) +
                     "-dim tensor " + shape_str());
  }
  return nd;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim_; ++d) n *= shape_[d];
  return n;
}

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // no element to misplace (NumPy 2 exports empty arrays with 0 strides)
  int64_t expected = 1;
  for (int d = ndim_ - 1; d >= 0; --d) {
    if (shape_[d] == 1) continue;
    if (strides_[d] != expected) return false;
    expected *= shape_[d];
  }
  return true;
}

void* Tensor::ptr_at(std::initializer_list<int64_t> index) const {
  if (int(index.size()) > ndim_) {
    throw ValueError("Tensor::ptr_at: " + std::to_string(index.size()) + " indices for a " + std::to_string(ndim_) +
                     "-dim tensor");
  }
  int64_t offset = 0;
  int d = 0;
  for (int64_t i : index) {
    if (i < 0 || i >= shape_[d]) {
      throw ValueError("Tensor::ptr_at: index " + std::to_string(i) + " out of range for dim " + std::to_string(d) +
                       " of size " + std::to_string(shape_[d]));
    }
    offset += i * strides_[d];
    ++d;
  }
  return static_cast<char*>(data_) + offset * element_size();
}

Tensor Tensor::narrow(int dim, int64_t start, int64_t length) const {
  const int d = norm_dim(dim);
  if (start < 0 || length < 0 || start > shape_[d] || length > shape_[d] - start) {
    // (start and length are printed apart: start + length may overflow)
    throw ValueError("Tensor::narrow: " + std::to_string(length) + " elements from " + std::to_string(start) +
                     " out of bounds for dim " + std::to_string(d) + " of " + shape_str());
  }
  Tensor t = *this;
  t.data_ = static_cast<char*>(data_) + start * strides_[d] * element_size();
  t.shape_[d] = length;
  return t;
}

Tensor Tensor::select(int dim, int64_t index) const {
  const int d = norm_dim(dim);
  if (index < 0 || index >= shape_[d]) {
    throw ValueError("Tensor::select: index " + std::to_string(index) + " out of range for dim " + std::to_string(d) +
                     " of " + shape_str());
  }
  Tensor t = *this;
  t.data_ = static_cast<char*>(data_) + index * strides_[d] * element_size();
  for (int i = d; i < ndim_ - 1; ++i) {
    t.shape_[i] = shape_[i + 1];
    t.strides_[i] = strides_[i + 1];
  }
  t.ndim_ = ndim_ - 1;
  return t;
}

Tensor Tensor::view(std::span<const int64_t> shape) const {
  if (!is_contiguous()) {
    throw ValueError("Tensor::view: needs a contiguous tensor, got " + describe());
  }
  std::vector<int64_t> s(shape.begin(), shape.end());
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer >= 0) throw ValueError("Tensor::view: only one -1 allowed in " + join_dims(shape));
      infer = int(i);
    } else {
      known = checked_mul(known, s[i], "Tensor::view: shape " + join_dims(shape));
    }
  }
  if (infer >= 0) s[infer] = known == 0 ? 0 : numel() / known;
  int64_t n = 1;
  for (int64_t v : s) n = checked_mul(n, v, "Tensor::view: shape " + join_dims(shape));
  if (n != numel()) {
    throw ValueError("Tensor::view: shape " + join_dims(shape) + " does not match " + std::to_string(numel()) +
                     " elements of " + shape_str());
  }
  return Tensor(data_, dtype_, std::span<const int64_t>(s), device_);
}

Tensor Tensor::transpose(int d0, int d1) const {
  const int a = norm_dim(d0), b = norm_dim(d1);
  Tensor t = *this;
  std::swap(t.shape_[a], t.shape_[b]);
  std::swap(t.strides_[a], t.strides_[b]);
  return t;
}

Tensor Tensor::unsqueeze(int dim) const {
  const int d = dim < 0 ? dim + ndim_ + 1 : dim;
  if (d < 0 || d > ndim_ || ndim_ == kMaxDims) {
    throw ValueError("Tensor::unsqueeze: dim " + std::to_string(dim) + " invalid for " + shape_str());
  }
  Tensor t = *this;
  for (int i = ndim_; i > d; --i) {
    t.shape_[i] = shape_[i - 1];
    t.strides_[i] = strides_[i - 1];
  }
  t.shape_[d] = 1;
  t.strides_[d] = d < ndim_ ? strides_[d] * shape_[d] : 1;
  t.ndim_ = ndim_ + 1;
  return t;
}

Tensor Tensor::reinterpret(DType dtype) const {
  if (dtype_size(dtype) != dtype_size(dtype_)) {
    throw ValueError(std::string("Tensor::reinterpret: ") + dtype_name(dtype_) + " and " + dtype_name(dtype) +
                     " differ in element size");
  }
  Tensor t = *this;
  t.dtype_ = dtype;
  return t;
}

std::string Tensor::shape_str() const { return join_dims(shape()); }

std::string Tensor::describe() const {
  if (!defined_) return "undefined tensor";
  std::string s = std::string(dtype_name(dtype_)) + shape_str();
  if (!is_contiguous()) s += " strides " + join_dims(strides());
  return s + " on " + device_name(device_);
}

// ---- Buffer --------------------------------------------------------------

Buffer::Buffer(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  if (bytes == 0) return;
  // Host buffers: 2 MiB aligned huge pages when large (src/cpu/device_ops_cpu.cpp).
  data_ = detail::device_ops(device).malloc(bytes, device.index);
}

Buffer::~Buffer() { reset(); }

Buffer::Buffer(Buffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_), device_(o.device_) {
  o.data_ = nullptr;
  o.bytes_ = 0;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = o.data_;
    bytes_ = o.bytes_;
    device_ = o.device_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void Buffer::reset() {
  if (data_) detail::device_ops(device_).free(data_, device_.index);
  data_ = nullptr;
  bytes_ = 0;
}

OwnedTensor OwnedTensor::empty(std::span<const int64_t> shape, DType dtype, Device device) {
  // The view first: it refuses negative sizes and byte counts past int64
  // before anything is allocated.
  const Tensor checked(nullptr, dtype, shape, device);
  OwnedTensor t;
  t.storage_ = Buffer(checked.nbytes(), device);
  t.view_ = Tensor(t.storage_.data(), dtype, shape, device);
  return t;
}

OwnedTensor OwnedTensor::zeros(std::initializer_list<int64_t> shape, DType dtype, Device device) {
  OwnedTensor t = empty(shape, dtype, device);
  fill_bytes(t.view_, 0);
  return t;
}

// ---- copies and fills ------------------------------------------------------

namespace {

// Calls fn(element offset in a, element offset in b) for every index of the
// shared shape, in row-major order.
template <class Fn>
void for_each_index(const Tensor& a, const Tensor& b, Fn&& fn) {
  const int nd = a.dim();
  if (a.numel() == 0) return;
  std::array<int64_t, kMaxDims> idx{};
  int64_t oa = 0, ob = 0;
  while (true) {
    fn(oa, ob);
    int d = nd - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < a.size(d)) {
        oa += a.stride(d);
        ob += b.stride(d);
        break;
      }
      oa -= (a.size(d) - 1) * a.stride(d);
      ob -= (b.size(d) - 1) * b.stride(d);
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace

void copy_host(const Tensor& src, const Tensor& dst) {
  if (!src.device().is_cpu() || !dst.device().is_cpu()) {
    throw ValueError("copy_host: both tensors must be on the cpu, got " + src.describe() + " and " + dst.describe());
  }
  if (src.dim() != dst.dim() || !std::equal(src.shape().begin(), src.shape().end(), dst.shape().begin())) {
    throw ValueError("copy_host: shapes differ: " + src.shape_str() + " vs " + dst.shape_str());
  }
  if (src.numel() == 0) return;  // empty tensors may carry null data pointers
  const DType st = src.dtype(), dt = dst.dtype();
  if (st == dt) {
    const int es = src.element_size();
    const char* s = static_cast<const char*>(src.data());
    char* d = static_cast<char*>(dst.data());
    if (src.is_contiguous() && dst.is_contiguous()) {
      std::memmove(d, s, src.nbytes());
      return;
    }
    for_each_index(src, dst, [&](int64_t a, int64_t b) { std::memcpy(d + b * es, s + a * es, es); });
    return;
  }
  if (!is_floating(st) || !is_floating(dt)) {
    throw ValueError(std::string("copy_host: cannot convert ") + dtype_name(st) + " to " + dtype_name(dt));
  }
  for_each_index(src, dst,
                 [&](int64_t a, int64_t b) { store_from_f32(dst.data(), dt, b, load_as_f32(src.data(), st, a)); });
}

void copy_tensor(const Tensor& src, const Tensor& dst) {
  if (src.device().is_cpu() && dst.device().is_cpu()) {
    copy_host(src, dst);
    return;
  }
  if (src.dtype() != dst.dtype() || src.numel() != dst.numel() || !src.is_contiguous() || !dst.is_contiguous()) {
    throw ValueError("copy_tensor: device copies need contiguous tensors of equal dtype and size, got " +
                     src.describe() + " and " + dst.describe());
  }
  detail::device_ops(src.device(), dst.device())
      .memcpy(dst.data(), dst.device(), src.data(), src.device(), src.nbytes(), nullptr);
}

void fill_bytes(const Tensor& t, uint8_t byte) {
  if (t.numel() == 0) return;  // empty tensors may carry null data pointers
  if (t.device().is_cpu()) {
    if (t.is_contiguous()) {
      std::memset(t.data(), byte, t.nbytes());
      return;
    }
    const int es = t.element_size();
    char* p = static_cast<char*>(t.data());
    for_each_index(t, t, [&](int64_t a, int64_t) { std::memset(p + a * es, byte, es); });
    return;
  }
  if (!t.is_contiguous()) throw ValueError("fill_bytes: device tensors must be contiguous, got " + t.describe());
  detail::device_ops(t.device()).memset(t.data(), byte, t.nbytes(), t.device().index, nullptr);
}

void fill(const Tensor& t, float value) {
  if (t.device().is_cpu()) {
    for_each_index(t, t, [&](int64_t a, int64_t) { store_from_f32(t.data(), t.dtype(), a, value); });
    return;
  }
  // Device: build one contiguous host copy and upload it.
  OwnedTensor host = OwnedTensor::empty(t.shape(), t.dtype());
  fill(host.tensor(), value);
  copy_tensor(host.tensor(), t);
}

}  // namespace lattn
