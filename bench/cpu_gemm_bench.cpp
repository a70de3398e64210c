// bench/cpu_gemm_bench.cpp — the choice behind detail::cpu_gemm, measured:
// OpenBLAS on f32 panels vs lattn's AVX512-BF16 kernel on the MLA projection
// shapes (DeepSeek dims, 16 heads, bf16), all threads. The one benchmark
// that uses an internal header: the projection GEMM is not public API.
//
//   cpu_gemm_bench [--benchmark_repetitions=N ...]   (Google Benchmark flags)
#include <benchmark/benchmark.h>

#include <random>

#include "core/ops/gemm.h"
#include "cpu/gemm_paths.h"
#include "lattn/cpu.h"
#include "lattn/tensor.h"

namespace {

using lattn::DType;
using lattn::OwnedTensor;

struct ProjShape {
  const char* name;
  int64_t m, n, k, batch;
  bool trans_b, shared_a;
};

// m = tokens: 1 and 8 decode tokens (B1 and B8, s_q 1), 1024 new prefill tokens.
constexpr ProjShape kShapes[] = {
    {"decode_B1_absorb_q_nope_x_W_UK_T", 1, 512, 128, 16, false, false},
    {"decode_B1_v_up_o_x_W_UV", 1, 128, 512, 16, false, false},
    {"decode_absorb_q_nope_x_W_UK_T", 8, 512, 128, 16, false, false},
    {"decode_v_up_o_x_W_UV", 8, 128, 512, 16, false, false},
    {"prefill_k_nope_kv_c_x_W_UK_T^T", 1024, 128, 512, 16, true, true},
    {"prefill_v_kv_c_x_W_UV", 1024, 128, 512, 16, false, true},
};

void fill(const OwnedTensor& t) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (int64_t i = 0; i < t.tensor().numel(); ++i) lattn::store_from_f32(t.data(), t.tensor().dtype(), i, d(rng));
}

void BM_ProjectionGemm(benchmark::State& state, ProjShape s, lattn::cpu::GemmPath path) {
  if (path == lattn::cpu::GemmPath::bf16_dot && lattn::cpu_isa() != lattn::CpuIsa::avx512_bf16) {
    state.SkipWithError("needs an AVX512-BF16 CPU");
    return;
  }
  OwnedTensor a = OwnedTensor::empty({s.shared_a ? s.m : s.batch * s.m, s.k}, DType::bf16);
  OwnedTensor b = OwnedTensor::empty({s.batch, s.k * s.n}, DType::bf16);
  OwnedTensor c = OwnedTensor::empty({s.m, s.batch * s.n}, DType::bf16);
  fill(a);
  fill(b);
  lattn::detail::GemmProblem p;
  p.m = s.m, p.n = s.n, p.k = s.k, p.batch = s.batch;
  p.a = a.data(), p.a_dtype = DType::bf16, p.lda = s.k, p.batch_stride_a = s.shared_a ? 0 : s.m * s.k;
  p.b = b.data(), p.b_dtype = DType::bf16, p.ldb = s.trans_b ? s.k : s.n, p.batch_stride_b = s.k * s.n;
  p.trans_b = s.trans_b;
  p.c = c.data(), p.c_dtype = DType::bf16, p.ldc = s.batch * s.n, p.batch_stride_c = s.n;
  lattn::cpu::set_gemm_path(path);
  const lattn::RunContext ctx;
  for (auto _ : state) lattn::detail::gemm(p, ctx);
  lattn::cpu::set_gemm_path(lattn::cpu::GemmPath::automatic);
  const double flops = 2.0 * double(s.m) * double(s.n) * double(s.k) * double(s.batch);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

int register_all() {
  for (const ProjShape& s : kShapes) {
    benchmark::RegisterBenchmark((std::string(s.name) + "/openblas").c_str(), BM_ProjectionGemm, s,
                                 lattn::cpu::GemmPath::openblas)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark((std::string(s.name) + "/bf16_dot").c_str(), BM_ProjectionGemm, s,
                                 lattn::cpu::GemmPath::bf16_dot)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
  return 0;
}
const int kRegistered = register_all();

}  // namespace

BENCHMARK_MAIN();
