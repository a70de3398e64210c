// src/cuda/sm90/decode/decode_epilogue.cuh — the end of one (request, key
// range) piece: the two warpgroups' partial row sums are added (they share the
// row max, so their sums add directly), O is normalized and written with the
// LSE — the final output when the request is not split, else a partial result
// (O / l and LSE, f32) for decode_combine, exactly as the `cuda` backend does.
#pragma once

#include <cmath>

#include "cuda/sm90/decode/decode_mainloop.cuh"

namespace lattn::cuda::sm90 {

// The full row sums of this thread's two rows (16 w + lane / 4 + 8 i of the
// M tile) in total[i]: the quad's partial sums, then the two warpgroups'
// (they share the row max, so their sums add directly) through row_sum
// ([2][kBlockM] f32 in shared memory), with `meet()` between each
// warpgroup's stores and its reads of the other's: every consumer thread
// calls it. share_row_sums meets at a named barrier (write_o and the sparse
// kernel's epilogue); the seesaw kernel at an mbarrier (seesaw_kernel.cuh).
template <class K, class Meet>
__device__ __forceinline__ void share_row_sums_at(const SoftmaxState& st, int g, float* row_sum, float (&total)[2],
                                                  Meet&& meet) {
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32;
  const int r0 = 16 * w + lane / 4;
  float l[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] = st.l[i];
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
  }
  if (lane % 4 == 0) {
    row_sum[g * K::kBlockM + r0] = l[0];
    row_sum[g * K::kBlockM + r0 + 8] = l[1];
  }
  meet();
#pragma unroll
  for (int i = 0; i < 2; ++i) total[i] = l[i] + row_sum[(1 - g) * K::kBlockM + r0 + 8 * i];
}
template <class K>
__device__ __forceinline__ void share_row_sums(const SoftmaxState& st, int g, float* row_sum, float (&total)[2]) {
  share_row_sums_at<K>(st, g, row_sum, total, [] { named_barrier_sync(kBarConsumers, K::kConsumerThreads); });
}

// A finished row's factor from O to the normalized output (out_scale /
// total) and its LSE (natural log), from its full row sum and running max
// (log2 units). A row that saw no key: 0 and -inf. A NaN sum (the row saw a
// non-finite value, sanitize_masked_keys) passes through: NaN and NaN. One
// definition for write_o and the batch-invariant fold
// (decode_split_fold.cuh), whose bits must agree.
__device__ __forceinline__ void row_scale_and_lse(float total, float m, float out_scale, float& inv, float& lse) {
  const bool seen = !(total <= 0.f);
  inv = seen ? out_scale / total : 0.f;
  lse = seen ? (m + log2f(total)) * 0.69314718055994531f : -INFINITY;
}

// O / l of this warpgroup's columns and the LSE, from the full row sums
// `sums` (share_row_sums): the final output when slot < 0, else the partial
// result of split `slot` for decode_combine.
template <class K>
__device__ __forceinline__ void write_o_rows(const DecodeParams& p, const DecodeRequestView& pv, const SoftmaxState& st,
                                             const float (&o)[K::kColsPerWarpgroup / 2], int slot, int g,
                                             const float (&sums)[2]) {
  using T = typename K::T;
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32;
  const int r0 = 16 * w + lane / 4;
  float inv[2], lse[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) row_scale_and_lse(sums[i], st.m[i], p.out_scale, inv[i], lse[i]);
  const int col0 = g * K::kColsPerWarpgroup + 2 * (lane % 4);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int gr = pv.row0 + r0 + 8 * i;
    if (gr >= pv.rows) continue;
    if (slot < 0) {
      const int j = gr / p.num_heads, h = gr % p.num_heads;
      T* out = static_cast<T*>(p.out) + (pv.q0 + j) * p.out_stride_t + h * p.out_stride_h + col0;
#pragma unroll
      for (int n = 0; n < K::kColsPerWarpgroup / 8; ++n) {
        *reinterpret_cast<uint32_t*>(out + 8 * n) =
            sm80::pack2<T>(o[4 * n + 2 * i] * inv[i], o[4 * n + 2 * i + 1] * inv[i]);
      }
      if (p.lse && g == 0 && lane % 4 == 0) p.lse[h * p.lse_stride_h + int64_t(pv.q0 + j) * p.lse_stride_t] = lse[i];
    } else {
      float* out = p.plan.partial_o + (int64_t(slot) * p.plan.rows_capacity + gr) * K::kL + col0;
#pragma unroll
      for (int n = 0; n < K::kColsPerWarpgroup / 8; ++n) {
        *reinterpret_cast<float2*>(out + 8 * n) = make_float2(o[4 * n + 2 * i] * inv[i], o[4 * n + 2 * i + 1] * inv[i]);
      }
      if (g == 0 && lane % 4 == 0) p.plan.partial_lse[int64_t(slot) * p.plan.rows_capacity + gr] = lse[i];
    }
  }
}

template <class K>
__device__ __forceinline__ void write_o(const DecodeParams& p, const DecodeRequestView& pv, const SoftmaxState& st,
                                        const float (&o)[K::kColsPerWarpgroup / 2], int slot, int g, float* row_sum) {
  float sums[2];
  share_row_sums<K>(st, g, row_sum, sums);
  write_o_rows<K>(p, pv, st, o, slot, g, sums);
}

}  // namespace lattn::cuda::sm90
