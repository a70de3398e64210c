// The `reference` decode backend: multi-query attention over the paged
// latent cache with QK dim L+R ([ql_nope | q_pe] · [kv_c | k_pe]) and
// V = kv_c (dim L), as plain loops in fp64 — the oracle of every decode
// backend. Any block size, any cache dtype (fp8 entries are read as
// stored * scale), several query tokens per request (causal). Valid on any
// device: CUDA tensors and the cache are staged through host copies.
#include <memory>
#include <string>
#include <vector>

#include "core/ops/host_staging.h"
#include "cpu/reference_common.h"
#include "lattn/backend.h"
#include "lattn/check.h"
#include "lattn/errors.h"

namespace lattn {
namespace {

using detail::HostStaged;
using detail::HostStagedCache;

int32_t host_index(const Tensor& t, int64_t i) { return t.data_as<const int32_t>()[i * t.stride(0)]; }
int32_t host_index(const Tensor& t, int64_t i, int64_t j) {
  return t.data_as<const int32_t>()[i * t.stride(0) + j * t.stride(1)];
}

// The seq_len cache entries of one request, widened to fp64 (dequantized):
// [seq_len, L+R], row j = [kv_c_j | k_pe_j].
std::vector<double> load_request_keys(const LatentCache& cache, const Tensor& block_table, int64_t request,
                                      int64_t seq_len) {
  const int64_t block_size = cache.block_size(), entry_dim = cache.entry_dim();
  const float scale = cache.is_fp8() ? cache.scale : 1.f;
  std::vector<double> keys(size_t(seq_len * entry_dim));
  for (int64_t j = 0; j < seq_len; ++j) {
    const int64_t block = host_index(block_table, request, j / block_size);
    const int64_t entry = block * cache.data.stride(0) + (j % block_size) * cache.data.stride(1);
    for (int64_t d = 0; d < entry_dim; ++d) {
      keys[size_t(j * entry_dim + d)] = double(load_as_f32(cache.data.data(), cache.dtype(), entry + d)) * scale;
    }
  }
  return keys;
}

class ReferenceDecode final : public DecodeBackend {
 public:
  using DecodeBackend::DecodeBackend;
  std::string name() const override { return "reference"; }

  void run(const Tensor& ql_nope, const Tensor& q_pe, const LatentCache& cache, const DecodeMetadata& md,
           const Tensor& out, const Tensor& lse) override {
    const char* op = "reference.decode";
    check_arguments(op, ql_nope, q_pe, cache, md, out, lse);
    const int64_t N = params_.num_heads, L = params_.kv_lora_rank, R = params_.qk_rope_head_dim;

    const HostStaged ql_host(ql_nope, true), pe_host(q_pe, true), out_host(out, true), lse_host(lse, true);
    const HostStagedCache cache_host(cache);
    const reference::F64Array ql64 = reference::load_f64(ql_host.host());
    const reference::F64Array pe64 = reference::load_f64(pe_host.host());
    const Tensor& o = out_host.host();
    const Tensor& l = lse_host.host();

    for (int r = 0; r < md.num_decodes; ++r) {
      const int64_t first_token = host_index(md.query_start_loc_cpu, r);
      const int64_t num_queries = host_index(md.query_start_loc_cpu, r + 1) - first_token;
      const int64_t seq_len = host_index(md.seq_lens_cpu, r);
      const std::vector<double> keys = load_request_keys(cache_host.host(), md.block_table_cpu, r, seq_len);
      for (int64_t j = 0; j < num_queries; ++j) {
        for (int64_t h = 0; h < N; ++h) {
          // Query j sits at position seq_len - num_queries + j and sees keys [0, position].
          const int64_t t = first_token + j;
          const int64_t num_keys = seq_len - num_queries + j + 1;
          std::vector<double> q(static_cast<size_t>(L + R)), o_row(static_cast<size_t>(L));
          std::copy(ql64.row(t, h), ql64.row(t, h) + L, q.begin());
          std::copy(pe64.row(t, h), pe64.row(t, h) + R, q.begin() + L);
          // MQA: every head reads the same latent rows; V is the kv_c part of each row.
          const double row_lse = reference::attend_one_row(q.data(), L + R, keys.data(), L + R, keys.data(), L + R, L,
                                                           num_keys, params_.scale, o_row.data());
          reference::store_row(o, t * o.stride(0) + h * o.stride(1), o_row.data(), L, 1.f);
          if (l.defined()) l.data_as<float>()[h * l.stride(0) + t * l.stride(1)] = float(row_lse);
        }
      }
    }
    out_host.copy_back();
    lse_host.copy_back();
  }

