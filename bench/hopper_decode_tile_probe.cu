// bench/hopper_decode_tile_probe.cu — how long the Hopper decode kernel's
// per-tile consumer path takes by itself: a math-only probe (bench-only, not
// part of the library; CMake builds it as `hopper_decode_tile_probe` where
// 90a is among LATTN_CUDA_ARCHS, so it keeps compiling). By hand:
//   nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
//     -Xptxas=--warn-on-spills -Isrc -Iinclude bench/hopper_decode_tile_probe.cu -o tile_probe
//   ./tile_probe [ctas, default every SM] [tiles per CTA, default 256]
//
// Each CTA (one per SM, the decode kernel's 384 threads, shared-memory layout
// and setmaxnreg split) fills its Q tile and one KV stage once with ordinary
// stores, then the two consumer warpgroups run the same per-tile step `iters`
// times over that one resident stage — no copies, no producer. Each mode keeps
// or removes parts of the step (S = Q K^T, the softmax with its row-max
// exchange, the P barrier, O += P V, the stage's mbarriers), using the
// kernel's own functions (decode_mainloop.cuh) where the part is the
// kernel's, so the differences between modes are what each part costs on the
// critical path. Reported: SM clocks per tile (clock64 of consumer thread 0,
// median and max over the CTAs) and ns per tile (globaltimer), against the
// 2176 tensor clocks of a tile's products (S 64x64x576 + P V 64x64x512 at
// 2048 multiply-adds per clock).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "cuda/sm90/common/cta_smem.cuh"
#include "cuda/sm90/decode/decode_mainloop.cuh"

namespace lattn::cuda::sm90 {
namespace {

using K = DecodeTraits<__nv_bfloat16>;
constexpr bool kBf16 = true;

enum Mode : int {
  kS,               // S only (compute_qk: 36 m64n32k16 SS per warpgroup, one wait)
  kS2Chains,        // S with two accumulator chains (even / odd k16 steps), added after the wait
  kSRed,            // S split by reduction columns: 18 m64n64k16 SS per warpgroup (no exchange: timing only)
  kSoftmax,         // softmax_tile alone on register scores (+ its row-max barrier), + the P barrier
  kPV,              // P V only (compute_pv: 4 m64n256k16 SS per warpgroup)
  kSPV,             // S then P V, a wait after each, nothing between
  kSPVOneWait,      // S and P V issued back to back, one commit and one wait
  kSSoftmax,        // S + softmax_tile (row-max barrier, P store, fence)
  kSSoftmaxPBar,    // + the P barrier
  kFull,            // S + softmax + P barrier + P V + the stage's mbarrier wait / arrive: the kernel's tile
  kFullCopy,        // the tile with the probe's copy of softmax_tile (checks the copy against kFull)
  kFullNoFence,     // ... without the softmax's fence.proxy.async (timing only)
  kFullNoRowMax,    // ... without the row-max exchange and its barrier (own row max; P barrier kept)
  kFullNoBar,       // ... without both named barriers (timing only)
  kFull2Chains,     // the kernel's tile with S in two accumulator chains
  kFullSkipScale,   // the kernel's tile, O's rescale skipped where the warp's alphas are all 1
  kPVScale,         // P V with O's rescale by factors the compiler cannot fold
  kFullSplitScale,  // the kernel's tile, P V as two N = 128 halves, the second half's rescale behind the first's wgmmas
  kFullCopies,      // the kernel's tile while the producer streams 72 KB tiles from DRAM into the other stage
  kCopiesOnly,      // the producer's stream alone (the consumers only wait): the copy rate per CTA
  kS1Wg,            // S of warpgroup 0 alone (warpgroup 1 idle): shared resource or per-warpgroup latency?
  kPV1Wg,           // P V of warpgroup 0 alone
  kModes
};
const char* const kModeNames[kModes] = {
    "S (36 x m64n32k16 SS, 1 wait)",
    "S, two accumulator chains",
    "S by reduction cols (18 x m64n64k16)",
    "softmax alone + P barrier",
    "PV (4 x m64n256k16 SS)",
    "S ; PV (wait after each)",
    "S + PV, one wait",
    "S + softmax",
    "S + softmax + P barrier",
    "full tile (kernel's path + mbarriers)",
    "full tile, probe's softmax copy",
    "  ... without fence.proxy.async",
    "  ... without row-max exchange+barrier",
    "  ... without both named barriers",
    "full tile, S in two chains",
    "full tile, rescale skipped if alpha==1",
    "PV with O rescale",
    "full tile, PV halves, 2nd rescale hidden",
    "full tile + DRAM copies into stage 1",
    "DRAM copies alone (per 72 KB copy)",
    "S of warpgroup 0 alone",
    "PV of warpgroup 0 alone",
};

// S with its 36 k16 steps alternating between two accumulators (the chain of
// dependent wgmmas on one accumulator halved), summed after the wait.
__device__ __forceinline__ void compute_qk_2chains(const uint8_t* q_smem, const uint8_t* kv, int g, float (&s)[16]) {
  float s1[16];
  warpgroup_arrive();
#pragma unroll
  for (int c = 0; c < K::kBoxes; ++c) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint64_t da = make_desc_kmajor_sw128(q_smem + c * K::kBoxBytes + kk * 32);
      const uint64_t db = make_desc_kmajor_sw128(kv + c * K::kBlockN * 128 + g * K::kKeysPerWarpgroup * 128 + kk * 32);
      const int step = 4 * c + kk;
      if (step % 2 == 0) {
        wgmma_ss<K::kKeysPerWarpgroup, kBf16>(s, da, db, step != 0);
      } else {
        wgmma_ss<K::kKeysPerWarpgroup, kBf16>(s1, da, db, step != 1);
      }
    }
  }
  wgmma_commit_group();
  wgmma_wait_group<0>();
  fence_operands(s);
  fence_operands(s1);
#pragma unroll
  for (int i = 0; i < 16; ++i) s[i] += s1[i];
}

