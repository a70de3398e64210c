// src/cuda/sm80/prefill/prefill_mainloop.cuh — the stages of the prefill main loop,
// one per function, in the order the kernel calls them:
//   load_tile       global -> shared with cp.async (zero-filled past the end)
//   compute_qk      S = Q Kᵀ for the warp's rows (ldmatrix + mma.sync)
//   mask_scores     -inf for keys past the request's end or above the diagonal
//   online_softmax  running row max/sum, rescale O, P = exp(S - max) in bf16/f16
//   compute_pv      O += P V (P straight from registers, V by ldmatrix.trans)
//
// Register tiles (per thread, for the warp's kMTiles m16 tiles):
//   acc_s [kMTiles][kNTilesS][4] f32  the m16n8 C fragments of S
//   acc_o [kMTiles][kNTilesO][4] f32  the m16n8 C fragments of O
//   row_offset / row_sum [kMTiles][2] rows g and g + 8 of each m16 tile
//                                     (g = lane / 4); row_sum is this thread's
//                                     partial sum, the epilogue adds the quad
// The C fragment of S is exactly the A fragment of P for the next MMA
// (FlashAttention-2's register reuse), so P never touches shared memory.
#pragma once

#include <cstdint>

#include "cuda/sm80/mma.cuh"
#include "cuda/sm80/prefill/prefill_traits.cuh"

namespace lattn::cuda::sm80 {

template <class Traits, bool kCausal>
struct PrefillMainloop {
  using Element = typename Traits::Element;
  static constexpr int kThreads = Traits::kThreads;
  static constexpr int kMTiles = Traits::kMTiles;
  static constexpr int kNTilesS = Traits::kNTilesS;
  static constexpr int kNTilesO = Traits::kNTilesO;
  static constexpr int kPitchQK = Traits::kPitchQK;
  static constexpr int kPitchV = Traits::kPitchV;

  // Copies rows [row_begin, row_begin + kRows) of one head (gmem: that head's
  // row 0; rows row_stride elements apart) into a padded shared tile. Rows at
  // or past row_end become zeros, so padded keys contribute 0 * 0 and never
  // NaN from stale memory.
  //
  // Thread layout: groups of kGroup threads copy kGroup consecutive 16-byte
  // chunks of one row (128 contiguous bytes when kGroup = 8); one pass covers
  // kRowsPerPass rows. Every copy's row and chunk are then the thread's fixed
  // (r0, c0) plus compile-time steps: two adds per pass instead of a
  // division per chunk (the per-chunk index math was a fifth of the kernel's
  // instructions).
  template <int kRows, int kChunks, int kPitch>
  __device__ __forceinline__ static void load_tile(uint32_t smem_tile, const Element* gmem, int64_t row_stride,
                                                   int row_begin, int row_end, int tid) {
    constexpr int kGroup = kChunks % 8 == 0 ? 8 : (kChunks % 4 == 0 ? 4 : 2);
    constexpr int kRowsPerPass = kThreads / kGroup;
    static_assert(kRows % kRowsPerPass == 0, "a tile must be whole passes of the copy layout");
    const int r0 = tid / kGroup;
    const int c0 = tid % kGroup;
    const Element* src = gmem + static_cast<int64_t>(row_begin + r0) * row_stride + c0 * 8;
    const int64_t pass_stride = kRowsPerPass * row_stride;
    const uint32_t dst = smem_tile + r0 * kPitch + c0 * 16;
#pragma unroll
    for (int j = 0; j < kRows / kRowsPerPass; ++j) {
      const bool valid = row_begin + r0 + j * kRowsPerPass < row_end;
#pragma unroll
      for (int g = 0; g < kChunks / kGroup; ++g) {
        cp_async_16</*kPrefetchL2=*/true>(dst + j * kRowsPerPass * kPitch + g * kGroup * 16,
                                          valid ? src + g * kGroup * 8 : gmem, valid ? 16 : 0);
      }
      src += pass_stride;
    }
  }

  // Zeroes the non-finite elements of rows [r_lo, r_hi) of the V tile
  // (kPitchV bytes per row): keys masked for some row (see the kernel).
  __device__ __forceinline__ static void sanitize_values(uint8_t* v_tile, int r_lo, int r_hi, int tid) {
    for (int idx = tid; idx < (r_hi - r_lo) * Traits::kHeadDimV; idx += kThreads) {
      const int r = r_lo + idx / Traits::kHeadDimV, e = idx % Traits::kHeadDimV;
      Element* x = reinterpret_cast<Element*>(v_tile + r * kPitchV) + e;
      if (!isfinite(static_cast<float>(*x))) *x = Element(0.f);
    }
  }

