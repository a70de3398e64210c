// CUDA benchmarks of sparse MLA (docs/sparse.md): the `cuda` sparse kernel
// on the issue's shape (H128, 128 requests × s_q 2 = 256 tokens, top-2048
// random slots of a 65536-token cache, bf16 and fp8_ds_mla caches) and the
// cuda indexer (64 heads × 128 over 131072 positions, top-2048: one decode
// token, a batch of 128 decode tokens, and the top-k step alone), against
// the same run's ceilings (cuBLAS bf16 8192^3 GEMM, 2 GiB device copy).
// Every number is a median of CUDA-event timings after warm-up, each sample
// after a 256 MiB L2 flush. FLOPs: sparse 2·N·topk·(2L + R) per token;
// indexer 2·H·D·S per token. Output: one table (plain text).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/ops/device_ops.h"
#include "cuda/common/runtime_utils.h"
#include "cuda_bench_timing.h"
#include "lattn/cache.h"
#include "lattn/device.h"
#include "lattn/ops.h"
#include "lattn/sparse.h"
#include "lattn/tensor.h"

namespace lattn {
namespace {

const Device kGpu = Device::cuda(0);

// Medians with a 256 MiB write between samples (the cache and the indices
// come from HBM, not from L2).
double median_us(Stream stream, int warmup, int samples, const std::function<void()>& issue) {
  static OwnedTensor flush = OwnedTensor::empty({int64_t(256) << 20}, DType::u8, kGpu);
  int sample = 0;
  return bench_cuda::median_device_us(stream, warmup, samples, issue, [&] {
    detail::cuda_device_ops().memset(flush.data(), sample++ & 0xff, flush.tensor().nbytes(), kGpu.index, stream);
  });
}

double gemm_ceiling_tflops(Stream stream) { return bench_cuda::measure_gemm_ceiling(stream, kGpu).rate; }
double copy_ceiling_gbps(Stream stream) { return bench_cuda::measure_copy_ceiling(stream, kGpu).rate; }

struct Row {
  std::string name;
  double us = 0, tflops = 0, gbps = 0;
};

// Sparse decode: T tokens × N heads over topk random distinct slots each.
Row sparse_case(Stream stream, DType cache_dtype, int N, int T, int topk) {
  const int L = 512, R = 64, block = 64, positions = 65536;
  const MlaDims dims{N, L, 128, R, 128};
  OwnedLatentCache cache(positions / block, block, dims, cache_dtype, kGpu);
  {
    OwnedTensor kv = OwnedTensor::empty({positions, L}, DType::bf16, kGpu),
                pe = OwnedTensor::empty({positions, R}, DType::bf16, kGpu);
    cuda::fill_random_device(kv.data(), DType::bf16, int64_t(positions) * L, 1, 1.f, stream);
    cuda::fill_random_device(pe.data(), DType::bf16, int64_t(positions) * R, 2, 1.f, stream);
    OwnedTensor slots = OwnedTensor::empty({positions}, DType::i64);
    for (int i = 0; i < positions; ++i) slots.data_as<int64_t>()[i] = i;
    const OwnedTensor dslots = OwnedTensor::empty({positions}, DType::i64, kGpu);
    copy_tensor(slots, dslots);
    concat_and_cache_mla(kv.tensor(), pe.tensor(), cache, dslots.tensor(), stream);
  }
  OwnedTensor idx = OwnedTensor::empty({T, topk}, DType::i32);
  std::mt19937 rng(7);
  std::vector<int32_t> all(static_cast<size_t>(positions));
  for (int i = 0; i < positions; ++i) all[size_t(i)] = i;
  for (int t = 0; t < T; ++t) {
    for (int j = 0; j < topk; ++j) std::swap(all[size_t(j)], all[size_t(j) + rng() % size_t(positions - j)]);
    std::copy(all.begin(), all.begin() + topk, idx.data_as<int32_t>() + int64_t(t) * topk);
  }
  const OwnedTensor didx = OwnedTensor::empty({T, topk}, DType::i32, kGpu);
  copy_tensor(idx, didx);
  OwnedTensor q = OwnedTensor::empty({T, N, L + R}, DType::bf16, kGpu),
              out = OwnedTensor::empty({T, N, L}, DType::bf16, kGpu);
  OwnedTensor lse = OwnedTensor::empty({N, T}, DType::f32, kGpu);
  cuda::fill_random_device(q.data(), DType::bf16, q.tensor().numel(), 3, 0.1f, stream);
  SparseMlaArgs a;
  a.q = q.tensor(), a.indices = didx.tensor(), a.out = out.tensor(), a.lse = lse.tensor(), a.scale = 0.1352f;
  Row r;
  r.name = std::string("sparse decode H") + std::to_string(N) + " T" + std::to_string(T) + " topk" +
           std::to_string(topk) + (cache_dtype == kFp8DsMla ? " fp8_ds_mla" : " bf16");
  r.us = median_us(stream, 3, 15, [&] { sparse_mla(a, cache, "cuda", stream); });
  const double flops = 2.0 * N * topk * (2.0 * L + R) * T;
  const double bytes = double(T) * topk * (cache_dtype == kFp8DsMla ? 656 : 1152);
  r.tflops = flops / (r.us * 1e-6) / 1e12;
  r.gbps = bytes / (r.us * 1e-6) / 1e9;
  return r;
}

// Indexer: T decode tokens, each over S positions of its own request.
Row indexer_case(Stream stream, int T, int S, int topk, Row* topk_only) {
  const int H = 64, D = 128, block = 64;
  const int blocks_per_req = S / block;
  OwnedIndexerKeyCache cache(int64_t(blocks_per_req), block, D, kGpu);  // every request shares one cache of S keys
  {
    OwnedTensor k = OwnedTensor::empty({S, D}, DType::bf16, kGpu);
    cuda::fill_random_device(k.data(), DType::bf16, int64_t(S) * D, 4, 1.f, stream);
    OwnedTensor slots = OwnedTensor::empty({S}, DType::i64);
    for (int i = 0; i < S; ++i) slots.data_as<int64_t>()[i] = i;
    const OwnedTensor dslots = OwnedTensor::empty({S}, DType::i64, kGpu);
    copy_tensor(slots, dslots);
    indexer_k_cache_write(k.tensor(), cache, dslots.tensor(), stream);
  }
  OwnedTensor bt = OwnedTensor::empty({T, blocks_per_req}, DType::i32), qsl = OwnedTensor::empty({T + 1}, DType::i32),
              lens = OwnedTensor::empty({T}, DType::i32);
  for (int t = 0; t <= T; ++t) qsl.data_as<int32_t>()[t] = t;
  for (int t = 0; t < T; ++t) {
    lens.data_as<int32_t>()[t] = S;
    for (int b = 0; b < blocks_per_req; ++b) bt.data_as<int32_t>()[t * blocks_per_req + b] = b;
  }
  const OwnedTensor dbt = OwnedTensor::empty({T, blocks_per_req}, DType::i32, kGpu),
                    dqsl = OwnedTensor::empty({T + 1}, DType::i32, kGpu),
                    dlens = OwnedTensor::empty({T}, DType::i32, kGpu);
  copy_tensor(bt, dbt);
  copy_tensor(qsl, dqsl);
  copy_tensor(lens, dlens);
  OwnedTensor q = OwnedTensor::empty({T, H, D}, DType::bf16, kGpu), w = OwnedTensor::empty({T, H}, DType::f32, kGpu);
  cuda::fill_random_device(q.data(), DType::bf16, q.tensor().numel(), 5, 1.f, stream);
  cuda::fill_random_device(w.data(), DType::f32, w.tensor().numel(), 6, 0.01f, stream);
  OwnedTensor out = OwnedTensor::empty({T, topk}, DType::i32, kGpu);
  IndexerArgs a{q.tensor(), w.tensor(), dbt.tensor(), dqsl.tensor(), dlens.tensor(), S, stream};
  Row r;
  r.name = "indexer logits+top" + std::to_string(topk) + " T" + std::to_string(T) + " S" + std::to_string(S);
  r.us = median_us(stream, 2, 9, [&] { indexer_topk(a, cache, out.tensor()); });
  r.tflops = 2.0 * H * D * double(S) * T / (r.us * 1e-6) / 1e12;
  r.gbps = double(S) * (D + 4) * T / (r.us * 1e-6) / 1e9;
  if (topk_only) {
    OwnedTensor logits = OwnedTensor::empty({T, S}, DType::f32, kGpu);
    indexer_logits(a, cache, logits.tensor());
    topk_only->name = "top" + std::to_string(topk) + " alone T" + std::to_string(T) + " S" + std::to_string(S);
    topk_only->us = median_us(stream, 2, 9, [&] {
      detail::cuda_device_ops().topk_positions(logits.tensor(), dlens.tensor(), out.tensor(), stream);
    });
    topk_only->gbps = double(S) * 4 * T / (topk_only->us * 1e-6) / 1e9;
  }
  return r;
}

}  // namespace
}  // namespace lattn

