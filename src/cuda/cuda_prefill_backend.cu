// The `cuda` prefill backend: varlen attention of the compute-friendly MLA
// path on the sm80 tensor-core kernels (src/cuda/sm80/prefill/). New tokens
// run causal over query_start_loc; context chunk i runs non-causal with keys
// cu_seq_lens[i]. Both write out [T, N, V] and LSE [N, T] in one launch.
//
// The instance (cuda_prefill_backend.h) is shared with the `hopper` backend,
// which replaces only its launch step.
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cuda/common/cuda_check.h"
#include "cuda/cuda_prefill_backend.h"
#include "cuda/sm80/prefill/prefill_config.h"
#include "cuda/sm80/prefill/prefill_launch.h"
#include "lattn/backend.h"
#include "lattn/check.h"
#include "lattn/errors.h"

namespace lattn {

using cuda::sm80::PrefillParams;

namespace {

// Makes `device` current for the scope and restores the previous one.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    LATTN_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) LATTN_CUDA_CHECK(cudaSetDevice(device));
    current_ = device;
  }
  ~ScopedDevice() {
    if (previous_ != current_) cudaSetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = 0;
  int current_ = 0;
};

}  // namespace

std::string cuda_prefill_head_dims_reason(int qk, int v) {
  if (cuda::sm80::default_prefill_config(qk, v) >= 0) return "";
  return "head dims qk_nope_head_dim + qk_rope_head_dim = " + std::to_string(qk) +
         ", v_head_dim = " + std::to_string(v) +
         " not supported by the cuda prefill kernels (supported (qk, v): " + cuda::sm80::supported_prefill_head_dims() +
         ")";
}

std::vector<std::string> cuda_prefill_configuration_reasons(const PrefillBackendClass& cls,
                                                            std::optional<DeviceCapability> capability,
                                                            const SelectorConfig& config) {
  std::vector<std::string> reasons = cls.PrefillBackendClass::validate_configuration(capability, config);
  const MLADimensions& d = config.mla_dimensions;
  const std::string dims = cuda_prefill_head_dims_reason(d.qk_nope_head_dim + d.qk_rope_head_dim, d.v_head_dim);
  if (!dims.empty()) reasons.push_back(dims);
  return reasons;
}

void check_cuda_prefill_backend_params(const char* op, const PrefillBackendClass& cls,
                                       const PrefillBackendParams& params) {
  check_arg(params.context.device.is_cuda(), op, "params.context.device", "a CUDA device",
            device_name(params.context.device));
  check_arg(cls.supports_dtype(params.dtype), op, "params.dtype", "f16 or bf16", dtype_name(params.dtype));
  check_arg(params.num_heads > 0, op, "params.num_heads", "> 0", std::to_string(params.num_heads));
  check_arg(params.scale > 0.f, op, "params.scale", "> 0", std::to_string(params.scale));
  const std::string dims =
      cuda_prefill_head_dims_reason(params.qk_nope_head_dim + params.qk_rope_head_dim, params.v_head_dim);
  if (!dims.empty()) throw ValueError(std::string(op) + ": " + dims);
}

namespace {

// Host view of one row of cumulative lengths, checked: non-decreasing,
// starting at >= 0, ending at <= `rows` (the tensor the lengths index).
// Returns the longest length.
int check_cu_seqlens(const char* op, const char* what, const int32_t* cu, int batch, int64_t rows) {
  int longest = 0;
  if (cu[0] < 0) throw ValueError(std::string(op) + ": " + what + "[0] must be >= 0, got " + std::to_string(cu[0]));
  for (int b = 0; b < batch; ++b) {
    const int len = cu[b + 1] - cu[b];
    if (len < 0) {
      throw ValueError(std::string(op) + ": " + what + " must be non-decreasing, got " + std::to_string(cu[b]) +
                       " then " + std::to_string(cu[b + 1]) + " at index " + std::to_string(b));
    }
    longest = std::max(longest, len);
  }
  if (cu[batch] > rows) {
    throw ValueError(std::string(op) + ": " + what + " ends at " + std::to_string(cu[batch]) +
                     " but the tensor it indexes has " + std::to_string(rows) + " rows");
  }
  return longest;
}

// A row of cumulative lengths of the prepared metadata: `device_view` must
// live where the activations do (MlaMetadata::to_device puts it there) and
// `host_view` is its host copy, both int32 with `length` contiguous entries.
void check_index_rows(const char* op, const char* name, const Tensor& device_view, const Tensor& host_view,
                      int64_t length, Device device) {
  const auto ok = [&](const Tensor& t, Device where) {
    return t.defined() && t.device() == where && t.dtype() == DType::i32 && t.dim() == 1 && t.size(0) == length &&
           t.is_contiguous();
  };
  if (!ok(device_view, device) || !ok(host_view, Device::cpu())) {
    throw ValueError(std::string(op) + ": prefill metadata '" + name + "' must be int32 [" + std::to_string(length) +
                     "] on " + device_name(device) +
                     " with its host copy (call MlaMetadata::to_device before "
                     "prepare_metadata), got " +
                     (device_view.defined() ? device_view.describe() : std::string("undefined")));
  }
}

}  // namespace

