// example_naive: a complete MLA prefill backend in one file, built as a
// plug-in (a shared library lattn loads with dlopen; see lattn/plugin.h).
//
// It is deliberately plain: one query row at a time, scores in f32, a
// softmax, a weighted sum of V rows. It runs host tensors of f32, f16 or bf16
// with any strides, so it states that it supports the CPU only. Use it as the
// skeleton of a real backend: keep the class (what the selector asks), the
// instance (what MlaAttention runs) and the exported descriptor; replace the
// loops.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lattn/check.h"
#include "lattn/errors.h"
#include "lattn/plugin.h"

namespace {

using lattn::DType;
using lattn::Tensor;

// Element (row, head, d) of a [rows, heads, dim] tensor of any float dtype
// and any strides (in elements), as f32.
float load(const Tensor& t, int64_t row, int64_t head, int64_t d) {
  return lattn::load_as_f32(t.data(), t.dtype(), row * t.stride(0) + head * t.stride(1) + d * t.stride(2));
}

void store(const Tensor& t, int64_t row, int64_t head, int64_t d, float value) {
  lattn::store_from_f32(t.data(), t.dtype(), row * t.stride(0) + head * t.stride(1) + d * t.stride(2), value);
}

// Reads a host int32 index array (query_start_loc, cu_seq_lens).
int32_t index_at(const Tensor& t, int64_t i) { return t.data_as<const int32_t>()[i * t.stride(-1)]; }

class ExampleNaivePrefill final : public lattn::PrefillBackend {
 public:
  using lattn::PrefillBackend::PrefillBackend;

  std::string name() const override { return "example_naive"; }

  void run_prefill_new_tokens(const Tensor& q, const Tensor& k, const Tensor& v, bool return_softmax_lse,
                              const Tensor& out, const Tensor& lse, const Tensor& output_scale) override {
    const char* op = "example_naive.run_prefill_new_tokens";
    if (output_scale.defined()) {
      throw lattn::NotImplementedError(std::string(op) +
                                       ": fused output quantization is not supported by example_naive "
                                       "(supports_quant_output is false); pass no output_scale");
    }
    const lattn::PrefillMetadata& m = prepared(op);
    const int64_t tokens = m.num_prefill_tokens;
    check_inputs(op, q, k, v, out, tokens, tokens);
    if (return_softmax_lse) check_lse(op, lse, tokens);
    const Tensor& lse_out = return_softmax_lse ? lse : Tensor();
    // Causal within each request: token i of a request sees keys [start, i].
    for (int p = 0; p < m.num_prefills; ++p) {
      const int64_t start = index_at(m.query_start_loc_cpu, p);
      const int64_t end = index_at(m.query_start_loc_cpu, p + 1);
      for (int64_t i = start; i < end; ++i) attend_row(q, i, k, v, start, i + 1, out, lse_out);
    }
  }

  void run_prefill_context_chunk(int chunk_idx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                 const Tensor& lse) override {
    const char* op = "example_naive.run_prefill_context_chunk";
    const lattn::PrefillMetadata& m = prepared(op);
    const lattn::ContextChunkPlan& chunks = m.chunks;
    lattn::check_arg(chunk_idx >= 0 && chunk_idx < chunks.num_chunks, op, "chunk_idx",
                     "in [0, " + std::to_string(chunks.num_chunks) + ")", std::to_string(chunk_idx));
    const Tensor cu = chunks.cu_seq_lens_cpu.select(0, chunk_idx);  // [num_prefills + 1]
    const int64_t tokens = m.num_prefill_tokens;
    check_inputs(op, q, k, v, out, tokens, index_at(cu, m.num_prefills));
    check_lse(op, lse, tokens);
    // Not causal: every new token of request p sees all of p's chunk rows.
    for (int p = 0; p < m.num_prefills; ++p) {
      const int64_t q_start = index_at(m.query_start_loc_cpu, p);
      const int64_t q_end = index_at(m.query_start_loc_cpu, p + 1);
      for (int64_t i = q_start; i < q_end; ++i) attend_row(q, i, k, v, index_at(cu, p), index_at(cu, p + 1), out, lse);
    }
  }

 private:
  const lattn::PrefillMetadata& prepared(const char* op) const {
    if (!prefill_metadata()) {
      throw lattn::ValueError(std::string(op) + ": no prefill metadata; call prepare_metadata(prefill view) first");
    }
    return *prefill_metadata();
  }