// Partial S of all 64 keys over this warpgroup's 288 reduction columns.
__device__ __forceinline__ void compute_qk_red(const uint8_t* q_smem, const uint8_t* kv, int g, float (&s)[32]) {
  warpgroup_arrive();
#pragma unroll
  for (int i = 0; i < 18; ++i) {
    const int step = 18 * g + i, c = step / 4, kk = step % 4;
    const uint64_t da = make_desc_kmajor_sw128(q_smem + c * K::kBoxBytes + kk * 32);
    const uint64_t db = make_desc_kmajor_sw128(kv + c * K::kBlockN * 128 + kk * 32);
    wgmma_ss<64, kBf16>(s, da, db, i != 0);
  }
  wgmma_commit_group();
  wgmma_wait_group<0>();
  fence_operands(s);
}

// softmax_tile's steps (no masking) with parts removable: kExchange the
// row-max exchange with the other warpgroup and its barrier, kFence the
// fence.proxy.async after the P store. Without them: timing only.
template <bool kExchange, bool kFence>
__device__ __forceinline__ void softmax_probe(float (&s)[16], SoftmaxState& st, float scale_log2, int g, float* row_max,
                                              uint8_t* p_smem, float (&alpha)[2]) {
  const int w = warp_in_warpgroup(), lane = threadIdx.x % 32;
  const int r0 = 16 * w + lane / 4;
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float x = s[4 * j + e] * scale_log2;
      s[4 * j + e] = x;
      mx[e / 2] = fmaxf(mx[e / 2], x);
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
  }
  if constexpr (kExchange) {
    if (lane % 4 == 0) {
      row_max[g * K::kBlockM + r0] = mx[0];
      row_max[g * K::kBlockM + r0 + 8] = mx[1];
    }
    named_barrier_sync(kBarRowMax, K::kConsumerThreads);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float other = kExchange ? row_max[(1 - g) * K::kBlockM + r0 + 8 * i] : -INFINITY;
    const float m_new = fmaxf(st.m[i], fmaxf(mx[i], other));
    const float base = m_new == -INFINITY ? 0.f : m_new;
    alpha[i] = exp2f(st.m[i] - base);
    st.m[i] = m_new;
    mx[i] = base;
  }
  float sum[2] = {0.f, 0.f};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float pr = exp2f(s[4 * j + e] - mx[e / 2]);
      s[4 * j + e] = pr;
      sum[e / 2] += pr;
    }
    const int key = g * K::kKeysPerWarpgroup + 8 * j + 2 * (lane % 4);
    *reinterpret_cast<uint32_t*>(p_smem + swizzle128_offset(r0, key)) =
        sm80::pack2<__nv_bfloat16>(s[4 * j], s[4 * j + 1]);
    *reinterpret_cast<uint32_t*>(p_smem + swizzle128_offset(r0 + 8, key)) =
        sm80::pack2<__nv_bfloat16>(s[4 * j + 2], s[4 * j + 3]);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) st.l[i] = st.l[i] * alpha[i] + sum[i];
  if constexpr (kFence) fence_proxy_async_shared();
}

