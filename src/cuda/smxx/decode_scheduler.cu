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
// batch size. Batch-invariant plans cut each request at tile multiples of a
// split size that depends on its own length only (batch_invariant_split.h;
// decode_params.h says how the plan encodes it). When whole requests fill the
// parts within 1/16 of W (large batches), the part boundaries are moved to
// request boundaries instead and nothing is split (decode_params.h,
// "Whole-request plans"). The planner also lists the requests the combine
// must visit (no keys, or split), so a step with none costs the combine
// nothing but its launch.
#include "cuda/smxx/decode_scheduler.h"

#include <algorithm>

#include "cuda/common/cuda_check.h"
#include "cuda/common/grid_dependency.cuh"
#include "cuda/common/workspace.h"
#include "cuda/smxx/decode_plan_math.cuh"

namespace lattn::cuda {
namespace {

// Batches up to this size keep the cost prefix in shared memory (the part
// search then reads no global memory); larger ones read it back from global.
constexpr int kSmemPrefix = 4096;
// Plans of at most this many parts may be whole-request plans (the bounds
// are kept in shared memory; balanced plans have at most 1024 parts).
constexpr int kMaxWholeParts = 1024;

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

// The max over the block, to every thread.
template <int kThreads>
__device__ int block_max(int v, int* warp_sums) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, d));
  if constexpr (kThreads == 32) {
    return v;
  } else {
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
    __syncthreads();
    int m = warp_sums[0];
    for (int i = 1; i < kThreads / 32; ++i) m = max(m, warp_sums[i]);
    __syncthreads();
    return m;
  }
}

template <int kThreads>
__device__ __forceinline__ void block_sync() {
  if constexpr (kThreads == 32) {
    __syncwarp();
  } else {
    __syncthreads();
  }
}

// The first request whose cost range ends past x (batch when none does).
__device__ __forceinline__ int first_request_past(const int* prefix, int batch, int x) {
  int lo = 0, hi = batch;  // answer in [lo, hi]
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (prefix[mid + 1] > x) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// A whole-request plan is taken when its fullest part is at most W + W / 16
// (the split plan's parts are W each, plus the combine and each piece's
// fixed work: a few percent of imbalance costs less than splitting).
__device__ __forceinline__ bool whole_plan_fits(int max_load, int w) { return max_load <= w + w / 16; }

// One CTA of kThreads (32 for batches up to 32: no block barrier at all;
// 1024 otherwise). The costs are read once into registers/shared memory; the
// only global traffic is seq_lens in and the plan out.
template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    decode_plan_kernel(const int32_t* __restrict__ seq_lens, int batch, DecodePlan plan, bool whole_requests) {
  // An attention kernel launched as a programmatic dependent may start its
  // CTAs now; it reads the plan only after this kernel has completed.
  grid_dependency_trigger();
  __shared__ int warp_sums[32];
  __shared__ int total_s;
  __shared__ int prefix_s[kSmemPrefix + 1];     // cost_prefix when batch <= kSmemPrefix
  __shared__ int bounds_s[kMaxWholeParts + 1];  // whole-request part bounds
  const bool smem_prefix = batch <= kSmemPrefix;
  const int tid = threadIdx.x;
  const int ovh = plan.overhead_tiles;
  const bool invariant = plan.batch_invariant;

  // 1. cost_prefix (exclusive) over requests.
  int carry = 0;
  for (int base = 0; base < batch; base += kThreads) {
    const int r = base + tid;
    const int cost = r < batch ? decode_request_cost(seq_lens[r], plan.tile_keys, ovh, invariant, plan.split_rule) : 0;
    const int incl = block_inclusive_scan<kThreads>(cost, warp_sums);
    if (r < batch) {
      plan.cost_prefix[r] = carry + incl - cost;
      if (smem_prefix) prefix_s[r] = carry + incl - cost;
    }
    carry += block_total<kThreads>(incl, &total_s);
  }
  const int total = carry;
  const int w = decode_part_width(total, plan.num_parts);
  if (tid == 0) {
    plan.cost_prefix[batch] = total;
    plan.header[0] = w;
    plan.header[1] = total;
    if (smem_prefix) prefix_s[batch] = total;
  }
  // cost_prefix is read below (shared, or global: this block's global
  // writes are visible to it after the barrier).
  block_sync<kThreads>();
  const int* prefix = smem_prefix ? prefix_s : plan.cost_prefix;

  // 2. Whole-request plan: each boundary p * W moved to the nearest request
  // boundary; taken when no part then exceeds W by more than 1/16.
  bool whole = false;
  int max_load = 0;
  if (!invariant && whole_requests && plan.num_parts <= kMaxWholeParts && total > 0) {
    for (int part = tid; part <= plan.num_parts; part += kThreads) {
      const int x = min(part * w, total);
      const int r = first_request_past(prefix, batch, x);
      int b = total;
      if (r < batch) b = (x - prefix[r] <= prefix[r + 1] - x) ? prefix[r] : prefix[r + 1];
      bounds_s[part] = b;
    }
    block_sync<kThreads>();
    int load = 0;
    for (int part = tid; part < plan.num_parts; part += kThreads) load = max(load, bounds_s[part + 1] - bounds_s[part]);
    max_load = block_max<kThreads>(load, warp_sums);
    whole = whole_plan_fits(max_load, w);
  }

  // 3. Splits per request, the partial slots of split requests, and the
  // requests the combine visits (no keys, or split).
  carry = 0;
  int combine_carry = 0;
  for (int base = 0; base < batch; base += kThreads) {
    const int r = base + tid;
    int n = 0;
    if (r < batch) {
      if (whole) {
        n = prefix[r + 1] > prefix[r] ? 1 : 0;
      } else {
        n = decode_request_slots(decode_request_splits(prefix[r], prefix[r + 1], ovh, w), prefix[r], prefix[r + 1],
                                 invariant);
      }
      plan.num_splits[r] = n;
    }
    const int slots = n >= 2 ? n : 0;
    const int incl = block_inclusive_scan<kThreads>(slots, warp_sums);
    if (r < batch) plan.split_offset[r] = carry + incl - slots;
    carry += block_total<kThreads>(incl, &total_s);
    const int visit = r < batch && n != 1 ? 1 : 0;
    const int vincl = block_inclusive_scan<kThreads>(visit, warp_sums);
    if (visit) decode_combine_reqs(plan)[combine_carry + vincl - 1] = r;
    combine_carry += block_total<kThreads>(vincl, &total_s);
  }
  if (tid == 0) {
    plan.split_offset[batch] = carry;
    plan.header[2] = combine_carry;
  }

  // 4. A whole-request plan in the encoding the piece walk reads
  // (decode_pieces.cuh: part p covers costs [p * W, (p + 1) * W)): W becomes
  // the fullest part's load, and each request's cost range is moved into its
  // part's (request r of part p, whose costs start at bounds[p], starts at
  // p * W + prefix[r] - bounds[p]), leaving unused cost units at the end of
  // lighter parts. Every request then lies inside one part.
  int part_w = w;
  if (whole) {
    block_sync<kThreads>();  // every thread's reads of the unpadded prefix are done
    part_w = max_load;
    // prefix is not written in place before all threads have read theirs: the
    // padded values are computed first (into registers per chunk of requests).
    for (int base = 0; base <= batch; base += kThreads) {
      const int r = base + tid;
      int padded = 0;
      if (r <= batch) {
        if (r == batch) {
          padded = plan.num_parts * part_w;
        } else {
          // The part of request r: the largest p < num_parts with bounds[p] <= prefix[r].
          const int c = prefix[r];
          int lo = 0, hi = plan.num_parts - 1;
          while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (bounds_s[mid] <= c) {
              lo = mid;
            } else {
              hi = mid - 1;
            }
          }
          padded = lo * part_w + c - bounds_s[lo];
        }
      }
      block_sync<kThreads>();  // this chunk's (and the previous) reads of prefix are done
      if (r <= batch) {
        plan.cost_prefix[r] = padded;
        if (smem_prefix) prefix_s[r] = padded;
      }
    }
    if (tid == 0) {
      plan.header[0] = part_w;
      plan.header[1] = plan.num_parts * part_w;
    }
    block_sync<kThreads>();  // the padded prefix is read below
  }

  // 5. First request of each part: the first r whose cost range ends past p * W.
  for (int part = tid; part < plan.num_parts; part += kThreads) {
    plan.part_first_req[part] = first_request_past(prefix, batch, part * part_w);
  }
}

}  // namespace

