// src/cuda/cuda_decode_backend.h — the `cuda` decode backend (sm80+):
// absorbed MLA attention over the paged latent cache with a split-KV plan.
//
//   prepare_metadata (the plan): picks the kernel and tile configuration,
//     sizes the instance's workspace (pointer-stable once grown) and launches
//     the planning kernel on the instance's stream; it reads seq_lens on the
//     device, so a CUDA graph that captured it re-plans on replay.
//   run: the attention kernel, then the combine kernel. Both have a grid that
//     depends only on the batch shape (num_decodes, heads, max query tokens),
//     so a captured step replays with new seq_lens / block tables / queries.
//
// Kernels: (L, R) = (512, 64) with a cache of the activation dtype or fp8
// runs the tensor-core kernel (sm80/); any other dims or dtype pair run the
// generic SIMT kernel (smxx/decode_generic.cu), correct but slow.
//
// The same class is the `hopper` backend when constructed with hopper = true:
// then a 16-bit cache of the activation dtype with (L, R) = (512, 64) and a
// page size that is a multiple of 64 runs the wgmma + TMA kernel (sm90/decode,
// same plan and combine), and every other case the kernels above (docs/hopper.md).
#pragma once

#include <memory>
#include <string>

#include "cuda/common/workspace.h"
#include "cuda/sm80/decode/decode_config.h"
#include "cuda/smxx/decode_params.h"
#include "lattn/backend.h"

namespace lattn::cuda {

class CudaDecodeBackend final : public DecodeBackend {
 public:
  explicit CudaDecodeBackend(const DecodeBackendParams& params, bool hopper = false);

  std::string name() const override { return hopper_ ? "hopper" : "cuda"; }
  // The kernel, tile configuration and split-KV parts of the last plan (kernel_labels.cpp).
  std::string kernel_label() const override;
  void prepare_metadata(const DecodeMetadata& metadata) override;
  void run(const Tensor& ql_nope, const Tensor& q_pe, const LatentCache& cache, const DecodeMetadata& metadata,
           const Tensor& out, const Tensor& lse) override;

  // What the last plan chose (benchmarks and tests report it).
  bool uses_tensor_cores() const { return fast_; }
  bool uses_sm90_kernel() const { return sm90_; }
  sm80::DecodeTileConfig tile_config() const { return config_; }
  int num_parts() const { return plan_.num_parts; }
  const Workspace& workspace() const { return workspace_; }

 private:
  void check_metadata(const DecodeMetadata& md, const char* op) const;
  // The plan; allow_sm90 = false keeps a hopper instance on the sm80 kernel.
  void plan(const DecodeMetadata& md, bool allow_sm90);

  bool hopper_ = false;  // the `hopper` backend (may choose the sm90 kernel)
  bool fast_ = false;    // tensor-core kernel (else generic)
  bool sm90_ = false;    // the last plan chose the sm90 wgmma kernel
  sm80::DecodeTileConfig config_{};
  int m_tiles_ = 0;
  int planned_batch_ = -1;
  DecodePlan plan_{};
  Workspace workspace_;
};

class CudaDecodeBackendClass final : public DecodeBackendClass {
 public:
  std::string name() const override { return "cuda"; }
  bool supports_cuda_graphs() const override { return true; }
  bool supports_compute_capability(std::optional<DeviceCapability> capability) const override {
    return capability.has_value() && capability->major >= 8;
  }
  // Built with CUDA; whether a device exists is the capability's question.
  bool is_available() const override { return true; }
  // A layer with this decode backend can write fp8 output: MlaAttention
  // quantizes the decode rows after W_UV with the CUDA quantize_fp8 kernel.
  bool supports_quant_output(QuantKey) const override { return true; }
  std::unique_ptr<DecodeBackend> create(const DecodeBackendParams& params) const override;
};

}  // namespace lattn::cuda
