// The `reference` prefill backend: ordinary multi-head attention with QK dim
// P+R and V dim V, as plain loops in fp64 (the oracle every prefill backend
// is compared against). Valid on any device: CUDA tensors are staged
// through host copies — correct and slow.
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/ops/host_staging.h"
#include "cpu/reference_common.h"
#include "lattn/backend.h"
#include "lattn/check.h"
#include "lattn/errors.h"

namespace lattn {
namespace {

using detail::HostStaged;

int32_t host_index(const Tensor& t, int64_t i) { return t.data_as<const int32_t>()[i * t.stride(0)]; }

class ReferencePrefill final : public PrefillBackend {
 public:
  using PrefillBackend::PrefillBackend;
  std::string name() const override { return "reference"; }
  bool supports_quant_output(QuantKey) const override { return true; }

  void run_prefill_new_tokens(const Tensor& q, const Tensor& k, const Tensor& v, bool return_softmax_lse,
                              const Tensor& out, const Tensor& lse, const Tensor& output_scale) override {
    const char* op = "reference.run_prefill_new_tokens";
    const PrefillMetadata& md = metadata(op);
    const int64_t T = md.num_prefill_tokens;
    check_inputs(op, q, k, v, T, T);
    check_outputs(op, out, return_softmax_lse ? lse : Tensor(), T, v.size(2), output_scale);
    check_arg(!return_softmax_lse || lse.defined(), op, "lse", "be a tensor when return_softmax_lse", "no tensor");

    // Causal: query token i of a request attends to the request's keys up to itself.
    const Tensor& query_start = md.query_start_loc_cpu;
    attend(
        q, k, v, out, return_softmax_lse ? lse : Tensor(), output_scale, md.num_prefills,
        [&](int64_t p) {
          return std::pair<int64_t, int64_t>{host_index(query_start, p), host_index(query_start, p + 1)};
        },
        [&](int64_t p, int64_t i) {
          const int64_t begin = host_index(query_start, p);
          return std::pair<int64_t, int64_t>{begin, i + 1};
        });
  }

  void run_prefill_context_chunk(int chunk_idx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                 const Tensor& lse) override {
    const char* op = "reference.run_prefill_context_chunk";
    const PrefillMetadata& md = metadata(op);
    const ContextChunkPlan& plan = md.chunks;
    check_arg(chunk_idx >= 0 && chunk_idx < plan.num_chunks, op, "chunk_idx",
              "be in [0, num_chunks = " + std::to_string(plan.num_chunks) + ")", std::to_string(chunk_idx));
    const int64_t T = md.num_prefill_tokens;
    check_inputs(op, q, k, v, T, plan.seq_tot[size_t(chunk_idx)]);
    check_defined(op, "lse", lse);
    check_outputs(op, out, lse, T, v.size(2), Tensor());

    // Non-causal: every query token of prefill p sees all of p's keys in this chunk.
    const Tensor& query_start = md.query_start_loc_cpu;
    const Tensor cu_keys = plan.cu_seq_lens_cpu.select(0, chunk_idx);
    attend(
        q, k, v, out, lse, Tensor(), md.num_prefills,
        [&](int64_t p) {
          return std::pair<int64_t, int64_t>{host_index(query_start, p), host_index(query_start, p + 1)};
        },
        [&](int64_t p, int64_t) {
          return std::pair<int64_t, int64_t>{host_index(cu_keys, p), host_index(cu_keys, p + 1)};
        });
  }

 private:
  const PrefillMetadata& metadata(const char* op) const {
    if (!prefill_metadata_) throw ValueError(std::string(op) + ": prepare_metadata was not called for this step");
    return *prefill_metadata_;
  }

  void check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, int64_t num_queries,
                    int64_t num_keys) const {
    const int64_t N = params_.num_heads, Dqk = params_.qk_nope_head_dim + params_.qk_rope_head_dim;
    const Device device = params_.context.device;
    for (const auto& [name, t, rows] : {std::tuple<const char*, const Tensor&, int64_t>{"q", q, num_queries},
                                        std::tuple<const char*, const Tensor&, int64_t>{"k", k, num_keys}}) {
      check_dtype(op, name, t, params_.dtype);
      check_device(op, name, t, device);
      check_shape(op, name, t, {rows, N, Dqk});
    }
    check_dtype(op, "v", v, params_.dtype);
    check_device(op, "v", v, device);
    check_shape(op, "v", v, {num_keys, N, kAnySize});
    check_arg(v.size(2) == params_.v_head_dim || v.size(2) == Dqk, op, "v",
              "have head dim v_head_dim = " + std::to_string(params_.v_head_dim) + " (or padded to " +
                  std::to_string(Dqk) + ")",
              v.shape_str());
  }

