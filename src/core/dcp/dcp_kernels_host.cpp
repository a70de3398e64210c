// The local steps of dcp_combine on host tensors (core/dcp/dcp_kernels.h):
// plain loops, f32 with the LSE sum in double.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/dcp/dcp_kernels.h"
#include "lattn/dtype.h"

namespace lattn::detail {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kInf = std::numeric_limits<float>::infinity();

// log Σ exp of `n` LSE values `stride` apart (+inf read as -inf; NaN propagates).
float combined_lse(const float* lse, int n, int64_t stride) {
  float m = kNegInf;
  for (int r = 0; r < n; ++r) {
    float v = lse[r * stride];
    if (std::isnan(v)) return v;
    if (v == kInf) v = kNegInf;
    m = std::max(m, v);
  }
  if (m == kNegInf) return kNegInf;
  double s = 0;
  for (int r = 0; r < n; ++r) {
    const float v = lse[r * stride];
    if (v > kNegInf && v < kInf) s += std::exp(double(v) - m);
  }
  return m + float(std::log(s));
}

float rank_weight(float lse_r, float lse) {
  if (std::isnan(lse_r) || std::isnan(lse)) return std::numeric_limits<float>::quiet_NaN();
  if (!(lse_r > kNegInf) || lse_r == kInf || lse == kNegInf) return 0.f;
  return std::exp(lse_r - lse);
}

void mask_lse(const Tensor& partial_lse, const Tensor& row_empty, const Tensor& own_lse, Stream) {
  const int64_t H = partial_lse.size(0), T = partial_lse.size(1);
  const auto* in = partial_lse.data_as<const float>();
  auto* o = own_lse.data_as<float>();
  const auto* empty = row_empty.defined() ? row_empty.data_as<const uint8_t>() : nullptr;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < T; ++t) o[h * T + t] = empty && empty[t] ? kNegInf : in[h * T + t];
}

void rescale(const Tensor& partial_out, const Tensor& own_lse, const Tensor& lse_all, int rank, const Tensor& scaled,
             const Tensor& lse, Stream) {
  const int64_t T = partial_out.size(0), H = partial_out.size(1), D = partial_out.size(2);
  const int W = int(lse_all.size(0));
  const auto* la = lse_all.data_as<const float>();
  const auto* own = own_lse.data_as<const float>();
  auto* l = lse.data_as<float>();
  auto* sc = scaled.data_as<float>();
  const DType pdt = partial_out.dtype();
  (void)rank;  // own_lse is rank's row of lse_all
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t i = h * T + t;
      l[i] = combined_lse(la + i, W, H * T);
      const float w = rank_weight(own[i], l[i]);
      float* dst = sc + i * D;
      for (int64_t d = 0; d < D; ++d)
        dst[d] = w == 0.f ? 0.f : w * load_as_f32(partial_out.data(), pdt, (t * H + h) * D + d);
    }
  }
}

void pack_rows(const Tensor& partial_out, const Tensor& own_lse, const Tensor& send, Stream) {
  const int64_t T = partial_out.size(0), H = partial_out.size(1), D = partial_out.size(2), row = D + 1;
  const auto* own = own_lse.data_as<const float>();
  auto* sp = send.data_as<float>();
  const DType pdt = partial_out.dtype();
  // send [W, Hs, T, D+1] flattened is [H, T, D+1]: head h goes to destination h / Hs.
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t t = 0; t < T; ++t) {
      float* dst = sp + (h * T + t) * row;
      for (int64_t d = 0; d < D; ++d) dst[d] = load_as_f32(partial_out.data(), pdt, (t * H + h) * D + d);
      dst[D] = own[h * T + t];
    }
  }
}

void merge_rows(const Tensor& recv, const Tensor& merged, const Tensor& lse, Stream) {
  const int W = int(recv.size(0));
  const int64_t Hs = recv.size(1), T = recv.size(2), row = recv.size(3), D = row - 1;
  const auto* rp = recv.data_as<const float>();
  auto* mp = merged.data_as<float>();
  auto* l = lse.data_as<float>();
  const int64_t per_rank = Hs * T * row;
  for (int64_t i = 0; i < Hs * T; ++i) {
    const float* src0 = rp + i * row;
    const float c = combined_lse(src0 + D, W, per_rank);
    l[i] = c;
    for (int64_t d = 0; d < D; ++d) {
      float acc = 0.f;
      for (int r = 0; r < W; ++r) {
        const float w = rank_weight(src0[r * per_rank + D], c);
        if (w != 0.f) acc += w * src0[r * per_rank + d];
      }
      mp[i * D + d] = acc;
    }
  }
}

void finish(const Tensor& summed, const Tensor& lse, const Tensor& out, const Tensor& out_lse, Stream) {
  const int n = int(summed.size(0));
  const int64_t Ho = summed.size(1), T = summed.size(2), D = summed.size(3);
  const int64_t per = Ho * T * D;
  const auto* sm = summed.data_as<const float>();
  const DType odt = out.dtype();
  for (int64_t h = 0; h < Ho; ++h) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t d = 0; d < D; ++d) {
        float acc = sm[(h * T + t) * D + d];  // n = 1 copies (keeps -0)
        for (int i = 1; i < n; ++i) acc += sm[i * per + (h * T + t) * D + d];
        store_from_f32(out.data(), odt, (t * Ho + h) * D + d, acc);
      }
      if (out_lse.defined()) out_lse.data_as<float>()[h * T + t] = lse.data_as<const float>()[h * T + t];
    }
  }
}

void fill_neg_inf(const Tensor& lse, Stream) {
  float* p = lse.data_as<float>();
  std::fill(p, p + lse.numel(), kNegInf);
}

}  // namespace

const DcpKernels& dcp_host_kernels() {
  static const DcpKernels k{mask_lse, rescale, pack_rows, merge_rows, finish, fill_neg_inf};
  return k;
}

}  // namespace lattn::detail
