// The `cuda` decode backend: validation, planning and launches (see the header).
#include "cuda/cuda_decode_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <tuple>
#include <vector>

#include "cuda/common/context.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/index_check.h"
#include "cuda/sm80/decode/decode_dispatch.h"
#include "cuda/sm90/decode/decode_host.h"
#include "cuda/smxx/batch_invariant_split.h"
#include "cuda/smxx/decode_combine.h"
#include "cuda/smxx/decode_fused.h"
#include "cuda/smxx/decode_generic.h"
#include "cuda/smxx/decode_scheduler.h"
#include "lattn/check.h"
#include "lattn/errors.h"
#include "lattn/step_plans.h"

namespace lattn::cuda {
namespace {

// Operation names in error messages, per backend name (cuda, hopper).
const char* run_op(bool hopper) { return hopper ? "hopper decode run" : "cuda decode run"; }
const char* plan_op(bool hopper) { return hopper ? "hopper decode prepare_metadata" : "cuda decode prepare_metadata"; }

// Plan cost of a request's fixed work (Q load, epilogue, combine share), in
// KV tiles; FlashMLA uses a similar constant.
constexpr int kOverheadTiles = 4;

// The hopper backend runs its wgmma kernel from this many packed rows
// (heads x query tokens) per request; fewer go to the sm80 kernel's 16-row tiles.
constexpr int kSm90MinRows = 17;

// The key-major 16-bit kernel by default up to this many 64-key tiles per SM
// (plan(): measured faster at 16, slower at 248 on an H100) ...
constexpr int kKm16MaxTilesPerPart = 32;
// ... and for any length on devices whose DRAM peaks above this (GB/s): the
// sm80 16-row tiles keep too few bytes in flight to read faster than about
// 3 TB/s, the key-major kernel's TMA ring does (an H200, 4.9 TB/s peak:
// 0.94 against 0.72 of copy at H16 B128 S16384; an H100, 3.35 TB/s peak,
// reaches its copy ceiling with either, and the sm80 tiles are 1.5-3 %
// faster there). docs/perf.md, "The merged tree of the eighth session".
constexpr double kKm16AnyLengthMinDramGbps = 4000;
// On such devices also a batch of one request (which the one-launch kernel
// would take) from this many 64-key tiles per SM (S65536: ~7.8 on 132 SMs):
// on an H200 its attention + combine measured 2.9 µs faster per layer than
// the one-launch kernel at B1 S65536 (42.8 against 45.7 µs; its planning
// kernel, once per step, makes a one-layer step 1 µs slower), within noise
// at B4 S16384 and B8 S8192 (which stay one launch: their one-layer step is
// 4-5 µs faster there), slower at B1 S16384 (~1.9 tiles per SM). On an H100
// the one-launch kernel is as fast or faster at B1-B8. docs/perf.md, "Hopper
// decode, at most 16 rows, small batches".
constexpr int kKm16SmallBatchMinTilesPerPart = 6;

void check_index(const char* op, const char* arg, const Tensor& t, Device device, int dims) {
  check_defined(op, arg, t);
  check_device(op, arg, t, device);
  check_dtype(op, arg, t, DType::i32);
  check_dim(op, arg, t, dims);
}

// The hopper backend's fp8-cache kernel (sm90/decode/fp8_*) serves fp8
// caches it can read; LATTN_HOPPER_FP8=0 keeps them on the sm80 kernel
// (read at each plan: same-run A/B in benchmarks and tests).
bool hopper_fp8_enabled() {
  const char* v = std::getenv("LATTN_HOPPER_FP8");
  return !(v && *v && std::atoi(v) == 0);
}

// The hopper backend's key-major kernel for a 16-bit cache with at most 16
// rows per request (sm90/decode/km16_*): LATTN_HOPPER_KM16=0 never, =1
// wherever it can read the cache (batches the one-launch kernel would take
// included); unset, the default rule of plan(). Read at each plan (same-run
// A/B in benchmarks and tests). -1: unset.
int hopper_km16_mode() {
  const char* v = std::getenv("LATTN_HOPPER_KM16");
  return v && *v ? (std::atoi(v) != 0 ? 1 : 0) : -1;
}

// The key-major 16-bit kernel and the combine after it launched as
// programmatic dependent launches (LATTN_HOPPER_PDL=1; read at each plan).
bool hopper_pdl_enabled() {
  const char* v = std::getenv("LATTN_HOPPER_PDL");
  return v && *v && std::atoi(v) != 0;
}

// Switches for measurements (read once; docs/cuda.md, "One plan per step"):
//   LATTN_DECODE_PLAN_PER_LAYER=1  every layer plans its own step (the old way)
//   LATTN_DECODE_PARTS=N           N parts instead of one wave (balanced plans)
//   LATTN_DECODE_WHOLE=0           never a whole-request plan (always split
//                                  evenly; read at each plan, so tests can switch it)
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}
bool plan_per_layer() {
  static const bool v = env_int("LATTN_DECODE_PLAN_PER_LAYER", 0) != 0;
  return v;
}
int parts_override() {
  static const int v = env_int("LATTN_DECODE_PARTS", 0);
  return v;
}
// The one-launch small-batch kernel (smxx/decode_fused.h) serves batches of
// at most this many requests (read at each plan, so tests and benchmarks can
// switch it): LATTN_DECODE_FUSED=0 turns it off, LATTN_DECODE_FUSED_MAX_BATCH=N
// moves the limit (at most kFusedDecodeMaxBatch). docs/cuda.md, "One launch
// for small batches".
constexpr int kFusedDefaultMaxBatch = 8;
int fused_max_batch() {
  if (env_int("LATTN_DECODE_FUSED", 1) == 0) return 0;
  return std::min(env_int("LATTN_DECODE_FUSED_MAX_BATCH", kFusedDefaultMaxBatch), kFusedDecodeMaxBatch);
}

// The capture sequence `stream` is in (0: not capturing). A capture always
// plans again: kernels launched before it are not part of the graph.
unsigned long long capture_id(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  LATTN_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, &id));
  return status == cudaStreamCaptureStatusActive ? id : 0;
}

