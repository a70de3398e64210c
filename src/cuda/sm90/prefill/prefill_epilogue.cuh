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
  // With Traits::kWideStores, each row's O leaves as 16-byte stores: the
  // wgmma layout gives a thread 2 columns (4 bytes) of every 8, and the 4
  // threads of a row swap words among themselves (a 4 x 4 transpose by
  // shuffles) so that each holds 8 contiguous columns of every 32 — 8 stores
  // of 16 bytes a thread instead of 32 of 4. The 4-byte stores filled half a
  // 32-byte sector each, and the profile of 16 x 1024 showed the epilogue
  // waiting on the store queue (docs/perf.md).
  __device__ static void store(const float (&o)[kNRegO], const float (&m)[2], const float (&l)[2], Element* out_row,
                               int64_t out_row_stride, float* lse_row, int first_row_valid, int second_row_valid,
                               int lane) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float sum = l[h];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const bool valid = h == 0 ? first_row_valid : second_row_valid;
      const float inv = sum == 0.f ? 0.f : 1.f / sum;
      if constexpr (Traits::kWideStores) {
        constexpr int kWords = Traits::kHeadDimV / 8;  // 4-byte words of this thread's row part
        uint32_t w[kWords];
#pragma unroll
        for (int j = 0; j < kWords; ++j) {
          w[j] = prefill_detail::pack2<Element>(o[4 * j + 2 * h] * inv, o[4 * j + 2 * h + 1] * inv);
        }
        // Group g (words 4g .. 4g + 3, columns 32g .. 32g + 31): thread q of
        // the row holds word k = columns 32g + 8k + 2q, 2q + 1; after the
        // transpose it holds the 4 words of columns 32g + 8q .. 8q + 7 (the
        // words of threads 0..3 in order). Two exchange stages (partner q ^ 2,
        // then q ^ 1), two words each; the exchanged slot is chosen by
        // select, so no register is indexed at run time.
        const int q = lane % 4;
#pragma unroll
        for (int g = 0; g < kWords / 4; ++g) {
          uint32_t* v = w + 4 * g;
#pragma unroll
          for (int stage = 2; stage >= 1; stage /= 2) {
            const bool hi = (q & stage) != 0;
#pragma unroll
            for (int b = 0; b < 2; ++b) {
              const int k0 = stage == 2 ? b : 2 * b;  // slot with the stage's bit clear
              const int k1 = k0 | stage;
              const uint32_t got = __shfl_xor_sync(0xffffffffu, hi ? v[k0] : v[k1], stage);
              if (hi) {
                v[k0] = got;
              } else {
                v[k1] = got;
              }
            }
          }
        }
        if (valid) {
          Element* row = out_row + h * 8 * out_row_stride + 8 * q;
#pragma unroll
          for (int g = 0; g < kWords / 4; ++g) {
            *reinterpret_cast<uint4*>(row + 32 * g) = make_uint4(w[4 * g], w[4 * g + 1], w[4 * g + 2], w[4 * g + 3]);
          }
        }
      } else {
        if (valid) {
          Element* row = out_row + h * 8 * out_row_stride + 2 * (lane % 4);
#pragma unroll
          for (int j = 0; j < Traits::kHeadDimV / 8; ++j) {
            *reinterpret_cast<uint32_t*>(row + 8 * j) =
                prefill_detail::pack2<Element>(o[4 * j + 2 * h] * inv, o[4 * j + 2 * h + 1] * inv);
          }
        }
      }
      if (valid && lse_row != nullptr && lane % 4 == 0) {
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