// compute_pv with O's rescale skipped where every alpha of the warp is 1
// (x * 1 = x: the same bits).
__device__ __forceinline__ void compute_pv_skip(const uint8_t* p_smem, const uint8_t* kv, int g, float (&o)[128],
                                                const float (&alpha)[2]) {
  if (!__all_sync(0xffffffffu, alpha[0] == 1.f && alpha[1] == 1.f)) {
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      o[4 * j] *= alpha[0];
      o[4 * j + 1] *= alpha[0];
      o[4 * j + 2] *= alpha[1];
      o[4 * j + 3] *= alpha[1];
    }
  }
  warpgroup_arrive();
#pragma unroll
  for (int kk = 0; kk < K::kBlockN / 16; ++kk) {
    const uint64_t da = make_desc_kmajor_sw128(p_smem + kk * 32);
    const uint64_t db = make_desc_mnmajor_sw128(kv + g * 4 * K::kBlockN * 128 + kk * 16 * 128, K::kBlockN * 128);
    wgmma_ss<K::kColsPerWarpgroup, kBf16, 0, 1>(o, da, db, 1);
  }
  wgmma_commit_group();
  wgmma_wait_group<0>();
  fence_operands(o);
}

// compute_pv as two N = 128 products per k16 step: O's columns [0, 128) of
// the warpgroup are rescaled and their 4 wgmmas issued, then columns
// [128, 256) are rescaled while those run, then theirs issued.
__device__ __forceinline__ void compute_pv_halves(const uint8_t* p_smem, const uint8_t* kv, int g, float (&o)[128],
                                                  const float (&alpha)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float(&oh)[64] = *reinterpret_cast<float(*)[64]>(&o[64 * h]);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      oh[4 * j] *= alpha[0];
      oh[4 * j + 1] *= alpha[0];
      oh[4 * j + 2] *= alpha[1];
      oh[4 * j + 3] *= alpha[1];
    }
    warpgroup_arrive();
#pragma unroll
    for (int kk = 0; kk < K::kBlockN / 16; ++kk) {
      const uint64_t da = make_desc_kmajor_sw128(p_smem + kk * 32);
      const uint64_t db =
          make_desc_mnmajor_sw128(kv + (4 * g + 2 * h) * K::kBlockN * 128 + kk * 16 * 128, K::kBlockN * 128);
      wgmma_ss<128, kBf16, 0, 1>(oh, da, db, 1);
    }
    wgmma_commit_group();
  }
  wgmma_wait_group<0>();
  fence_operands(o);
}

// One bulk copy (no tensor map) of `bytes` from global memory to shared
// memory, completing on `bar`.
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
}

__device__ __forceinline__ float probe_value(uint32_t i) {
  i = i * 2654435761u + 12345u;
  i ^= i >> 15;
  return float(int(i % 2001) - 1000) * 1e-3f;  // [-1, 1]
}

