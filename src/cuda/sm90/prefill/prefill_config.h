// src/cuda/sm90/prefill/prefill_config.h — which head dims the Hopper prefill
// kernel serves and with which tile shape (internal; no CUDA header: shared by
// the launcher, the backend, tests and benchmarks).
//
// Dimensions are data: another (qk, v) pair needs a row here, an
// instantiation file in instantiations/ and the traits' static_asserts to
// pass (qk and v multiples of 64, the shared-memory budget). Pairs without a
// row are served by the sm80 kernels inside the `hopper` backend (see
// docs/hopper.md, "Prefill").
#pragma once

namespace lattn::cuda::sm90 {

struct HopperPrefillConfig {
  int head_dim_qk;  // P + R
  int head_dim_v;   // V (never padded up to head_dim_qk)
  int block_m;      // query rows per tile: 64 per consumer warpgroup
  int block_n;      // key rows per pipeline stage
  int stages;       // K/V shared-memory stages
  // true: a consumer warpgroup issues Q K[n]ᵀ and P V[n+1] together and runs
  // block n's softmax while P V runs (two S/P register sets' worth of
  // overlap); false: the three steps one after the other.
  bool overlap;
  // true (with overlap): the two consumer warpgroups take turns issuing their
  // matrix products (FlashAttention-3's ping-pong, two named barriers), so
  // one's softmax runs while the other's products occupy the tensor cores.
  bool pingpong;
  // Producer warps that clean V tiles (1..3; PrefillMainloop::fix_v).
  int fix_warps;
  // true: O leaves in 16-byte stores after a word transpose among the 4
  // threads of a row (PrefillEpilogue::store); false: 4-byte stores straight
  // from the accumulator layout.
  bool wide_stores;
  bool candidate;  // true: kept for benchmarks and tests, never the default
  const char* name;
};

// Why 128 x 128, two stages (H100/H200: 227 KB of shared memory per block):
// Q 128x192 (48 KB) + 2 x (K 128x192 + V 128x128) (160 KB) = 208 KB. Each
// consumer warpgroup holds S (64x128 f32, 64 registers/thread) and O (64x128
// f32, 64) plus P (32), well inside the 240 registers setmaxnreg gives it.
inline constexpr HopperPrefillConfig kHopperPrefillConfigs[] = {
    // qk   v   bm   bn  stages overlap pingpong fixers wide candidate
    {192, 128, 128, 128, 2, true, true, 3, true, false, "qk192_v128_m128_n128_s2_pingpong"},
    {192, 128, 128, 128, 2, true, false, 3, true, true, "qk192_v128_m128_n128_s2_overlap"},
    {192, 128, 128, 128, 2, false, false, 3, true, true, "qk192_v128_m128_n128_s2_serial"},
    {192, 128, 128, 128, 2, true, true, 3, false, true, "qk192_v128_m128_n128_s2_pingpong_st4"},
};
inline constexpr int kNumHopperPrefillConfigs = int(sizeof(kHopperPrefillConfigs) / sizeof(kHopperPrefillConfigs[0]));

// Index of the default configuration for (qk, v), or -1 when the sm90
// kernel has none.
constexpr int hopper_prefill_config(int head_dim_qk, int head_dim_v) {
  for (int i = 0; i < kNumHopperPrefillConfigs; ++i) {
    const HopperPrefillConfig& c = kHopperPrefillConfigs[i];
    if (!c.candidate && c.head_dim_qk == head_dim_qk && c.head_dim_v == head_dim_v) return i;
  }
  return -1;
}

}  // namespace lattn::cuda::sm90
