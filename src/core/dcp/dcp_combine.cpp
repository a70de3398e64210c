// Combining the ranks' partial decode results under DCP (lattn/dcp.h,
// docs/dcp.md): the LSE correction of merge_attn_states, over any number of
// ranks, through a Communicator.
//
// Both methods compute, for every (head h, token t),
//   lse = log Σ_r exp(lse_r)            over ranks with lse_r > -inf
//   out = Σ_r exp(lse_r - lse) · out_r  in rank order, f32,
// with the weight of a rank that saw no key exactly 0 (its output, whatever it
// holds, is never read), so both give the same bits and an empty shard never
// brings a NaN in. A NaN LSE (NaN in the data a rank attended to) propagates.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "lattn/check.h"
#include "lattn/dcp.h"
#include "lattn/errors.h"

namespace lattn {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Robust log-sum-exp of `n` LSE values spaced `stride` apart (+inf read as -inf,
// as merge_attn_states does).
float combined_lse(const float* lse, int n, int64_t stride) {
  float m = kNegInf;
  for (int r = 0; r < n; ++r) {
    float v = lse[r * stride];
    if (std::isnan(v)) return v;
    if (v == std::numeric_limits<float>::infinity()) v = kNegInf;
    m = std::max(m, v);
  }
  if (m == kNegInf) return kNegInf;
  double s = 0;
  for (int r = 0; r < n; ++r) {
    const float v = lse[r * stride];
    if (v > kNegInf && v < std::numeric_limits<float>::infinity()) s += std::exp(double(v) - m);
  }
  return m + float(std::log(s));
}

float rank_weight(float lse_r, float lse) {
  if (std::isnan(lse_r) || std::isnan(lse)) return std::numeric_limits<float>::quiet_NaN();
  if (!(lse_r > kNegInf) || lse_r == std::numeric_limits<float>::infinity() || lse == kNegInf) return 0.f;
  return std::exp(lse_r - lse);
}

struct Shapes {
  int64_t T, H, D, Ho;
  int h0;  // first head of `out`
};

Shapes check_combine_args(const Communicator& comm, const Tensor& partial_out, const Tensor& partial_lse,
                          const Tensor& out, const Tensor& out_lse) {
  static const char* op = "dcp_combine";
  check_arg(comm.device().is_cpu(), op, "comm",
            "be a host communicator (in-process); device combine is not written yet", comm.kind());
  check_dim(op, "partial_out", partial_out, 3);
  check_dtype_in(op, "partial_out", partial_out, {DType::f32, DType::f16, DType::bf16});
  check_contiguous(op, "partial_out", partial_out);
  check_device(op, "partial_out", partial_out, Device::cpu());
  const int64_t T = partial_out.size(0), H = partial_out.size(1), D = partial_out.size(2);
  check_shape(op, "partial_lse", partial_lse, {H, T});
  check_dtype(op, "partial_lse", partial_lse, DType::f32);
  check_contiguous(op, "partial_lse", partial_lse);
  check_device(op, "partial_lse", partial_lse, Device::cpu());
  check_dim(op, "out", out, 3);
  check_dtype_in(op, "out", out, {DType::f32, DType::f16, DType::bf16});
  check_contiguous(op, "out", out);
  check_device(op, "out", out, Device::cpu());
  const int W = comm.world_size();
  const int64_t Ho = out.size(1);
  const bool full = Ho == H;
  const bool slice = W > 1 && H % W == 0 && Ho == H / W;
  check_arg(out.size(0) == T && out.size(2) == D && (full || slice), op, "out",
            "have shape [" + std::to_string(T) + ", " + std::to_string(H) + " (every head) or H / world_size, " +
                std::to_string(D) + "]",
            out.shape_str());
  if (out_lse.defined()) {
    check_shape(op, "out_lse", out_lse, {Ho, T});
    check_dtype(op, "out_lse", out_lse, DType::f32);
    check_contiguous(op, "out_lse", out_lse);
  }
  return {T, H, D, Ho, full ? 0 : int(comm.rank() * Ho)};
}

}  // namespace

void dcp_combine(Communicator& comm, const DcpDecodePlan& plan, const Tensor& partial_out, const Tensor& partial_lse,
                 const Tensor& out, const Tensor& out_lse, DcpCombineMethod method) {
  const Shapes s = check_combine_args(comm, partial_out, partial_lse, out, out_lse);
  const int W = comm.world_size();
  const bool full = s.Ho == s.H;
  const DType pdt = partial_out.dtype();
  const DType odt = out.dtype();
  // This rank's LSE with the rows it saw no key for set to -inf (their backend
  // rows attended to a placeholder slot).
  std::vector<float> own_lse(partial_lse.data_as<const float>(), partial_lse.data_as<const float>() + s.H * s.T);
  for (const int32_t row : plan.empty_rows) {
    check_arg(row >= 0 && row < s.T, "dcp_combine", "plan.empty_rows", "list rows in [0, " + std::to_string(s.T) + ")",
              std::to_string(row));
    for (int64_t h = 0; h < s.H; ++h) own_lse[size_t(h * s.T + row)] = kNegInf;
  }
  const float* lse_p = own_lse.data();

  if (method == DcpCombineMethod::all_to_all) {
    check_arg(!full || W == 1, "dcp_combine", "out",
              "be this rank's head slice [T, H / world_size, D] (all_to_all leaves each rank its slice)",
              out.shape_str());
    const int64_t Hs = s.Ho, row = s.D + 1;  // a row: D output values, then the LSE
    // send [W (destination), Hs, T, D + 1]: destination j gets heads [j*Hs, (j+1)*Hs).
    OwnedTensor send = OwnedTensor::empty({W * Hs * s.T * row}, DType::f32);
    OwnedTensor recv = OwnedTensor::empty({W * Hs * s.T * row}, DType::f32);
    auto* sp = send.data_as<float>();
    for (int64_t h = 0; h < s.H; ++h) {
      for (int64_t t = 0; t < s.T; ++t) {
        float* dst = sp + (h * s.T + t) * row;
        for (int64_t d = 0; d < s.D; ++d) dst[d] = load_as_f32(partial_out.data(), pdt, (t * s.H + h) * s.D + d);
        dst[s.D] = lse_p[h * s.T + t];
      }
    }
    comm.all_to_all(send, recv);
    const auto* rp = recv.data_as<const float>();
    const int64_t per_rank = Hs * s.T * row;
    for (int64_t hl = 0; hl < Hs; ++hl) {
      for (int64_t t = 0; t < s.T; ++t) {
        const float* src0 = rp + (hl * s.T + t) * row;
        const float lse = combined_lse(src0 + s.D, W, per_rank);
        for (int64_t d = 0; d < s.D; ++d) {
          float acc = 0.f;
          for (int r = 0; r < W; ++r) {
            const float w = rank_weight(src0[r * per_rank + s.D], lse);
            if (w != 0.f) acc += w * src0[r * per_rank + d];
          }
          store_from_f32(out.data(), odt, (t * s.Ho + hl) * s.D + d, acc);
        }
        if (out_lse.defined()) out_lse.data_as<float>()[hl * s.T + t] = lse;
      }
    }
    return;
  }

  // all_gather_reduce_scatter: every rank learns every LSE, rescales its own
  // partial, and the rescaled partials are summed over ranks by head.
  OwnedTensor lse_all = OwnedTensor::empty({W, s.H, s.T}, DType::f32);
  comm.all_gather(Tensor(const_cast<float*>(lse_p), DType::f32, {s.H, s.T}), lse_all);
  const auto* la = lse_all.data_as<const float>();
  std::vector<float> lse(size_t(s.H * s.T));
  for (int64_t i = 0; i < s.H * s.T; ++i) lse[size_t(i)] = combined_lse(la + i, W, s.H * s.T);

  // Rescaled partial, head-major [H, T, D] so a reduce-scatter splits it by head.
  OwnedTensor scaled = OwnedTensor::empty({s.H, s.T, s.D}, DType::f32);
  auto* sc = scaled.data_as<float>();
  for (int64_t h = 0; h < s.H; ++h) {
    for (int64_t t = 0; t < s.T; ++t) {
      const float w = rank_weight(lse_p[h * s.T + t], lse[size_t(h * s.T + t)]);
      float* dst = sc + (h * s.T + t) * s.D;
      for (int64_t d = 0; d < s.D; ++d) {
        dst[d] = w == 0.f ? 0.f : w * load_as_f32(partial_out.data(), pdt, (t * s.H + h) * s.D + d);
      }
    }
  }
  OwnedTensor summed = OwnedTensor::empty({s.Ho, s.T, s.D}, DType::f32);
  if (full) {
    // Every head on every rank: gather all rescaled partials, add in rank order.
    OwnedTensor all = OwnedTensor::empty({W, s.H, s.T, s.D}, DType::f32);
    comm.all_gather(scaled, all);
    const auto* ap = all.data_as<const float>();
    auto* sm = summed.data_as<float>();
    const int64_t n = s.H * s.T * s.D;
    for (int64_t i = 0; i < n; ++i) {
      float acc = 0.f;
      for (int r = 0; r < W; ++r) acc += ap[r * n + i];
      sm[i] = acc;
    }
  } else {
    comm.reduce_scatter_sum(scaled, summed);
  }
  const auto* sm = summed.data_as<const float>();
  for (int64_t hl = 0; hl < s.Ho; ++hl) {
    for (int64_t t = 0; t < s.T; ++t) {
      for (int64_t d = 0; d < s.D; ++d)
        store_from_f32(out.data(), odt, (t * s.Ho + hl) * s.D + d, sm[(hl * s.T + t) * s.D + d]);
      if (out_lse.defined()) out_lse.data_as<float>()[hl * s.T + t] = lse[size_t((s.h0 + hl) * s.T + t)];
    }
  }
}

}  // namespace lattn
