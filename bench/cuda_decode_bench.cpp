// CUDA benchmarks: the same-run ceilings (device-to-device copy of 2 GiB,
// cuBLAS bf16 8192^3 GEMM), then the `cuda` decode backend and, on sm90
// (H100/H200), the `hopper` backend on docs/bench-method.md's shapes (rows
// "cuda/..." and "hopper/..."; a hopper row runs its wgmma kernel where it
// serves the case). Every number is a median of CUDA-event timings after warm-up, each
// sample after an L2 flush (256 MiB written), so no input is served from L2.
// Decode rows report eager runs (attention + combine launches) and CUDA-graph
// replays of the same step, the plan kernel on its own (a new step each time),
// and one layer's whole step (plan + attention + combine), eager and as a graph.
//
// Vocabulary (shared with bench/harness): us = median microseconds; TFLOP/s and
// GB/s from the counts of docs/bench-method.md; frac_copy / frac_gemm = fraction of the
// ceiling measured in this run. Output: Google Benchmark's console/JSON
// (--benchmark_out=FILE --benchmark_out_format=json), then a summary table.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/ops/device_ops.h"
#include "core/ops/gemm.h"
#include "cuda/common/runtime_utils.h"
#include "cuda/cuda_decode_backend.h"
#include "cuda_bench_timing.h"
#include "lattn/backend.h"
#include "lattn/cache.h"
#include "lattn/device.h"
#include "lattn/tensor.h"

