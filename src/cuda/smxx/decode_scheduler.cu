// The split-KV scheduler (FlashMLA's get_mla_metadata idea, computed on the
// device so a captured CUDA graph re-plans from new seq_lens on replay).
//
// One CTA: a block-wide scan gives every request's cost prefix; each part
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

namespace lattn::cuda {
namespace {

constexpr int kPlanThreads = 1024;

// Inclusive block-wide scan of one int per thread (Hillis-Steele over warps).
__device__ int block_inclusive_scan(int v, int* warp_sums) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int n = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += n;
  }
  if (lane == 31) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int s = lane < kPlanThreads / 32 ? warp_sums[lane] : 0;
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

__global__ void __launch_bounds__(kPlanThreads) decode_plan_kernel(const int32_t* __restrict__ seq_lens, int batch,
                                                                   DecodePlan plan) {
  __shared__ int warp_sums[32];
  __shared__ int carry_s;
  const int tid = threadIdx.x;
  const int ovh = plan.overhead_tiles;

  // 1. cost_prefix (exclusive) over requests.
  int carry = 0;
  for (int base = 0; base < batch; base += kPlanThreads) {
    const int r = base + tid;
    int cost = 0;
    if (r < batch) {
      const int keys = max(seq_lens[r], 0);
      const int tiles = (keys + plan.tile_keys - 1) / plan.tile_keys;
      const int split = plan.fixed_split_tiles;
      if (split > 0) {
        cost = (tiles + split - 1) / split * split;  // whole splits (ovh is 0)
      } else {
        cost = tiles > 0 ? tiles + ovh : 0;
      }
    }
    const int incl = block_inclusive_scan(cost, warp_sums);
    if (r < batch) plan.cost_prefix[r] = carry + incl - cost;
    if (tid == kPlanThreads - 1) carry_s = carry + incl;
    __syncthreads();
    carry = carry_s;
    __syncthreads();
  }
  const int total = carry;
  const int w = plan.fixed_split_tiles > 0 ? plan.fixed_split_tiles
                                           : max(1, (total + plan.num_parts - 1) / plan.num_parts);
  if (tid == 0) {
    plan.cost_prefix[batch] = total;
    plan.header[0] = w;
    plan.header[1] = total;
  }
  __syncthreads();  // cost_prefix is read below (global writes of this block are visible after the barrier)

  // 2. Splits per request and the partial slots of split requests.
  carry = 0;
  for (int base = 0; base < batch; base += kPlanThreads) {
    const int r = base + tid;
    int n = 0;
    if (r < batch) {
      const int c0 = plan.cost_prefix[r], c1 = plan.cost_prefix[r + 1];
      if (c1 > c0) n = (c1 - 1) / w - (c0 + ovh) / w + 1;
      plan.num_splits[r] = n;
    }
    const int slots = n >= 2 ? n : 0;
    const int incl = block_inclusive_scan(slots, warp_sums);
    if (r < batch) plan.split_offset[r] = carry + incl - slots;
    if (tid == kPlanThreads - 1) carry_s = carry + incl;
    __syncthreads();
    carry = carry_s;
    __syncthreads();
  }
  if (tid == 0) plan.split_offset[batch] = carry;

  // 3. First request of each part: the first r whose cost range ends past p * W.
  for (int part = tid; part < plan.num_parts; part += kPlanThreads) {
    const int x = part * w;
    int lo = 0, hi = batch;  // answer in [lo, hi]
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (plan.cost_prefix[mid + 1] > x) {
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
  decode_plan_kernel<<<1, kPlanThreads, 0, stream>>>(seq_lens, batch, plan);
  LATTN_CUDA_CHECK_LAUNCH("decode_plan_kernel");
}

}  // namespace lattn::cuda