  // acc_s = Q_warp Kᵀ. q_lane / k_lane: this lane's ldmatrix row address in
  // the Q tile (at the warp's first row) and in the K tile (see lane_offsets).
  __device__ __forceinline__ static void compute_qk(float (&acc_s)[kMTiles][kNTilesS][4], uint32_t q_lane,
                                                    uint32_t k_lane) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int j = 0; j < kNTilesS; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_s[mt][j][e] = 0.f;
#pragma unroll 1
    for (int kk = 0; kk < Traits::kKStepsQK; ++kk) {
      uint32_t a[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) ldmatrix_x4(a[mt], q_lane + mt * 16 * kPitchQK + kk * 32);
#pragma unroll
      for (int p = 0; p < kNTilesS / 2; ++p) {
        uint32_t b[4];  // b0, b1 of n8 tile 2p, then of n8 tile 2p + 1
        ldmatrix_x4(b, k_lane + p * 16 * kPitchQK + kk * 32);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_16816<Element>(acc_s[mt][2 * p], a[mt], b[0], b[1]);
          mma_16816<Element>(acc_s[mt][2 * p + 1], a[mt], b[2], b[3]);
        }
      }
    }
  }

  // Sets S to -inf where key col >= key_limit(row), key_limit(row) =
  // seqlen_k, or for causal min(seqlen_k, row + diag + 1) with diag =
  // seqlen_k - seqlen_q. first_limit: row + diag + 1 for the row of this
  // thread's acc_s element [0][*][0]; first_col: the key of element [*][0][0].
  __device__ __forceinline__ static void mask_scores(float (&acc_s)[kMTiles][kNTilesS][4], int first_limit,
                                                     int first_col, int seqlen_k) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int limit = seqlen_k;
        if constexpr (kCausal) limit = min(limit, first_limit + mt * 16 + h * 8);
#pragma unroll
        for (int j = 0; j < kNTilesS; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (first_col + j * 8 + e >= limit) acc_s[mt][j][2 * h + e] = -INFINITY;
      }
  }

  // Online softmax over one key block, in base 2 (scores times scale_log2 =
  // scale * log2(e)). row_offset is the exponent offset P is taken against:
  // P = 2^(s * scale_log2 - row_offset); -inf until the row sees a key.
  // Whenever the offset rises, acc_o and row_sum are rescaled by
  // 2^(old - new). acc_s becomes P, packed as A fragments p_frag[mt][kk] for
  // the k16 step kk of P V.
  //
  // Lazy rescaling: the offset only rises when a block's max exceeds it by
  // more than kRescaleSlack, so P <= 2^8 (exact in f32 sums and in bf16/f16
  // P, whose relative precision does not depend on magnitude), and a warp
  // skips the 128 multiplies of the rescale unless one of its rows needs it:
  // after the first blocks almost none do. The result is the same softmax;
  // only the common offset differs (measured +2% at H128 S8192, docs/perf.md).
  static constexpr float kRescaleSlack = 8.f;

  __device__ __forceinline__ static void online_softmax(float (&acc_s)[kMTiles][kNTilesS][4],
                                                        float (&acc_o)[kMTiles][kNTilesO][4],
                                                        float (&row_offset)[kMTiles][2], float (&row_sum)[kMTiles][2],
                                                        uint32_t (&p_frag)[kMTiles][Traits::kKStepsPV][4],
                                                        float scale_log2) {
    float new_offset[kMTiles][2];
    bool raise[kMTiles][2];
    bool any_raise = false;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        // Tree reduction over this thread's 2 * kNTilesS scores of the row
        // (short dependency chains), then over the quad that shares the row.
        float m[kNTilesS];
#pragma unroll
        for (int j = 0; j < kNTilesS; ++j) m[j] = fmaxf(acc_s[mt][j][2 * h], acc_s[mt][j][2 * h + 1]);
#pragma unroll
        for (int w = 1; w < kNTilesS; w *= 2)
#pragma unroll
          for (int j = 0; j + w < kNTilesS; j += 2 * w) m[j] = fmaxf(m[j], m[j + w]);
        float block_max = fmaxf(m[0], __shfl_xor_sync(0xffffffffu, m[0], 1));
        block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 2));
        const float max_scaled = block_max * scale_log2;  // -inf for a row with no key yet
        raise[mt][h] = max_scaled > row_offset[mt][h] + kRescaleSlack;
        new_offset[mt][h] = raise[mt][h] ? max_scaled : row_offset[mt][h];
        any_raise |= raise[mt][h];
      }
    if (__any_sync(0xffffffffu, any_raise)) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          // old -inf -> 0 (nothing accumulated yet); no raise -> exactly 1.
          const float correction = raise[mt][h] ? exp2_approx(row_offset[mt][h] - new_offset[mt][h]) : 1.f;
          row_offset[mt][h] = new_offset[mt][h];
          row_sum[mt][h] *= correction;
