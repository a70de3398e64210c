// The split-KV combine (arXiv:2501.01005 §2.2 generalized to n parts; the
// arithmetic is decode_combine_row.cuh's (one warp per row) or, for steps of
// few rows, decode_combine_block.cuh's (one CTA per row chunk), each shared
// with the one-launch kernel). Only the requests the plan lists are visited
// (no keys, or split): after a whole-request plan, usually none.
#include "cuda/smxx/decode_combine.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cuda/common/cuda_check.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/grid_dependency.cuh"
#include "cuda/smxx/decode_combine_block.cuh"
#include "cuda/smxx/decode_combine_row.cuh"
#include "cuda/smxx/decode_scheduler.h"

namespace lattn::cuda {
namespace {

// One warp merges one row of one request (decode_combine_row.cuh). The warps
// of a grid of at most kMaxCombineCtas CTAs stride over the (listed request,
// row) pairs: the grid's shape depends only on the plan's, and a step whose
// plan lists no request costs one launch of CTAs that return at once.
constexpr int kCombineThreads = 256, kCombineWarps = kCombineThreads / 32;
constexpr int kMaxCombineCtas = 1024;  // 8 CTAs of 256 threads on each of 128 SMs: one full wave
// >= a request's splits: balanced plans have at most 2 * num_parts slots in
// all; batch-invariant plans are checked per request on the host.
constexpr int kMaxSplits = kMaxDecodeSplitsPerRequest;

// The partials were written by an earlier kernel and are read once: LSEs by
// plain loads, partial rows streamed (__ldcs).
struct StreamLoads {
  __device__ __forceinline__ float operator()(const float* x) const { return *x; }
  __device__ __forceinline__ float4 operator()(const float4* x) const { return __ldcs(x); }
};

template <class T>
__global__ void __launch_bounds__(kCombineThreads) decode_combine_kernel(const __grid_constant__ DecodeParams p) {
  grid_dependency_wait();  // a programmatic dependent launch: the attention kernel's partials are complete
  const DecodePlan& plan = p.plan;
  const int count = plan.header[2];
  const int warps = gridDim.x * kCombineWarps;
  const int64_t items = int64_t(count) * plan.rows_capacity;
  if (plan.batch_invariant) {  // one warp per 128-column slice of a row
    const int slices = (p.L / 4 + 31) / 32;
    for (int64_t item = int64_t(blockIdx.x) * kCombineWarps + threadIdx.x / 32; item < items * slices; item += warps) {
      const int64_t pair = item / slices;
      const int r = decode_combine_reqs(plan)[pair / plan.rows_capacity];
      const int row = int(pair % plan.rows_capacity);
      const int s_q = p.query_start_loc[r + 1] - p.query_start_loc[r];
      if (row >= s_q * p.num_heads) continue;
      combine_decode_row_slice<T>(p, r, row, plan.num_splits[r], plan.split_offset[r], int(item % slices),
                                  StreamLoads{});
    }
    return;
  }
  for (int64_t item = int64_t(blockIdx.x) * kCombineWarps + threadIdx.x / 32; item < items; item += warps) {
    const int r = decode_combine_reqs(plan)[item / plan.rows_capacity];
    const int row = int(item % plan.rows_capacity);
    const int s_q = p.query_start_loc[r + 1] - p.query_start_loc[r];
    if (row >= s_q * p.num_heads) continue;
    combine_decode_row<T>(p, r, row, plan.num_splits[r], plan.split_offset[r], StreamLoads{});
  }
}

// Steps of at most this many (request, row) pairs take the block path: a
// batch of one at 16 heads has 16 rows of ~130 splits each (one wave of
// 16-row parts), which the warp path merges in 16 warps, two splits per
// dependent L2 round trip. The block path is written for the DeepSeek
// latent width only.
constexpr int64_t kBlockCombineMaxRows = 128;
constexpr int kBlockCombineL = 512;

// One CTA per (listed request, row, column chunk) item: decode_combine_block.cuh.
template <class T>
__global__ void __launch_bounds__(kCombineThreads)
    decode_combine_block_kernel(const __grid_constant__ DecodeParams p, int chunks) {
  __shared__ CombineBlockSmem<kCombineThreads> sm;
  grid_dependency_wait();  // a programmatic dependent launch: the attention kernel's partials are complete
  const DecodePlan& plan = p.plan;
  const int rows = plan.rows_capacity;
  const int64_t items = int64_t(plan.header[2]) * rows * chunks;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int r = decode_combine_reqs(plan)[item / (int64_t(rows) * chunks)];
    const int row = int(item / chunks % rows), chunk = int(item % chunks);
    const int s_q = p.query_start_loc[r + 1] - p.query_start_loc[r];
    if (row >= s_q * p.num_heads) continue;
    combine_row_chunk_in_block<T, kCombineThreads, kBlockCombineL>(p, r, row, plan.num_splits[r], plan.split_offset[r],
                                                                   chunk, chunks, sm, StreamLoads{});
  }
}

// LATTN_DECODE_COMBINE=0: always the warp path; =1: the block path wherever
// it can run (balanced plans, L = 512), whatever the rows; unset: up to
// kBlockCombineMaxRows (read at each launch: same-run A/B in benchmarks and tests).
bool use_block_combine(const DecodeParams& p) {
  if (p.plan.batch_invariant || p.L != kBlockCombineL) return false;
  const char* v = std::getenv("LATTN_DECODE_COMBINE");
  if (v && *v) return std::atoi(v) != 0;
  return int64_t(p.batch) * p.plan.rows_capacity <= kBlockCombineMaxRows;
}

template <class Kernel, class... Args>
void launch_combine_kernel(Kernel kernel, unsigned ctas, cudaStream_t stream, bool pdl, const Args&... args) {
  if (!pdl) {
    kernel<<<ctas, kCombineThreads, 0, stream>>>(args...);
    return;
  }
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(ctas);
  config.blockDim = dim3(kCombineThreads);
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  LATTN_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args...));
}

}  // namespace

