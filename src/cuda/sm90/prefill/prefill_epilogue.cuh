// src/cuda/sm90/prefill/prefill_epilogue.cuh — the end of a consumer
// warpgroup's tile: O / row sum and LSE written straight from registers, only
// for rows inside the request; and the path for a tile that sees no key.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/sm90/prefill/prefill_mainloop.cuh"

namespace lattn::cuda::sm90 {

template <class Traits>
struct PrefillEpilogue {
  using Element = typename Traits::Element;
  static constexpr int kNRegO = Traits::kHeadDimV / 2;

  // out_row: out at (q_start + row, head, 0) for this thread's first row
  // (row = the warpgroup's row0 + 16 warp + lane / 4); the second row is 8
  // further. valid_rows: rows of the thread's warp < seqlen_q, counted from
  // the warp's first row. lse_row: lse at (head, q_start + row), may be nullptr.
  // m in scaled log2 units (PrefillMainloop::softmax): LSE = ln2 m + ln(sum);
  // a row whose sum is 0 saw no key: O = 0, LSE = -inf; a NaN sum (a NaN score
  // among the keys it sees) makes the row NaN (docs/mla.md, "NaN and inf").
  __device__ static void store(const float (&o)[kNRegO], const float (&m)[2], const float (&l)[2],
                               Element* out_row, int64_t out_row_stride, float* lse_row, int first_row_valid,
                               int second_row_valid, int lane) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float sum = l[h];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const bool valid = h == 0 ? first_row_valid : second_row_valid;
      if (!valid) continue;
      const float inv = sum == 0.f ? 0.f : 1.f / sum;
      Element* row = out_row + h * 8 * out_row_stride + 2 * (lane % 4);
#pragma unroll
      for (int j = 0; j < Traits::kHeadDimV / 8; ++j) {
        *reinterpret_cast<uint32_t*>(row + 8 * j) =
            prefill_detail::pack2<Element>(o[4 * j + 2 * h] * inv, o[4 * j + 2 * h + 1] * inv);
      }
      if (lse_row != nullptr && lane % 4 == 0) {
        lse_row[h * 8] = sum == 0.f ? -INFINITY : m[h] * 0.69314718055994531f + logf(sum);
      }
    }
  }

  // Rows [0, num_rows) from out_rows / lse_rows: O = 0, LSE = -inf, written by
  // the 128 threads of one warpgroup.
  __device__ static void store_empty(Element* out_rows, int64_t out_row_stride, float* lse_rows, int num_rows,
                                     int wg_thread) {
    constexpr int kChunks = Traits::kHeadDimV / 8;  // 16-byte vectors a row
    for (int i = wg_thread; i < num_rows * kChunks; i += 128) {
      const int r = i / kChunks, c = i % kChunks;
      *reinterpret_cast<uint4*>(out_rows + int64_t(r) * out_row_stride + c * 8) = make_uint4(0, 0, 0, 0);
    }
    if (lse_rows != nullptr)
      for (int r = wg_thread; r < num_rows; r += 128) lse_rows[r] = -INFINITY;
  }
};

}  // namespace lattn::cuda::sm90
