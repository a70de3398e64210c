// Benchmarks of the prefill kernels — the `cuda` backend's sm80 tensor-core
// varlen attention and, on an sm90 GPU, the `hopper` backend's sm_90a kernel
// ("[hopper]" rows) — against the same-run ceiling: a cuBLAS bf16 8192^3 GEMM.
//
// Cases (docs/bench-method.md): causal 192/128 bf16 at H128 x one request
// of 8192 tokens, 4 x 4096 and 16 x 1024, and H16 x 8 x 8192, each with the
// default kernel, the candidate tile configurations and the hopper kernels
// (the rows of one shape back to back);
// and chunked context (32k cached tokens + 2k new, workspace 64k and 8k
// tokens) against the same attention done in one bottom-right causal launch,
// with either backend's kernel. Each row: median µs of many event-timed
// launches after warm-up, TFLOP/s by the count of docs/bench-method.md, and
// the fraction of the GEMM rate. The default hopper kernel's rows run each
// tile walk by name ("walk=pairs|static|dynamic"; LATTN_PREFILL_BENCH_ROTATE=k
// rotates the order of a shape's rows). A summary table is printed last.
// LATTN_PREFILL_BENCH_TRACE=dir runs the trace experiment instead
// (run_trace_experiment: per-CTA SM, clock and tile times), or, with
// LATTN_PREFILL_BENCH_TRACE_CONFIGS=i,j,..., the cycle comparison of those
// hopper config rows (run_trace_ab).
//
// This benchmark reaches the internal launchers (src/cuda/sm80/prefill/prefill_launch.h,
// src/cuda/sm90/prefill/prefill_launch.h)
// for the candidate configurations and for the bottom-right causal launch
// the unchunked baseline needs; the public backend runs the same kernels.
#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "core/ops/device_ops.h"
#include "cuda/sm80/prefill/prefill_config.h"
#include "cuda/sm80/prefill/prefill_launch.h"
#include "cuda/sm90/prefill/prefill_launch.h"
#include "lattn/device.h"
#include "lattn/dtype.h"
#include "lattn/errors.h"
#include "lattn/tensor.h"

namespace {

namespace sm80 = lattn::cuda::sm80;
namespace sm90 = lattn::cuda::sm90;

// Which kernel a row times: a row of sm80::kPrefillTileConfigs (>= 0), or
// kHopper - i for row i of sm90::kHopperPrefillConfigs.
constexpr int kHopper = -1;
bool is_hopper(int kernel) { return kernel <= kHopper; }
int hopper_config(int kernel) { return kHopper - kernel; }

// The tile walk of a hopper row (a benchmark argument): 0 the default
// (LATTN_HOPPER_PREFILL_SCHEDULE, else static), else one named walk, so one
// process times the walks side by side (docs/hopper.md, "Scheduler").
constexpr sm90::HopperPrefillSchedule kSchedules[] = {
    sm90::HopperPrefillSchedule::automatic, sm90::HopperPrefillSchedule::static_pairs,
    sm90::HopperPrefillSchedule::static_balanced, sm90::HopperPrefillSchedule::dynamic};
constexpr const char* kScheduleNames[] = {"", " walk=pairs", " walk=static", " walk=dynamic"};

#define BENCH_CUDA(call)                                                                                 \
  do {                                                                                                   \
    cudaError_t e_ = (call);                                                                             \
    if (e_ != cudaSuccess) throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(e_)); \
  } while (0)

struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) { BENCH_CUDA(cudaMalloc(&ptr, bytes)); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
};

// Fills `elems` 16-bit elements with N(0, stddev)-like random bf16 values:
// one 8 Mi-element random block made on the host, repeated on the device
// (random data, not zeros, which run faster; see METHOD.md).
void fill_random_bf16(void* dst, size_t elems, uint64_t seed, float stddev) {
  const size_t block = std::min<size_t>(elems, size_t{8} << 20);
  std::vector<uint16_t> host(block);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < block; ++i) {
    // Sum of 4 uniforms: close enough to a normal for timing purposes.
    float acc = 0;
    for (int j = 0; j < 4; ++j) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      acc += float(s >> 40) / float(1 << 24) - 0.5f;
    }
    host[i] = lattn::f32_to_bf16(acc * 1.732f * stddev);
  }
  auto* d = static_cast<uint16_t*>(dst);
  BENCH_CUDA(cudaMemcpy(d, host.data(), block * 2, cudaMemcpyHostToDevice));
  for (size_t done = block; done < elems;) {
    const size_t n = std::min(done, elems - done);
    BENCH_CUDA(cudaMemcpy(d + done, d, n * 2, cudaMemcpyDeviceToDevice));
    done += n;
  }
}