#pragma unroll
          for (int j = 0; j < kNTilesO; ++j) {
            acc_o[mt][j][2 * h] *= correction;
            acc_o[mt][j][2 * h + 1] *= correction;
          }
        }
    }
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        // A row still at -inf has only masked (-inf) scores here: offset 0
        // gives 2^-inf = 0 instead of (-inf) - (-inf) = NaN.
        const float offset = row_offset[mt][h] == -INFINITY ? 0.f : row_offset[mt][h];
        float part[kNTilesS];
#pragma unroll
        for (int j = 0; j < kNTilesS; ++j) {
          const float p0 = exp2_approx(acc_s[mt][j][2 * h] * scale_log2 - offset);
          const float p1 = exp2_approx(acc_s[mt][j][2 * h + 1] * scale_log2 - offset);
          acc_s[mt][j][2 * h] = p0;
          acc_s[mt][j][2 * h + 1] = p1;
          part[j] = p0 + p1;
        }
#pragma unroll
        for (int w = 1; w < kNTilesS; w *= 2)
#pragma unroll
          for (int j = 0; j + w < kNTilesS; j += 2 * w) part[j] += part[j + w];
        row_sum[mt][h] += part[0];
      }
      // C fragments of n8 tiles 2kk and 2kk+1 = A fragment of k16 step kk.
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int kk = 0; kk < Traits::kKStepsPV; ++kk) {
        p_frag[mt][kk][0] = pack2<Element>(acc_s[mt][2 * kk][0], acc_s[mt][2 * kk][1]);
        p_frag[mt][kk][1] = pack2<Element>(acc_s[mt][2 * kk][2], acc_s[mt][2 * kk][3]);
        p_frag[mt][kk][2] = pack2<Element>(acc_s[mt][2 * kk + 1][0], acc_s[mt][2 * kk + 1][1]);
        p_frag[mt][kk][3] = pack2<Element>(acc_s[mt][2 * kk + 1][2], acc_s[mt][2 * kk + 1][3]);
      }
  }

  // acc_o += P V. v_lane: this lane's ldmatrix.trans row address in the V tile.
  __device__ __forceinline__ static void compute_pv(const uint32_t (&p_frag)[kMTiles][Traits::kKStepsPV][4],
                                                    float (&acc_o)[kMTiles][kNTilesO][4], uint32_t v_lane) {
#pragma unroll
    for (int kk = 0; kk < Traits::kKStepsPV; ++kk)
#pragma unroll
      for (int p = 0; p < kNTilesO / 2; ++p) {
        uint32_t b[4];  // b0, b1 of n8 tile 2p (V columns 16p..16p+7), then of tile 2p + 1
        ldmatrix_x4_trans(b, v_lane + kk * 16 * kPitchV + p * 32);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_16816<Element>(acc_o[mt][2 * p], p_frag[mt][kk], b[0], b[1]);
          mma_16816<Element>(acc_o[mt][2 * p + 1], p_frag[mt][kk], b[2], b[3]);
        }
      }
  }

  // Per-lane ldmatrix row addresses (bytes, shared space) for the three tiles.
  //  Q (A operand, x4 = rows 0-7/8-15 x cols 0-7/8-15 of an m16k16 tile):
  //    lanes 0-7 -> rows 0-7 col 0, 8-15 -> rows 8-15 col 0, 16-23 -> rows 0-7 col 8, 24-31 -> rows 8-15 col 8
  //  K (B operand of S = Q Kᵀ, two n8 tiles x two k8 halves):
  //    lanes 0-7 -> keys 0-7 k 0, 8-15 -> keys 0-7 k 8, 16-23 -> keys 8-15 k 0, 24-31 -> keys 8-15 k 8
  //  V (B operand of O = P V, transposed, two k8 halves x two n8 tiles):
  //    lanes 0-7 -> keys 0-7 col 0, 8-15 -> keys 8-15 col 0, 16-23 -> keys 0-7 col 8, 24-31 -> keys 8-15 col 8
  struct LaneOffsets {
    uint32_t q, k, v;
  };
  __device__ __forceinline__ static LaneOffsets lane_offsets(uint32_t smem_base, int warp, int lane) {
    const int r8 = lane & 7;
    const int bit3 = (lane >> 3) & 1;
    const int bit4 = lane >> 4;
    LaneOffsets o;
    o.q = smem_base + Traits::kSmemQ + (warp * Traits::kWarpRows + r8 + bit3 * 8) * kPitchQK + bit4 * 16;
    o.k = smem_base + Traits::kSmemK + (r8 + bit4 * 8) * kPitchQK + bit3 * 16;
    o.v = smem_base + Traits::kSmemV + (r8 + bit3 * 8) * kPitchV + bit4 * 16;
    return o;
  }
};

}  // namespace lattn::cuda::sm80
