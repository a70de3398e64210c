// src/cuda/cuda_prefill_backend.h — the `cuda` prefill backend's instance
// (internal): argument checks and PrefillParams for both prefill passes, and
// the launch step that the `hopper` backend (hopper_prefill_backend.cu)
// replaces with its sm_90a kernel.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cuda/sm80/prefill/prefill_params.h"
#include "lattn/backend.h"

namespace lattn {

// The reason a (qk, v) pair has no sm80 prefill kernel, or "" when it has one.
std::string cuda_prefill_head_dims_reason(int qk, int v);

// What the `cuda` and `hopper` prefill classes share: the reasons
// validate_configuration gives (the base class's and the head dims), and the
// checks of create() — a CUDA device, f16 or bf16, num_heads > 0, scale > 0,
// head dims a kernel serves — throwing ValueError that names `op`.
std::vector<std::string> cuda_prefill_configuration_reasons(const PrefillBackendClass& cls,
                                                            std::optional<DeviceCapability> capability,
                                                            const SelectorConfig& config);
void check_cuda_prefill_backend_params(const char* op, const PrefillBackendClass& cls,
                                       const PrefillBackendParams& params);

// run_*() validate every argument (shapes, dtypes, device, strides, the
// prepared metadata's host copies) before launching anything, then launch on
// the instance's stream without synchronizing.
class CudaPrefillBackend : public PrefillBackend {
 public:
  explicit CudaPrefillBackend(const PrefillBackendParams& params) : PrefillBackend(params) {}

  std::string name() const override;
  // The kernel and tile configuration for this layer's head dims (kernel_labels.cpp).
  std::string kernel_label() const override;
  void run_prefill_new_tokens(const Tensor& q, const Tensor& k, const Tensor& v, bool return_softmax_lse,
                              const Tensor& out, const Tensor& lse, const Tensor& output_scale) override;
  void run_prefill_context_chunk(int chunk_idx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                 const Tensor& lse) override;

 protected:
  // Runs the attention of `p` on the instance's stream, its device current.
  // q_rows: rows of q and out; kv_rows: rows of k and v. Default: the sm80 kernels.
  virtual void launch_on_device(const cuda::sm80::PrefillParams& p, int64_t q_rows, int64_t kv_rows) const;

 private:
  const PrefillMetadata& metadata(const char* op) const;
  // q [tokens, N, P+R], k [key_rows, N, P+R], v [key_rows, N, V], out [tokens, N, V],
  // all of the instance's dtype, on its device, last dim contiguous.
  void check_activations(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         int64_t tokens, int64_t key_rows) const;
  // Dtype, device, and what the kernels' 16-byte row accesses need.
  void check_activation(const char* op, const char* arg, const Tensor& t) const;
  // lse [N, tokens] f32 on the device, token stride 1.
  void check_lse(const char* op, const Tensor& lse, int64_t tokens) const;
  cuda::sm80::PrefillParams base_params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                        const Tensor& lse) const;
  void launch(const cuda::sm80::PrefillParams& p, int64_t q_rows, int64_t kv_rows) const;
};

}  // namespace lattn
