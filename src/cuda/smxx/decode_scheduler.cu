// The split-KV scheduler (FlashMLA's get_mla_metadata idea, computed on the
// device so a captured CUDA graph re-plans from new seq_lens on replay).
//
// One CTA (one warp and no block barrier for up to 32 requests, else 1024
// threads; the prefix stays in shared memory up to 4096 requests, so the part
// search reads no global memory): a scan gives every request's cost prefix; each part
// takes the next W = ceil(total / num_parts) cost units. A request is split
// iff a part boundary (a multiple of W) falls inside its tile range, so at
// most num_parts - 1 requests are split, into at most 2 * num_parts - 2
// partial slots in total: the slot capacity is 2 * num_parts whatever the
// batch size. Batch-invariant plans (fixed_split_tiles > 0) cut each request
// every fixed_split_tiles tiles from its own start instead (decode_params.h).
#include "cuda/smxx/decode_scheduler.h"

#include <algorithm>

#include "cuda/common/cuda_check.h"
#include "cuda/common/workspace.h"
#include "cuda/smxx/decode_plan_math.cuh"

namespace lattn::cuda {
namespace {

// Batches up to this size keep the cost prefix in shared memory (the part
// search then reads no global memory); larger ones read it back from global.
constexpr int kSmemPrefix = 4096;

// Inclusive scan of one int per thread over a block of kThreads (a warp scan,
// then a scan of the warp sums when there are several warps).
template <int kThreads>
__device__ int block_inclusive_scan(int v, int* warp_sums) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int n = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += n;
  }
  if constexpr (kThreads == 32) {
    return v;
  } else {
    if (lane == 31) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
      int s = lane < kThreads / 32 ? warp_sums[lane] : 0;
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const int n = __shfl_up_sync(0xffffffffu, s, d);
        if (lane >= d) s += n;
      }
      warp_sums[lane] = s;  // inclusive prefix over warps
    }
    __syncthreads();
    const int result = v + (warp > 0 ? warp_sums[warp - 1] : 0);
    __syncthreads();  // warp_sums is reused by the next call
    return result;
  }
}

// The sum over the block of the last thread's inclusive value, to every thread.
template <int kThreads>
__device__ int block_total(int incl, int* slot) {
  if constexpr (kThreads == 32) {
    return __shfl_sync(0xffffffffu, incl, 31);
  } else {
    if (threadIdx.x == kThreads - 1) *slot = incl;
    __syncthreads();
    const int total = *slot;
    __syncthreads();
    return total;
  }
}

// One CTA of kThreads (32 for batches up to 32: no block barrier at all;
// 1024 otherwise). The costs are read once into registers/shared memory; the
// only global traffic is seq_lens in and the plan out.
template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    decode_plan_kernel(const int32_t* __restrict__ seq_lens, int batch, DecodePlan plan) {
  __shared__ int warp_sums[32];
  __shared__ int total_s;
  __shared__ int prefix_s[kSmemPrefix + 1];  // cost_prefix when batch <= kSmemPrefix
  const bool smem_prefix = batch <= kSmemPrefix;
  const int tid = threadIdx.x;
  const int ovh = plan.overhead_tiles;
  const int split = plan.fixed_split_tiles;

  // 1. cost_prefix (exclusive) over requests.
  int carry = 0;
  for (int base = 0; base < batch; base += kThreads) {
    const int r = base + tid;
    const int cost = r < batch ? decode_request_cost(seq_lens[r], plan.tile_keys, ovh, split) : 0;
    const int incl = block_inclusive_scan<kThreads>(cost, warp_sums);
    if (r < batch) {
      plan.cost_prefix[r] = carry + incl - cost;
      if (smem_prefix) prefix_s[r] = carry + incl - cost;
    }
    carry += block_total<kThreads>(incl, &total_s);
  }
  const int total = carry;
  const int w = decode_part_width(total, plan.num_parts, split);
  if (tid == 0) {
    plan.cost_prefix[batch] = total;
    plan.header[0] = w;
    plan.header[1] = total;
    if (smem_prefix) prefix_s[batch] = total;
  }
  // cost_prefix is read below (shared, or global: this block's global
  // writes are visible to it after the barrier).
  if constexpr (kThreads == 32) {
    __syncwarp();
  } else {
    __syncthreads();
  }
  const int* prefix = smem_prefix ? prefix_s : plan.cost_prefix;

  // 2. Splits per request and the partial slots of split requests.
  carry = 0;
  for (int base = 0; base < batch; base += kThreads) {
    const int r = base + tid;
    int n = 0;
    if (r < batch) {
      n = decode_request_splits(prefix[r], prefix[r + 1], ovh, w);
      plan.num_splits[r] = n;
    }
    const int slots = n >= 2 ? n : 0;
    const int incl = block_inclusive_scan<kThreads>(slots, warp_sums);
    if (r < batch) plan.split_offset[r] = carry + incl - slots;
    carry += block_total<kThreads>(incl, &total_s);
  }
  if (tid == 0) plan.split_offset[batch] = carry;

  // 3. First request of each part: the first r whose cost range ends past p * W.
  for (int part = tid; part < plan.num_parts; part += kThreads) {
    const int x = part * w;
    int lo = 0, hi = batch;  // answer in [lo, hi]
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (prefix[mid + 1] > x) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    plan.part_first_req[part] = lo;
  }
}

}  // namespace

size_t decode_plan_bytes(int batch, int num_parts, int rows_capacity, int L) {
  DecodePlan plan;
  return carve_decode_plan(nullptr, batch, num_parts, rows_capacity, L, plan);
}

size_t carve_decode_plan(void* workspace, int batch, int num_parts, int rows_capacity, int L, DecodePlan& plan) {
  plan.num_parts = num_parts;
  plan.slot_capacity = 2 * num_parts;
  plan.rows_capacity = rows_capacity;
  WorkspaceCarver carver(workspace);
  plan.header = carver.take<int32_t>(2);
  plan.cost_prefix = carver.take<int32_t>(size_t(batch) + 1);
  plan.num_splits = carver.take<int32_t>(size_t(batch));
  plan.split_offset = carver.take<int32_t>(size_t(batch) + 1);
  plan.part_first_req = carver.take<int32_t>(size_t(num_parts));
  plan.partial_lse = carver.take<float>(size_t(plan.slot_capacity) * size_t(rows_capacity));
  plan.partial_o = carver.take<float>(size_t(plan.slot_capacity) * size_t(rows_capacity) * size_t(L));
  return carver.bytes_used();
}

void launch_decode_plan(const int32_t* seq_lens, int batch, const DecodePlan& plan, cudaStream_t stream) {
  if (batch <= 32) {
    decode_plan_kernel<32><<<1, 32, 0, stream>>>(seq_lens, batch, plan);
  } else {
    decode_plan_kernel<1024><<<1, 1024, 0, stream>>>(seq_lens, batch, plan);
  }
  LATTN_CUDA_CHECK_LAUNCH("decode_plan_kernel");
}

}  // namespace lattn::cuda