template <int kMode>
__global__ void __launch_bounds__(K::kThreads, 1)
    tile_probe_kernel(int iters, long long* cycles, unsigned long long* nanos, float* sink, const uint8_t* stream,
                      int stream_tiles, long long* copy_stats) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  const CtaSmem<K> smem(smem_raw);
  uint8_t *const q_smem = smem.q, *const kv = smem.kv, *const p_smem = smem.p;
  float* const row_max = smem.row_max;
  // Q, stage 0 and P: any finite values (the swizzle does not matter here).
  {
    auto* q16 = reinterpret_cast<__nv_bfloat16*>(q_smem);
    for (uint32_t i = threadIdx.x; i < K::kQBytes / 2; i += K::kThreads) q16[i] = __float2bfloat16(probe_value(i));
    auto* kv16 = reinterpret_cast<__nv_bfloat16*>(kv);
    for (uint32_t i = threadIdx.x; i < K::kKVTileBytes / 2; i += K::kThreads)
      kv16[i] = __float2bfloat16(probe_value(i + 7777u));
    auto* p16 = reinterpret_cast<__nv_bfloat16*>(p_smem);
    for (uint32_t i = threadIdx.x; i < K::kBoxBytes / 2; i += K::kThreads) p16[i] = __float2bfloat16(0.01f);
    for (uint32_t i = threadIdx.x; i < 2 * K::kBlockM; i += K::kThreads) smem.row_sum[i] = 1.f;
    fence_proxy_async_shared();
  }
  // full[0]: completes phase 0 once (one arrival) so every wait on parity 0
  // passes at once, as a landed stage; empty[0]: the 256 consumers' arrivals.
  smem.init_ring(1, K::kConsumerThreads);
  if (threadIdx.x == 0) mbarrier_arrive(&smem.full[0]);
  __syncthreads();

  volatile int* const done = smem.template at<int>(K::kBadKeyOffset);
  if (threadIdx.x == 0) {
    *done = 0;
    if constexpr (kMode == kFullCopies || kMode == kCopiesOnly) {
      mbarrier_init(reinterpret_cast<uint64_t*>(smem.row_sum), 1);
      mbarrier_init(reinterpret_cast<uint64_t*>(smem.row_sum) + 1, 1);
      fence_barrier_init();
    }
  }
  __syncthreads();
  if (threadIdx.x >= K::kConsumerThreads) {
    setmaxnreg_dec<K::kProducerRegs>();
    if constexpr (kMode == kFullCopies || kMode == kCopiesOnly) {
      // Stage 1 refilled from this CTA's run of distinct 72 KB tiles in
      // DRAM (the cache's size in all), nine 8 KB boxes per copy and two
      // copies in flight, as the kernel's producer keeps two stages (both
      // copies land in stage 1, which nobody reads: timing only).
      if (threadIdx.x == K::kConsumerThreads) {
        uint64_t* const bars = reinterpret_cast<uint64_t*>(smem.row_sum);  // [2], count 1
        long long n = 0;
        unsigned long long c0, c1;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(c0));
        for (;; ++n) {
          const int slot = int(n & 1);
          if (n >= 2) mbarrier_wait(&bars[slot], uint32_t(((n - 2) >> 1) & 1));
          if (*done) break;
          const uint8_t* src = stream + (size_t(blockIdx.x) * stream_tiles + n % stream_tiles) * K::kKVTileBytes;
          mbarrier_arrive_expect_tx(&bars[slot], K::kKVTileTxBytes);
          for (int b = 0; b < K::kBoxes; ++b)
            bulk_copy_g2s(kv + K::kKVTileBytes + b * K::kBoxBytes, src + b * K::kBoxBytes, K::kBoxBytes, &bars[slot]);
        }
        if (n >= 1) mbarrier_wait(&bars[(n - 1) & 1], uint32_t(((n - 1) >> 1) & 1));  // the last copy in flight
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(c1));
        copy_stats[2 * blockIdx.x] = n;
        copy_stats[2 * blockIdx.x + 1] = (long long)(c1 - c0);
      }
    }
    return;
  }
  setmaxnreg_inc<K::kConsumerRegs>();
  const int g = threadIdx.x / 128;
  const float scale_log2 = 0.0625f * 1.4426950408889634f;
  const int key_limit[2] = {1 << 30, 1 << 30};
  SoftmaxState st{{-INFINITY, -INFINITY}, {0.f, 0.f}};
  float o[K::kColsPerWarpgroup / 2];
