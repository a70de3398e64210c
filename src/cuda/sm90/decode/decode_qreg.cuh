// src/cuda/sm90/decode/decode_qreg.cuh — S = Q K^T of the qreg schedule
// (decode_traits.h, docs/hopper.md "Two schedules"): Q in registers as the
// RS A operand, the 576 reduction columns split between the two consumer
// warpgroups, partial scores exchanged through shared memory. Everything
// after S (softmax, P V, epilogue) is the serial schedule's.
#pragma once

#include "cuda/sm90/common/smem.cuh"
#include "cuda/sm90/decode/decode_mainloop.cuh"

namespace lattn::cuda::sm90 {

// Q fragments of warpgroup g: k16 steps [18g + kQSmemSteps, 18g + 18) of
// the 576 columns for this thread's rows r0 = 16 w + lane / 4 and r0 + 8 of the CTA's 64
// (the wgmma A layout: word 0 (r0, c), 1 (r0 + 8, c), 2 (r0, c + 8),
// 3 (r0 + 8, c + 8), two 16-bit elements each, c = 16 step + 2 (lane % 4)).
// Rows past the request's rows are zero. Read straight from global memory
// (72 KB per CTA and piece, once per piece).
template <class K>
__device__ __forceinline__ void load_q_regs(const DecodeParams& p, const PieceView& pv, int g,
                                            uint32_t (&qa)[K::kQRegSteps][4]) {
  using T = typename K::T;
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int gr = pv.row0 + 16 * w + lane / 4 + 8 * i;
    const bool valid = gr < pv.rows;
    const int j = valid ? gr / p.num_heads : 0, h = valid ? gr % p.num_heads : 0;
    const T* nope = static_cast<const T*>(p.q_nope) + (pv.q0 + j) * p.q_nope_stride_t + h * p.q_nope_stride_h;
    const T* pe = static_cast<const T*>(p.q_pe) + (pv.q0 + j) * p.q_pe_stride_t + h * p.q_pe_stride_h;
#pragma unroll
    for (int ks = 0; ks < K::kQRegSteps; ++ks) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        // Column of the 576; a k16 step lies wholly in q_nope or in q_pe (512 = 32 steps).
        const int col = 16 * (K::kQSteps * g + K::kQSmemSteps + ks) + 8 * half + 2 * (lane % 4);
        const T* src = col < K::kL ? nope + col : pe + (col - K::kL);
        uint32_t v = 0;
        if (valid) {
          if (p.q_vec) {
            v = *reinterpret_cast<const uint32_t*>(src);  // rows 16-byte aligned, col even
          } else {
            const T e[2] = {src[0], src[1]};
            memcpy(&v, e, 4);
          }
        }
        qa[ks][2 * half + i] = v;
      }
    }
  }
}

// Consumers (256 threads): the shared-memory part of Q, columns
// [288g, 288g + 64 kQSmemBoxes) of rows [row0, +64) for both warpgroups g,
// into kQSmemBoxes swizzled boxes each (warpgroup 0's first), as load_q does
// for the whole tile; rows past the request's rows are zero. The caller
// fences nothing more: this ends with fence.proxy.async, a barrier follows.
template <class K>
__device__ __forceinline__ void load_q_smem_part(const DecodeParams& p, const PieceView& pv, uint8_t* q_smem) {
  using T = typename K::T;
  constexpr int kChunks = K::kQSmemBoxes * K::kBoxCols / 8;  // 16-byte chunks per row and warpgroup
  for (int c = threadIdx.x; c < K::kConsumerWarpgroups * K::kBlockM * kChunks; c += K::kConsumerThreads) {
    const int g = c / (K::kBlockM * kChunks), row = c / kChunks % K::kBlockM, chunk = c % kChunks;
    const int gr = pv.row0 + row;
    const int lcol = chunk * 8;                 // column inside warpgroup g's part
    const int col = K::kQSteps * 16 * g + lcol;  // of the 576 (8 columns never cross 512)
    uint4 v = make_uint4(0, 0, 0, 0);
    if (gr < pv.rows) {
      const int j = gr / p.num_heads, h = gr % p.num_heads;
      const T* src =
          col < K::kL
              ? static_cast<const T*>(p.q_nope) + (pv.q0 + j) * p.q_nope_stride_t + h * p.q_nope_stride_h + col
              : static_cast<const T*>(p.q_pe) + (pv.q0 + j) * p.q_pe_stride_t + h * p.q_pe_stride_h + (col - K::kL);
      if (p.q_vec) {
        v = *reinterpret_cast<const uint4*>(src);
      } else {
        T e[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) e[i] = src[i];
        memcpy(&v, e, 16);
      }
    }
    const int box = g * K::kQSmemBoxes + lcol / K::kBoxCols;
    *reinterpret_cast<uint4*>(q_smem + box * K::kBoxBytes + swizzle128_offset(row, lcol % K::kBoxCols)) = v;
  }
  fence_proxy_async_shared();
}

