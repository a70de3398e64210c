// The `cpu` sparse MLA backend. Sparse absorbed attention is dense decode
// attention over a per-token list of cache rows, so it reuses the decode
// kernels (src/cpu/attention_kernels.h): a token's valid slots become the
// "block table" of a cache read with block size 1, and every row is loaded
// once for all heads (MQA). fp8_ds_mla entries (a scale per 128-element
// tile) with bf16 queries go to a kernel that reads them in place
// (attention_ds_mla_impl.h: rows converted unscaled, scales applied per
// segment) where the ISA has one (AVX512-BF16); otherwise each chunk of rows
// is first dequantized into a scratch that the plain kernel then reads. Each
// token's rows are split into chunks when tokens alone cannot keep every
// thread busy; chunks combine by their LSE (arXiv:2501.01005 §2.2).
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "cpu/attention_kernels.h"
#include "cpu/host_workspace.h"
#include "cpu/sparse_cpu.h"
#include "cpu/thread_pool.h"
#include "lattn/cpu.h"
#include "lattn/errors.h"
#include "lattn/sparse.h"

namespace lattn::cpu {
namespace {

constexpr int kMaxChunk = 512;  // rows per fp8_ds_mla chunk: 512 · 1152 B of bf16 scratch stays in L2

struct Chunk {
  int token, begin, end;  // rows [begin, end) of the token's compacted list
};

class CpuSparseClass final : public SparseMlaBackendClass {
 public:
  std::string name() const override { return "cpu"; }
  std::vector<std::string> validate_configuration(std::optional<DeviceCapability> capability,
                                                  const SparseSelectorConfig& c) const override {
    std::vector<std::string> reasons;
    if (capability)
      reasons.push_back("compute capability " + std::to_string(capability->major) + "." +
                        std::to_string(capability->minor) + " not supported");
    if (c.kv_cache_dtype == kFp8DsMla && c.kv_lora_rank % kFp8DsMlaTile != 0) {
      reasons.push_back("latent dims (" + std::to_string(c.kv_lora_rank) + ", " + std::to_string(c.qk_rope_head_dim) +
                        ") not supported (supported: kv_lora_rank a multiple of 128 for fp8_ds_mla)");
    }
    return reasons;
  }

