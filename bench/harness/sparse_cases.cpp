// The sparse-MLA benchmark cases (bench/harness/sparse_cases.h).
#include "harness/sparse_cases.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "lattn/cpu.h"
#include "lattn/ops.h"
#include "lattn/sparse.h"

namespace lattn::bench {
namespace {

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median µs of `repeats` calls after one warm-up; the fastest into *min (if given).
template <class Fn>
double median_us(Fn&& fn, int repeats, double* min = nullptr) {
  fn();  // warm-up (workspaces, page faults)
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    const double t0 = now_us();
    fn();
    t.push_back(now_us() - t0);
  }
  std::sort(t.begin(), t.end());
  if (min) *min = t.front();
  return t[t.size() / 2];
}

void fill_random(const Tensor& t, std::mt19937_64& rng, float stddev) {
  std::normal_distribution<float> nd(0.f, stddev);
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) store_from_f32(t.data(), t.dtype(), i, nd(rng));
}

}  // namespace

const char* sparse_phase_name(SparsePhase p) {
  switch (p) {
    case SparsePhase::decode:
      return "sparse-decode";
    case SparsePhase::prefill:
      return "sparse-prefill";
    case SparsePhase::indexer:
      return "indexer";
  }
  return "?";
}

std::string SparseCase::name() const {
  char buf[160];
  if (phase == SparsePhase::indexer) {
    std::snprintf(buf, sizeof buf, "indexer H%d D128 T%d S%d topk%d %s", num_heads, tokens, positions, topk,
                  backend.c_str());
  } else {
    std::snprintf(buf, sizeof buf, "%s H%d T%d topk%d S%d %s %s", sparse_phase_name(phase), num_heads, tokens, topk,
                  positions, kv_cache_dtype == kFp8DsMla ? "fp8_ds_mla" : dtype_name(kv_cache_dtype), backend.c_str());
  }
  return buf;
}

double SparseRow::roofline_fraction(const Ceilings& ceil) const {
  const double peak = phase_is_bf16() ? ceil.compute_gflops(DType::bf16) : ceil.compute_gflops(DType::f32);
  const double t = std::max(bytes / (ceil.bandwidth_gbps * 1e3), flops / (peak * 1e3));  // µs
  return t / median_us;
}

std::vector<SparseCase> sparse_target_cases(const std::vector<SparsePhase>& phases) {
  std::vector<SparseCase> cases;
  for (SparsePhase p : phases) {
    if (p == SparsePhase::indexer) {
      SparseCase c;
      c.phase = p, c.num_heads = 64, c.tokens = 1, c.positions = 131072;
      cases.push_back(c);
      continue;
    }
    for (DType cache : {DType::bf16, kFp8DsMla}) {
      SparseCase c;
      c.phase = p, c.kv_cache_dtype = cache;
      c.tokens = p == SparsePhase::decode ? 8 : 64;
      cases.push_back(c);
    }
  }
  return cases;
}

