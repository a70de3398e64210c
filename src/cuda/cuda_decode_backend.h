// src/cuda/cuda_decode_backend.h — the `cuda` decode backend (sm80+):
// absorbed MLA attention over the paged latent cache with a split-KV plan.
//
//   prepare_metadata (the plan): picks the kernel and tile configuration and
//     makes the step's device plan, once per step for all layers: the first
//     layer that prepares a step's metadata launches the planning kernel into
//     its plan store (a pointer-stable workspace: plan arrays and split-KV
//     partials) and records it in the metadata's StepPlans
//     (lattn/step_plans.h); every other layer with the same plan shape on the
//     same stream reuses that plan and store, launching nothing. The kernel
//     reads seq_lens on the device, so a CUDA graph that captured it re-plans
//     on replay; a capture always plans again (its first layer), since kernels
//     launched before the capture are not part of the graph. docs/cuda.md,
//     "One plan per step".
//   run: the attention kernel, then the combine kernel. Both have a grid that
//     depends only on the batch shape (num_decodes, heads, max query tokens),
//     so a captured step replays with new seq_lens / block tables / queries.
//     Small batches with 16-row tiles on sm90 (at most 8 requests by
//     default) run one cooperative kernel instead that plans, attends and
//     combines (smxx/decode_fused.h); prepare_metadata then launches nothing.
//
// Kernels: (L, R) = (512, 64) with a cache of the activation dtype or fp8
// runs the tensor-core kernel (sm80/); any other dims or dtype pair run the
// generic SIMT kernel (smxx/decode_generic.cu), correct but slow.
//
// The same class is the `hopper` backend when constructed with hopper = true:
// then a 16-bit cache of the activation dtype with (L, R) = (512, 64) and a
// page size that is a multiple of 64 runs the wgmma + TMA kernel (sm90/decode,
// same plan and combine), an fp8 cache with the same dims and pages runs the
// key-major fp8 wgmma kernel (sm90/decode/fp8_*), a 16-bit cache with at most
// 16 rows per request the key-major 16-bit kernel (sm90/decode/km16_*) where
// plan() picks it, and every other case the kernels above (docs/hopper.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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
  // The last plan chose the sm90 key-major kernel for an fp8 cache (sm90/decode/fp8_*).
  bool uses_sm90_fp8_kernel() const { return sm90_fp8_; }
  // The last plan chose the sm90 key-major kernel for a 16-bit cache (sm90/decode/km16_*).
  bool uses_sm90_km16_kernel() const { return sm90_km16_; }
  // The last plan runs the one-launch small-batch kernel (smxx/decode_fused.h).
  bool uses_fused_kernel() const { return fused_; }
  sm80::DecodeTileConfig tile_config() const { return config_; }
  int num_parts() const { return plan_.num_parts; }
  // Planning kernels this instance launched (tests count them).
  int64_t plans_launched() const { return plans_launched_; }
  const DecodePlan& plan() const { return plan_; }
  int planned_batch() const { return planned_batch_; }

  // Device memory of plans: the plan arrays and split-KV partials that one
  // instance's planning kernel writes, shared with every layer that reuses
  // the plan. generation counts the plans written into it, so a layer can
  // tell that its step's plan was overwritten (another step planned here).
  struct PlanStore {
    explicit PlanStore(int device) : workspace(device) {}
    Workspace workspace;
    std::atomic<uint64_t> generation{0};
  };

 private:
  void check_metadata(const DecodeMetadata& md, const char* op) const;
  // The plan; allow_sm90 = false keeps a hopper instance on the sm80 kernel.
  void plan(const DecodeMetadata& md, bool allow_sm90);
  // Launches the planning kernel into this instance's store (plan_ set).
  void launch_plan(const DecodeMetadata& md, int parts);
  // Reserves this backend's own plan store for `parts` splits per request and
  // carves plan_ in it (both launch_plan and plan_fused start so).
  void carve_plan(const DecodeMetadata& md, int parts);
  // The one-launch kernel's plan: partial slots in this instance's store;
  // nothing is launched (the kernel plans itself).
  void plan_fused(const DecodeMetadata& md, int parts);
  // Co-resident CTAs per SM of the one-launch kernel (queried once: the
  // configuration and dtype it serves are fixed per instance).
  int fused_ctas_per_sm();
  // Whether the plan in use was overwritten since (plan store generation).
  bool plan_overwritten() const;

  bool hopper_ = false;     // the `hopper` backend (may choose the sm90 kernel)
  bool fast_ = false;       // tensor-core kernel (else generic)
  bool sm90_ = false;       // the last plan chose the sm90 wgmma kernel
  bool sm90_fp8_ = false;   // the last plan chose the sm90 key-major fp8-cache kernel
  bool sm90_km16_ = false;  // the last plan chose the sm90 key-major 16-bit-cache kernel (<= 16 rows)
  bool pdl_ = false;        // its launches are programmatic dependent launches (LATTN_HOPPER_PDL)
  bool fused_ = false;      // the last plan chose the one-launch small-batch kernel
  int fused_ctas_per_sm_ = -1;
  sm80::DecodeTileConfig config_{};
  int m_tiles_ = 0;
  int min_slots_ = 0;  // partial slots a batch-invariant plan with folding needs beyond 2 * parts
  int planned_batch_ = -1;
  DecodePlan plan_{};
  bool whole_requests_ = true;             // plans may keep requests whole (LATTN_DECODE_WHOLE=0: never)
  std::shared_ptr<PlanStore> own_store_;   // where this instance's plans go
  std::shared_ptr<PlanStore> plan_store_;  // the store plan_ points into (own or a shared step's)
  uint64_t plan_generation_ = 0;           // plan_store_'s generation when plan_ was written
  int64_t plans_launched_ = 0;
  Workspace fused_sync_;  // the one-launch kernel's grid-barrier words (zeroed once)
};

// Planning kernels a `cuda` or `hopper` decode backend instance has launched
// (tests count them: one per step, not one per layer); -1 for any other
// backend. Builds without CUDA link src/cuda/absent/ (always -1).
int64_t decode_plans_launched(const DecodeBackend& backend);

// For tests: the last plan's parts per request (copied from the device after
// a device synchronize; empty when the backend has no device plan, e.g. the
// one-launch small-batch kernel or the generic kernel).
std::vector<int32_t> decode_plan_num_splits(const DecodeBackend& backend);

// For tests: the split-KV parts of the last plan; -1 for any other backend
// (as decode_plans_launched: a test must not name the CUDA class, which a
// build without CUDA does not have).
int decode_plan_num_parts(const DecodeBackend& backend);

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
