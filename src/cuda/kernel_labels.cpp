// What the `cuda` and `hopper` backends run, in words (lattn/kernel_label.h):
// the kernel each instance launches, its tile configuration and, for decode,
// the split-KV parts of the last plan. Kept apart from the launch code: it
// reads the choices the backends made and repeats none of their rules except
// which prefill kernel serves which head dims (the kernels' config tables).
#include <string>

#include "cuda/cuda_decode_backend.h"
#include "cuda/cuda_prefill_backend.h"
#include "cuda/sm80/prefill/prefill_config.h"
#include "cuda/sm90/decode/decode_host.h"
#include "cuda/sm90/decode/decode_schedule.h"
#include "cuda/sm90/prefill/prefill_config.h"
#include "lattn/dtype.h"

namespace lattn {
namespace {

std::string str(int v) { return std::to_string(v); }

// MlaAttention's projections go through cuda::gemm (smxx/gemm_cublas.cu):
// cuBLAS for the layer's same-dtype operands, lattn's own tiled kernel in
// batch-invariant mode (cuBLAS picks its algorithm by shape).
std::string projections(bool batch_invariant) {
  return batch_invariant
             ? "; projections: lattn's fixed-tile GEMM (batch-invariant mode: tiles and K order fixed whatever "
               "the number of rows)"
             : "; projections: cuBLAS (f32 accumulation)";
}

}  // namespace

std::string CudaPrefillBackend::kernel_label() const {
  const int qk = params_.qk_nope_head_dim + params_.qk_rope_head_dim, v = params_.v_head_dim;
  std::string s = name() + ": ";
  // HopperPrefillBackend (hopper_prefill_backend.cu) runs the sm90a kernel for
  // the head dims that have one and this class's sm80 kernels for the others.
  const int sm90 = name() == "hopper" ? cuda::sm90::hopper_prefill_config(qk, v) : -1;
  if (sm90 >= 0) {
    const cuda::sm90::HopperPrefillConfig& c = cuda::sm90::kHopperPrefillConfigs[sm90];
    s += std::string("sm90a wgmma + TMA prefill, ") + c.name + " (" + str(c.block_m) + " query rows x " +
         str(c.block_n) + " keys per tile, " + str(c.stages) + " K/V stages" + (c.pingpong ? ", ping-pong" : "") + ")";
  } else {
    const int i = cuda::sm80::default_prefill_config(qk, v);
    s += "sm80 mma.sync prefill";
    if (name() == "hopper") s += " (no sm90a kernel for head dims " + str(qk) + "/" + str(v) + ")";
    if (i >= 0) {
      const cuda::sm80::PrefillTileConfig& c = cuda::sm80::kPrefillTileConfigs[i];
      s += std::string(", ") + c.name + " (" + str(c.block_m) + " query rows x " + str(c.block_n) + " keys per tile, " +
           str(c.num_warps) + " warps)";
    }
  }
  return s + projections(params_.context.batch_invariant);
}

namespace cuda {

std::string CudaDecodeBackend::kernel_label() const {
  const DecodeBackendParams& p = params_;
  std::string s = name() + ": ";
  if (!fast_) {
    s += "generic SIMT decode kernel, no tensor cores (those serve (L, R) = (512, 64) with a cache of the "
         "activation dtype or fp8; this layer: (" +
         str(p.kv_lora_rank) + ", " + str(p.qk_rope_head_dim) + "), " + dtype_name(p.dtype) + " activations, " +
         dtype_name(p.kv_cache_dtype) + " cache)";
  } else if (planned_batch_ < 0) {
    s += std::string(hopper_ ? "sm90a wgmma + TMA or sm80 mma.sync" : "sm80 mma.sync") +
         " tensor-core decode; tile configuration and split-KV parts are chosen by each step's plan (none yet)";
  } else {
    // The wgmma kernel's schedule (docs/hopper.md): "seesaw" (each consumer
    // warpgroup a whole tile, the softmax of one overlapping the other's
    // products) or "serial" (S, softmax and P V of each tile in turn).
    // The fp8-cache kernel puts the keys in the MMAs' M dimension ("key-major", docs/hopper.md).
    // So does the 16-bit kernel for at most 16 rows per request.
    const bool seesaw = sm90_ && sm90::decode_sm90_seesaw(plan_.batch_invariant && plan_.fold_splits);
    s += sm90_        ? std::string("sm90a wgmma + TMA decode (") + (seesaw ? "seesaw" : "serial") + " schedule)"
         : sm90_fp8_  ? std::string("sm90a wgmma + TMA decode (fp8 cache, key-major)")
         : sm90_km16_ ? std::string("sm90a wgmma + TMA decode (16-bit cache, key-major)")
                      : std::string("sm80 mma.sync decode");
    if (hopper_ && !sm90_ && !sm90_fp8_ && !sm90_km16_) {
      // Why plan() kept this hopper instance on the sm80 kernel, in its order.
      const bool fp8 = p.kv_cache_dtype == DType::fp8_e4m3;
      const std::string layout =
          fp8 ? sm90::decode_sm90_fp8_unsupported_reason(p.dtype, p.kv_cache_dtype, p.kv_lora_rank, p.qk_rope_head_dim,
                                                         sm90::kDecodeFp8BlockN, nullptr, 0)
              : sm90::decode_sm90_unsupported_reason(p.dtype, p.kv_cache_dtype, p.kv_lora_rank, p.qk_rope_head_dim,
                                                     sm90::kDecodeBlockN, nullptr, 0);
      std::string why;
      if (fp8 && p.context.batch_invariant)
        why =
            "batch-invariant mode keeps fp8 caches on the sm80 kernel (the fp8 kernel's split of a piece's tiles "
            "between its two warpgroups follows the CTA's walk)";
      else if (fp8 && layout.empty())
        why =
            "LATTN_HOPPER_FP8=0, more than 16 rows per request, or the fp8 kernel cannot address this cache: a "
            "page size not a multiple of 64, or an unaligned view";
      else if (p.context.batch_invariant && p.num_heads <= 16)
        why =
            "batch-invariant mode with at most 16 heads: 16-row tiles (the kernel follows the head count, not "
            "the batch's longest query)";
      else if (m_tiles_ == 1 && config_.block_m == 16 && !fp8)
        why = fused_ ? "at most 16 rows per request in a batch the one-launch kernel takes: 16-row tiles"
                     : "at most 16 rows per request: 16-row tiles";
      else if (!layout.empty())
        why = layout;
      else
        why = "the wgmma kernel cannot address this cache: a page size not a multiple of 64, or an unaligned view";
      s += " (sm80 delegate: " + why + ")";
    }
    s += ", tile " + config_.str() + " (" + str(config_.block_m) + " head rows x " + str(config_.block_n) + " keys, " +
         str(config_.warps) + " warps, " + str(config_.stages) + " stages), " + str(m_tiles_) + " row tile" +
         (m_tiles_ == 1 ? "" : "s") + " x " + str(plan_.num_parts) + " split-KV parts, " +
         (plan_.batch_invariant ? std::string("batch-invariant splits (rule ") + str(plan_.split_rule) +
                                      (plan_.fold_splits && !fused_ ? ", folded in the kernel), " : "), ")
                                : std::string()) +
         (fused_ ? "planned and combined in the same launch" : "then the combine kernel");
  }
  return s + projections(p.context.batch_invariant);
}

}  // namespace cuda
}  // namespace lattn
