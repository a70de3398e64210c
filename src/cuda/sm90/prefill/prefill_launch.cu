// src/cuda/sm90/prefill/prefill_launch.cu — checks, tensor maps, and the
// run-time -> compile-time dispatch of the Hopper prefill kernel:
// (config row, element type, causal) -> kernel instance.
#include "cuda/sm90/prefill/prefill_launch.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "cuda/common/context.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device_guard.h"
#include "cuda/sm90/common/tma_host.h"
#include "cuda/sm90/prefill/prefill_instantiations.h"
#include "lattn/errors.h"

namespace lattn::cuda::sm90 {
namespace {

using sm80::PrefillElement;
using sm80::PrefillParams;

using LaunchFn = void (*)(const PrefillParams&, const PrefillSchedule&, const CUtensorMap&, const CUtensorMap&,
                          const CUtensorMap&, cudaStream_t);

struct ConfigLaunchers {
  LaunchFn bf16[2];  // [causal]
  LaunchFn f16[2];   // nullptr for candidate rows (bf16 only)
};

template <int kConfig>
constexpr ConfigLaunchers launchers_of() {
  ConfigLaunchers l{{&launch_hopper_prefill_kernel<kConfig, __nv_bfloat16, false>,
                     &launch_hopper_prefill_kernel<kConfig, __nv_bfloat16, true>},
                    {nullptr, nullptr}};
  if constexpr (!kHopperPrefillConfigs[kConfig].candidate) {
    l.f16[0] = &launch_hopper_prefill_kernel<kConfig, __half, false>;
    l.f16[1] = &launch_hopper_prefill_kernel<kConfig, __half, true>;
  }
  return l;
}

template <int... kConfigs>
constexpr auto make_table(std::integer_sequence<int, kConfigs...>) {
  return std::array<ConfigLaunchers, sizeof...(kConfigs)>{launchers_of<kConfigs>()...};
}

const auto kLaunchers = make_table(std::make_integer_sequence<int, kNumHopperPrefillConfigs>{});

// A [rows, heads, dim] 16-bit tensor read in [128 rows][64 columns] boxes of
// one head, 128-byte swizzled (prefill_traits.cuh's layout).
CUtensorMap head_major_map(const char* name, const void* base, PrefillElement element, int64_t rows, int heads, int dim,
                           int64_t row_stride, int64_t head_stride, int box_rows) {
  const cuuint64_t dims[3] = {cuuint64_t(dim), cuuint64_t(heads), cuuint64_t(rows)};
  const cuuint64_t strides[2] = {cuuint64_t(head_stride) * 2, cuuint64_t(row_stride) * 2};
  const cuuint32_t box[3] = {64, 1, cuuint32_t(box_rows)};
  TensorMapSpec spec;
  spec.name = std::string("prefill '") + name + "'";
  spec.dtype = element == PrefillElement::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  spec.element_bytes = 2;
  spec.base = base;
  spec.dims = dims;
  spec.strides = strides;
  spec.box = box;
  spec.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  return make_tensor_map(spec);
}

void check_strides(const char* name, int64_t row_stride, int64_t head_stride) {
  for (int64_t s : {row_stride, head_stride}) {
    if (s % 8 != 0 || s < 0) {
      throw ValueError(std::string("hopper prefill attention: the row and head strides of '") + name +
                       "' must be non-negative multiples of 8 elements, got " + std::to_string(s));
    }
  }
}

// ---- the dynamic walk's tile counters ----------------------------------------------
// A dynamic launch needs an int that is 0 when it starts; the kernel sets it
// back to 0 when its last tile is taken (prefill_tile_scheduler.cuh), so no
// memset runs before a launch. Launches on one stream run one after the
// other, but launches on different streams may overlap, so each launch takes
// the next of kCounterSlots ints of its device, round robin: two launches
// share an int only kCounterSlots launches apart, and would disturb each
// other only if both were in flight at once. (A launch captured into a CUDA
// graph keeps its int; the graph's replays run one after the other.)
constexpr int kCounterSlots = 1024;

struct DeviceCounters {
  int* base = nullptr;  // device, kCounterSlots ints, zeroed once
  std::atomic<uint32_t> next{0};
};

std::mutex counters_mutex;
std::map<int, std::unique_ptr<DeviceCounters>>& all_counters() {
  static auto* m = new std::map<int, std::unique_ptr<DeviceCounters>>;  // never freed: used until exit
  return *m;
}

// The device's counters; allocated here unless `may_allocate` is false
// (then nullptr when they do not exist yet).
DeviceCounters* device_counters(int device, bool may_allocate) {
  const std::lock_guard<std::mutex> lock(counters_mutex);
  std::unique_ptr<DeviceCounters>& c = all_counters()[device];
  if (c == nullptr) {
    if (!may_allocate) return nullptr;
    auto fresh = std::make_unique<DeviceCounters>();
    LATTN_CUDA_CHECK(cudaMalloc(&fresh->base, kCounterSlots * sizeof(int)));
    LATTN_CUDA_CHECK(cudaMemset(fresh->base, 0, kCounterSlots * sizeof(int)));
    c = std::move(fresh);
  }
  return c.get();
}

// LATTN_HOPPER_PREFILL_SCHEDULE ("static", "pairs" or "dynamic"; read
// once), else static: the pairs, with the balanced tail where
// prefill_balanced_tail_helps (docs/hopper.md, "Scheduler"; the measurements that
// chose it are in docs/perf.md).
HopperPrefillSchedule resolve(HopperPrefillSchedule schedule) {
  if (schedule != HopperPrefillSchedule::automatic) return schedule;
  static const HopperPrefillSchedule from_env = [] {
    const char* v = std::getenv("LATTN_HOPPER_PREFILL_SCHEDULE");
    const std::string name = v == nullptr ? std::string() : std::string(v);
    if (name.empty() || name == "static") return HopperPrefillSchedule::static_balanced;
    if (name == "pairs") return HopperPrefillSchedule::static_pairs;
    if (name == "dynamic") return HopperPrefillSchedule::dynamic;
    throw ValueError("LATTN_HOPPER_PREFILL_SCHEDULE must be 'static', 'pairs' or 'dynamic', got '" + name + "'");
  }();
  return from_env;
}

// Bytes of K + V that one section of heads of the dynamic walk may hold
// (LATTN_HOPPER_PREFILL_SECTION_MB, read once; for measurements). Default
// 0: one head per section, so a head's tiles are handed out one after the
// other and run at the same time, on neighbouring CTAs, sharing its K/V in
// L2 (the sections of a third of L2 that were measured, docs/perf.md, lost
// 5 % at 16 x 1024 against the static pairs; this default is not measured).
int64_t section_bytes() {
  static const int64_t from_env = [] {
    const char* v = std::getenv("LATTN_HOPPER_PREFILL_SECTION_MB");
    if (v == nullptr || *v == '\0') return int64_t{0};
    char* end = nullptr;
    const long mb = std::strtol(v, &end, 10);
    if (*end != '\0' || mb < 0 || mb > 4096) {
      throw ValueError(std::string("LATTN_HOPPER_PREFILL_SECTION_MB must be an integer in [0, 4096], got '") + v + "'");
    }
    return int64_t(mb) << 20;
  }();
  return from_env;
}

// The kernel argument for this launch. An explicit static_balanced always
// deals the tail (tests, benchmarks); the default static walk where
// prefill_balanced_tail_helps.
PrefillSchedule make_schedule(const PrefillParams& p, int64_t q_rows, int64_t kv_rows, HopperPrefillSchedule kind,
                              int device, cudaStream_t stream) {
  PrefillSchedule s;
  const HopperPrefillSchedule resolved = resolve(kind);
  s.balanced_tail =
      resolved == HopperPrefillSchedule::static_balanced &&
      (kind == HopperPrefillSchedule::static_balanced || prefill_balanced_tail_helps(p.causal, q_rows, kv_rows));
  if (resolved != HopperPrefillSchedule::dynamic) return s;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    // The legacy stream while another stream is captured: allocate nothing.
    (void)cudaGetLastError();
    capture = cudaStreamCaptureStatusActive;
  }
  DeviceCounters* c = device_counters(device, capture == cudaStreamCaptureStatusNone);
  if (c == nullptr) {  // capturing, no counters yet: the static walk
    s.balanced_tail = prefill_balanced_tail_helps(p.causal, q_rows, kv_rows);
    return s;
  }
  s.counter = c->base + c->next.fetch_add(1, std::memory_order_relaxed) % kCounterSlots;
  const int64_t row_bytes = int64_t(p.head_dim_qk + p.head_dim_v) * 2;
  s.section_rows = int(std::min<int64_t>(section_bytes() / row_bytes, 0x7fffffff));
  return s;
}

}  // namespace

