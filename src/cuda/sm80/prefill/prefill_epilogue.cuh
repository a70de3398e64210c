// src/cuda/sm80/prefill/prefill_epilogue.cuh — the end of a tile: finish the softmax
// (O / row sum, LSE), stage O through shared memory, and write it with
// 16-byte coalesced stores; plus the path for tiles that see no key at all.
#pragma once

#include <cstdint>

#include "cuda/sm80/mma.cuh"
#include "cuda/sm80/prefill/prefill_traits.cuh"

namespace lattn::cuda::sm80 {

template <class Traits>
struct PrefillEpilogue {
  using Element = typename Traits::Element;
  static constexpr int kMTiles = Traits::kMTiles;
  static constexpr int kNTilesO = Traits::kNTilesO;
  static constexpr int kWarpRows = Traits::kWarpRows;
  static constexpr int kChunksV = Traits::kChunksV;
  static constexpr int kPitchV = Traits::kPitchV;

  // Normalizes acc_o by the row sums and writes this warp's rows of O and
  // LSE. Rows at or past seqlen_q (the padding of the last block) are not
  // written. A row whose sum is 0 saw no key: O = 0, LSE = -inf.
  //   smem_o     the warp's staging rows (in the Q tile, which no warp reads
  //              any more once the main loop's last barrier has passed)
  //   out_rows   out pointer at (q_start + warp's first row, head, 0)
  //   lse_rows   lse pointer at (head, q_start + warp's first row); nullptr = skip
  //   valid_rows how many of the warp's rows are < seqlen_q (may be <= 0)
  // row_offset: the base-2 exponent offset of P (online_softmax), so
  // LSE = ln(2) * row_offset + ln(row_sum).
  __device__ __forceinline__ static void store(float (&acc_o)[kMTiles][kNTilesO][4],
                                               const float (&row_offset)[kMTiles][2],
                                               const float (&row_sum)[kMTiles][2], uint8_t* smem_o, Element* out_rows,
                                               int64_t out_row_stride, float* lse_rows, int valid_rows, int lane) {
    const int g = lane >> 2;
    const int t = lane & 3;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float sum = row_sum[mt][h];  // this thread's part: add the quad's
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        // No key: 0 and LSE -inf. A NaN sum (the row attended to a NaN): NaN and LSE NaN.
        const float inv = sum == 0.f ? 0.f : 1.f / sum;
        const int row = mt * 16 + h * 8 + g;
        if (lse_rows != nullptr && t == 0 && row < valid_rows) {
          lse_rows[row] = sum == 0.f ? -INFINITY : row_offset[mt][h] * 0.69314718055994531f + logf(sum);
        }
#pragma unroll
        for (int j = 0; j < kNTilesO; ++j) {
          const uint32_t packed = pack2<Element>(acc_o[mt][j][2 * h] * inv, acc_o[mt][j][2 * h + 1] * inv);
          *reinterpret_cast<uint32_t*>(smem_o + row * kPitchV + j * 16 + t * 4) = packed;
        }
      }
    __syncwarp();
    constexpr int kTotal = kWarpRows * kChunksV;
#pragma unroll
    for (int i = 0; i < kTotal / 32; ++i) {
      const int idx = lane + i * 32;
      const int r = idx / kChunksV;
      const int c = idx % kChunksV;
      if (r < valid_rows) {
        const uint4 v = *reinterpret_cast<const uint4*>(smem_o + r * kPitchV + c * 16);
        *reinterpret_cast<uint4*>(out_rows + static_cast<int64_t>(r) * out_row_stride + c * 8) = v;
      }
    }
  }

  // A tile none of whose rows sees a key: O = 0 and LSE = -inf for its
  // first num_rows rows (out_rows / lse_rows at the tile's first row),
  // written by all threads of the CTA.
  __device__ __forceinline__ static void store_empty(Element* out_rows, int64_t out_row_stride, float* lse_rows,
                                                     int num_rows, int tid) {
    for (int idx = tid; idx < num_rows * kChunksV; idx += Traits::kThreads) {
      const int r = idx / kChunksV;
      const int c = idx % kChunksV;
      *reinterpret_cast<uint4*>(out_rows + static_cast<int64_t>(r) * out_row_stride + c * 8) = make_uint4(0, 0, 0, 0);
    }
    if (lse_rows != nullptr)
      for (int r = tid; r < num_rows; r += Traits::kThreads) lse_rows[r] = -INFINITY;
  }
};

}  // namespace lattn::cuda::sm80
