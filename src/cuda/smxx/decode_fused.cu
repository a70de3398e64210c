// The one-launch small-batch decode (see decode_fused.h): in-kernel plan,
// the sm80 kernel's attention pieces, a grid barrier, then the combine.
#include "cuda/smxx/decode_fused.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <mutex>
#include <string>

#include "cuda/common/cuda_check.h"
#include "cuda/common/dtype_device.cuh"
#include "cuda/sm80/decode/decode_kernel.cuh"
#include "cuda/smxx/decode_combine.h"
#include "cuda/smxx/decode_combine_block.cuh"
#include "cuda/smxx/decode_combine_row.cuh"
#include "cuda/smxx/decode_plan_math.cuh"
#include "lattn/errors.h"

namespace lattn::cuda {
// Device helpers in a named namespace: the sm_80 pass compiles the kernel to
// a trap, and unused functions of an anonymous namespace would be warned about.
namespace fused_detail {

// The plan of a batch of at most kFusedDecodeMaxBatch requests (shared memory).
struct SmallPlan {
  int prefix[kFusedDecodeMaxBatch + 1];  // exclusive cost prefix; [batch] = total
  int splits[kFusedDecodeMaxBatch];      // parts attending to each request (0: no keys)
  int slot0[kFusedDecodeMaxBatch];       // first partial slot of a split request
  int w, total;                          // cost units per part, all units
};

__device__ __forceinline__ int warp_inclusive_scan(int v) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int n = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += n;
  }
  return v;
}

// Warp 0: lane r plans request r with the planning kernel's arithmetic.
__device__ __forceinline__ void plan_in_warp(const DecodeParams& p, SmallPlan& sp) {
  const int lane = threadIdx.x % 32;
  const DecodePlan& plan = p.plan;
  const int ovh = plan.overhead_tiles;
  const int cost =
      lane < p.batch ? decode_request_cost(p.seq_lens[lane], plan.tile_keys, ovh, plan.batch_invariant, plan.split_rule)
                     : 0;
  const int incl = warp_inclusive_scan(cost);
  const int total = __shfl_sync(0xffffffffu, incl, 31);
  const int w = decode_part_width(total, plan.num_parts);
  const int n = lane < p.batch ? decode_request_slots(decode_request_splits(incl - cost, incl, ovh, w), incl - cost,
                                                      incl, plan.batch_invariant)
                               : 0;
  const int slots = n >= 2 ? n : 0;
  const int slot_incl = warp_inclusive_scan(slots);
  if (lane < p.batch) {
    sp.prefix[lane] = incl - cost;
    sp.splits[lane] = n;
    sp.slot0[lane] = slot_incl - slots;
  }
  if (lane == 0) {
    sp.prefix[p.batch] = total;
    sp.w = w;
    sp.total = total;
  }
}

__device__ __forceinline__ void prefetch_l2(const void* ptr) { asm volatile("prefetch.global.L2 [%0];" ::"l"(ptr)); }

// The global reads that follow the plan (query_start_loc, then the block-table
// entry of the part's first tile) would be dependent DRAM round trips before
// the first KV copy is issued; thread t of nt (warps 1..) brings them into L2
// while warp 0 reads seq_lens. Speculative: every request's table row up to
// its first 64 lines of 32 entries (the part's tiles are among them, except
// in rows of more than 2048 pages); all addresses in bounds.
__device__ __forceinline__ void prefetch_metadata(const DecodeParams& p, int t, int nt) {
  if (t * 32 <= p.batch) prefetch_l2(p.query_start_loc + t * 32);
  const int lines = int(min((p.table_width * 4 + 127) / 128, int64_t(64)));
  for (int i = t; i < p.batch * lines; i += nt) {
    prefetch_l2(p.block_table + (i / lines) * p.block_table_stride + (i % lines) * 32);
  }
}

// Every CTA of the grid arrives; returns when all have (all are resident: the
// launch is cooperative). sync[0] counts arrivals and is reset by the last
// CTA, which then advances the generation sync[1] that the others wait on.
// The fences make each CTA's partials visible to every CTA after it.
__device__ __forceinline__ void grid_barrier(uint32_t* sync, unsigned ctas) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile uint32_t* generation = sync + 1;
    const uint32_t g = *generation;  // cannot advance before this CTA arrives
    __threadfence();
    if (atomicAdd(sync, 1u) == ctas - 1) {
      atomicExch(sync, 0u);
      __threadfence();
      atomicAdd(sync + 1, 1u);
    } else {
      while (*generation == g) __nanosleep(32);
    }
    __threadfence();
  }
  __syncthreads();
}

