// The `reference` sparse MLA backend: for each token, the valid slots of its
// index row are read (dequantized) into fp64 and attended with plain loops —
// the oracle of every sparse backend. Any cache dtype (bf16, f16, fp8 with a
// per-tensor scale, fp8_ds_mla), any dims, any device (CUDA tensors are
// staged through host copies).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/ops/host_staging.h"
#include "cpu/reference_common.h"
#include "lattn/sparse.h"

namespace lattn {
namespace {

using detail::HostStaged;
using detail::HostStagedCache;

// Cache slot `slot` widened to fp64: [kv_c (L) | k_pe (R)].
void load_slot_f64(const LatentCache& cache, int64_t slot, double* row) {
  const int L = cache.kv_lora_rank, R = cache.qk_rope_head_dim;
  const int64_t block = slot / cache.block_size(), offset = slot % cache.block_size();
  const int64_t entry = block * cache.data.stride(0) + offset * cache.data.stride(1);
  if (cache.is_fp8_ds_mla()) {
    fp8_ds_mla_decode_f64(static_cast<const uint8_t*>(cache.data.data()) + entry, L, R, row);
    return;
  }
  const double scale = cache.is_fp8() ? cache.scale : 1.0;
  for (int d = 0; d < L + R; ++d) row[d] = double(load_as_f32(cache.data.data(), cache.dtype(), entry + d)) * scale;
}

class ReferenceSparseClass final : public SparseMlaBackendClass {
 public:
  std::string name() const override { return "reference"; }
  std::vector<std::string> validate_configuration(std::optional<DeviceCapability>,
                                                  const SparseSelectorConfig&) const override {
    return {};  // any dtype, cache dtype, dims and device
  }

  void run(const SparseMlaArgs& a, const LatentCache& cache, Stream) const override {
    const HostStaged q_host(a.q, true), idx_host(a.indices, true), sink_host(a.attn_sink, true);
    const HostStaged out_host(a.out, true), lse_host(a.lse, true);
    const HostStagedCache cache_host(cache);
    const LatentCache& c = cache_host.host();
    const int64_t T = a.q.size(0), N = a.q.size(1), topk = a.indices.size(1);
    const int64_t L = c.kv_lora_rank, D = L + c.qk_rope_head_dim;
    const int64_t capacity = c.num_blocks() * c.block_size();
    const reference::F64Array q64 = reference::load_f64(q_host.host());
    const Tensor& idx = idx_host.host();
    const Tensor& o = out_host.host();
    const Tensor& l = lse_host.host();
    std::vector<double> keys, o_row(static_cast<size_t>(L));
    for (int64_t t = 0; t < T; ++t) {
      // The valid slots of this row, in order; a repeated slot is a repeated key.
      keys.clear();
      int64_t n = 0;
      for (int64_t j = 0; j < topk; ++j) {
        const int32_t slot = idx.data_as<const int32_t>()[t * idx.stride(0) + j * idx.stride(1)];
        if (slot < 0 || slot >= capacity) continue;  // -1 (device indices out of range too: unchecked there)
        keys.resize(size_t((n + 1) * D));
        load_slot_f64(c, slot, keys.data() + n * D);
        ++n;
      }
      for (int64_t h = 0; h < N; ++h) {
        double lse =
            reference::attend_one_row(q64.row(t, h), D, keys.data(), D, keys.data(), D, L, n, a.scale, o_row.data());
        if (a.attn_sink.defined() && n > 0) {
          // out · e^lse / (e^lse + e^sink), computed stably as 1 / (1 + e^(sink - lse)).
          const double sink = double(sink_host.host().data_as<const float>()[h * sink_host.host().stride(0)]);
          const double factor = 1.0 / (1.0 + std::exp(sink - lse));
          for (double& v : o_row) v *= factor;
        }
        reference::store_row(o, t * o.stride(0) + h * o.stride(1), o_row.data(), L, 1.f);
        if (l.defined()) l.data_as<float>()[h * l.stride(0) + t * l.stride(1)] = float(lse);
      }
    }
    out_host.copy_back();
    lse_host.copy_back();
  }
};

const RegisterSparseMlaBackend kRegisterReferenceSparse{std::make_shared<ReferenceSparseClass>()};

}  // namespace
}  // namespace lattn