// One step's device plan of one shape, shared by its layers (the value a
// StepPlans key holds). The first layer writes it; it stays valid while the
// store was not overwritten since (generation), the capture sequence is the
// same, and the host seq_lens are those it was planned from (metadata edited
// in place is planned afresh).
struct SharedPlanState {
  std::mutex mutex;
  std::shared_ptr<CudaDecodeBackend::PlanStore> store;
  uint64_t generation = 0;
  unsigned long long capture = 0;
  std::vector<int32_t> seq_lens;
  DecodePlan plan;
};
struct SharedPlanSlot {
  std::shared_ptr<SharedPlanState> state = std::make_shared<SharedPlanState>();
};

bool same_lens(const std::vector<int32_t>& have, const DecodeMetadata& md) {
  const Tensor& s = md.seq_lens_cpu;
  if (have.size() != size_t(md.num_decodes) || s.stride(0) != 1) return false;
  return std::memcmp(have.data(), s.data(), have.size() * sizeof(int32_t)) == 0;
}

bool is_aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % uintptr_t(bytes) == 0; }

// Rows of a [T, H, D] tensor start on 16-byte boundaries (cp.async-able).
bool rows_are_16_byte(const Tensor& t) {
  const int es = t.element_size();
  return is_aligned(t.data(), 16) && (t.stride(0) * es) % 16 == 0 && (t.stride(1) * es) % 16 == 0;
}

}  // namespace

CudaDecodeBackend::CudaDecodeBackend(const DecodeBackendParams& params, bool hopper)
    : DecodeBackend(params),
      hopper_(hopper),
      own_store_(std::make_shared<PlanStore>(params.context.device.index)),
      fused_sync_(params.context.device.index) {
  const char* op = hopper ? "hopper decode backend" : "cuda decode backend";
  check_arg(params.context.device.is_cuda(), op, "context.device", "a CUDA device", device_name(params.context.device));
  check_arg(params.num_heads > 0, op, "num_heads", "positive", std::to_string(params.num_heads));
  check_arg(params.kv_lora_rank > 0 && params.qk_rope_head_dim > 0, op, "kv_lora_rank, qk_rope_head_dim", "positive",
            std::to_string(params.kv_lora_rank) + ", " + std::to_string(params.qk_rope_head_dim));
  check_arg(params.dtype == DType::f16 || params.dtype == DType::bf16, op, "dtype", "f16 or bf16",
            dtype_name(params.dtype));
  check_arg(params.kv_cache_dtype == DType::f16 || params.kv_cache_dtype == DType::bf16 ||
                params.kv_cache_dtype == DType::fp8_e4m3,
            op, "kv_cache_dtype", "f16, bf16 or fp8_e4m3", dtype_name(params.kv_cache_dtype));
  check_arg(params.kv_lora_rank + params.qk_rope_head_dim <= kGenericDecodeMaxEntry, op,
            "kv_lora_rank + qk_rope_head_dim", "at most " + std::to_string(kGenericDecodeMaxEntry),
            std::to_string(params.kv_lora_rank + params.qk_rope_head_dim));
  fast_ = params.kv_lora_rank == sm80::kDecodeL && params.qk_rope_head_dim == sm80::kDecodeR &&
          (params.kv_cache_dtype == params.dtype || params.kv_cache_dtype == DType::fp8_e4m3);
}