// Arguments: none (every row), `target` (the ceilings and the issue's H128
// case with the default kernel only: the rows an A/B of two builds repeats),
// or `topk` (the ceilings and the indexer rows).
int main(int argc, char** argv) {
  using namespace lattn;
  const std::string only = argc > 1 ? argv[1] : "";
  cuda::StreamHandle stream(0);
  const double gemm = gemm_ceiling_tflops(stream.get()), copy = copy_ceiling_gbps(stream.get());
  std::printf("ceilings: cuBLAS bf16 8192^3 %.1f TFLOP/s, device copy %.0f GB/s\n", gemm, copy);
  std::vector<Row> rows;
  // The issue's case with each tensor-core kernel (LATTN_SPARSE_KERNEL, read
  // at each call): the default choice (wgmma on Hopper), the mma.sync kernel,
  // and the wgmma kernel's fp8_ds_mla producer loading 4 rows at a time.
  struct Variant {
    const char* label;
    const char* kernel;
    const char* fp8_batch;
    bool bf16;
  };
  if (only.empty() || only == "target") {
    for (const Variant& v : {Variant{"default", "", "8", true}, Variant{"mma", "mma", "8", true},
                             Variant{"wgmma batch4", "wgmma", "4", false}}) {
      if (only == "target" && std::string(v.label) != "default") continue;
      setenv("LATTN_SPARSE_KERNEL", v.kernel, 1);
      setenv("LATTN_SPARSE_FP8_BATCH", v.fp8_batch, 1);
      for (DType cache_dtype : {kFp8DsMla, DType::bf16}) {
        if (cache_dtype == DType::bf16 && !v.bf16) continue;
        Row r = sparse_case(stream.get(), cache_dtype, 128, 256, 2048);
        r.name += std::string(" [") + v.label + "]";
        rows.push_back(r);
      }
    }
    unsetenv("LATTN_SPARSE_KERNEL");
    unsetenv("LATTN_SPARSE_FP8_BATCH");
  }
  if (only.empty()) rows.push_back(sparse_case(stream.get(), kFp8DsMla, 16, 8, 2048));
  if (only.empty() || only == "topk") {
    // The top-k split across CTAs (the default for rows longer than 4096)
    // against one CTA per row (LATTN_TOPK_SPLIT=0), at 1, 8 and 128 tokens.
    for (const char* split : {"", "0"}) {
      setenv("LATTN_TOPK_SPLIT", split, 1);
      const std::string label = *split ? " [one CTA per row]" : " [split]";
      for (int T : {1, 8, 128}) {
        Row topk_row;
        Row r = indexer_case(stream.get(), T, 131072, 2048, &topk_row);
        r.name += label, topk_row.name += label;
        rows.push_back(r);
        rows.push_back(topk_row);
      }
    }
    unsetenv("LATTN_TOPK_SPLIT");
  }
  std::printf("%-62s %12s %10s %8s %10s %8s\n", "case", "us", "TFLOP/s", "frac_gemm", "GB/s", "frac_copy");
  for (const Row& r : rows) {
    std::printf("%-62s %12.1f %10.2f %8.3f %10.0f %8.3f\n", r.name.c_str(), r.us, r.tflops, r.tflops / gemm, r.gbps,
                r.gbps / copy);
  }
  return 0;
}