#pragma unroll
  for (int i = 0; i < K::kColsPerWarpgroup / 2; ++i) o[i] = 0.f;
  float s_init[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) s_init[i] = probe_value(threadIdx.x * 16 + i) * 8.f;
  float acc = 0.f;
  long long t0 = 0;
  unsigned long long n0 = 0;
  constexpr int kWarmup = 4;
  for (int it = -kWarmup; it < iters; ++it) {
    if (it == 0) {
      named_barrier_sync(kBarConsumers, K::kConsumerThreads);
      t0 = clock64();
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(n0));
    }
    float sc[16];
    float alpha[2] = {1.f, 1.f};
    if constexpr (kMode == kS) {
      compute_qk<K>(q_smem, kv, g, sc);
      acc += sc[0];
    } else if constexpr (kMode == kS2Chains) {
      compute_qk_2chains(q_smem, kv, g, sc);
      acc += sc[0];
    } else if constexpr (kMode == kSRed) {
      float sr[32];
      compute_qk_red(q_smem, kv, g, sr);
      acc += sr[0];
    } else if constexpr (kMode == kSoftmax) {
#pragma unroll
      for (int i = 0; i < 16; ++i) sc[i] = s_init[i] + float(it & 1);
      softmax_tile<K>(sc, st, 0, false, key_limit, scale_log2, g, row_max, p_smem, alpha);
      named_barrier_sync(kBarP, K::kConsumerThreads);
      acc += alpha[0];
    } else if constexpr (kMode == kPV) {
      compute_pv<K>(p_smem, kv, g, o, alpha);
    } else if constexpr (kMode == kSPV) {
      compute_qk<K>(q_smem, kv, g, sc);
      acc += sc[0];
      compute_pv<K>(p_smem, kv, g, o, alpha);
    } else if constexpr (kMode == kSPVOneWait) {
      warpgroup_arrive();
#pragma unroll
      for (int c = 0; c < K::kBoxes; ++c) {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const uint64_t da = make_desc_kmajor_sw128(q_smem + c * K::kBoxBytes + kk * 32);
          const uint64_t db =
              make_desc_kmajor_sw128(kv + c * K::kBlockN * 128 + g * K::kKeysPerWarpgroup * 128 + kk * 32);
          wgmma_ss<K::kKeysPerWarpgroup, kBf16>(sc, da, db, (c | kk) != 0);
        }
      }