std::string CudaPrefillBackend::name() const { return "cuda"; }

void CudaPrefillBackend::run_prefill_new_tokens(const Tensor& q, const Tensor& k, const Tensor& v,
                                                bool return_softmax_lse, const Tensor& out, const Tensor& lse,
                                                const Tensor& output_scale) {
  constexpr const char* op = "run_prefill_new_tokens";
  if (output_scale.defined()) {
    throw NotImplementedError(std::string(op) + ": the " + name() +
                              " prefill backend does not fuse output quantization "
                              "(supports_quant_output is false); pass no output_scale");
  }
  const PrefillMetadata& md = metadata(op);
  const int64_t tokens = md.num_prefill_tokens;
  check_activations(op, q, k, v, out, tokens, tokens);
  if (return_softmax_lse) check_lse(op, lse, tokens);
  check_index_rows(op, "query_start_loc", md.query_start_loc, md.query_start_loc_cpu, md.num_prefills + 1,
                   params_.context.device);
  const int longest =
      check_cu_seqlens(op, "query_start_loc", md.query_start_loc_cpu.data_as<const int32_t>(), md.num_prefills, tokens);

  PrefillParams p = base_params(q, k, v, out, return_softmax_lse ? lse : Tensor());
  p.cu_seqlens_q = md.query_start_loc.data_as<const int32_t>();
  p.cu_seqlens_k = p.cu_seqlens_q;
  p.batch = md.num_prefills;
  p.max_seqlen_q = longest;
  p.causal = true;
  launch(p, tokens, tokens);
}

void CudaPrefillBackend::run_prefill_context_chunk(int chunk_idx, const Tensor& q, const Tensor& k, const Tensor& v,
                                                   const Tensor& out, const Tensor& lse) {
  constexpr const char* op = "run_prefill_context_chunk";
  const PrefillMetadata& md = metadata(op);
  const ContextChunkPlan& plan = md.chunks;
  check_arg(chunk_idx >= 0 && chunk_idx < plan.num_chunks, op, "chunk_idx",
            "in [0, " + std::to_string(plan.num_chunks) + ")", std::to_string(chunk_idx));
  check_index_rows(op, "query_start_loc", md.query_start_loc, md.query_start_loc_cpu, md.num_prefills + 1,
                   params_.context.device);
  check_arg(plan.cu_seq_lens.defined() && plan.cu_seq_lens.dim() == 2 && plan.cu_seq_lens.size(0) > chunk_idx &&
                plan.cu_seq_lens_cpu.defined() && plan.cu_seq_lens_cpu.dim() == 2 &&
                plan.cu_seq_lens_cpu.size(0) > chunk_idx,
            op, "chunks.cu_seq_lens", "[num_chunks, num_prefills + 1] on the device and the host",
            plan.cu_seq_lens.defined() ? plan.cu_seq_lens.describe() : std::string("undefined"));
  check_index_rows(op, "chunks.cu_seq_lens[chunk_idx]", plan.cu_seq_lens.select(0, chunk_idx),
                   plan.cu_seq_lens_cpu.select(0, chunk_idx), md.num_prefills + 1, params_.context.device);

  const int64_t tokens = md.num_prefill_tokens;
  check_dim(op, "k", k, 3);
  check_activations(op, q, k, v, out, tokens, k.size(0));
  check_lse(op, lse, tokens);
  const int longest =
      check_cu_seqlens(op, "query_start_loc", md.query_start_loc_cpu.data_as<const int32_t>(), md.num_prefills, tokens);
  check_cu_seqlens(op, "chunks.cu_seq_lens[chunk_idx]",
                   plan.cu_seq_lens_cpu.select(0, chunk_idx).data_as<const int32_t>(), md.num_prefills, k.size(0));

  PrefillParams p = base_params(q, k, v, out, lse);
  p.cu_seqlens_q = md.query_start_loc.data_as<const int32_t>();
  p.cu_seqlens_k = plan.cu_seq_lens.select(0, chunk_idx).data_as<const int32_t>();
  p.batch = md.num_prefills;
  p.max_seqlen_q = longest;
  p.causal = false;
  launch(p, tokens, k.size(0));
}