void launch_decode_combine(const DecodeParams& p, DType out_dtype, cudaStream_t stream, bool pdl) {
  if (p.L % 4 != 0) {
    throw NotImplementedError("decode_combine: latent dim " + std::to_string(p.L) + " is not a multiple of 4");
  }
  if (!p.plan.batch_invariant && p.plan.slot_capacity > kMaxSplits) {
    throw RuntimeError("decode_combine: " + std::to_string(p.plan.slot_capacity) + " split slots exceed the limit " +
                       std::to_string(kMaxSplits));
  }
  if (use_block_combine(p)) {
    // Enough CTAs for every (request, row, chunk) item when all are listed, at most one wave.
    const int chunks = combine_block_chunks(int64_t(p.batch) * p.plan.rows_capacity);
    const unsigned ctas =
        unsigned(std::clamp<int64_t>(int64_t(p.batch) * p.plan.rows_capacity * chunks, 1, kMaxCombineCtas));
    LATTN_DISPATCH_HALF_TYPES(out_dtype, "decode", "out", [&] {
      launch_combine_kernel(decode_combine_block_kernel<T>, ctas, stream, pdl, p, chunks);
    });
    LATTN_CUDA_CHECK_LAUNCH("decode_combine_block_kernel");
    return;
  }
  // Enough warps for every (request, row) pair when all are listed (every
  // row slice in batch-invariant plans), at most one wave.
  const int64_t pairs = int64_t(p.batch) * p.plan.rows_capacity * (p.plan.batch_invariant ? (p.L / 4 + 31) / 32 : 1);
  const unsigned ctas = unsigned(std::clamp<int64_t>((pairs + kCombineWarps - 1) / kCombineWarps, 1, kMaxCombineCtas));
  LATTN_DISPATCH_HALF_TYPES(out_dtype, "decode", "out",
                            [&] { launch_combine_kernel(decode_combine_kernel<T>, ctas, stream, pdl, p); });
  LATTN_CUDA_CHECK_LAUNCH("decode_combine_kernel");
}

}  // namespace lattn::cuda