#pragma unroll
      for (int kk = 0; kk < K::kBlockN / 16; ++kk) {
        const uint64_t da = make_desc_kmajor_sw128(p_smem + kk * 32);
        const uint64_t db = make_desc_mnmajor_sw128(kv + g * 4 * K::kBlockN * 128 + kk * 16 * 128, K::kBlockN * 128);
        wgmma_ss<K::kColsPerWarpgroup, kBf16, 0, 1>(o, da, db, 1);
      }
      wgmma_commit_group();
      wgmma_wait_group<0>();
      fence_operands(sc);
      fence_operands(o);
      acc += sc[0];
    } else if constexpr (kMode == kSSoftmax || kMode == kSSoftmaxPBar) {
      compute_qk<K>(q_smem, kv, g, sc);
      softmax_tile<K>(sc, st, 0, false, key_limit, scale_log2, g, row_max, p_smem, alpha);
      if constexpr (kMode == kSSoftmaxPBar) named_barrier_sync(kBarP, K::kConsumerThreads);
      acc += alpha[0];
    } else if constexpr (kMode == kFull || kMode == kFull2Chains || kMode == kFullCopies || kMode == kFullSkipScale ||
                         kMode == kFullSplitScale) {
      // The kernel's tile; the modes swap one product for a variant.
      mbarrier_wait(&smem.full[0], 0);
      if constexpr (kMode == kFull2Chains) {
        compute_qk_2chains(q_smem, kv, g, sc);
      } else {
        compute_qk<K>(q_smem, kv, g, sc);
      }
      softmax_tile<K>(sc, st, 0, false, key_limit, scale_log2, g, row_max, p_smem, alpha);
      named_barrier_sync(kBarP, K::kConsumerThreads);
      if constexpr (kMode == kFullSkipScale) {
        compute_pv_skip(p_smem, kv, g, o, alpha);
      } else if constexpr (kMode == kFullSplitScale) {
        compute_pv_halves(p_smem, kv, g, o, alpha);
      } else {
        compute_pv<K>(p_smem, kv, g, o, alpha);
      }
      mbarrier_arrive(&smem.empty[0]);
    } else if constexpr (kMode == kFullCopy || kMode == kFullNoFence || kMode == kFullNoRowMax || kMode == kFullNoBar) {
      mbarrier_wait(&smem.full[0], 0);
      compute_qk<K>(q_smem, kv, g, sc);
      softmax_probe<kMode != kFullNoRowMax && kMode != kFullNoBar, kMode != kFullNoFence>(sc, st, scale_log2, g,
                                                                                          row_max, p_smem, alpha);
      if constexpr (kMode != kFullNoBar) named_barrier_sync(kBarP, K::kConsumerThreads);
      compute_pv<K>(p_smem, kv, g, o, alpha);
      mbarrier_arrive(&smem.empty[0]);
    } else if constexpr (kMode == kS1Wg) {
      if (g == 0) {
        compute_qk<K>(q_smem, kv, g, sc);
        acc += sc[0];
      }
    } else if constexpr (kMode == kPV1Wg) {
      if (g == 0) compute_pv<K>(p_smem, kv, g, o, alpha);
    } else if constexpr (kMode == kCopiesOnly) {
      __nanosleep(1000);
    } else if constexpr (kMode == kPVScale) {
      // Factors read from shared memory (1.0, written below at the start):
      // the compiler cannot drop the 128 multiplies.
      const float* f = smem.row_sum;
      const float a[2] = {f[threadIdx.x % 64], f[64 + threadIdx.x % 64]};
      compute_pv<K>(p_smem, kv, g, o, a);
    }
  }
  named_barrier_sync(kBarConsumers, K::kConsumerThreads);
  const long long t1 = clock64();
  unsigned long long n1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(n1));
  if constexpr (kMode == kFullCopies || kMode == kCopiesOnly) {
    // Copies counted from the first timed tile: report ns per copy for kCopiesOnly.
    if (threadIdx.x == 0) *done = 1;
  }
  if (threadIdx.x == 0) {
    cycles[blockIdx.x] = t1 - t0;
    nanos[blockIdx.x] = n1 - n0;
  }
#pragma unroll
  for (int i = 0; i < K::kColsPerWarpgroup / 2; ++i) acc += o[i];
  sink[blockIdx.x * K::kConsumerThreads + threadIdx.x] = acc + st.l[0];
#endif
}

#define PROBE_CHECK(x)                                                                        \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

struct ProbeBuffers {
  long long* cycles;
  unsigned long long* nanos;
  float* sink;
  uint8_t* stream;  // the copy modes' source: stream_tiles distinct 72 KB tiles per CTA
  int stream_tiles;
  long long* copy_stats;  // [ctas][2]: copies, ns
};