// LATTN_PREFILL_BENCH_SETTLE_MS=n (read once; default 0): every timing
// (rows and the cuBLAS ceiling alike) first runs its launch back to back for
// n ms, so the GPU's power controller has settled under the power cap
// before the timed launches. Without it a row's median depends on how long
// the GPU idled before it: the first launches after idle run at a higher SM
// clock (docs/perf.md, "what makes the two levels").
double settle_ms() {
  static const double v = [] {
    const char* e = std::getenv("LATTN_PREFILL_BENCH_SETTLE_MS");
    return e == nullptr ? 0.0 : std::atof(e);
  }();
  return v;
}

// Median milliseconds of `reps` launches of fn, each timed by its own pair
// of events on the default stream, after `warmup` untimed launches (and,
// with LATTN_PREFILL_BENCH_SETTLE_MS, after settle_ms() of launches).
double median_ms(const std::function<void()>& fn, int warmup, int reps) {
  for (int i = 0; i < warmup; ++i) fn();
  BENCH_CUDA(cudaDeviceSynchronize());
  if (settle_ms() > 0) {
    const auto start = std::chrono::steady_clock::now();
    while (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() < settle_ms()) {
      for (int i = 0; i < 4; ++i) fn();
      BENCH_CUDA(cudaDeviceSynchronize());
    }
  }
  std::vector<cudaEvent_t> ev(size_t(2 * reps));
  for (auto& e : ev) BENCH_CUDA(cudaEventCreate(&e));
  for (int i = 0; i < reps; ++i) {
    BENCH_CUDA(cudaEventRecord(ev[size_t(2 * i)], nullptr));
    fn();
    BENCH_CUDA(cudaEventRecord(ev[size_t(2 * i + 1)], nullptr));
  }
  BENCH_CUDA(cudaDeviceSynchronize());
  std::vector<double> ms(static_cast<size_t>(reps), 0.0);
  for (int i = 0; i < reps; ++i) {
    float t = 0;
    BENCH_CUDA(cudaEventElapsedTime(&t, ev[size_t(2 * i)], ev[size_t(2 * i + 1)]));
    ms[size_t(i)] = t;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

std::string gpu_skip_reason() {
  const lattn::CudaDeviceQuery q = lattn::query_cuda_devices();
  if (q.devices.empty()) return q.unavailable_reason;
  if (q.devices[0].capability.major < 8) return "the cuda prefill kernels need sm80+";
  return "";
}

std::string hopper_skip_reason() {
  const lattn::CudaDeviceQuery q = lattn::query_cuda_devices();
  if (q.devices.empty()) return q.unavailable_reason;
  const lattn::DeviceCapability c = q.devices[0].capability;
  if (!(c.major == 9 && c.minor == 0)) return "the hopper prefill kernel needs an sm90 GPU";
  if (!sm90::hopper_prefill_compiled()) return "this build has no sm_90a code";
  return "";
}

struct Row {
  std::string name;
  double us, tflops, fraction;
  std::string note;
};
std::vector<Row>& rows() {
  static std::vector<Row> r;
  return r;
}

// The bf16 matrix ceiling: cuBLAS 8192^3 GEMM, f32 accumulation, random data.
double gemm_ceiling_tflops() {
  static double tflops = [] {
    constexpr int n = 8192;
    const size_t elems = size_t(n) * n;
    DeviceBuffer a(elems * 2), b(elems * 2), c(elems * 2);
    fill_random_bf16(a.ptr, elems, 1, 1.f);
    fill_random_bf16(b.ptr, elems, 2, 1.f);
    cublasHandle_t handle;
    if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasCreate failed");
    const float alpha = 1.f, beta = 0.f;
    auto gemm = [&] {
      const cublasStatus_t st =
          cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.ptr, CUDA_R_16BF, n, b.ptr, CUDA_R_16BF, n,
                       &beta, c.ptr, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      if (st != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasGemmEx failed");
    };
    const double ms = median_ms(gemm, 5, 30);
    cublasDestroy(handle);
    const double t = 2.0 * n * double(n) * n / (ms * 1e-3) / 1e12;
    rows().push_back({"ceiling: cuBLAS bf16 GEMM 8192^3", ms * 1e3, t, 1.0, ""});
    return t;
  }();
  return tflops;
}

// ---- attention problems --------------------------------------------------------

constexpr int kDqk = 192, kDv = 128;

// FLOPs per docs/bench-method.md: 2 H (Dqk + Dv) sum(Sq Sk - Sq (Sq - 1) / 2) causal,
// 2 H (Dqk + Dv) Sq Sk otherwise.
double attention_flops(int heads, const std::vector<int>& sq, const std::vector<int>& sk, bool causal) {
  double pairs = 0;
  for (size_t b = 0; b < sq.size(); ++b) {
    pairs += double(sq[b]) * sk[b];
    if (causal) pairs -= double(sq[b]) * (sq[b] - 1) / 2;
  }
  return 2.0 * heads * (kDqk + kDv) * pairs;
}

// Device tensors of one varlen problem: q/out [Tq, H, 192/128] and k/v
// [Tk, H, 192/128] (k/v may be views into a larger caller buffer).
struct Problem {
  int heads = 128;
  std::vector<int> sq, sk;
  std::unique_ptr<DeviceBuffer> q, k, v, out, lse, cu_q, cu_k;
  int64_t tq = 0, tk = 0;
  int max_sq = 0;

  Problem(int heads_, std::vector<int> sq_, std::vector<int> sk_)
      : heads(heads_), sq(std::move(sq_)), sk(std::move(sk_)) {
    std::vector<int32_t> cq{0}, ck{0};
    for (size_t b = 0; b < sq.size(); ++b) {
      cq.push_back(cq.back() + sq[b]);
      ck.push_back(ck.back() + sk[b]);
      max_sq = std::max(max_sq, sq[b]);
    }
    tq = cq.back();
    tk = ck.back();
    q = std::make_unique<DeviceBuffer>(size_t(tq) * heads * kDqk * 2);
    k = std::make_unique<DeviceBuffer>(size_t(tk) * heads * kDqk * 2);
    v = std::make_unique<DeviceBuffer>(size_t(tk) * heads * kDv * 2);
    out = std::make_unique<DeviceBuffer>(size_t(tq) * heads * kDv * 2);
    lse = std::make_unique<DeviceBuffer>(size_t(tq) * heads * 4);
    cu_q = std::make_unique<DeviceBuffer>(cq.size() * 4);
    cu_k = std::make_unique<DeviceBuffer>(ck.size() * 4);
    BENCH_CUDA(cudaMemcpy(cu_q->ptr, cq.data(), cq.size() * 4, cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(cu_k->ptr, ck.data(), ck.size() * 4, cudaMemcpyHostToDevice));
    // stddev 1 with scale 1/sqrt(192): logits ~ N(0, 1), as trained models see.
    fill_random_bf16(q->ptr, size_t(tq) * heads * kDqk, 11, 1.f);
    fill_random_bf16(k->ptr, size_t(tk) * heads * kDqk, 12, 1.f);
    fill_random_bf16(v->ptr, size_t(tk) * heads * kDv, 13, 1.f);
  }

  // Runs `p` with `kernel` (a config row or kHopper); p's k/v start at row
  // k_row0 of this problem's buffers.
  void run(const sm80::PrefillParams& p, int kernel, int64_t k_row0 = 0, int schedule = 0,
           const sm90::HopperPrefillDiagnostics* diagnostics = nullptr, int max_ctas = 0) const {
    if (is_hopper(kernel)) {
      sm90::run_hopper_prefill_attention(p, tq, tk - k_row0, nullptr, hopper_config(kernel), kSchedules[schedule],
                                         max_ctas, diagnostics);
    } else {
      sm80::run_prefill_attention(p, nullptr, kernel);
    }
  }

  // Params over rows [k_row0, ...) of this problem's k/v.
  sm80::PrefillParams params(bool causal, int64_t k_row0 = 0, const int32_t* cu_k_override = nullptr) const {
    sm80::PrefillParams p;
    p.q = q->ptr;
    p.k = k->as<uint16_t>() + k_row0 * heads * kDqk;
    p.v = v->as<uint16_t>() + k_row0 * heads * kDv;
    p.out = out->ptr;
    p.lse = lse->as<float>();
    p.q_row_stride = int64_t(heads) * kDqk;
    p.q_head_stride = kDqk;
    p.k_row_stride = int64_t(heads) * kDqk;
    p.k_head_stride = kDqk;
    p.v_row_stride = int64_t(heads) * kDv;
    p.v_head_stride = kDv;
    p.out_row_stride = int64_t(heads) * kDv;
    p.out_head_stride = kDv;
    p.lse_head_stride = tq;
    p.cu_seqlens_q = cu_q->as<const int32_t>();
    p.cu_seqlens_k = cu_k_override ? cu_k_override : cu_k->as<const int32_t>();
    p.batch = int(sq.size());
    p.num_heads = heads;
    p.head_dim_qk = kDqk;
    p.head_dim_v = kDv;
    p.max_seqlen_q = max_sq;
    p.scale = 0.0721687836f;  // 1/sqrt(192)
    p.causal = causal;
    p.element = sm80::PrefillElement::bf16;
    return p;
  }
};

void report(benchmark::State& state, const std::string& name, double ms, double flops, const std::string& note = "") {
  const double tflops = flops / (ms * 1e-3) / 1e12;
  const double fraction = tflops / gemm_ceiling_tflops();
  state.SetIterationTime(ms * 1e-3);
  state.counters["us"] = ms * 1e3;
  state.counters["TFLOPs"] = tflops;
  state.counters["frac_gemm"] = fraction;
  rows().push_back({name, ms * 1e3, tflops, fraction, note});
}

bool skip_without_gpu(benchmark::State& state, int kernel = 0) {
  static const std::string reason = gpu_skip_reason();
  static const std::string hopper_reason = hopper_skip_reason();
  if (reason.empty() && (!is_hopper(kernel) || hopper_reason.empty())) return false;
  state.SkipWithError(("no usable GPU: " + (reason.empty() ? hopper_reason : reason)).c_str());
  for (auto _ : state) {}
  return true;
}

void BM_GemmCeiling(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  for (auto _ : state) {
    const double t = gemm_ceiling_tflops();
    state.SetIterationTime(2.0 * 8192.0 * 8192.0 * 8192.0 / (t * 1e12));
    state.counters["TFLOPs"] = t;
  }
}

std::string kernel_name(int kernel) {
  return is_hopper(kernel) ? std::string("hopper ") + sm90::kHopperPrefillConfigs[hopper_config(kernel)].name
                           : std::string(sm80::kPrefillTileConfigs[kernel].name);
}

// Causal prefill of `batch` requests of `seq` tokens, `heads` heads, with
// `kernel` (index into kPrefillTileConfigs, or kHopper).
void BM_PrefillCausal(benchmark::State& state) {
  const int batch = int(state.range(0)), seq = int(state.range(1)), kernel = int(state.range(2));
  const int heads = int(state.range(3)), schedule = int(state.range(4));
  if (skip_without_gpu(state, kernel)) return;
  gemm_ceiling_tflops();
  const Problem pb(heads, std::vector<int>(size_t(batch), seq), std::vector<int>(size_t(batch), seq));
  const sm80::PrefillParams p = pb.params(true);
  const double flops = attention_flops(heads, pb.sq, pb.sk, true);
  const int reps = flops > 5e12 ? 15 : 30;
  for (auto _ : state) {
    const double ms = median_ms([&] { pb.run(p, kernel, 0, schedule); }, 3, reps);
    report(state,
           "prefill causal H" + std::to_string(heads) + " B" + std::to_string(batch) + " S" + std::to_string(seq) +
               " [" + kernel_name(kernel) + kScheduleNames[schedule] + "]",
           ms, flops);
  }
}

// Chunked context: one request with `context` cached tokens and `fresh` new
// tokens, H128. Chunked = new tokens causal among themselves + one
// non-causal launch per workspace chunk (+ the LSE merges when the CUDA
// merge_attn_states op is available); unchunked = one bottom-right causal
// launch over context + new keys. Both do the same useful FLOPs.
void BM_ChunkedContext(benchmark::State& state) {
  const int context = int(state.range(0)), fresh = int(state.range(1)), workspace = int(state.range(2));
  const int kernel = int(state.range(3)), schedule = int(state.range(4));
  if (skip_without_gpu(state, kernel)) return;
  gemm_ceiling_tflops();
  const int heads = 128;
  // K/V rows [0, context) are the gathered context, [context, context + fresh) the new tokens.
  const Problem all(heads, {fresh}, {context + fresh});
  const double flops = attention_flops(heads, {fresh}, {context + fresh}, true);
  const sm80::PrefillParams unchunked = all.params(true);

  // New tokens: q against k/v rows [context, context + fresh), causal.
  DeviceBuffer cu_new(8), out_new(size_t(fresh) * heads * kDv * 2), lse_new(size_t(fresh) * heads * 4),
      lse_merged(size_t(fresh) * heads * 4);
  const int32_t cu_new_host[2] = {0, fresh};
  BENCH_CUDA(cudaMemcpy(cu_new.ptr, cu_new_host, 8, cudaMemcpyHostToDevice));
  sm80::PrefillParams new_tokens = all.params(true, context, cu_new.as<const int32_t>());
  // Chunks: q against k/v rows [c * workspace, ...), non-causal, merged into out_new.
  const int num_chunks = (context + workspace - 1) / workspace;
  std::vector<std::unique_ptr<DeviceBuffer>> cu_chunk;
  std::vector<sm80::PrefillParams> chunk_params;
  for (int c = 0; c < num_chunks; ++c) {
    const int32_t cu[2] = {0, std::min(workspace, context - c * workspace)};
    cu_chunk.push_back(std::make_unique<DeviceBuffer>(8));
    BENCH_CUDA(cudaMemcpy(cu_chunk.back()->ptr, cu, 8, cudaMemcpyHostToDevice));
    chunk_params.push_back(all.params(false, int64_t(c) * workspace, cu_chunk.back()->as<const int32_t>()));
  }
  new_tokens.out = out_new.ptr;
  new_tokens.lse = lse_new.as<float>();
  new_tokens.lse_head_stride = fresh;

  // The merge (out_new, lse_new) <- merge(out_new, chunk out): through the
  // CUDA hook when the ops module provides it.
  using lattn::DType;
  const lattn::Device dev = lattn::Device::cuda(0);
  const lattn::Tensor o_acc(out_new.ptr, DType::bf16, {fresh, heads, kDv}, dev);
  const lattn::Tensor l_acc(lse_new.ptr, DType::f32, {heads, fresh}, dev);
  const lattn::Tensor l_merged(lse_merged.ptr, DType::f32, {heads, fresh}, dev);  // out_lse must not alias
  const lattn::Tensor o_chunk(all.out->ptr, DType::bf16, {fresh, heads, kDv}, dev);
  const lattn::Tensor l_chunk(all.lse->ptr, DType::f32, {heads, fresh}, dev);
  bool merge_available = true;
  try {
    lattn::detail::cuda_device_ops().merge_attn_states(o_acc, l_merged, o_acc, l_acc, o_chunk, l_chunk, nullptr);
  } catch (const lattn::NotImplementedError&) {
    merge_available = false;
  }

  for (auto _ : state) {
    const double ms_unchunked = median_ms([&] { all.run(unchunked, kernel, 0, schedule); }, 3, 30);
    const double ms_chunked = median_ms(
        [&] {
          all.run(new_tokens, kernel, context, schedule);
          for (int c = 0; c < num_chunks; ++c) {
            all.run(chunk_params[size_t(c)], kernel, int64_t(c) * workspace, schedule);
            if (merge_available)
              lattn::detail::cuda_device_ops().merge_attn_states(o_acc, l_merged, o_acc, l_acc, o_chunk, l_chunk,
                                                                 nullptr);
          }
        },
        3, 30);
    const std::string shape = "ctx" + std::to_string(context) + " new" + std::to_string(fresh) + " H128 [" +
                              (is_hopper(kernel) ? std::string("hopper") : std::string("cuda")) +
                              kScheduleNames[schedule] + "]";
    report(state, "context unchunked " + shape, ms_unchunked, flops);
    report(state,
           "context chunked " + shape + " ws" + std::to_string(workspace) + " (" + std::to_string(num_chunks) +
               " chunk" + (num_chunks > 1 ? "s" : "") + ")",
           ms_chunked, flops,
           "chunked/unchunked = " + std::to_string(ms_chunked / ms_unchunked) +
               (merge_available ? "" : "; merge_attn_states not available (CUDA op pending), not timed"));
    state.counters["chunked_over_unchunked"] = ms_chunked / ms_unchunked;
  }
}

void register_benchmarks() {
  benchmark::RegisterBenchmark("gemm_ceiling_bf16_8192", BM_GemmCeiling)->UseManualTime()->Iterations(1);
  std::vector<int> kernels;
  for (int h = 0; h < sm90::kNumHopperPrefillConfigs; ++h) {
    if (sm90::kHopperPrefillConfigs[h].head_dim_qk == kDqk && sm90::kHopperPrefillConfigs[h].head_dim_v == kDv) {
      kernels.push_back(kHopper - h);
    }
  }
  for (int config = 0; config < sm80::kNumPrefillTileConfigs; ++config) {
    const sm80::PrefillTileConfig& c = sm80::kPrefillTileConfigs[config];
    if (c.head_dim_qk == kDqk && c.head_dim_v == kDv) kernels.push_back(config);
  }
  // The default hopper kernel also runs each named walk. The rows of one
  // shape run back to back (kernels in table order, the default's walks
  // pairs / static / dynamic), so kernels compared with each other run at
  // about the same GPU state; LATTN_PREFILL_BENCH_ROTATE=k starts each
  // shape's list at its k-th row, so passes of several processes can
  // alternate which row goes first.
  const int default_hopper = kHopper - sm90::hopper_prefill_config(kDqk, kDv);
  const char* rotate_env = std::getenv("LATTN_PREFILL_BENCH_ROTATE");
  const int rotate = rotate_env == nullptr ? 0 : std::atoi(rotate_env);
  const auto walks_of = [&](int kernel) {
    return kernel == default_hopper ? std::vector<int>{1, 2, 3} : std::vector<int>{0};
  };
  const auto walk_suffix = [](int walk) {
    return walk == 0 ? std::string() : "/" + std::string(kScheduleNames[walk] + 6);  // "/pairs" ...
  };
  std::vector<std::pair<int, int>> shape_rows;  // (kernel, walk) of one shape
  for (int kernel : kernels)
    for (int walk : walks_of(kernel)) shape_rows.emplace_back(kernel, walk);
  const int n_rows = int(shape_rows.size());
  std::rotate(shape_rows.begin(), shape_rows.begin() + ((rotate % n_rows) + n_rows) % n_rows, shape_rows.end());
  for (auto [heads, batch, seq] :
       {std::tuple{128, 1, 8192}, std::tuple{128, 4, 4096}, std::tuple{128, 16, 1024}, std::tuple{16, 8, 8192}}) {
    for (auto [kernel, walk] : shape_rows) {
      const std::string name = is_hopper(kernel)
                                   ? "hopper_" + std::string(sm90::kHopperPrefillConfigs[hopper_config(kernel)].name)
                                   : sm80::kPrefillTileConfigs[kernel].name;
      benchmark::RegisterBenchmark(("prefill_causal/" + name + walk_suffix(walk)).c_str(), BM_PrefillCausal)
          ->Args({batch, seq, kernel, heads, walk})
          ->UseManualTime()
          ->Iterations(1);
    }
  }
  for (int kernel : {kHopper, 0}) {
    // hopper: the default walk (automatic: what the library runs), then each named one.
    for (int walk : kernel == kHopper ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{0}) {
      benchmark::RegisterBenchmark(
          ((kernel == kHopper ? "chunked_context/hopper" : "chunked_context/cuda") + walk_suffix(walk)).c_str(),
          BM_ChunkedContext)
          ->Args({32768, 2048, 65536, kernel, walk})
          ->Args({32768, 2048, 8192, kernel, walk})
          ->UseManualTime()
          ->Iterations(1);
    }
  }
}

// ---- traced launches (the two experiments below) -------------------------------------
// One launch at a time with the diagnostic trace on (PrefillSchedule::trace):
// event-timed, its trace copied back and appended to a trace file as
// bench/prefill_trace_analyze.py reads it: int64 tag, float64 µs, int64
// grid, then per CTA its header words and 3 words per tile it saw.
class PrefillTracer {
 public:
  PrefillTracer() {
    int device = 0;
    BENCH_CUDA(cudaGetDevice(&device));
    BENCH_CUDA(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device));
    words_ = size_t(sms_) * sm90::kPrefillTraceWords;
    dtrace_ = std::make_unique<DeviceBuffer>(words_ * 8);
    diag_.trace = dtrace_->as<unsigned long long>();
    host_.resize(words_);
    BENCH_CUDA(cudaEventCreate(&e0_));
    BENCH_CUDA(cudaEventCreate(&e1_));
  }
  ~PrefillTracer() {
    cudaEventDestroy(e0_);
    cudaEventDestroy(e1_);
  }
  PrefillTracer(const PrefillTracer&) = delete;
  PrefillTracer& operator=(const PrefillTracer&) = delete;

  int sms() const { return sms_; }

  struct Launch {
    double us = 0;
    int64_t grid = 0;         // CTAs that ran
    std::vector<double> mhz;  // each CTA's SM clock (its cycles / ns), ascending
    double median_mhz() const { return mhz[mhz.size() / 2]; }
  };

  // Runs `p` of `pb` with `kernel` and the default walk (what
  // LATTN_HOPPER_PREFILL_SCHEDULE says, else the library's rule) on at most
  // max_ctas CTAs (0: one per SM), traced, and appends it to `f` under `tag`.
  Launch launch(const Problem& pb, const sm80::PrefillParams& p, int kernel, int max_ctas, int64_t tag, FILE* f) {
    BENCH_CUDA(cudaMemset(dtrace_->ptr, 0, words_ * 8));
    BENCH_CUDA(cudaEventRecord(e0_, nullptr));
    pb.run(p, kernel, 0, 0, &diag_, max_ctas);
    BENCH_CUDA(cudaEventRecord(e1_, nullptr));
    BENCH_CUDA(cudaEventSynchronize(e1_));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, e0_, e1_));
    BENCH_CUDA(cudaMemcpy(host_.data(), dtrace_->ptr, words_ * 8, cudaMemcpyDeviceToHost));
    Launch l;
    l.us = ms * 1e3;
    for (int c = 0; c < sms_; ++c) l.grid += cta(c)[1] != 0;
    std::fwrite(&tag, 8, 1, f);
    std::fwrite(&l.us, 8, 1, f);
    std::fwrite(&l.grid, 8, 1, f);
    for (int c = 0; c < l.grid; ++c) {
      const unsigned long long* w = cta(c);
      const size_t n = std::min<size_t>(w[5], sm90::kPrefillTraceTiles);
      std::fwrite(w, 8, sm90::kPrefillTraceHeader + 3 * n, f);
      l.mhz.push_back(double(w[4] - w[2]) / double(w[3] - w[1]) * 1e3);
    }
    std::sort(l.mhz.begin(), l.mhz.end());
    return l;
  }

  // The last launch's trace words of CTA c (layout: prefill_schedule.h).
  const unsigned long long* cta(int c) const { return host_.data() + size_t(c) * sm90::kPrefillTraceWords; }

 private:
  int sms_ = 0;
  size_t words_ = 0;
  std::unique_ptr<DeviceBuffer> dtrace_;
  sm90::HopperPrefillDiagnostics diag_;
  std::vector<unsigned long long> host_;
  cudaEvent_t e0_ = nullptr, e1_ = nullptr;
};

// ---- the trace experiment (LATTN_PREFILL_BENCH_TRACE=dir) ---------------------------
// What makes the two speed levels of the long causal shapes (docs/perf.md,
// "Hopper prefill"): per shape, kAllocs copies of the problem in different
// memory, launched interleaved (copy 0, 1, 2, 0, 1, 2, ...) and then each
// kConsecutive times in a row, then copy 0 on half the SMs (max_ctas, so
// what the CTAs share — L2, DRAM, power — is loaded half as much; "alloc"
// 100 + copy in the file). Every launch is event-timed and traced
// (PrefillSchedule::trace: SM, start/end time, SM clock, tile starts per
// CTA). Writes dir/trace_<shape>.bin (per launch: int64 alloc, float64
// µs, int64 grid; then per CTA the header words and 3 words per tile it
// saw) and one summary line per launch to stdout; then 16 untraced launches
// back to back per copy, each one's time.
int run_trace_experiment(const std::string& dir) {
  PrefillTracer tracer;
  const int sms = tracer.sms();
  constexpr int kAllocs = 3, kRounds = 8, kConsecutive = 12;
  for (auto [heads, batch, seq] : {std::tuple{128, 1, 8192}, std::tuple{16, 8, 8192}, std::tuple{128, 4, 4096}}) {
    const std::string tag = "h" + std::to_string(heads) + "_b" + std::to_string(batch) + "_s" + std::to_string(seq);
    std::vector<std::unique_ptr<Problem>> pbs;
    for (int a = 0; a < kAllocs; ++a) {
      pbs.push_back(
          std::make_unique<Problem>(heads, std::vector<int>(size_t(batch), seq), std::vector<int>(size_t(batch), seq)));
    }
    std::vector<int> order;
    for (int r = 0; r < kRounds; ++r)
      for (int a = 0; a < kAllocs; ++a) order.push_back(a);
    for (int a = 0; a < kAllocs; ++a)
      for (int i = 0; i < kConsecutive; ++i) order.push_back(a);
    for (int i = 0; i < 6; ++i) order.push_back(100);  // copy 0 on half the SMs
    const std::string path = dir + "/trace_" + tag + ".bin";
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) throw std::runtime_error("cannot write " + path);
    for (int a = 0; a < kAllocs; ++a)
      for (int w = 0; w < 3; ++w) pbs[size_t(a)]->run(pbs[size_t(a)]->params(true), kHopper, 0, 0);
    BENCH_CUDA(cudaDeviceSynchronize());
    for (size_t i = 0; i < order.size(); ++i) {
      const Problem& pb = *pbs[size_t(order[i] % 100)];
      const PrefillTracer::Launch l =
          tracer.launch(pb, pb.params(true), kHopper, order[i] >= 100 ? sms / 2 : 0, order[i], f);
      // Summary: the SM clock (median over CTAs), the spread of the CTAs'
      // starts and ends, and their mean life.
      unsigned long long t0min = ~0ull, t0max = 0, t1min = ~0ull, t1max = 0;
      double life = 0;
      for (int c = 0; c < l.grid; ++c) {
        const unsigned long long* w = tracer.cta(c);
        t0min = std::min(t0min, w[1]), t0max = std::max(t0max, w[1]);
        t1min = std::min(t1min, w[3]), t1max = std::max(t1max, w[3]);
        life += double(w[3] - w[1]) / double(l.grid);
      }
      std::printf(
          "trace %s launch %zu alloc %d: %.1f us, SM clock %.0f MHz (min %.0f, max %.0f), start spread %.1f us, "
          "end spread %.1f us, mean CTA life %.1f us\n",
          tag.c_str(), i, order[i], l.us, l.median_mhz(), l.mhz.front(), l.mhz.back(), double(t0max - t0min) * 1e-3,
          double(t1max - t1min) * 1e-3, life * 1e-3);
    }
    std::fclose(f);
    // Untraced, back to back as the benchmark rows run (no gap between
    // launches): every launch's time, copies interleaved in blocks of 15.
    for (int rep = 0; rep < 2; ++rep)
      for (int a = 0; a < kAllocs; ++a) {
        const Problem& pb = *pbs[size_t(a)];
        const sm80::PrefillParams p = pb.params(true);
        std::vector<cudaEvent_t> ev(32);
        for (auto& e : ev) BENCH_CUDA(cudaEventCreate(&e));
        for (int i = 0; i < 16; ++i) {
          BENCH_CUDA(cudaEventRecord(ev[size_t(2 * i)], nullptr));
          pb.run(p, kHopper, 0, 0);
          BENCH_CUDA(cudaEventRecord(ev[size_t(2 * i + 1)], nullptr));
        }
        BENCH_CUDA(cudaDeviceSynchronize());
        std::printf("back-to-back %s alloc %d:", tag.c_str(), a);
        for (int i = 0; i < 16; ++i) {
          float ms = 0;
          BENCH_CUDA(cudaEventElapsedTime(&ms, ev[size_t(2 * i)], ev[size_t(2 * i + 1)]));
          std::printf(" %.0f", ms * 1e3);
        }
        std::printf("\n");
        for (auto& e : ev) cudaEventDestroy(e);
      }
    std::fflush(stdout);
  }
  return 0;
}

