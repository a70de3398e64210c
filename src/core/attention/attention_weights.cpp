// MlaAttention::process_weights_after_loading: kv_b_proj -> W_UK_T, W_UV
// (seed 002, docs/mla.md).
//
// kv_b_proj's weight is (out, in) = [N*(P+V), L]: for head n, rows
// [n*(P+V), n*(P+V)+P) are W_UK's (nope) rows and the next V rows W_UV's.
// The seed transposes it to (L, N*(P+V)), views (L, N, P+V), splits [P, V]
// and permutes; here the same indices are written out directly into
// contiguous tensors in the activation dtype (the seed keeps 16-bit copies
// too: there is no quantized bmm for them).
#include <memory>
#include <string>

#include "core/attention/attention_impl.h"
#include "core/ops/host_staging.h"
#include "lattn/check.h"
#include "lattn/errors.h"

namespace lattn {
namespace {

// Python's f"{kv_b_proj_weight.shape=}" of the transposed weight: torch.Size([L, N*(P+V)]).
std::string transposed_shape_repr(const Tensor& w) {
  std::string s = "torch.Size([";
  for (int d = w.dim() - 1; d >= 0; --d) {
    s += std::to_string(w.size(d));
    if (d) s += ", ";
  }
  return s + "])";
}

}  // namespace

void MlaAttention::process_weights_after_loading(const Tensor& kv_b_proj_weight) {
  const char* op = "process_weights_after_loading";
  Impl& im = *impl_;
  const detail::ExclusiveUse use(im.in_use, "MlaAttention::process_weights_after_loading");
  const MlaDims& d = im.dims();
  const int64_t N = d.num_heads, L = d.kv_lora_rank, P = d.qk_nope_head_dim, V = d.v_head_dim;
  check_defined(op, "kv_b_proj_weight", kv_b_proj_weight);
  check_dtype_in(op, "kv_b_proj_weight", kv_b_proj_weight, {DType::f32, DType::f16, DType::bf16});

  const Tensor& w = kv_b_proj_weight;
  const bool shape_ok = w.dim() == 2 && w.size(0) == N * (P + V) && w.size(1) == L;
  lattn_assert(shape_ok, "kv_b_proj_weight.shape=" + transposed_shape_repr(w) +
                             ", self.kv_lora_rank=" + std::to_string(L) + ", self.num_heads=" + std::to_string(N) +
                             ", self.qk_nope_head_dim=" + std::to_string(P) + ", self.v_head_dim=" + std::to_string(V));

  const detail::HostStaged staged(w, true);
  const Tensor& host = staged.host();
  const DType dtype = im.config.dtype;
  OwnedTensor uk_t = OwnedTensor::empty({N, P, L}, dtype);
  OwnedTensor uv = OwnedTensor::empty({N, L, V}, dtype);
  auto weight = [&](int64_t row, int64_t col) {
    return load_as_f32(host.data(), host.dtype(), row * host.stride(0) + col * host.stride(1));
  };
  for (int64_t n = 0; n < N; ++n) {
    const int64_t head_row = n * (P + V);
    for (int64_t l = 0; l < L; ++l) {
      for (int64_t p = 0; p < P; ++p) store_from_f32(uk_t.data(), dtype, (n * P + p) * L + l, weight(head_row + p, l));
      for (int64_t v = 0; v < V; ++v)
        store_from_f32(uv.data(), dtype, (n * L + l) * V + v, weight(head_row + P + v, l));
    }
  }
  // New storage each time: views of the previous weights (held with
  // weights_owner()) stay valid.
  if (im.config.device.is_cpu()) {
    im.w_uk_t = std::make_shared<const OwnedTensor>(std::move(uk_t));
    im.w_uv = std::make_shared<const OwnedTensor>(std::move(uv));
    return;
  }
  auto dev_uk_t = std::make_shared<OwnedTensor>(OwnedTensor::empty({N, P, L}, dtype, im.config.device));
  auto dev_uv = std::make_shared<OwnedTensor>(OwnedTensor::empty({N, L, V}, dtype, im.config.device));
  copy_tensor(uk_t.tensor(), dev_uk_t->tensor());
  copy_tensor(uv.tensor(), dev_uv->tensor());
  im.w_uk_t = std::move(dev_uk_t);
  im.w_uv = std::move(dev_uv);
}

}  // namespace lattn