template <int kMode>
void run_mode(int ctas, int iters, int passes, const ProbeBuffers& b) {
  auto kernel = tile_probe_kernel<kMode>;
  PROBE_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(K::kSmemBytes)));
  std::vector<long long> cyc(ctas), stats(2 * ctas);
  std::vector<unsigned long long> ns(ctas);
  for (int pass = 0; pass < passes; ++pass) {
    kernel<<<ctas, K::kThreads, K::kSmemBytes>>>(iters, b.cycles, b.nanos, b.sink, b.stream, b.stream_tiles,
                                                 b.copy_stats);
    PROBE_CHECK(cudaGetLastError());
    PROBE_CHECK(cudaDeviceSynchronize());
    PROBE_CHECK(cudaMemcpy(cyc.data(), b.cycles, ctas * sizeof(long long), cudaMemcpyDeviceToHost));
    PROBE_CHECK(cudaMemcpy(ns.data(), b.nanos, ctas * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    std::vector<long long> c = cyc;
    std::sort(c.begin(), c.end());
    std::vector<unsigned long long> n = ns;
    std::sort(n.begin(), n.end());
    const double med_clk = double(c[ctas / 2]) / iters, max_clk = double(c.back()) / iters;
    const double med_ns = double(n[ctas / 2]) / iters;
    std::printf("%-42s pass %d: %6.0f clk/tile (max %6.0f) %7.1f ns/tile %5.0f MHz  tensor %.2f", kModeNames[kMode],
                pass, med_clk, max_clk, med_ns, med_clk / med_ns * 1e3, 2176.0 / med_clk);
    if constexpr (kMode == kFullCopies || kMode == kCopiesOnly) {
      PROBE_CHECK(cudaMemcpy(stats.data(), b.copy_stats, 2 * ctas * sizeof(long long), cudaMemcpyDeviceToHost));
      double copies = 0, nsum = 0;
      for (int i = 0; i < ctas; ++i) {
        copies += double(stats[2 * i]);
        nsum += double(stats[2 * i + 1]);
      }
      std::printf("  | copies %.0f per CTA, %.1f ns per 72 KB copy, %.0f GB/s all CTAs", copies / ctas, nsum / copies,
                  copies * K::kKVTileBytes / (nsum / ctas));
    }
    std::printf("\n");
  }
}

template <int... kModes>
void run_all(std::integer_sequence<int, kModes...>, int ctas, int iters, int passes, const ProbeBuffers& b) {
  (run_mode<kModes>(ctas, iters, passes, b), ...);
}

}  // namespace
}  // namespace lattn::cuda::sm90

int main(int argc, char** argv) {
  using namespace lattn::cuda::sm90;
  int dev = 0, ctas = 0;
  PROBE_CHECK(cudaGetDevice(&dev));
  PROBE_CHECK(cudaDeviceGetAttribute(&ctas, cudaDevAttrMultiProcessorCount, dev));
  if (argc > 1) ctas = std::atoi(argv[1]);  // CTAs (one per SM); default: every SM
  const int iters = argc > 2 ? std::atoi(argv[2]) : 256;
  const int passes = 2;
  cudaDeviceProp prop{};
  PROBE_CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("hopper decode tile probe: %s, %d CTAs x %d tiles, 64 rows x 64 keys x 576, bf16\n", prop.name, ctas,
              iters);
  ProbeBuffers b{};
  b.stream_tiles = 64;  // 132 CTAs: 608 MB, about the H128 B128 S4096 cache
  PROBE_CHECK(cudaMalloc(&b.cycles, ctas * sizeof(long long)));
  PROBE_CHECK(cudaMalloc(&b.nanos, ctas * sizeof(unsigned long long)));
  PROBE_CHECK(cudaMalloc(&b.sink, size_t(ctas) * K::kConsumerThreads * sizeof(float)));
  PROBE_CHECK(cudaMalloc(&b.stream, size_t(ctas) * b.stream_tiles * K::kKVTileBytes));
  PROBE_CHECK(cudaMemset(b.stream, 0, size_t(ctas) * b.stream_tiles * K::kKVTileBytes));
  PROBE_CHECK(cudaMalloc(&b.copy_stats, 2 * size_t(ctas) * sizeof(long long)));
  run_all(std::make_integer_sequence<int, kModes>{}, ctas, iters, passes, b);
  return 0;
}