// ---- cycles of several hopper configs (LATTN_PREFILL_BENCH_TRACE_CONFIGS) ----------
// The SM clock moves under the power cap between launches (docs/perf.md,
// "what makes the two levels"), so times of two kernels differ by the clock
// they were given as much as by their work; their cycles do not. Per causal
// shape: the given config rows (default walk; run one process per
// LATTN_HOPPER_PREFILL_SCHEDULE value to compare walks in cycles) launched
// in turn, kRounds times (the order reversed every round), every launch
// traced; written as
// run_trace_experiment's files (dir/trace_ab_<shape>.bin, the "alloc" field
// = the config row) for bench/prefill_trace_analyze.py, and one line per
// launch: time, SM clock, cycles (time x clock).
int run_trace_ab(const std::string& dir, const std::vector<int>& configs) {
  PrefillTracer tracer;
  constexpr int kRounds = 10;
  for (auto [heads, batch, seq] :
       {std::tuple{128, 1, 8192}, std::tuple{128, 4, 4096}, std::tuple{128, 16, 1024}, std::tuple{16, 8, 8192}}) {
    const std::string tag = "h" + std::to_string(heads) + "_b" + std::to_string(batch) + "_s" + std::to_string(seq);
    const Problem pb(heads, std::vector<int>(size_t(batch), seq), std::vector<int>(size_t(batch), seq));
    const sm80::PrefillParams p = pb.params(true);
    for (int c : configs)
      for (int w = 0; w < 3; ++w) pb.run(p, kHopper - c, 0, 0);
    BENCH_CUDA(cudaDeviceSynchronize());
    const std::string path = dir + "/trace_ab_" + tag + ".bin";
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) throw std::runtime_error("cannot write " + path);
    std::vector<std::vector<double>> cycles(configs.size());
    for (int round = 0; round < kRounds; ++round) {
      for (size_t k = 0; k < configs.size(); ++k) {
        const size_t ci = round % 2 == 0 ? k : configs.size() - 1 - k;
        const PrefillTracer::Launch l = tracer.launch(pb, p, kHopper - configs[ci], 0, configs[ci], f);
        const double clock = l.median_mhz();
        cycles[ci].push_back(l.us * clock);
        std::printf("trace-ab %s round %d config %d (%s): %.1f us, SM clock %.0f MHz, %.3f M cycles\n", tag.c_str(),
                    round, configs[ci], sm90::kHopperPrefillConfigs[configs[ci]].name, l.us, clock,
                    l.us * clock * 1e-6);
      }
    }
    std::fclose(f);
    for (size_t ci = 0; ci < configs.size(); ++ci) {
      std::vector<double>& v = cycles[ci];
      std::sort(v.begin(), v.end());
      std::printf("trace-ab %s config %d (%s): cycles median %.4f M, min %.4f M, max %.4f M over %zu launches\n",
                  tag.c_str(), configs[ci], sm90::kHopperPrefillConfigs[configs[ci]].name, v[v.size() / 2] * 1e-6,
                  v.front() * 1e-6, v.back() * 1e-6, v.size());
    }
    std::fflush(stdout);
  }
  return 0;
}