 private:
  void check_arguments(const char* op, const Tensor& ql_nope, const Tensor& q_pe, const LatentCache& cache,
                       const DecodeMetadata& md, const Tensor& out, const Tensor& lse) const {
    const int64_t N = params_.num_heads, L = params_.kv_lora_rank, R = params_.qk_rope_head_dim;
    const int64_t T = md.num_decode_tokens;
    const Device device = params_.context.device;
    cache.validate(op);
    check_arg(cache.kv_lora_rank == L && cache.qk_rope_head_dim == R, op, "cache",
              "have latent dims (L, R) = (" + std::to_string(L) + ", " + std::to_string(R) + ")",
              "(" + std::to_string(cache.kv_lora_rank) + ", " + std::to_string(cache.qk_rope_head_dim) + ")");
    check_device(op, "cache", cache.data, device);
    check_dtype(op, "ql_nope", ql_nope, params_.dtype);
    check_device(op, "ql_nope", ql_nope, device);
    check_shape(op, "ql_nope", ql_nope, {T, N, L});
    check_dtype(op, "q_pe", q_pe, params_.dtype);
    check_device(op, "q_pe", q_pe, device);
    check_shape(op, "q_pe", q_pe, {T, N, R});
    check_dtype(op, "out", out, params_.dtype);
    check_device(op, "out", out, device);
    check_shape(op, "out", out, {T, N, L});
    if (lse.defined()) {
      check_dtype(op, "lse", lse, DType::f32);
      check_device(op, "lse", lse, device);
      check_shape(op, "lse", lse, {N, T});
    }
    // The index arrays: read from the metadata's host copies.
    check_shape(op, "metadata.query_start_loc", md.query_start_loc_cpu, {md.num_decodes + 1});
    check_shape(op, "metadata.seq_lens", md.seq_lens_cpu, {md.num_decodes});
    check_dim(op, "metadata.block_table", md.block_table_cpu, 2);
    check_arg(host_index(md.query_start_loc_cpu, md.num_decodes) == T, op, "metadata.query_start_loc",
              "end at num_decode_tokens = " + std::to_string(T),
              std::to_string(host_index(md.query_start_loc_cpu, md.num_decodes)));
    for (int r = 0; r < md.num_decodes; ++r) {
      const int64_t num_queries = host_index(md.query_start_loc_cpu, r + 1) - host_index(md.query_start_loc_cpu, r);
      const int64_t seq_len = host_index(md.seq_lens_cpu, r);
      check_arg(num_queries >= 1 && seq_len >= num_queries, op, "metadata.seq_lens",
                "be >= the request's query length " + std::to_string(num_queries) + " (>= 1)",
                std::to_string(seq_len) + " for decode " + std::to_string(r));
      const int64_t blocks = (seq_len + cache.block_size() - 1) / cache.block_size();
      check_arg(blocks <= md.block_table_cpu.size(1), op, "metadata.block_table",
                "have " + std::to_string(blocks) + " columns for decode " + std::to_string(r),
                md.block_table_cpu.shape_str());
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t block = host_index(md.block_table_cpu, r, b);
        check_arg(block >= 0 && block < cache.num_blocks(), op, "metadata.block_table",
                  "hold block ids in [0, num_blocks = " + std::to_string(cache.num_blocks()) + ")",
                  std::to_string(block) + " at [" + std::to_string(r) + ", " + std::to_string(b) + "]");
      }
    }
  }
};

class ReferenceDecodeClass final : public DecodeBackendClass {
 public:
  std::string name() const override { return "reference"; }
  std::vector<DType> supported_dtypes() const override { return {DType::f32, DType::f16, DType::bf16}; }
  bool supports_quant_output(QuantKey) const override { return true; }
  std::unique_ptr<DecodeBackend> create(const DecodeBackendParams& params) const override {
    return std::make_unique<ReferenceDecode>(params);
  }
};

const RegisterDecodeBackend kRegisterReferenceDecode{std::make_shared<ReferenceDecodeClass>()};

}  // namespace
}  // namespace lattn