void reserve_hopper_prefill_counters(int device) {
  const DeviceGuard guard(device);
  device_counters(device, true);
}

bool hopper_prefill_counters_idle() {
  int device = 0;
  LATTN_CUDA_CHECK(cudaGetDevice(&device));
  const DeviceCounters* c = device_counters(device, false);
  if (c == nullptr) return true;
  LATTN_CUDA_CHECK(cudaDeviceSynchronize());
  std::array<int, kCounterSlots> host{};
  LATTN_CUDA_CHECK(cudaMemcpy(host.data(), c->base, sizeof(host), cudaMemcpyDeviceToHost));
  for (int v : host) {
    if (v != 0) return false;
  }
  return true;
}

bool hopper_prefill_compiled() {
#if defined(LATTN_WITH_SM90A)  // a build with sm_90a code (src/CMakeLists.txt)
  return true;
#else
  return false;
#endif
}

void run_hopper_prefill_attention(const PrefillParams& p, int64_t q_rows, int64_t kv_rows, Stream stream, int config,
                                  HopperPrefillSchedule schedule, int max_ctas,
                                  const HopperPrefillDiagnostics* diagnostics) {
  if (config < 0) {
    config = hopper_prefill_config(p.head_dim_qk, p.head_dim_v);
    if (config < 0) {
      throw ValueError("hopper prefill attention: head dims (qk " + std::to_string(p.head_dim_qk) + ", v " +
                       std::to_string(p.head_dim_v) + ") have no sm90 kernel (supported (qk, v): (192, 128))");
    }
  }
  if (config >= kNumHopperPrefillConfigs) {
    throw ValueError("hopper prefill attention: config index " + std::to_string(config) + " out of range [0, " +
                     std::to_string(kNumHopperPrefillConfigs) + ")");
  }
  const HopperPrefillConfig& cfg = kHopperPrefillConfigs[config];
  if (cfg.head_dim_qk != p.head_dim_qk || cfg.head_dim_v != p.head_dim_v) {
    throw ValueError(std::string("hopper prefill attention: config ") + cfg.name + " serves head dims (qk " +
                     std::to_string(cfg.head_dim_qk) + ", v " + std::to_string(cfg.head_dim_v) + "), got (qk " +
                     std::to_string(p.head_dim_qk) + ", v " + std::to_string(p.head_dim_v) + ")");
  }
  if (!hopper_prefill_compiled()) {
    throw RuntimeError("hopper prefill attention: this build has no sm_90a code (LATTN_CUDA_ARCHS lacks 90a)");
  }
  if (p.batch < 0 || p.num_heads < 0 || p.max_seqlen_q < 0 || q_rows < 0 || kv_rows < 0) {
    throw ValueError("hopper prefill attention: batch, num_heads, max_seqlen_q and row counts must be >= 0");
  }
  if (max_ctas < 0) {
    throw ValueError("hopper prefill attention: max_ctas must be >= 0 (0: one per SM), got " +
                     std::to_string(max_ctas));
  }
  if (!(std::isfinite(p.scale) && p.scale > 0.f)) {
    throw ValueError("hopper prefill attention: scale must be a positive finite number, got " +
                     std::to_string(p.scale));
  }
  if (p.batch == 0 || p.num_heads == 0 || p.max_seqlen_q == 0 || q_rows == 0) return;
  if (p.cu_seqlens_q == nullptr || p.cu_seqlens_k == nullptr) {
    throw ValueError("hopper prefill attention: cu_seqlens_q and cu_seqlens_k must be device pointers, got nullptr");
  }
  check_strides("q", p.q_row_stride, p.q_head_stride);
  check_strides("k", p.k_row_stride, p.k_head_stride);
  check_strides("v", p.v_row_stride, p.v_head_stride);
  check_strides("out", p.out_row_stride, p.out_head_stride);
  if (reinterpret_cast<uintptr_t>(p.out) % 16 != 0) {
    throw ValueError("hopper prefill attention: 'out' must be 16-byte aligned");
  }
  int device = 0;
  LATTN_CUDA_CHECK(cudaGetDevice(&device));
  const DeviceContext& ctx = device_context(device);
  if (ctx.capability_major != 9 || ctx.capability_minor != 0) {
    throw RuntimeError("hopper prefill attention: the sm_90a kernel needs compute capability 9.0, device " +
                       std::to_string(device) + " is " + std::to_string(ctx.capability_major) + "." +
                       std::to_string(ctx.capability_minor));
  }

  const CUtensorMap tq = head_major_map("q", p.q, p.element, q_rows, p.num_heads, p.head_dim_qk, p.q_row_stride,
                                        p.q_head_stride, cfg.block_m);
  // No key rows at all: every tile sees no key and no K/V box is ever
  // loaded; q's map stands in for the descriptors.
  const CUtensorMap tk = kv_rows == 0 ? tq
                                      : head_major_map("k", p.k, p.element, kv_rows, p.num_heads, p.head_dim_qk,
                                                       p.k_row_stride, p.k_head_stride, cfg.block_n);
  const CUtensorMap tv = kv_rows == 0 ? tq
                                      : head_major_map("v", p.v, p.element, kv_rows, p.num_heads, p.head_dim_v,
                                                       p.v_row_stride, p.v_head_stride, cfg.block_n);
  const ConfigLaunchers& l = kLaunchers[size_t(config)];
  const LaunchFn fn = p.element == PrefillElement::bf16 ? l.bf16[p.causal] : l.f16[p.causal];
  if (fn == nullptr) {
    throw ValueError(std::string("hopper prefill attention: candidate config ") + cfg.name +
                     " is compiled for bf16 only");
  }
  PrefillSchedule sched = make_schedule(p, q_rows, kv_rows, schedule, device, stream);
  sched.max_ctas = max_ctas;
  if (diagnostics != nullptr) sched.trace = diagnostics->trace;
  fn(p, sched, tq, tk, tv, stream);
}

}  // namespace lattn::cuda::sm90