const PrefillMetadata& CudaPrefillBackend::metadata(const char* op) const {
  if (prefill_metadata() == nullptr) {
    throw ValueError(std::string(op) + ": no prefill metadata; call prepare_metadata() before running");
  }
  return *prefill_metadata();
}

void CudaPrefillBackend::check_activations(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& out, int64_t tokens, int64_t key_rows) const {
  const int64_t heads = params_.num_heads;
  const int64_t qk = params_.qk_nope_head_dim + params_.qk_rope_head_dim;
  const int64_t dv = params_.v_head_dim;
  check_activation(op, "q", q);
  check_shape(op, "q", q, {tokens, heads, qk});
  check_activation(op, "k", k);
  check_shape(op, "k", k, {key_rows, heads, qk});
  check_activation(op, "v", v);
  check_shape(op, "v", v, {key_rows, heads, dv});
  check_activation(op, "out", out);
  check_shape(op, "out", out, {tokens, heads, dv});
}

void CudaPrefillBackend::check_activation(const char* op, const char* arg, const Tensor& t) const {
  check_dtype(op, arg, t, params_.dtype);
  check_device(op, arg, t, params_.context.device);
  check_dim(op, arg, t, 3);
  check_last_dim_contiguous(op, arg, t);
  const auto address = reinterpret_cast<uintptr_t>(t.data());
  check_arg(t.stride(0) % 8 == 0 && t.stride(1) % 8 == 0 && address % 16 == 0, op, arg,
            "16-byte aligned with row and head strides that are multiples of 8 elements",
            t.describe() + " at address " + std::to_string(address));
}

void CudaPrefillBackend::check_lse(const char* op, const Tensor& lse, int64_t tokens) const {
  check_dtype(op, "lse", lse, DType::f32);
  check_device(op, "lse", lse, params_.context.device);
  check_shape(op, "lse", lse, {int64_t(params_.num_heads), tokens});
  check_last_dim_contiguous(op, "lse", lse);
}

PrefillParams CudaPrefillBackend::base_params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                              const Tensor& lse) const {
  PrefillParams p;
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.out = out.data();
  p.lse = lse.defined() ? lse.data_as<float>() : nullptr;
  p.q_row_stride = q.stride(0);
  p.q_head_stride = q.stride(1);
  p.k_row_stride = k.stride(0);
  p.k_head_stride = k.stride(1);
  p.v_row_stride = v.stride(0);
  p.v_head_stride = v.stride(1);
  p.out_row_stride = out.stride(0);
  p.out_head_stride = out.stride(1);
  p.lse_head_stride = lse.defined() ? lse.stride(0) : 0;
  p.num_heads = params_.num_heads;
  p.head_dim_qk = params_.qk_nope_head_dim + params_.qk_rope_head_dim;
  p.head_dim_v = params_.v_head_dim;
  p.scale = params_.scale;
  p.element = params_.dtype == DType::bf16 ? cuda::sm80::PrefillElement::bf16 : cuda::sm80::PrefillElement::f16;
  return p;
}

void CudaPrefillBackend::launch(const PrefillParams& p, int64_t q_rows, int64_t kv_rows) const {
  ScopedDevice device(params_.context.device.index);
  launch_on_device(p, q_rows, kv_rows);
}

void CudaPrefillBackend::launch_on_device(const PrefillParams& p, int64_t, int64_t) const {
  cuda::sm80::run_prefill_attention(p, params_.context.stream);
}

namespace {

class CudaPrefillBackendClass final : public PrefillBackendClass {
 public:
  std::string name() const override { return "cuda"; }

  bool supports_compute_capability(std::optional<DeviceCapability> capability) const override {
    return capability.has_value() && capability->major >= 8;
  }

  std::vector<std::string> validate_configuration(std::optional<DeviceCapability> capability,
                                                  const SelectorConfig& config) const override {
    return cuda_prefill_configuration_reasons(*this, capability, config);
  }

  std::unique_ptr<PrefillBackend> create(const PrefillBackendParams& params) const override {
    check_cuda_prefill_backend_params("cuda prefill backend", *this, params);
    return std::make_unique<CudaPrefillBackend>(params);
  }
};

const RegisterPrefillBackend kReg{std::make_shared<CudaPrefillBackendClass>()};

}  // namespace
}  // namespace lattn