void print_summary() {
  if (rows().empty()) return;
  std::printf("\n%-72s %12s %10s %9s  %s\n", "case", "median us", "TFLOP/s", "of GEMM", "note");
  for (const Row& r : rows()) {
    std::printf("%-72s %12.1f %10.1f %9.3f  %s\n", r.name.c_str(), r.us, r.tflops, r.fraction, r.note.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* dir = std::getenv("LATTN_PREFILL_BENCH_TRACE"); dir != nullptr && *dir != '\0') {
    if (!hopper_skip_reason().empty()) {
      std::printf("trace: %s\n", hopper_skip_reason().c_str());
      return 0;
    }
    if (const char* list = std::getenv("LATTN_PREFILL_BENCH_TRACE_CONFIGS"); list != nullptr && *list != '\0') {
      std::vector<int> configs;
      for (const char* c = list; *c != '\0';) {
        char* end = nullptr;
        const long v = std::strtol(c, &end, 10);
        if (end == c || v < 0 || v >= sm90::kNumHopperPrefillConfigs) {
          std::fprintf(stderr,
                       "LATTN_PREFILL_BENCH_TRACE_CONFIGS: expected config rows 0..%d separated by commas, got '%s'\n",
                       sm90::kNumHopperPrefillConfigs - 1, list);
          return 1;
        }
        configs.push_back(int(v));
        c = *end == ',' ? end + 1 : end;
      }
      return run_trace_ab(dir, configs);
    }
    return run_trace_experiment(dir);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  print_summary();
  return 0;
}