  void run(const SparseMlaArgs& a, const LatentCache& cache, Stream) const override;
};

void CpuSparseClass::run(const SparseMlaArgs& a, const LatentCache& cache, Stream) const {
  const KernelTable& kt = kernel_table(cpu_isa());
  const int T = int(a.q.size(0)), N = int(a.q.size(1)), topk = int(a.indices.size(1));
  const int L = cache.kv_lora_rank, R = cache.qk_rope_head_dim, D = L + R;
  const bool ds = cache.is_fp8_ds_mla();
  const int64_t capacity = cache.num_blocks() * cache.block_size();
  const int threads = omp_get_max_threads();

  // Rows of a cache read with block size 1: entries are D elements apart when
  // blocks are a whole number of entries apart (always for owned caches).
  const int64_t bs = cache.block_size(), stride0 = cache.data.stride(0);
  const bool in_place = !ds && stride0 % D == 0 && capacity * (stride0 / D) / bs < (int64_t(1) << 31);
  const int64_t rows_per_block = ds ? 0 : stride0 / D;

  // Compacted valid rows per token: row ids (in place) or byte offsets (ds).
  // (Locals, not thread_local: the worker threads read them.)
  std::vector<int32_t> row_ids(ds ? 0 : size_t(T) * size_t(topk));
  std::vector<int64_t> byte_offsets(ds ? size_t(T) * size_t(topk) : 0);
  std::vector<int> count(size_t(T), 0);
  // A slot's block and offset by shift and mask where the block size is a
  // power of two (always in practice): with a 64-bit division per index this
  // serial loop took 64 us of an fp8_ds_mla step of about 2000 (H16 T8
  // top-2048, docs/perf.md), 21 us without.
  const int shift = (bs & (bs - 1)) == 0 ? std::countr_zero(uint64_t(bs)) : -1;
  const int64_t entry_stride = cache.data.stride(1);
  auto compact = [&](auto place) {
    for (int t = 0; t < T; ++t) {
      const int32_t* idx = a.indices.data_as<const int32_t>() + int64_t(t) * a.indices.stride(0);
      const size_t base = size_t(t) * size_t(topk);
      int n = 0;
      for (int j = 0; j < topk; ++j) {
        const int64_t slot = idx[j];
        if (slot < 0 || slot >= capacity) continue;
        const int64_t block = shift >= 0 ? slot >> shift : slot / bs;
        const int64_t off = shift >= 0 ? slot & (bs - 1) : slot % bs;
        place(base + size_t(n++), block, off);
      }
      count[size_t(t)] = n;
    }
  };
  if (ds) {
    compact([&](size_t i, int64_t block, int64_t off) { byte_offsets[i] = block * stride0 + off * entry_stride; });
  } else {
    compact([&](size_t i, int64_t block, int64_t off) { row_ids[i] = int32_t(block * rows_per_block + off); });
  }
  if (!ds && !in_place) {
    throw ValueError("sparse_mla (cpu): argument 'cache' must have blocks a whole number of entries apart, got " +
                     cache.data.describe());
  }

  const DType q_dtype = a.q.dtype();
  // fp8_ds_mla rows are dequantized to bf16 for bf16 queries (the bf16 dot
  // path, within bf16's error model) and to f32 otherwise (f32's model),
  // unless the kernel reads the entries itself.
  const DType ds_rows = q_dtype == DType::bf16 ? DType::bf16 : DType::f32;
  // LATTN_SPARSE_CPU_DEQUANT=1 takes the dequantize-first path even where the
  // fused kernel exists (the benchmark's A/B, docs/perf.md).
  const char* dequant_env = std::getenv("LATTN_SPARSE_CPU_DEQUANT");
  const bool force_dequant = dequant_env && std::string(dequant_env) == "1";
  const bool fused = ds && q_dtype == DType::bf16 && kt.decode_split_ds_mla != nullptr && !force_dequant;

  // Chunks: enough per token to give every thread work, at most kMaxChunk rows for dequantized fp8_ds_mla.
  const int per_token = std::max(1, (2 * threads + T - 1) / std::max(T, 1));
  std::vector<Chunk> chunks;
  for (int t = 0; t < T; ++t) {
    const int n = count[size_t(t)];
    if (n == 0) continue;
    int size = (n + per_token - 1) / per_token;
    if (ds && !fused) size = std::min(size, kMaxChunk);
    size = std::max(size, 64);
    for (int b = 0; b < n; b += size) chunks.push_back({t, b, std::min(n, b + size)});
  }
  std::vector<int> first_chunk(size_t(T) + 1, 0);
  for (const Chunk& c : chunks) first_chunk[size_t(c.token) + 1]++;
  std::partial_sum(first_chunk.begin(), first_chunk.end(), first_chunk.begin());

  const DType data_dtype = ds ? ds_rows : cache.dtype();
  const MathPath path = kt.decode_path(q_dtype, data_dtype);
  static thread_local HostWorkspace partials;  // the calling thread's; workers only get the pointer
  float* partial = static_cast<float*>(partials.reserve(chunks.size() * size_t(N) * size_t(L + 1) * 4 + 64));
  float* partial_lse = partial + chunks.size() * size_t(N) * size_t(L);
  const size_t kernel_scratch =
      ((fused ? kt.decode_ds_mla_scratch_bytes(N, L, R) : kt.decode_scratch_bytes(N, L, R)) + 4095) / 4096 * 4096;
  const size_t dequant_scratch = ds && !fused ? size_t(kMaxChunk) * size_t(D) * size_t(dtype_size(ds_rows)) + 4096 : 0;
  const size_t esize = size_t(dtype_size(q_dtype));
  const bool avx512 = cpu_isa() >= CpuIsa::avx512;
  static const std::vector<int32_t> identity = [] {
    std::vector<int32_t> v(kMaxChunk);
    std::iota(v.begin(), v.end(), 0);
    return v;
  }();

  // Threads from lattn's pool (thread_pool.h), not an OpenMP region: no job
  // waits for a thread that is not running (on a shared machine an OpenMP
  // region made 2 threads 4-5x slower than 1; docs/perf.md, "Sparse MLA (CPU)").
  parallel_jobs(int64_t(chunks.size()), threads, [&](int64_t i, int) {
    static thread_local HostWorkspace scratch_ws;  // one job at a time per thread
    char* scratch = static_cast<char*>(scratch_ws.reserve(kernel_scratch + dequant_scratch));
    uint16_t* rows_bf16 = reinterpret_cast<uint16_t*>(scratch + kernel_scratch);  // or f32 rows (ds_rows)
    const Chunk& c = chunks[size_t(i)];
    const int n = c.end - c.begin;
    DecodeSplitJob job;
    job.path = path;
    const char* q_row = static_cast<const char*>(a.q.data()) + int64_t(c.token) * a.q.stride(0) * int64_t(esize);
    job.ql_nope = q_row;
    job.ql_stride_t = a.q.stride(0);
    job.ql_stride_h = a.q.stride(1);
    job.q_pe = q_row + int64_t(L) * int64_t(esize);
    job.qpe_stride_t = a.q.stride(0);
    job.qpe_stride_h = a.q.stride(1);
    job.q_dtype = q_dtype;
    job.s_q = 1;
    job.num_heads = N;
    job.kv_lora_rank = L;
    job.rope_dim = R;
    job.block_size = 1;
    job.block_stride = D;
    if (fused) {
      job.cache = cache.data.data();
      job.cache_dtype = kFp8DsMla;
      job.cache_scale = 1.f;
      job.entry_offsets = byte_offsets.data() + size_t(c.token) * topk + c.begin;
    } else if (ds) {
      const int64_t* offsets = byte_offsets.data() + size_t(c.token) * topk + c.begin;
      const auto* base = static_cast<const uint8_t*>(cache.data.data());
      if (ds_rows == DType::f32) {
        dequant_ds_mla_rows_f32(base, offsets, n, L, R, reinterpret_cast<float*>(rows_bf16));
      } else if (avx512) {
        dequant_ds_mla_rows_bf16_avx512(base, offsets, n, L, R, rows_bf16);
      } else {
        dequant_ds_mla_rows_bf16(base, offsets, n, L, R, rows_bf16);
      }
      job.cache = rows_bf16;
      job.cache_dtype = ds_rows;
      job.cache_scale = 1.f;
      job.block_table = identity.data();
    } else {
      job.cache = cache.data.data();
      job.cache_dtype = cache.dtype();
      job.cache_scale = cache.is_fp8() ? cache.scale : 1.f;
      job.block_table = row_ids.data() + size_t(c.token) * topk + c.begin;
    }
    job.seq_len = n;
    job.key_begin = 0;
    job.key_end = n;
    job.scale = a.scale;
    job.o = partial + size_t(i) * size_t(N) * size_t(L);
    job.lse = partial_lse + size_t(i) * size_t(N);
    job.scratch = scratch;
    if (fused) {
      kt.decode_split_ds_mla(job);
    } else {
      kt.decode_split(job);
    }
  });

  // Combine each (token, head)'s chunks, apply the sink, store.
  parallel_jobs(int64_t(T) * N, threads, [&](int64_t r, int) {
    static thread_local std::vector<float> row;
    row.resize(static_cast<size_t>(L));
    const int t = int(r / N), h = int(r % N);
    const int c0 = first_chunk[size_t(t)], c1 = first_chunk[size_t(t) + 1];
    float m = -INFINITY;
    for (int c = c0; c < c1; ++c) m = std::max(m, partial_lse[size_t(c) * N + h]);
    std::fill(row.begin(), row.end(), 0.f);
    float lse = -INFINITY;
    if (m != -INFINITY) {
      float sum = 0.f;
      for (int c = c0; c < c1; ++c) {
        const float w = std::exp(partial_lse[size_t(c) * N + h] - m);
        if (w == 0.f) continue;
        const float* o = partial + (size_t(c) * N + size_t(h)) * size_t(L);
        for (int d = 0; d < L; ++d) row[size_t(d)] += w * o[d];
        sum += w;
      }
      lse = m + std::log(sum);
      float factor = 1.f / sum;
      if (a.attn_sink.defined()) {
        const float sink = a.attn_sink.data_as<const float>()[h * a.attn_sink.stride(0)];
        factor /= 1.f + std::exp(sink - lse);  // out · e^lse / (e^lse + e^sink)
      }
      for (float& v : row) v *= factor;
    }
    kt.from_f32(row.data(), L, q_dtype,
                static_cast<char*>(a.out.data()) +
                    (int64_t(t) * a.out.stride(0) + int64_t(h) * a.out.stride(1)) * int64_t(esize));
    if (a.lse.defined()) a.lse.data_as<float>()[h * a.lse.stride(0) + t * a.lse.stride(1)] = lse;
  });
}

const RegisterSparseMlaBackend kRegisterCpuSparse{std::make_shared<CpuSparseClass>()};

}  // namespace
}  // namespace lattn::cpu
