// Device-dispatched data movements of the forward (see core/ops/forward_ops.h).
#include "core/ops/forward_ops.h"

#include "core/ops/device_ops.h"

namespace lattn::detail {
namespace {

// Copies `rows` rows of `row_bytes` bytes between pitched layouts on any device.
void copy_rows(char* dst, size_t dst_pitch, const char* src, size_t src_pitch, size_t row_bytes, size_t rows,
               Device device, Stream stream) {
  if (row_bytes == 0 || rows == 0) return;
  device_ops(device).memcpy_2d(dst, dst_pitch, src, src_pitch, row_bytes, rows, device.index, stream);
}

}  // namespace

void broadcast_k_pe(const Tensor& k_pe, const Tensor& k, Stream stream) {
  const int64_t T = k.size(0), N = k.size(1), R = k_pe.size(1);
  const int64_t P = k.size(2) - R;
  const size_t es = size_t(k.element_size());
  const char* src = static_cast<const char*>(k_pe.data());
  for (int64_t n = 0; n < N; ++n) {
    char* dst = static_cast<char*>(k.data()) + size_t(n * k.stride(1) + P) * es;
    copy_rows(dst, size_t(k.stride(0)) * es, src, size_t(k_pe.stride(0)) * es, size_t(R) * es, size_t(T), k.device(),
              stream);
  }
}

void copy_leading_columns(const Tensor& src, const Tensor& dst, Stream stream) {
  const int64_t T = dst.size(0), N = dst.size(1), V = dst.size(2);
  const size_t es = size_t(dst.element_size());
  const bool uniform = src.stride(0) == N * src.stride(1) && dst.stride(0) == N * dst.stride(1);
  if (uniform) {  // every (token, head) row is one pitch apart: one 2-D copy
    copy_rows(static_cast<char*>(dst.data()), size_t(dst.stride(1)) * es, static_cast<const char*>(src.data()),
              size_t(src.stride(1)) * es, size_t(V) * es, size_t(T * N), dst.device(), stream);
    return;
  }
  for (int64_t t = 0; t < T; ++t) {
    copy_rows(static_cast<char*>(dst.data()) + size_t(t * dst.stride(0)) * es, size_t(dst.stride(1)) * es,
              static_cast<const char*>(src.data()) + size_t(t * src.stride(0)) * es, size_t(src.stride(1)) * es,
              size_t(V) * es, size_t(N), dst.device(), stream);
  }
}

void quantize_fp8(const Tensor& src, const Tensor& dst, const Tensor& scale, Stream stream) {
  device_ops(dst.device()).quantize_fp8(src, dst, scale, stream);
}

void zero_rows(const Tensor& t, Stream stream) {
  if (t.numel() == 0) return;
  if (t.device().is_cpu()) {
    fill(t, 0.f);
    return;
  }
  const size_t row_bytes = size_t(t.size(1)) * size_t(t.element_size());
  if (t.is_contiguous()) {
    device_ops(t.device()).memset(t.data(), 0, row_bytes * size_t(t.size(0)), t.device().index, stream);
    return;
  }
  for (int64_t r = 0; r < t.size(0); ++r) {
    device_ops(t.device())
        .memset(static_cast<char*>(t.data()) + size_t(r * t.stride(0)) * size_t(t.element_size()), 0, row_bytes,
                t.device().index, stream);
  }
}

}  // namespace lattn::detail