namespace lattn {
namespace {

const Device kGpu = Device::cuda(0);

// Median device time (µs) of `issue` on `stream`, each sample preceded by an
// L2 flush outside the timed region: a 256 MiB memset. That leaves the L2
// full of dirty lines, which the timed kernels then write back to memory as
// their reads evict them (up to the L2's size of extra write traffic: a
// visible share of a small step). LATTN_BENCH_FLUSH=read follows the memset
// with a GEMM that reads the 256 MiB (writing 256 KiB), so the timed region
// starts with a clean L2 of unrelated data, as after a decode step's
// weight-reading GEMM. The default stays the memset (the recorded numbers).
double median_us(Stream stream, int warmup, int samples, const std::function<void()>& issue) {
  static OwnedTensor flush = OwnedTensor::empty({int64_t(256) << 20}, DType::u8, kGpu);
  static OwnedTensor flush_b = OwnedTensor::empty({8192, 8}, DType::bf16, kGpu);
  static OwnedTensor flush_c = OwnedTensor::empty({16384, 8}, DType::bf16, kGpu);
  static const bool read_flush = [] {
    const char* v = std::getenv("LATTN_BENCH_FLUSH");
    return v && std::string(v) == "read";
  }();
  int sample = 0;
  return bench_cuda::median_device_us(stream, warmup, samples, issue, [&] {
    detail::cuda_device_ops().memset(flush.data(), sample++ & 0x3f, flush.tensor().nbytes(), kGpu.index, stream);
    if (read_flush) {
      detail::GemmProblem g;  // C [16384, 8] = A [16384, 8192] (the flush buffer as bf16) . B [8192, 8]
      g.m = 16384, g.n = 8, g.k = 8192;
      g.a = flush.data(), g.a_dtype = DType::bf16, g.lda = 8192;
      g.b = flush_b.data(), g.b_dtype = DType::bf16, g.ldb = 8;
      g.c = flush_c.data(), g.c_dtype = DType::bf16, g.ldc = 8;
      detail::gemm(g, RunContext{kGpu, stream, 0});
    }
  });
}

struct Ceilings {
  double copy_gbps = 0, copy_us = 0;
  double gemm_tflops = 0, gemm_us = 0;
};

const Ceilings& ceilings() {
  static const Ceilings c = [] {
    cuda::StreamHandle stream(0);
    const bench_cuda::Ceiling copy = bench_cuda::measure_copy_ceiling(stream.get(), kGpu);
    const bench_cuda::Ceiling gemm = bench_cuda::measure_gemm_ceiling(stream.get(), kGpu);
    return Ceilings{copy.rate, copy.us, gemm.rate, gemm.us};
  }();
  return c;
}

// One decode shape of docs/bench-method.md.
struct DecodeShape {
  std::string name;
  bool hopper;  // the `hopper` backend (else `cuda`)
  int heads;
  std::vector<int> seq_lens;
  int s_q;
  DType cache_dtype;
  const char* judged_by;  // "copy" or "gemm"
  double target;          // issue 7's goal for the portable backend (0: none)
  int layers = 1;         // > 1: also time a step of this many layers (one instance each)
};

struct Row {
  std::string name;
  double us, graph_us, plan_us, step_us, step_graph_us, tflops, gbps, frac, target;
  int layers = 1;
  double layers_us = 0, layers_graph_us = 0;  // a step of `layers` layers (plans included)
  int64_t layers_plans = 0;                   // planning kernels that step launched
  const char* judged_by;
  std::string config;
};
std::vector<Row>& rows() {
  static std::vector<Row> r;
  return r;
}

void bench_decode(benchmark::State& state, const DecodeShape& shape) {
  const Ceilings& ceil = ceilings();
  const int H = shape.heads, L = 512, R = 64, page = 64, D = L + R;
  const int B = int(shape.seq_lens.size());
  const int T = B * shape.s_q;
  cuda::StreamHandle stream(0);
  // Paged cache: every request's pages drawn from one random permutation.
  int64_t num_blocks = 0, max_blocks = 0;
  for (int s : shape.seq_lens) {
    num_blocks += (s + page - 1) / page;
    max_blocks = std::max<int64_t>(max_blocks, (s + page - 1) / page);
  }
  OwnedTensor cache_t = OwnedTensor::empty({num_blocks, page, D}, shape.cache_dtype, kGpu);
  const float cache_scale = shape.cache_dtype == DType::fp8_e4m3 ? 1.f / 64 : 1.f;
  cuda::fill_random_device(cache_t.data(), shape.cache_dtype, cache_t.tensor().numel(), 3, 1.f / cache_scale,
                           stream.get());
  const LatentCache cache{cache_t.tensor(), L, R, cache_scale};
  std::mt19937_64 rng(5);
  std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  OwnedTensor table = OwnedTensor::empty({B, max_blocks}, DType::i32), lens = OwnedTensor::empty({B}, DType::i32);
  OwnedTensor qsl = OwnedTensor::empty({B + 1}, DType::i32);
  size_t next = 0;
  for (int r = 0; r < B; ++r) {
    const int s = shape.seq_lens[size_t(r)];
    lens.data_as<int32_t>()[r] = s;
    qsl.data_as<int32_t>()[r] = r * shape.s_q;
    for (int64_t i = 0; i < max_blocks; ++i) {
      table.data_as<int32_t>()[r * max_blocks + i] = i < (s + page - 1) / page ? perm[next++] : 0;
    }
  }
  qsl.data_as<int32_t>()[B] = T;
  OwnedTensor table_d = OwnedTensor::empty({B, max_blocks}, DType::i32, kGpu);
  OwnedTensor lens_d = OwnedTensor::empty({B}, DType::i32, kGpu), qsl_d = OwnedTensor::empty({B + 1}, DType::i32, kGpu);
  copy_tensor(table.tensor(), table_d.tensor());
  copy_tensor(lens.tensor(), lens_d.tensor());
  copy_tensor(qsl.tensor(), qsl_d.tensor());
  DecodeMetadata md;
  md.num_decodes = B;
  md.num_decode_tokens = T;
  md.max_decode_query_len = shape.s_q;
  md.max_decode_seq_len = *std::max_element(shape.seq_lens.begin(), shape.seq_lens.end());
  md.block_size = page;
  md.seq_lens_cpu = lens.tensor(), md.seq_lens = lens_d.tensor();
  md.query_start_loc_cpu = qsl.tensor(), md.query_start_loc = qsl_d.tensor();
  md.block_table_cpu = table.tensor(), md.block_table = table_d.tensor();

  OwnedTensor q_nope = OwnedTensor::empty({T, H, L}, DType::bf16, kGpu),
              q_pe = OwnedTensor::empty({T, H, R}, DType::bf16, kGpu);
  OwnedTensor out = OwnedTensor::empty({T, H, L}, DType::bf16, kGpu),
              lse = OwnedTensor::empty({H, T}, DType::f32, kGpu);
  cuda::fill_random_device(q_nope.data(), DType::bf16, q_nope.tensor().numel(), 7, 1.f, stream.get());
  cuda::fill_random_device(q_pe.data(), DType::bf16, q_pe.tensor().numel(), 8, 1.f, stream.get());

  DecodeBackendParams params;
  params.num_heads = H;
  params.scale = 1.f / std::sqrt(192.f);
  params.kv_lora_rank = L;
  params.qk_rope_head_dim = R;
  params.dtype = DType::bf16;
  params.kv_cache_dtype = shape.cache_dtype;
  params.context = RunContext{kGpu, stream.get(), 0};
  cuda::CudaDecodeBackend backend(params, shape.hopper);
  backend.prepare_metadata(md);
  auto run = [&] { backend.run(q_nope.tensor(), q_pe.tensor(), cache, md, out.tensor(), lse.tensor()); };
  const int samples = 30;
  Row row;
  // A new step each time (fresh StepPlans): prepare_metadata launches the
  // plan kernel, as the first layer of a step does.
  auto new_step = [&] {
    md.plans = std::make_shared<StepPlans>();
    backend.prepare_metadata(md);
  };
  row.plan_us = median_us(stream.get(), 3, samples, new_step);
  row.us = median_us(stream.get(), 3, samples, run);
  // One layer's whole step: plan + attention + combine.
  row.step_us = median_us(stream.get(), 3, samples, [&] {
    new_step();
    run();
  });
  cuda::CapturedGraph step_graph;
  step_graph.begin(stream.get());
  new_step();
  run();
  step_graph.end();
  row.step_graph_us = median_us(stream.get(), 3, samples, [&] { step_graph.replay(stream.get()); });
  new_step();
  cuda::CapturedGraph graph;
  graph.begin(stream.get());
  run();
  graph.end();
  row.graph_us = median_us(stream.get(), 3, samples, [&] { graph.replay(stream.get()); });
  if (shape.layers > 1) {
    // A step of many layers, as MlaAttention::forward runs it: every layer's
    // own backend instance prepares the step's metadata and runs (the layers
    // share inputs here: only the time matters). With one plan per step the
    // first layer plans; LATTN_DECODE_PLAN_PER_LAYER=1 gives the old way.
    std::vector<std::unique_ptr<cuda::CudaDecodeBackend>> layers;
    for (int k = 0; k < shape.layers; ++k)
      layers.push_back(std::make_unique<cuda::CudaDecodeBackend>(params, shape.hopper));
    auto layer_step = [&] {
      md.plans = std::make_shared<StepPlans>();
      for (auto& l : layers) {
        l->prepare_metadata(md);
        l->run(q_nope.tensor(), q_pe.tensor(), cache, md, out.tensor(), lse.tensor());
      }
    };
    layer_step();  // sizes every workspace before capture
    int64_t before = 0;
    for (auto& l : layers) before += l->plans_launched();
    layer_step();
    for (auto& l : layers) row.layers_plans += l->plans_launched();
    row.layers_plans -= before;
    row.layers = shape.layers;
    row.layers_us = median_us(stream.get(), 2, 15, layer_step);
    cuda::CapturedGraph layers_graph;
    layers_graph.begin(stream.get());
    layer_step();
    layers_graph.end();
    row.layers_graph_us = median_us(stream.get(), 2, 15, [&] { layers_graph.replay(stream.get()); });
  }
  stream.synchronize();

  double keys = 0;
  for (int s : shape.seq_lens) keys += s;
  const double flops = 2.0 * H * shape.s_q * keys * (L + R + L);
  const double bytes = keys * D * dtype_size(shape.cache_dtype);
  const double best_us = std::min(row.us, row.graph_us);
  row.name = shape.name;
  row.tflops = flops / (best_us * 1e-6) / 1e12;
  row.gbps = bytes / (best_us * 1e-6) / 1e9;
  row.judged_by = shape.judged_by;
  row.frac = std::string(shape.judged_by) == "gemm" ? row.tflops / ceil.gemm_tflops : row.gbps / ceil.copy_gbps;
  row.target = shape.target;
  row.config = backend.kernel_label();
  rows().push_back(row);
  for (auto _ : state) state.SetIterationTime(best_us * 1e-6);
  state.counters["us_eager"] = row.us;
  state.counters["us_graph"] = row.graph_us;
  state.counters["us_plan"] = row.plan_us;
  state.counters["us_step"] = row.step_us;
  state.counters["us_step_graph"] = row.step_graph_us;
  state.counters["TFLOPs"] = row.tflops;
  state.counters["GBps"] = row.gbps;
  state.counters["frac_copy"] = row.gbps / ceil.copy_gbps;
  state.counters["frac_gemm"] = row.tflops / ceil.gemm_tflops;
  state.counters["target_frac"] = row.target;
  state.SetLabel(row.config);
}

void bench_ceilings(benchmark::State& state) {
  const Ceilings& c = ceilings();
  for (auto _ : state) state.SetIterationTime(c.copy_us * 1e-6);
  state.counters["copy_GBps"] = c.copy_gbps;
  state.counters["copy_us"] = c.copy_us;
  state.counters["gemm_TFLOPs"] = c.gemm_tflops;
  state.counters["gemm_us"] = c.gemm_us;
}

std::vector<int> same(int b, int s) { return std::vector<int>(size_t(b), s); }
std::vector<int> mixed(int b) {  // 128 .. 32768 keys, log-uniform
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<double> d(std::log(128.0), std::log(32768.0));
  std::vector<int> v(static_cast<size_t>(b));
  for (int& x : v) x = int(std::exp(d(rng)));
  return v;
}

void register_all() {
  benchmark::RegisterBenchmark("ceilings", bench_ceilings)->Iterations(1)->UseManualTime();
  // Portable-backend targets (issue 7) for cuda rows, issue 12's for hopper rows.
  struct Base {
    std::string name;
    int heads;
    std::vector<int> seq_lens;
    int s_q;
    DType cache_dtype;
    const char* judged_by;
    double cuda_target, hopper_target;
  };
  const std::vector<Base> shapes = {
      {"decode/H16_B128_S16384_p64_bf16", 16, same(128, 16384), 1, DType::bf16, "copy", 0.75, 0.94},
      {"decode/H16_B64_S32768_p64_bf16", 16, same(64, 32768), 1, DType::bf16, "copy", 0, 0.94},
      {"decode/H16_B32_S4096_p64_bf16", 16, same(32, 4096), 1, DType::bf16, "copy", 0, 0.70},
      {"decode/H128_B128_S4096_p64_bf16", 128, same(128, 4096), 1, DType::bf16, "gemm", 0.30, 0.80},
      {"decode/H128_B128_S16384_p64_bf16", 128, same(128, 16384), 1, DType::bf16, "gemm", 0, 0.80},
      {"decode/H128_B32_S4096_p64_bf16", 128, same(32, 4096), 1, DType::bf16, "gemm", 0, 0.60},
      {"decode/H16_B1_S16384_p64_bf16", 16, same(1, 16384), 1, DType::bf16, "copy", 0.50, 0},
      {"decode/H16_B1_S65536_p64_bf16", 16, same(1, 65536), 1, DType::bf16, "copy", 0, 0.70},
      // Small batches between B1 and B32: where the one-launch kernel
      // (smxx/decode_fused.h) stops paying (LATTN_DECODE_FUSED_MAX_BATCH).
      {"decode/H16_B4_S16384_p64_bf16", 16, same(4, 16384), 1, DType::bf16, "copy", 0, 0},
      {"decode/H16_B8_S8192_p64_bf16", 16, same(8, 8192), 1, DType::bf16, "copy", 0, 0},
      {"decode/H128_B1_S65536_p64_bf16", 128, same(1, 65536), 1, DType::bf16, "gemm", 0, 0},
      {"decode/H128_B64_S8192_p64_bf16", 128, same(64, 8192), 1, DType::bf16, "gemm", 0, 0},
      // One M tile per request (64 rows): every KV tile is read by one CTA
      // only; against H128 (two CTAs read each tile) it shows whether the
      // second read is served by L2 (docs/perf.md, "Hopper decode").
      {"decode/H64_B128_S4096_p64_bf16", 64, same(128, 4096), 1, DType::bf16, "gemm", 0, 0},
      {"decode/H16_B64_mixed128-32k_p64_bf16", 16, mixed(64), 1, DType::bf16, "copy", 0, 0},
      {"decode/H16_B128_S16384_p64_fp8", 16, same(128, 16384), 1, DType::fp8_e4m3, "copy", 0, 0.85},
      {"decode/H128_B128_S4096_p64_fp8", 128, same(128, 4096), 1, DType::fp8_e4m3, "gemm", 0, 0},
      {"decode/H16_B128_S4096_sq2_p64_bf16", 16, same(128, 4096), 2, DType::bf16, "copy", 0, 0},
  };
  const lattn::CudaDeviceQuery q = lattn::query_cuda_devices();
  const bool sm90 = !q.devices.empty() && q.devices[0].capability.major == 9;
  for (const Base& b : shapes) {
    for (bool hopper : {false, true}) {
      if (hopper && !sm90) continue;
      const DecodeShape s{std::string(hopper ? "hopper/" : "cuda/") + b.name,
                          hopper,
                          b.heads,
                          b.seq_lens,
                          b.s_q,
                          b.cache_dtype,
                          b.judged_by,
                          hopper ? b.hopper_target : b.cuda_target};
      benchmark::RegisterBenchmark(s.name.c_str(), [s](benchmark::State& st) { bench_decode(st, s); })
          ->Iterations(1)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
  // DeepSeek-V3's 61 layers per step: what one plan per step saves (rows
  // "layers61/..."; compare with LATTN_DECODE_PLAN_PER_LAYER=1).
  for (const Base& b : shapes) {
    if (b.name != "decode/H16_B32_S4096_p64_bf16" && b.name != "decode/H16_B1_S16384_p64_bf16") continue;
    const bool hopper = sm90;
    DecodeShape s{std::string("layers61/") + (hopper ? "hopper/" : "cuda/") + b.name,
                  hopper,
                  b.heads,
                  b.seq_lens,
                  b.s_q,
                  b.cache_dtype,
                  b.judged_by,
                  0};
    s.layers = 61;
    benchmark::RegisterBenchmark(s.name.c_str(), [s](benchmark::State& st) { bench_decode(st, s); })
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

void print_summary() {
  const Ceilings& c = ceilings();
  std::printf("\nceilings (this run): copy %.0f GB/s (%.0f us for 2 GiB), bf16 GEMM %.0f TFLOP/s (%.0f us)\n",
              c.copy_gbps, c.copy_us, c.gemm_tflops, c.gemm_us);
  std::printf("%-47s %9s %9s %7s %8s %8s %8s %8s %6s %6s %s\n", "case", "eager_us", "graph_us", "plan_us", "step_us",
              "stepg_us", "TFLOP/s", "GB/s", "frac", "target", "config");
  for (const Row& r : rows()) {
    if (r.layers > 1) {
      std::printf(
          "%-47s %d layers per step: eager %.1f us, graph %.1f us (%.2f us per layer), %lld plan kernels per "
          "step\n",
          r.name.c_str(), r.layers, r.layers_us, r.layers_graph_us, r.layers_graph_us / r.layers,
          (long long)r.layers_plans);
    }
    std::printf("%-47s %9.1f %9.1f %7.1f %8.1f %8.1f %8.1f %8.0f %6.3f %6s %s (%s)%s\n", r.name.c_str(), r.us,
                r.graph_us, r.plan_us, r.step_us, r.step_graph_us, r.tflops, r.gbps, r.frac,
                r.target > 0 ? std::to_string(r.target).substr(0, 4).c_str() : "-", r.config.c_str(), r.judged_by,
                r.target > 0 ? (r.frac >= r.target ? "  MEETS" : "  MISSES") : "");
  }
}

}  // namespace
}  // namespace lattn

int main(int argc, char** argv) {
  const lattn::CudaDeviceQuery q = lattn::query_cuda_devices();
  if (q.devices.empty()) {
    std::printf("cuda_decode_bench: skipped (%s)\n", q.unavailable_reason.c_str());
    return 0;
  }
  std::printf("device: %s, %d SMs, capability %d.%d\n", q.devices[0].name.c_str(), q.devices[0].sm_count,
              q.devices[0].capability.major, q.devices[0].capability.minor);
  benchmark::Initialize(&argc, argv);
  lattn::register_all();
  benchmark::RunSpecifiedBenchmarks();
  lattn::print_summary();
  benchmark::Shutdown();
  return 0;
}