  // q [q_rows, N, P+R], k [k_rows, N, P+R], v [k_rows, N, V], out [q_rows, N, V]:
  // host tensors of the activation dtype.
  void check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                    int64_t q_rows, int64_t k_rows) const {
    const auto& p = params();
    const int64_t n = p.num_heads, qk = p.qk_nope_head_dim + p.qk_rope_head_dim, vd = p.v_head_dim;
    const std::pair<const char*, const Tensor*> args[] = {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}};
    for (const auto& [arg, t] : args) {
      lattn::check_defined(op, arg, *t);
      lattn::check_device(op, arg, *t, lattn::Device::cpu());
      lattn::check_dtype(op, arg, *t, p.dtype);
    }
    lattn::check_shape(op, "q", q, {q_rows, n, qk});
    lattn::check_shape(op, "k", k, {k_rows, n, qk});
    lattn::check_shape(op, "v", v, {k_rows, n, vd});
    lattn::check_shape(op, "out", out, {q_rows, n, vd});
  }

  // lse [N, T] f32 on the host.
  void check_lse(const char* op, const Tensor& lse, int64_t tokens) const {
    lattn::check_defined(op, "lse", lse);
    lattn::check_device(op, "lse", lse, lattn::Device::cpu());
    lattn::check_dtype(op, "lse", lse, DType::f32);
    lattn::check_shape(op, "lse", lse, {params().num_heads, tokens});
  }

  // Query row `row` of every head against key rows [k_begin, k_end): writes
  // out[row] and, when lse is defined, lse[:, row]. No keys: out 0, lse -inf.
  void attend_row(const Tensor& q, int64_t row, const Tensor& k, const Tensor& v, int64_t k_begin, int64_t k_end,
                  const Tensor& out, const Tensor& lse) const {
    const auto& p = params();
    const int64_t qk_dim = p.qk_nope_head_dim + p.qk_rope_head_dim;
    std::vector<float> scores(size_t(std::max<int64_t>(k_end - k_begin, 0)));
    for (int64_t h = 0; h < p.num_heads; ++h) {
      float max_score = -std::numeric_limits<float>::infinity();
      for (int64_t j = k_begin; j < k_end; ++j) {
        float dot = 0.f;
        for (int64_t d = 0; d < qk_dim; ++d) dot += load(q, row, h, d) * load(k, j, h, d);
        scores[size_t(j - k_begin)] = dot * p.scale;
        max_score = std::max(max_score, scores[size_t(j - k_begin)]);
      }
      float denominator = 0.f;
      for (float& s : scores) {
        s = std::exp(s - max_score);
        denominator += s;
      }
      for (int64_t d = 0; d < p.v_head_dim; ++d) {
        float acc = 0.f;
        for (int64_t j = k_begin; j < k_end; ++j) acc += scores[size_t(j - k_begin)] * load(v, j, h, d);
        store(out, row, h, d, k_end > k_begin ? acc / denominator : 0.f);
      }
      if (lse.defined()) {
        const float value =
            k_end > k_begin ? max_score + std::log(denominator) : -std::numeric_limits<float>::infinity();
        *static_cast<float*>(lse.ptr_at({h, row})) = value;
      }
    }
  }
};

class ExampleNaivePrefillClass final : public lattn::PrefillBackendClass {
 public:
  std::string name() const override { return "example_naive"; }
  std::vector<DType> supported_dtypes() const override { return {DType::f32, DType::f16, DType::bf16}; }
  // Host loops: the CPU only (no compute capability).
  bool supports_compute_capability(std::optional<lattn::DeviceCapability> capability) const override {
    return !capability.has_value();
  }
  std::unique_ptr<lattn::PrefillBackend> create(const lattn::PrefillBackendParams& params) const override {
    if (!params.context.device.is_cpu()) {
      throw lattn::ValueError("example_naive: argument 'params.context.device' must be cpu, got " +
                              lattn::device_name(params.context.device));
    }
    return std::make_unique<ExampleNaivePrefill>(params);
  }
};

}  // namespace

// The entry point lattn calls after dlopen: "libexample_naive_prefill.so:lattn_example_naive_plugin".
LATTN_PLUGIN_EXPORT const LattnPluginDescriptor* lattn_example_naive_plugin() {
  static const ExampleNaivePrefillClass prefill;
  static const LattnPluginDescriptor descriptor{LATTN_PLUGIN_API_VERSION, "example_naive", &prefill, nullptr};
  return &descriptor;
}