// Batch-invariant plans: one warp per (request, row, 128-column slice), with
// the combine kernel's arithmetic for those plans (decode_combine_row.cuh),
// so that a request's bits are the same whether this kernel or the combine
// kernel merged it.
struct CoherentLoads {
  __device__ __forceinline__ float operator()(const float* x) const { return __ldcg(x); }
  __device__ __forceinline__ float4 operator()(const float4* x) const { return __ldcg(x); }
};
template <class K>
__device__ __forceinline__ void combine_phase_invariant(const DecodeParams& p, const SmallPlan& sp) {
  const int rows = p.plan.rows_capacity;
  const int slices = (K::kL / 4 + 31) / 32;
  const int warps = gridDim.x * gridDim.y * (K::kThreads / 32);
  const int warp = (blockIdx.y * gridDim.x + blockIdx.x) * (K::kThreads / 32) + threadIdx.x / 32;
  for (int item = warp; item < p.batch * rows * slices; item += warps) {
    const int pair = item / slices;
    const int r = pair / rows, row = pair % rows;
    const int n = sp.splits[r];
    if (n == 1) continue;  // written by its only part
    const int s_q = p.query_start_loc[r + 1] - p.query_start_loc[r];
    if (row >= s_q * p.num_heads) continue;
    combine_decode_row_slice<typename K::T>(p, r, row, n, sp.slot0[r], item % slices, CoherentLoads{});
  }
}

// The combine after the grid barrier (decode_combine_block.cuh: one CTA per
// (request, row, column chunk) item). The work is cut so that there are about
// as many items as CTAs: a batch of one has 16 rows x 8 chunks of 64
// columns, each CTA merging its chunk's partials with 16 groups of threads
// taking every 16th split (every split's partial of the chunk loaded at
// once: about 8 loads per thread at 132 splits). The partials were written
// by this launch, so they are read through L2 (ld.global.cg), never the
// non-coherent path.
template <class K>
__device__ __forceinline__ void combine_phase(const DecodeParams& p, const SmallPlan& sp, char* smem) {
  const int chunks = p.batch == 1 ? 8 : p.batch == 2 ? 4 : p.batch <= 4 ? 2 : 1;
  const int rows = p.plan.rows_capacity;
  const int items = p.batch * rows * chunks;
  auto& sm = *reinterpret_cast<CombineBlockSmem<K::kThreads>*>(smem);
  for (int item = blockIdx.y * gridDim.x + blockIdx.x; item < items; item += gridDim.x * gridDim.y) {
    const int r = item / (rows * chunks), row = item / chunks % rows, chunk = item % chunks;
    const int n = sp.splits[r];
    if (n == 1) continue;  // written by its only part
    const int s_q = p.query_start_loc[r + 1] - p.query_start_loc[r];
    if (row >= s_q * p.num_heads) continue;
    combine_row_chunk_in_block<typename K::T, K::kThreads, K::kL>(p, r, row, n, sp.slot0[r], chunk, chunks, sm,
                                                                  CoherentLoads{});
  }
}

}  // namespace fused_detail

namespace {
using namespace fused_detail;

template <class K>
__device__ __forceinline__ void fused_body(const DecodeParams& p, uint32_t* grid_sync, int stages) {
  extern __shared__ __align__(128) char smem[];
  __shared__ SmallPlan sp;
  if (threadIdx.x < 32) {
    plan_in_warp(p, sp);
  } else if (stages & kFusedStagePrefetch) {
    prefetch_metadata(p, threadIdx.x - 32, K::kThreads - 32);
  }
  __syncthreads();

  // The part's pieces, as decode_pieces.cuh walks them (the plan from shared memory).
  const int part = blockIdx.y;
  const int w = sp.w, ovh = p.plan.overhead_tiles;
  const int begin = part * w, end = min(begin + w, sp.total);
  for (int r = 0; r < p.batch && begin < end && (stages & kFusedStageAttention); ++r) {
    const int c0 = sp.prefix[r];
    if (c0 >= end) break;
    const int c1 = sp.prefix[r + 1];
    if (c1 == c0) continue;  // no keys: the combine phase writes 0 / -inf
    const int first_tile_pos = c0 + ovh;
    int tile_begin = max(begin, first_tile_pos) - first_tile_pos;
    int tile_end = min(end, c1) - first_tile_pos;
    int slot = sp.splits[r] >= 2 ? sp.slot0[r] + (part - first_tile_pos / w) : -1;
    // A batch-invariant plan's cost unit is one split: splits [a, b) and
    // their tiles, one slot per split (as decode_pieces.cuh).
    if (p.plan.batch_invariant) {
      const int tiles = (p.seq_lens[r] + K::kBlockN - 1) / K::kBlockN;
      const int a = tile_begin, b = tile_end;
      batch_invariant_splits_range(tiles, a, b, p.plan.split_rule, tile_begin, tile_end);
      slot = sp.splits[r] >= 2 ? sp.slot0[r] + a : -1;
    }
    if (tile_end <= tile_begin) continue;
    const DecodeRequestView rv = make_decode_request_view(p, r, blockIdx.x * K::kBlockM);
    if (rv.row0 >= rv.rows) continue;
    sm80::attend_piece<K>(p, rv, tile_begin, tile_end, slot, smem);  // one split a part (no folding here)
  }
  // Every CTA (with or without pieces) joins the barrier and the combine.
  grid_barrier(grid_sync, gridDim.x * gridDim.y);
  if (stages & kFusedStageCombine) {
    if (p.plan.batch_invariant) {
      combine_phase_invariant<K>(p, sp);
    } else {
      combine_phase<K>(p, sp, smem);
    }
  }
}

template <class K>
__global__ void __launch_bounds__(K::kThreads, 1)
    mla_decode_fused_kernel(const __grid_constant__ DecodeParams p, uint32_t* grid_sync, int stages) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // needs more shared memory than any sm8x GPU has; never launched there
#else
  fused_body<K>(p, grid_sync, stages);
#endif
}