void CudaDecodeBackend::check_metadata(const DecodeMetadata& md, const char* op) const {
  const Device device = params_.context.device;
  const int b = md.num_decodes;
  check_index(op, "metadata.seq_lens", md.seq_lens, device, 1);
  check_index(op, "metadata.query_start_loc", md.query_start_loc, device, 1);
  check_index(op, "metadata.block_table", md.block_table, device, 2);
  check_arg(md.seq_lens.size(0) >= b, op, "metadata.seq_lens",
            "at least num_decodes = " + std::to_string(b) + " entries", md.seq_lens.shape_str());
  check_arg(md.query_start_loc.size(0) >= b + 1, op, "metadata.query_start_loc",
            "at least num_decodes + 1 = " + std::to_string(b + 1) + " entries", md.query_start_loc.shape_str());
  check_arg(md.block_table.size(0) >= b, op, "metadata.block_table",
            "at least num_decodes = " + std::to_string(b) + " rows", md.block_table.shape_str());
  check_arg(md.seq_lens.stride(0) == 1 && md.query_start_loc.stride(0) == 1 && md.block_table.stride(1) == 1, op,
            "metadata", "contiguous index arrays (block_table rows may be strided)", md.block_table.describe());
  check_arg(md.max_decode_query_len >= 1, op, "metadata.max_decode_query_len", ">= 1",
            std::to_string(md.max_decode_query_len));
  check_arg(md.block_size >= 1, op, "metadata.block_size", ">= 1", std::to_string(md.block_size));
  // The host copies (always present) must agree with the declared maxima, or
  // rows past max_decode_query_len would never be written.
  if (md.query_start_loc_cpu.defined() && md.query_start_loc_cpu.size(0) >= b + 1) {
    const int32_t* qsl = md.query_start_loc_cpu.data_as<const int32_t>();
    for (int r = 0; r < b; ++r) {
      const int s_q = qsl[r + 1] - qsl[r];
      if (s_q < 0 || s_q > md.max_decode_query_len) {
        throw ValueError(std::string(op) + ": decode request " + std::to_string(r) + " has " + std::to_string(s_q) +
                         " query tokens, expected 0.." + std::to_string(md.max_decode_query_len) +
                         " (metadata.max_decode_query_len)");
      }
    }
  }
}

void CudaDecodeBackend::prepare_metadata(const DecodeMetadata& md) {
  DecodeBackend::prepare_metadata(md);
  plan(md, true);
}