size_t decode_plan_bytes(int batch, int num_parts, int rows_capacity, int L, int min_slots, bool fold_splits) {
  DecodePlan plan;
  plan.fold_splits = fold_splits;
  return carve_decode_plan(nullptr, batch, num_parts, rows_capacity, L, plan, min_slots);
}

size_t carve_decode_plan(void* workspace, int batch, int num_parts, int rows_capacity, int L, DecodePlan& plan,
                         int min_slots) {
  plan.num_parts = num_parts;
  plan.slot_capacity = std::max(2 * num_parts, min_slots);
  plan.rows_capacity = rows_capacity;
  WorkspaceCarver carver(workspace);
  // header[0..2] (decode_params.h; [2] = the number of requests the combine
  // visits), then those requests' indices: decode_combine_reqs().
  plan.header = carver.take<int32_t>(3 + size_t(batch));
  plan.cost_prefix = carver.take<int32_t>(size_t(batch) + 1);
  plan.num_splits = carver.take<int32_t>(size_t(batch));
  plan.split_offset = carver.take<int32_t>(size_t(batch) + 1);
  plan.part_first_req = carver.take<int32_t>(size_t(num_parts));
  plan.partial_lse = carver.take<float>(size_t(plan.slot_capacity) * size_t(rows_capacity));
  plan.partial_o = carver.take<float>(size_t(plan.slot_capacity) * size_t(rows_capacity) * size_t(L));
  // The folding kernel's scratch (sm80/decode/decode_split_fold.cuh), one row block a part.
  plan.fold_o = plan.fold_splits ? carver.take<float>(size_t(num_parts) * size_t(rows_capacity) * size_t(L)) : nullptr;
  return carver.bytes_used();
}

void launch_decode_plan(const int32_t* seq_lens, int batch, const DecodePlan& plan, bool whole_requests,
                        cudaStream_t stream) {
  if (batch <= 32) {
    decode_plan_kernel<32><<<1, 32, 0, stream>>>(seq_lens, batch, plan, whole_requests);
  } else {
    decode_plan_kernel<1024><<<1, 1024, 0, stream>>>(seq_lens, batch, plan, whole_requests);
  }
  LATTN_CUDA_CHECK_LAUNCH("decode_plan_kernel");
}

}  // namespace lattn::cuda
