// The split-KV combine (the arithmetic of one row: decode_combine_row.cuh)
// over the normalized partials out_s = O_s / l_s. The parts are summed in a fixed order for a given number of parts, so
// with a fixed split size (batch-invariant mode) the bits do not depend on
// the batch. Only the requests the plan lists are visited (no keys, or
// split): after a whole-request plan, usually none.
#include "cuda/smxx/decode_combine.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/dtype_device.cuh"
#include "cuda/common/fast_math.cuh"
#include "cuda/smxx/decode_combine_row.cuh"
#include "cuda/smxx/decode_scheduler.h"

namespace lattn::cuda {
namespace {

// One warp merges one row of one request, all L columns: lane i owns float4
// columns i, i + 32, ... (4 of them at L = 512, held in registers), and the
// parts are summed one after another in increasing order with 16-byte loads,
// two parts' loads in flight per step (8 x 16 bytes per lane at L = 512).
// The warps of a grid of at most kMaxCombineCtas CTAs stride over the
// (listed request, row) pairs: the grid's shape depends only on the plan's,
// and a step whose plan lists no request costs one launch of CTAs that
// return at once.
constexpr int kCombineThreads = 256, kCombineWarps = kCombineThreads / 32;
constexpr int kMaxCombineCtas = 1024;  // 8 CTAs of 256 threads on each of 128 SMs: one full wave
constexpr int kColChunks = 4;          // float4 columns per lane per pass (L <= 512 in one pass)
// >= a request's splits: balanced plans have at most 2 * num_parts slots in
// all; batch-invariant plans are checked per request on the host.
constexpr int kMaxSplits = kMaxDecodeSplitsPerRequest;

__device__ __forceinline__ void fma4(float4& acc, float w, const float4& v) {
  acc.x += w * v.x, acc.y += w * v.y, acc.z += w * v.z, acc.w += w * v.w;
}

// Four outputs at out[c..c+3]: one 8-byte store where aligned.
template <class T>
__device__ __forceinline__ void store4(T* out, const float4& v) {
  if (reinterpret_cast<uintptr_t>(out) % 8 == 0) {
    union {
      T t[4];
      uint2 u;
    } pack;
    pack.t[0] = from_f32<T>(v.x), pack.t[1] = from_f32<T>(v.y), pack.t[2] = from_f32<T>(v.z), pack.t[3] = from_f32<T>(v.w);
    *reinterpret_cast<uint2*>(out) = pack.u;
  } else {
    out[0] = from_f32<T>(v.x), out[1] = from_f32<T>(v.y), out[2] = from_f32<T>(v.z), out[3] = from_f32<T>(v.w);
  }
}

template <class T>
__global__ void __launch_bounds__(kCombineThreads) decode_combine_kernel(const __grid_constant__ DecodeParams p) {
  const DecodePlan& plan = p.plan;
  const int count = plan.header[2];
  const int lane = threadIdx.x % 32;
  const int warps = gridDim.x * kCombineWarps;
  const int64_t items = int64_t(count) * plan.rows_capacity;
  const int cols4 = p.L / 4;
  const int64_t part_stride = int64_t(plan.rows_capacity) * p.L;
  for (int64_t item = int64_t(blockIdx.x) * kCombineWarps + threadIdx.x / 32; item < items; item += warps) {
    const int r = decode_combine_reqs(plan)[item / plan.rows_capacity];
    const int row = int(item % plan.rows_capacity);
    CombineRow<T> dst;
    if (!combine_row(p, r, row, dst)) continue;
    T* out = dst.out;
    const int n = plan.num_splits[r];
    if (n == 0) {  // no keys: output 0, LSE -inf
      for (int c4 = lane; c4 < cols4; c4 += 32) store4(out + 4 * c4, make_float4(0.f, 0.f, 0.f, 0.f));
      if (dst.lse && lane == 0) *dst.lse = -INFINITY;
      continue;
    }
    const int slot0 = plan.split_offset[r];
    const float* lse = plan.partial_lse + int64_t(slot0) * plan.rows_capacity + row;

    // The parts' LSE -> weights exp(lse_s - m) / sum, m = max lse_s.
    float m = -INFINITY;
    for (int s = lane; s < n; s += 32) m = max_nan(m, lse[int64_t(s) * plan.rows_capacity]);
#pragma unroll
    for (int d = 16; d > 0; d /= 2) m = max_nan(m, __shfl_xor_sync(0xffffffffu, m, d));
    auto weight = [&](int s) { return combine_weight(lse[int64_t(s) * plan.rows_capacity], m); };
    float sum = 0.f;
    for (int s = lane; s < n; s += 32) sum += weight(s);
#pragma unroll
    for (int d = 16; d > 0; d /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, d);
    const CombineTotal total = combine_total(m, sum);

    const float* part = plan.partial_o + (int64_t(slot0) * plan.rows_capacity + row) * p.L;
    for (int cbase = 0; cbase < cols4; cbase += 32 * kColChunks) {
      float4 acc[kColChunks];
#pragma unroll
      for (int k = 0; k < kColChunks; ++k) acc[k] = make_float4(0.f, 0.f, 0.f, 0.f);
      // Parts with weight 0 (no key for this row) add nothing (their partials
      // may be stale). Two parts' loads are issued before either is added.
      int s = 0;
      for (; s + 1 < n; s += 2) {
        const float w0 = weight(s), w1 = weight(s + 1);
        const float4* v0p = reinterpret_cast<const float4*>(part + s * part_stride) + cbase + lane;
        const float4* v1p = reinterpret_cast<const float4*>(part + (s + 1) * part_stride) + cbase + lane;
        float4 v0[kColChunks], v1[kColChunks];
#pragma unroll
        for (int k = 0; k < kColChunks; ++k) {
          const bool in = cbase + lane + 32 * k < cols4;
          v0[k] = in ? __ldcs(v0p + 32 * k) : make_float4(0.f, 0.f, 0.f, 0.f);
          v1[k] = in ? __ldcs(v1p + 32 * k) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int k = 0; k < kColChunks; ++k) {
          if (w0 != 0.f) fma4(acc[k], w0, v0[k]);
          if (w1 != 0.f) fma4(acc[k], w1, v1[k]);
        }
      }
      if (s < n) {
        const float w0 = weight(s);
        const float4* v0p = reinterpret_cast<const float4*>(part + s * part_stride) + cbase + lane;
#pragma unroll
        for (int k = 0; k < kColChunks; ++k) {
          if (w0 != 0.f && cbase + lane + 32 * k < cols4) fma4(acc[k], w0, __ldcs(v0p + 32 * k));
        }
      }
#pragma unroll
      for (int k = 0; k < kColChunks; ++k) {
        const int c4 = cbase + lane + 32 * k;
        if (c4 < cols4) {
          store4(out + 4 * c4,
                 make_float4(acc[k].x * total.inv, acc[k].y * total.inv, acc[k].z * total.inv, acc[k].w * total.inv));
        }
      }
    }
    if (dst.lse && lane == 0) *dst.lse = total.lse;
  }
}

}  // namespace

void launch_decode_combine(const DecodeParams& p, DType out_dtype, cudaStream_t stream) {
  if (p.L % 4 != 0) {
    throw NotImplementedError("decode_combine: latent dim " + std::to_string(p.L) + " is not a multiple of 4");
  }
  if (!p.plan.batch_invariant && p.plan.slot_capacity > kMaxSplits) {
    throw RuntimeError("decode_combine: " + std::to_string(p.plan.slot_capacity) + " split slots exceed the limit " +
                       std::to_string(kMaxSplits));
  }
  // Enough warps for every (request, row) pair when all are listed, at most one wave.
  const int64_t pairs = int64_t(p.batch) * p.plan.rows_capacity;
  const unsigned ctas = unsigned(std::clamp<int64_t>((pairs + kCombineWarps - 1) / kCombineWarps, 1, kMaxCombineCtas));
  LATTN_DISPATCH_HALF_TYPES(out_dtype, "decode", "out",
                            [&] { decode_combine_kernel<T><<<ctas, kCombineThreads, 0, stream>>>(p); });
  LATTN_CUDA_CHECK_LAUNCH("decode_combine_kernel");
}

}  // namespace lattn::cuda