SparseRow time_sparse_case(const SparseCase& c, int repeats) {
  SparseRow row;
  row.c = c;
  std::mt19937_64 rng(1);
  const int threads = c.threads > 0 ? c.threads : omp_get_max_threads();
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  const int block_size = 64;
  const int64_t blocks = (c.positions + block_size - 1) / block_size;
  if (c.phase == SparsePhase::indexer) {
    const int D = 128;
    OwnedIndexerKeyCache cache(blocks, block_size, D);
    OwnedTensor k = OwnedTensor::empty({blocks * block_size, D}, DType::bf16);
    OwnedTensor slots = OwnedTensor::empty({blocks * block_size}, DType::i64);
    fill_random(k, rng, 1.f);
    std::iota(slots.data_as<int64_t>(), slots.data_as<int64_t>() + blocks * block_size, int64_t(0));
    indexer_k_cache_write(k, cache, slots);
    OwnedTensor q = OwnedTensor::empty({c.tokens, c.num_heads, D}, DType::bf16),
                w = OwnedTensor::empty({c.tokens, c.num_heads}, DType::f32);
    fill_random(q, rng, 1.f);
    fill_random(w, rng, 0.1f);
    OwnedTensor bt = OwnedTensor::empty({1, blocks}, DType::i32), qsl = OwnedTensor::empty({2}, DType::i32),
                sl = OwnedTensor::empty({1}, DType::i32);
    std::iota(bt.data_as<int32_t>(), bt.data_as<int32_t>() + blocks, 0);
    qsl.data_as<int32_t>()[0] = 0, qsl.data_as<int32_t>()[1] = c.tokens, sl.data_as<int32_t>()[0] = c.positions;
    const IndexerArgs args{q, w, bt, qsl, sl};
    OwnedTensor out = OwnedTensor::empty({c.tokens, c.topk}, DType::i32);
    row.median_us = median_us([&] { indexer_topk(args, cache, out, c.backend == "reference" ? "reference" : "cpu"); },
                              repeats, &row.min_us);
    // The top-k step alone, on logits of the same size.
    OwnedTensor logits = OwnedTensor::empty({c.tokens, c.positions}, DType::f32),
                lens = OwnedTensor::empty({c.tokens}, DType::i32);
    fill_random(logits, rng, 1.f);
    std::fill(lens.data_as<int32_t>(), lens.data_as<int32_t>() + c.tokens, c.positions);
    row.topk_us = median_us([&] { topk_positions(logits, lens, out); }, repeats);
    row.flops = 2.0 * c.num_heads * D * double(c.positions) * c.tokens;
    row.bytes = double(c.positions) * (D + 4);
  } else {
    const MlaDims dims = MlaDims::deepseek_v3(c.num_heads);
    OwnedLatentCache cache(blocks, block_size, dims, c.kv_cache_dtype);
    {
      const int64_t n = blocks * block_size;
      OwnedTensor kv = OwnedTensor::empty({n, 512}, DType::bf16), pe = OwnedTensor::empty({n, 64}, DType::bf16);
      OwnedTensor slots = OwnedTensor::empty({n}, DType::i64);
      fill_random(kv, rng, 1.f);
      fill_random(pe, rng, 1.f);
      std::iota(slots.data_as<int64_t>(), slots.data_as<int64_t>() + n, int64_t(0));
      concat_and_cache_mla(kv, pe, cache, slots);
    }
    OwnedTensor q = OwnedTensor::empty({c.tokens, c.num_heads, 576}, DType::bf16);
    fill_random(q, rng, 0.3f);
    OwnedTensor idx = OwnedTensor::empty({c.tokens, c.topk}, DType::i32);
    std::uniform_int_distribution<int32_t> pick(0, int32_t(c.positions - 1));
    for (int64_t i = 0; i < int64_t(c.tokens) * c.topk; ++i) idx.data_as<int32_t>()[i] = pick(rng);
    OwnedTensor out = OwnedTensor::empty({c.tokens, c.num_heads, 512}, DType::bf16),
                lse = OwnedTensor::empty({c.num_heads, c.tokens}, DType::f32);
    SparseMlaArgs a;
    a.q = q, a.indices = idx, a.out = out, a.lse = lse, a.scale = 1.f / std::sqrt(192.f);
    row.median_us = median_us([&] { sparse_mla(a, cache, c.backend); }, repeats, &row.min_us);
    const double entry = c.kv_cache_dtype == kFp8DsMla ? 656.0 : 1152.0;
    row.flops = 2.0 * c.num_heads * double(c.topk) * (512 + 64 + 512) * c.tokens;
    row.bytes = double(c.tokens) * c.topk * entry;
  }
  omp_set_num_threads(saved);
  return row;
}

std::string format_sparse_table(const Ceilings& ceil, const std::vector<SparseRow>& rows) {
  std::string s;
  char buf[320];
  std::snprintf(buf, sizeof buf, "ceilings (%s, %d threads): %.1f GB/s triad, %.0f GFLOP/s f32, %.0f GFLOP/s bf16\n",
                ceil.device_name.c_str(), ceil.threads, ceil.bandwidth_gbps, ceil.f32_gflops, ceil.bf16_gflops);
  s += buf;
  s += "case                                                   median_us     min_us   GFLOP/s     GB/s  roofline  "
       "topk_us\n";
  for (const SparseRow& r : rows) {
    std::snprintf(buf, sizeof buf, "%-54s %10.1f %10.1f %9.1f %8.2f %9.2f %8.1f\n", r.c.name().c_str(), r.median_us,
                  r.min_us, r.gflops(), r.gbps(), r.roofline_fraction(ceil), r.topk_us);
    s += buf;
  }
  return s;
}

}  // namespace lattn::bench