void CudaDecodeBackend::plan(const DecodeMetadata& md, bool allow_sm90) {
  planned_batch_ = -1;
  sm90_ = false;
  sm90_fp8_ = false;
  sm90_km16_ = false;
  fused_ = false;
  if (md.num_decodes == 0) return;
  check_metadata(md, plan_op(hopper_));
  const int device = params_.context.device.index;
  DeviceGuard guard(device);
  if (!fast_) {
    planned_batch_ = md.num_decodes;
    return;  // the generic kernel needs no plan
  }
  const DeviceContext& ctx = device_context(device);
  const bool fp8 = params_.kv_cache_dtype == DType::fp8_e4m3;
  const int rows = params_.num_heads * md.max_decode_query_len;
  const bool invariant = params_.context.batch_invariant;
  // The batch-invariant mode picks the kernel and its tiles from the head
  // count alone (a request's single-token rows), never from the batch's
  // longest query: the key tile and the warps' split of a tile fix each row's
  // summation order, while the M tiling does not (rows never mix), so a
  // request gets the same kernel and tiles in any batch — the ones the
  // default mode gives a batch of single-token decodes.
  const int kernel_rows = invariant ? params_.num_heads : rows;
  // hopper: the wgmma kernel where it serves the layout (the cache pointer is
  // checked again at run time) and has more than 16 rows per request: with
  // at most 16 (H16 with one query token) the sm80 kernel's 16-row tiles
  // measured faster on an H100 than the wgmma kernel's 64-row tiles, which are
  // then 3/4 padding (docs/perf.md, "Hopper decode").
  sm90_ = hopper_ && allow_sm90 && kernel_rows >= kSm90MinRows &&
          sm90::decode_sm90_unsupported_reason(params_.dtype, params_.kv_cache_dtype, params_.kv_lora_rank,
                                               params_.qk_rope_head_dim, md.block_size, nullptr, 0)
              .empty();
  // hopper with an fp8 cache: the key-major kernel (16 rows x 64 keys per
  // tile, nothing padded at H16) where it can read the layout and a request
  // has at most 16 rows: more rows take more 16-row tiles, each reading every
  // key again, and at H128 B128 S4096 the sm80 kernel's 64-row tiles measured
  // 5.7 % faster (docs/perf.md, "Hopper decode with an fp8 cache"). Not in the
  // batch-invariant mode: its two warpgroups split a piece's tiles by the
  // parity of the CTA's walk, so a row's summation order would follow the
  // batch; that mode keeps fp8 caches on the sm80 kernel.
  sm90_fp8_ = hopper_ && allow_sm90 && !invariant && fp8 && rows < kSm90MinRows && hopper_fp8_enabled() &&
              sm90::decode_sm90_fp8_unsupported_reason(params_.dtype, params_.kv_cache_dtype, params_.kv_lora_rank,
                                                       params_.qk_rope_head_dim, md.block_size, nullptr, 0)
                  .empty();
  // hopper with a 16-bit cache and at most 16 rows per request: the
  // key-major kernel (16 rows x 64 keys per tile, TMA, nothing padded), by
  // default for batches the one-launch kernel does not take (more than its
  // limit of requests) whose 64-key tiles come to at most
  // kKm16MaxTilesPerPart per SM (short pieces), or of any length on a
  // device whose DRAM peaks above kKm16AnyLengthMinDramGbps (an H200: the
  // sm80 tiles read at most ~3 TB/s there); on such a device also for a
  // batch of one request from kKm16SmallBatchMinTilesPerPart tiles per SM.
  // Measured on an H100 (docs/perf.md, "Hopper decode, at most 16
  // rows: the 16-bit key-major kernel"): 3-4 % faster than the sm80 kernel
  // at H16 B32 S4096 (16 tiles per SM), 1.4-3 % slower at B64 S32768 and
  // B128 S16384 (248 per SM); at B1-B8 its attention and combine (one CTA
  // per row chunk) come within -1.1..+2.3 µs of the one-launch kernel's
  // attention and merge, and the planning kernel adds ~4.5 µs to the step
  // ("Hopper decode, at most 16 rows, small batches").
  // The bound between 16 and 248 is not tuned. Not in the batch-invariant
  // mode (its warpgroups split a piece's tiles by the parity of the CTA's
  // walk, as the fp8 kernel's).
  const int km16_mode = hopper_km16_mode();
  pdl_ = hopper_pdl_enabled();
  bool km16_default = false;
  if (km16_mode < 0) {
    const bool fast_dram = ctx.dram_peak_gbps > kKm16AnyLengthMinDramGbps;
    int64_t tiles = -1;  // the batch's 64-key tiles (-1: no host seq_lens)
    if (md.seq_lens_cpu.defined() && md.seq_lens_cpu.device().is_cpu() && md.seq_lens_cpu.size(0) >= md.num_decodes) {
      const int32_t* lens = md.seq_lens_cpu.data_as<const int32_t>();
      const int64_t stride = md.seq_lens_cpu.stride(0);
      tiles = 0;
      for (int r = 0; r < md.num_decodes; ++r) tiles += (std::max(lens[r * stride], 0) + 63) / 64;
    }
    if (md.num_decodes > fused_max_batch()) {
      km16_default = fast_dram || (tiles >= 0 && tiles <= int64_t(kKm16MaxTilesPerPart) * ctx.sm_count);
    } else {
      km16_default =
          md.num_decodes == 1 && fast_dram && tiles >= int64_t(kKm16SmallBatchMinTilesPerPart) * ctx.sm_count;
    }
  }
  sm90_km16_ = hopper_ && allow_sm90 && !invariant && !fp8 && rows < kSm90MinRows && (km16_mode == 1 || km16_default) &&
               sm90::decode_sm90_unsupported_reason(params_.dtype, params_.kv_cache_dtype, params_.kv_lora_rank,
                                                    params_.qk_rope_head_dim, md.block_size, nullptr, 0)
                   .empty();
  int ctas_per_sm = 1;
  if (sm90_) {
    config_ = sm80::DecodeTileConfig{sm90::kDecodeBlockM, sm90::kDecodeBlockN, 9, 2};
  } else if (sm90_fp8_) {
    config_ = sm80::DecodeTileConfig{sm90::kDecodeFp8BlockM, sm90::kDecodeFp8BlockN, 12, 4};
  } else if (sm90_km16_) {
    config_ = sm80::DecodeTileConfig{sm90::kDecodeKm16BlockM, sm90::kDecodeKm16BlockN, 12, 2};
  } else {
    config_ = sm80::choose_decode_tiles(kernel_rows, ctx.max_smem_per_block_optin, fp8);
    ctas_per_sm = std::max(1, sm80::decode_ctas_per_sm(config_, params_.dtype, params_.kv_cache_dtype));
  }
  m_tiles_ = (rows + config_.block_m - 1) / config_.block_m;
  // One wave: every SM busy with a CTA of each co-resident slot.
  int parts = std::clamp(ctx.sm_count * ctas_per_sm / m_tiles_, 1, 1024);
  min_slots_ = 0;
  int64_t invariant_splits = 0;
  plan_.split_rule = kBatchInvariantDefaultSplitRule;
  plan_.fold_splits = false;
  if (invariant) {
    // Kernels that fold the splits of a piece themselves keep one wave of
    // parts for any batch, each taking W consecutive splits: a request inside
    // one part writes no partials (decode_params.h). hopper's wgmma kernel
    // (sm90/decode/decode_split_fold.cuh) folds by default: at 128 heads
    // every split's partials are 256 KB against its 576 KB of keys, and
    // writing and combining them cost 2.1x the default mode at B64/B128 x
    // 4096 keys (docs/perf.md, "Batch-invariant mode", 7th session). The sm80
    // kernel's 16-row tiles can fold too (sm80/decode/decode_split_fold.cuh,
    // with a finer rule 4), but there it measured slower than writing the
    // partials (same section), so it is off by default.
    // LATTN_BATCH_INVARIANT_FOLD=0|1 overrides both (read at each plan).
    // Every part's split writes rows x L f32 partials where the kernel does
    // not fold, and where a request is met by several parts: the more heads,
    // the coarser the rule (2 up to 16 heads, 1 up to 64, 0 above), so that
    // the partials stay small against the keys a split reads (at 128 heads
    // rule 0 took B64/B128 x 4096 keys from 2.9x to 2.1x the default mode).
    // All fixed by the tiles and the head count;
    // LATTN_BATCH_INVARIANT_SPLIT_RULE overrides the rule, for measurements.
    const int fold_env = env_int("LATTN_BATCH_INVARIANT_FOLD", -1);
    const bool sm80_fold = !sm90_ && !sm90_fp8_ && !sm90_km16_ && config_.block_m == 16 && fold_env == 1;
    plan_.fold_splits = sm80_fold || (sm90_ && fold_env != 0);
    int rule = sm80_fold ? 4 : params_.num_heads <= 16 ? 2 : params_.num_heads <= 64 ? 1 : 0;
    rule = std::clamp(env_int("LATTN_BATCH_INVARIANT_SPLIT_RULE", rule), kBatchInvariantMinSplitRule,
                      kBatchInvariantMaxSplitRule);
    plan_.split_rule = rule;
    // Splits from the host's seq_lens (a graph must be captured with its
    // longest contexts).
    const int32_t* lens = md.seq_lens_cpu.data_as<const int32_t>();
    std::vector<int> cost(size_t(md.num_decodes) + 1, 0);
    int64_t splits = 0;
    for (int r = 0; r < md.num_decodes; ++r) {
      const int tiles = (std::max(lens[r], 0) + config_.block_n - 1) / config_.block_n;
      const int n = batch_invariant_num_splits(tiles, rule);
      if (n > kMaxDecodeSplitsPerRequest || (!plan_.fold_splits && splits + n > 65535)) {
        throw NotImplementedError(
            std::string(plan_op(hopper_)) + ": batch-invariant decode cuts request " + std::to_string(r) +
            " (seq_len " + std::to_string(lens[r]) + ") into " + std::to_string(n) + " splits of " +
            std::to_string(batch_invariant_split_tiles(tiles, rule) * config_.block_n) +
            " keys, bringing the batch to " + std::to_string(splits + n) + " splits, more than the kernels handle (" +
            std::to_string(kMaxDecodeSplitsPerRequest) + " per request, 65535 in all)");
      }
      cost[size_t(r)] = int(splits);
      splits += n;
    }
    cost[size_t(md.num_decodes)] = int(splits);
    invariant_splits = splits;
    if (!plan_.fold_splits) {
      parts = std::max<int64_t>(parts, splits);  // one part per split
    } else {
      // W splits per part (decode_plan_math.cuh); the slots the plan will
      // give: one per split of every request met by two or more parts.
      const int64_t w = std::max<int64_t>(1, (splits + parts - 1) / parts);
      for (int r = 0; r < md.num_decodes; ++r) {
        const int64_t c0 = cost[size_t(r)], c1 = cost[size_t(r) + 1];
        if (c1 > c0 && (c1 - 1) / w - c0 / w + 1 >= 2) min_slots_ += int(c1 - c0);
      }
    }
  }
  if (!invariant && parts_override() > 0) parts = std::min(parts_override(), 1024);
  plan_.tile_keys = config_.block_n;
  plan_.overhead_tiles = invariant ? 0 : kOverheadTiles;
  plan_.batch_invariant = invariant;
  whole_requests_ = env_int("LATTN_DECODE_WHOLE", 1) != 0;

  // A small batch: one cooperative launch that plans, attends and combines
  // (no planning kernel; every CTA of the one wave resident).
  if (ctx.capability_major == 9 && !fused_sync_.data()) {
    // Its grid-barrier words, in their own allocation (no other kernel writes
    // them), zero from the start and again after every launch. Made at an
    // instance's first plan on sm90 whatever the batch, so that a graph
    // captured later for a small batch (after a warm-up with a large one)
    // finds them; never inside a capture (Workspace::reserve refuses), so
    // the memset is never part of a graph.
    fused_sync_.reserve(256, params_.context.stream, plan_op(hopper_));
    LATTN_CUDA_CHECK(
        cudaMemsetAsync(fused_sync_.data(), 0, 256, reinterpret_cast<cudaStream_t>(params_.context.stream)));
  }
  // The batch-invariant mode takes it too: it walks the same splits as the
  // planning kernel would and merges them with the combine kernel's
  // arithmetic (decode_combine_row.cuh), so a request's bits are the same in
  // a small batch (this kernel) and a large one (three kernels).
  // (It never folds: with folding, only plans of one split a part.)
  if (!sm90_ && !sm90_fp8_ && !sm90_km16_ && md.num_decodes <= fused_max_batch() &&
      (!plan_.fold_splits || invariant_splits <= parts) &&
      decode_fused_supported(config_, params_.dtype, params_.kv_cache_dtype, ctx.capability_major) &&
      m_tiles_ * parts <= ctx.sm_count * fused_ctas_per_sm()) {
    plan_fused(md, parts);
    return;
  }

  // One plan per step: reuse the step's plan of this shape when a layer
  // already made it (same stream, device, kernel, tiles, rows and parts).
  const bool can_share = !plan_per_layer() && md.plans && md.seq_lens_cpu.defined() &&
                         md.seq_lens_cpu.device().is_cpu() && md.seq_lens_cpu.size(0) >= md.num_decodes;
  if (!can_share) {
    launch_plan(md, parts);
    planned_batch_ = md.num_decodes;
    return;
  }
  const std::string key =
      std::string("cuda decode plan: device ") + std::to_string(params_.context.device.index) + ", stream " +
      std::to_string(reinterpret_cast<uintptr_t>(params_.context.stream)) +
      (sm90_        ? ", sm90"
       : sm90_fp8_  ? ", sm90 fp8"
       : sm90_km16_ ? ", sm90 km16"
                    : ", sm80") +
      ", tiles " + config_.str() + ", rows " + std::to_string(m_tiles_ * config_.block_m) + ", L " +
      std::to_string(params_.kv_lora_rank) + ", parts " + std::to_string(parts) + ", overhead " +
      std::to_string(plan_.overhead_tiles) +
      (plan_.batch_invariant ? ", batch-invariant splits, rule " + std::to_string(plan_.split_rule) +
                                   (plan_.fold_splits ? ", folded" : "")
                             : "") +
      (whole_requests_ ? "" : ", always split");
  const auto slot = md.plans->get_or_make<SharedPlanSlot>(key, [] { return SharedPlanSlot{}; });
  SharedPlanState& shared = *slot->state;
  std::lock_guard lock(shared.mutex);
  const unsigned long long capture = capture_id(reinterpret_cast<cudaStream_t>(params_.context.stream));
  if (shared.store && shared.store->generation.load() == shared.generation && shared.capture == capture &&
      same_lens(shared.seq_lens, md)) {
    plan_ = shared.plan;
    plan_store_ = shared.store;
    plan_generation_ = shared.generation;
    planned_batch_ = md.num_decodes;
    return;
  }
  launch_plan(md, parts);
  shared.store = plan_store_;
  shared.generation = plan_generation_;
  shared.capture = capture;
  const int32_t* lens = md.seq_lens_cpu.data_as<const int32_t>();
  shared.seq_lens.assign(lens, lens + md.num_decodes);
  shared.plan = plan_;
  planned_batch_ = md.num_decodes;
}