// The combine phase's shared memory fits in the attention's.
template <class K>
constexpr bool kCombineFits = sizeof(CombineBlockSmem<K::kThreads>) <= K::kSmemBytes;

template <class K>
void set_fused_attributes() {
  static_assert(kCombineFits<K>);
  constexpr int kMaxDevices = 64;
  static std::once_flag once[kMaxDevices];
  int device = 0;
  LATTN_CUDA_CHECK(cudaGetDevice(&device));
  std::call_once(once[device % kMaxDevices], [] {
    LATTN_CUDA_CHECK(cudaFuncSetAttribute(mla_decode_fused_kernel<K>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(K::kSmemBytes)));
  });
}

template <class K>
int fused_ctas_per_sm() {
  set_fused_attributes<K>();
  int blocks = 0;
  LATTN_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, mla_decode_fused_kernel<K>, K::kThreads, K::kSmemBytes));
  return blocks;
}

template <class K>
void fused_launch(const DecodeParams& p, uint32_t* grid_sync, int stages, int m_tiles, cudaStream_t stream) {
  set_fused_attributes<K>();
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(m_tiles), unsigned(p.plan.num_parts));
  config.blockDim = dim3(K::kThreads);
  config.dynamicSmemBytes = K::kSmemBytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeCooperative;  // all CTAs resident: the grid barrier
  attribute[0].val.cooperative = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  LATTN_CUDA_CHECK(cudaLaunchKernelEx(&config, mla_decode_fused_kernel<K>, p, grid_sync, stages));
  LATTN_CUDA_CHECK_LAUNCH("mla_decode_fused_kernel");
}

constexpr sm80::DecodeTileConfig kFusedConfig{16, 64, 8, 3};
template <class T>
using FusedTraits = sm80::DecodeTraits<16, 64, 8, 3, T, T>;

struct CtasPerSm {
  template <class K>
  int operator()() const {
    return fused_ctas_per_sm<K>();
  }
};
struct Launch {
  const DecodeParams& p;
  uint32_t* grid_sync;
  int stages;
  int m_tiles;
  cudaStream_t stream;
  template <class K>
  void operator()() const {
    fused_launch<K>(p, grid_sync, stages, m_tiles, stream);
  }
};

template <class Fn>
auto with_fused_traits(sm80::DecodeTileConfig config, DType dtype, Fn&& fn) {
  if (!(config == kFusedConfig)) {
    throw NotImplementedError("decode (one launch): tile configuration " + config.str() + " has no fused kernel (" +
                              kFusedConfig.str() + " only)");
  }
  switch (dtype) {
    case DType::bf16:
      return fn.template operator()<FusedTraits<__nv_bfloat16>>();
    case DType::f16:
      return fn.template operator()<FusedTraits<__half>>();
    default:
      throw NotImplementedError(std::string("decode (one launch): activation dtype ") + dtype_name(dtype) +
                                " (supported: f16, bf16)");
  }
}

}  // namespace

bool decode_fused_supported(sm80::DecodeTileConfig config, DType dtype, DType cache_dtype, int cc_major) {
  return cc_major == 9 && config == kFusedConfig && cache_dtype == dtype &&
         (dtype == DType::bf16 || dtype == DType::f16);
}

int decode_fused_ctas_per_sm(sm80::DecodeTileConfig config, DType dtype) {
  return with_fused_traits(config, dtype, CtasPerSm{});
}

void launch_decode_fused(const DecodeParams& p, uint32_t* grid_sync, sm80::DecodeTileConfig config, DType dtype,
                         int m_tiles, cudaStream_t stream, int stages) {
  if (p.batch > kFusedDecodeMaxBatch) {
    throw RuntimeError("decode (one launch): batch " + std::to_string(p.batch) + " exceeds " +
                       std::to_string(kFusedDecodeMaxBatch));
  }
  with_fused_traits(config, dtype, Launch{p, grid_sync, stages, m_tiles, stream});
}

}  // namespace lattn::cuda