// The partial S[64 rows][64 keys] of the tile over warpgroup g's 288
// columns: 18 wgmma m64n64k16, B = K (K-major) from the stage, A = Q from
// shared memory for the first kQSmemSteps, from registers for the rest.
template <class K>
__device__ __forceinline__ void compute_qk_part(const uint32_t (&qa)[K::kQRegSteps][4], const uint8_t* q_smem,
                                                const uint8_t* kv, int g, float (&s)[K::kBlockN / 2]) {
  constexpr bool kBf16 = std::is_same_v<typename K::T, __nv_bfloat16>;
  warpgroup_arrive();
#pragma unroll
  for (int ks = 0; ks < K::kQSteps; ++ks) {
    const int step = K::kQSteps * g + ks;  // of the 36; box step / 4, k16 step % 4 inside it
    const uint64_t db = make_desc_kmajor_sw128(kv + (step / 4) * K::kBlockN * 128 + (step % 4) * 32);
    if (ks < K::kQSmemSteps) {
      const uint64_t da = make_desc_kmajor_sw128(q_smem + (g * K::kQSmemBoxes + ks / 4) * K::kBoxBytes + (ks % 4) * 32);
      wgmma_ss<K::kBlockN, kBf16>(s, da, db, ks != 0);
    } else {
      wgmma_rs<K::kBlockN, kBf16>(s, qa[ks - K::kQSmemSteps], db, ks != 0);
    }
  }
  wgmma_commit_group();
  wgmma_wait_group<0>();
  fence_operands(s);
}

// S[64 rows][32 keys] of warpgroup g's keys [32 g, +32) over all 576
// columns: the partial of the whole tile over this warpgroup's columns,
// the half of the other warpgroup's keys published in this warpgroup's
// exchange slot; after one named barrier the other's partial of these keys
// is added. The slot is rewritten (next tile) only after this tile's row-max
// barrier, which the reader reaches after reading it. The two f32 partials
// are added in the same order in both warpgroups' threads (a + b = b + a).
template <class K>
__device__ __forceinline__ void compute_qk_qreg(const uint32_t (&qa)[K::kQRegSteps][4], const uint8_t* q_smem,
                                                const uint8_t* kv, int g, uint32_t xchg,
                                                float (&s)[K::kKeysPerWarpgroup / 2]) {
  constexpr int kHalf = K::kKeysPerWarpgroup / 2;  // 16 accumulators: keys [0, 32) are s[0..15], [32, 64) s[16..31]
  constexpr int kVec = kHalf / 4;                  // float4 per thread (4)
  const uint32_t slot_bytes = 128 * kVec * 16;
  const uint32_t t16 = uint32_t(warpgroup_thread()) * 16;
  float full[K::kBlockN / 2];
  compute_qk_part<K>(qa, q_smem, kv, g, full);
  // Own keys and the other's, by selects (no run-time register indexing).
  float other[kHalf];
#pragma unroll
  for (int i = 0; i < kHalf; ++i) {
    s[i] = g == 0 ? full[i] : full[kHalf + i];
    other[i] = g == 0 ? full[kHalf + i] : full[i];
  }
#pragma unroll
  for (int v = 0; v < kVec; ++v) {
    st_shared_v4(xchg + g * slot_bytes + v * 128 * 16 + t16,
                 make_uint4(__float_as_uint(other[4 * v]), __float_as_uint(other[4 * v + 1]),
                            __float_as_uint(other[4 * v + 2]), __float_as_uint(other[4 * v + 3])));
  }
  named_barrier_sync(kBarXchg, K::kConsumerThreads);
#pragma unroll
  for (int v = 0; v < kVec; ++v) {
    const uint4 o = ld_shared_v4(xchg + (1 - g) * slot_bytes + v * 128 * 16 + t16);
    s[4 * v] += __uint_as_float(o.x);
    s[4 * v + 1] += __uint_as_float(o.y);
    s[4 * v + 2] += __uint_as_float(o.z);
    s[4 * v + 3] += __uint_as_float(o.w);
  }
}

}  // namespace lattn::cuda::sm90