void CudaDecodeBackend::carve_plan(const DecodeMetadata& md, int parts) {
  const int rows_capacity = m_tiles_ * config_.block_m;
  const size_t bytes =
      decode_plan_bytes(md.num_decodes, parts, rows_capacity, params_.kv_lora_rank, min_slots_, plan_.fold_splits);
  Workspace& ws = own_store_->workspace;
  ws.reserve(bytes, params_.context.stream, plan_op(hopper_));
  carve_decode_plan(ws.data(), md.num_decodes, parts, rows_capacity, params_.kv_lora_rank, plan_, min_slots_);
}

void CudaDecodeBackend::launch_plan(const DecodeMetadata& md, int parts) {
  carve_plan(md, parts);
  launch_decode_plan(md.seq_lens.data_as<const int32_t>(), md.num_decodes, plan_, whole_requests_,
                     reinterpret_cast<cudaStream_t>(params_.context.stream));
  plan_store_ = own_store_;
  plan_generation_ = ++own_store_->generation;
  ++plans_launched_;
}

int CudaDecodeBackend::fused_ctas_per_sm() {
  if (fused_ctas_per_sm_ < 0) fused_ctas_per_sm_ = decode_fused_ctas_per_sm(config_, params_.dtype);
  return fused_ctas_per_sm_;
}