  void check_outputs(const char* op, const Tensor& out, const Tensor& lse, int64_t T, int64_t Dv,
                     const Tensor& output_scale) const {
    const Device device = params_.context.device;
    check_dtype(op, "out", out, output_scale.defined() ? DType::fp8_e4m3 : params_.dtype);
    check_device(op, "out", out, device);
    check_shape(op, "out", out, {T, params_.num_heads, Dv});
    if (lse.defined()) {
      check_dtype(op, "lse", lse, DType::f32);
      check_device(op, "lse", lse, device);
      check_shape(op, "lse", lse, {params_.num_heads, T});
    }
    if (output_scale.defined()) {
      check_dtype(op, "output_scale", output_scale, DType::f32);
      check_device(op, "output_scale", output_scale, device);
      check_arg(output_scale.numel() == 1, op, "output_scale", "have one element", output_scale.shape_str());
    }
  }

  // For each prefill p, query rows query_rows(p) = [begin, end); query row i
  // attends to key rows key_rows(p, i) = [begin, end) of k and v.
  template <class QueryRows, class KeyRows>
  void attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
              const Tensor& output_scale, int num_prefills, QueryRows query_rows, KeyRows key_rows) const {
    const HostStaged q_host(q, true), k_host(k, true), v_host(v, true);
    const HostStaged out_host(out, true), lse_host(lse, true), scale_host(output_scale, true);
    const reference::F64Array q64 = reference::load_f64(q_host.host());
    const reference::F64Array k64 = reference::load_f64(k_host.host());
    const reference::F64Array v64 = reference::load_f64(v_host.host());
    const int64_t N = params_.num_heads, Dqk = q.size(2), Dv = v.size(2);
    const float fp8_scale = output_scale.defined() ? *scale_host.host().data_as<const float>() : 1.f;
    const Tensor& o = out_host.host();
    const Tensor& l = lse_host.host();

    for (int p = 0; p < num_prefills; ++p) {
      const std::pair<int64_t, int64_t> queries = query_rows(p);
      const int64_t q_begin = queries.first, q_end = queries.second;
      for (int64_t i = q_begin; i < q_end; ++i) {
        for (int64_t h = 0; h < N; ++h) {
          const std::pair<int64_t, int64_t> keys = key_rows(p, i);
          const int64_t num_keys = keys.second - keys.first;
          std::vector<double> o_row(static_cast<size_t>(Dv));
          // Keys of head h are rows keys.first.. of k (and v), N heads apart.
          const double* k_rows = num_keys > 0 ? k64.row(keys.first, h) : nullptr;
          const double* v_rows = num_keys > 0 ? v64.row(keys.first, h) : nullptr;
          const double row_lse = reference::attend_one_row(q64.row(i, h), Dqk, k_rows, N * Dqk, v_rows, N * Dv, Dv,
                                                           num_keys, params_.scale, o_row.data());
          reference::store_row(o, i * o.stride(0) + h * o.stride(1), o_row.data(), Dv, fp8_scale);
          if (l.defined()) l.data_as<float>()[h * l.stride(0) + i * l.stride(1)] = float(row_lse);
        }
      }
    }
    out_host.copy_back();
    lse_host.copy_back();
  }
};

class ReferencePrefillClass final : public PrefillBackendClass {
 public:
  std::string name() const override { return "reference"; }
  std::vector<DType> supported_dtypes() const override { return {DType::f32, DType::f16, DType::bf16}; }
  bool supports_quant_output(QuantKey) const override { return true; }
  std::unique_ptr<PrefillBackend> create(const PrefillBackendParams& params) const override {
    return std::make_unique<ReferencePrefill>(params);
  }
};

const RegisterPrefillBackend kRegisterReferencePrefill{std::make_shared<ReferencePrefillClass>()};

}  // namespace
}  // namespace lattn