void CudaDecodeBackend::plan_fused(const DecodeMetadata& md, int parts) {
  carve_plan(md, parts);
  plan_store_ = own_store_;
  plan_generation_ = own_store_->generation.load();
  fused_ = true;
  planned_batch_ = md.num_decodes;
}

bool CudaDecodeBackend::plan_overwritten() const {
  return fast_ && plan_store_ && plan_store_->generation.load() != plan_generation_;
}

void CudaDecodeBackend::run(const Tensor& ql_nope, const Tensor& q_pe, const LatentCache& cache,
                            const DecodeMetadata& md, const Tensor& out, const Tensor& lse) {
  const char* const kRun = run_op(hopper_);
  const Device device = params_.context.device;
  const int T = md.num_decode_tokens, H = params_.num_heads, L = params_.kv_lora_rank, R = params_.qk_rope_head_dim;
  // Validate everything before launching anything.
  for (auto [name, t, width] :
       {std::tuple{"ql_nope", &ql_nope, L}, std::tuple{"q_pe", &q_pe, R}, std::tuple{"out", &out, L}}) {
    check_defined(kRun, name, *t);
    check_device(kRun, name, *t, device);
    check_dtype(kRun, name, *t, params_.dtype);
    check_shape(kRun, name, *t, {T, H, width});
    check_last_dim_contiguous(kRun, name, *t);
  }
  cache.validate(kRun);
  check_arg(cache.device() == device, kRun, "cache", "on " + device_name(device), device_name(cache.device()));
  check_arg(cache.dtype() == params_.kv_cache_dtype, kRun, "cache",
            std::string("dtype ") + dtype_name(params_.kv_cache_dtype), dtype_name(cache.dtype()));
  check_arg(cache.kv_lora_rank == L && cache.qk_rope_head_dim == R, kRun, "cache",
            "latent dims (" + std::to_string(L) + ", " + std::to_string(R) + ")",
            "(" + std::to_string(cache.kv_lora_rank) + ", " + std::to_string(cache.qk_rope_head_dim) + ")");
  check_arg(cache.block_size() == md.block_size, kRun, "cache",
            "block size " + std::to_string(md.block_size) + " (metadata.block_size)",
            std::to_string(cache.block_size()));
  if (lse.defined()) {
    check_device(kRun, "lse", lse, device);
    check_dtype(kRun, "lse", lse, DType::f32);
    check_shape(kRun, "lse", lse, {H, T});
  }
  if (md.num_decodes == 0 || T == 0) return;
  // Plan again when run() is handed other metadata than prepared, or when the
  // plan shared with other layers was overwritten since (another step planned
  // into its store).
  if (decode_metadata_ != &md || planned_batch_ != md.num_decodes || plan_overwritten()) prepare_metadata(md);
  // A cache the bulk tensor copy engine cannot address (unaligned base or
  // page stride: views only) falls back to the sm80 kernel with its own plan.
  if ((sm90_ || sm90_km16_) &&
      !sm90::decode_sm90_unsupported_reason(params_.dtype, cache.dtype(), L, R, int(cache.block_size()),
                                            cache.data.data(), cache.data.stride(0))
           .empty()) {
    plan(md, false);
  }
  if (sm90_fp8_ &&
      !sm90::decode_sm90_fp8_unsupported_reason(params_.dtype, cache.dtype(), L, R, int(cache.block_size()),
                                                cache.data.data(), cache.data.stride(0))
           .empty()) {
    plan(md, false);
  }

  DeviceGuard guard(device.index);
  raise_pending_index_violation(device.index, kRun);
  DecodeParams p;
  p.q_nope = ql_nope.data();
  p.q_nope_stride_t = ql_nope.stride(0);
  p.q_nope_stride_h = ql_nope.stride(1);
  p.q_pe = q_pe.data();
  p.q_pe_stride_t = q_pe.stride(0);
  p.q_pe_stride_h = q_pe.stride(1);
  p.cache = cache.data.data();
  p.cache_block_stride = cache.data.stride(0);
  p.block_size = int(cache.block_size());
  p.seq_lens = md.seq_lens.data_as<const int32_t>();
  p.query_start_loc = md.query_start_loc.data_as<const int32_t>();
  p.block_table = md.block_table.data_as<const int32_t>();
  p.block_table_stride = md.block_table.stride(0);
  p.num_blocks = cache.num_blocks();
  p.table_width = md.block_table.size(1);
  p.index_violations = index_violation_words(device.index);
  p.out = out.data();
  p.out_stride_t = out.stride(0);
  p.out_stride_h = out.stride(1);
  p.lse = lse.defined() ? lse.data_as<float>() : nullptr;
  p.lse_stride_h = lse.defined() ? lse.stride(0) : 0;
  p.lse_stride_t = lse.defined() ? lse.stride(1) : 0;
  p.batch = md.num_decodes;
  p.num_heads = H;
  p.L = L;
  p.R = R;
  const float k_scale = cache.is_fp8() ? cache.scale : 1.f;
  p.scale_log2 = params_.scale * k_scale * 1.4426950408889634f;
  p.out_scale = k_scale;
  p.q_vec = rows_are_16_byte(ql_nope) && rows_are_16_byte(q_pe);
  p.q_dtype = uint8_t(params_.dtype);
  p.cache_dtype = uint8_t(cache.dtype());
  p.out_dtype = uint8_t(out.dtype());
  p.plan = plan_;
  auto stream = reinterpret_cast<cudaStream_t>(params_.context.stream);
  if (sm90_) {
    sm90::launch_decode_sm90(p, params_.dtype, cache.num_blocks(), m_tiles_, stream);
    launch_decode_combine(p, params_.dtype, stream);
  } else if (sm90_fp8_) {
    sm90::launch_decode_sm90_fp8(p, params_.dtype, cache.num_blocks(), m_tiles_, stream);
    launch_decode_combine(p, params_.dtype, stream);
  } else if (sm90_km16_) {
    // pdl_: each kernel launched as a programmatic dependent of the one
    // before it (the plan kernel, then this kernel), so that its launch
    // overlaps that kernel's run (common/grid_dependency.cuh).
    sm90::launch_decode_sm90_km16(p, params_.dtype, cache.num_blocks(), m_tiles_, stream, pdl_);
    launch_decode_combine(p, params_.dtype, stream, pdl_);
  } else if (fused_) {
    // LATTN_DECODE_FUSED_STAGES: a mask of attention 1, combine 2, metadata
    // prefetch 4 (default 7); stage-removal timings for docs/perf.md only.
    launch_decode_fused(p, static_cast<uint32_t*>(fused_sync_.data()), config_, params_.dtype, m_tiles_, stream,
                        env_int("LATTN_DECODE_FUSED_STAGES", kFusedStageAll) & kFusedStageAll);
  } else if (fast_) {
    sm80::launch_decode_sm80(p, config_, params_.dtype, params_.kv_cache_dtype, m_tiles_, stream);
    launch_decode_combine(p, params_.dtype, stream);
  } else {
    launch_decode_generic(p, T, stream);
  }
  check_launch_indices(device.index, stream, kRun, "block_table",
                       "hold block ids in [0, num_blocks = " + std::to_string(p.num_blocks) +
                           ") for every key of its sequence, within its " + std::to_string(p.table_width) + " columns");
}

int64_t decode_plans_launched(const DecodeBackend& backend) {
  const auto* cuda_backend = dynamic_cast<const CudaDecodeBackend*>(&backend);
  return cuda_backend ? cuda_backend->plans_launched() : -1;
}

int decode_plan_num_parts(const DecodeBackend& backend) {
  const auto* cuda_backend = dynamic_cast<const CudaDecodeBackend*>(&backend);
  return cuda_backend ? cuda_backend->num_parts() : -1;
}

std::vector<int32_t> decode_plan_num_splits(const DecodeBackend& backend) {
  const auto* cuda_backend = dynamic_cast<const CudaDecodeBackend*>(&backend);
  if (!cuda_backend || !cuda_backend->plan().num_splits || cuda_backend->planned_batch() <= 0) return {};
  std::vector<int32_t> splits(size_t(cuda_backend->planned_batch()));
  LATTN_CUDA_CHECK(cudaDeviceSynchronize());
  LATTN_CUDA_CHECK(cudaMemcpy(splits.data(), cuda_backend->plan().num_splits, splits.size() * sizeof(int32_t),
                              cudaMemcpyDeviceToHost));
  return splits;
}

std::unique_ptr<DecodeBackend> CudaDecodeBackendClass::create(const DecodeBackendParams& params) const {
  return std::make_unique<CudaDecodeBackend>(params);
}

namespace {
const RegisterDecodeBackend kReg{std::make_shared<CudaDecodeBackendClass>()};
}  // namespace

}  // namespace lattn::cuda
