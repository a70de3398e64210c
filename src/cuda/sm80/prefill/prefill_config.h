// src/cuda/sm80/prefill/prefill_config.h — the table of prefill kernel
// configurations: which head dims the sm80 kernels serve and with which tile
// shape (internal; no CUDA header, shared by the launcher, the backend, tests
// and benchmarks).
//
// Dimensions are data: to serve another (qk, v) pair, add a row here and an
// instantiation file in instantiations/ (the launcher's static_asserts name
// what is missing). The first row for a (qk, v) pair is the one the backend
// uses; later rows with the same dims are candidates kept for benchmarks and
// tests (compiled for bf16 only).
#pragma once

#include <cstddef>
#include <string>

namespace lattn::cuda::sm80 {

struct PrefillTileConfig {
  int head_dim_qk;        // P + R
  int head_dim_v;         // V (never padded up to head_dim_qk)
  int block_m;            // query rows per CTA
  int block_n;            // key rows per main-loop step
  int num_warps;          // each warp owns block_m / num_warps query rows (16 or 32)
  int min_blocks_per_sm;  // __launch_bounds__ occupancy hint (caps registers)
  int qk_unroll;          // unroll factor of the k16 loop of Q Kᵀ; 0 = fully
  bool candidate;         // true: benchmark/test candidate, bf16 only
  const char* name;
};

// Why these shapes (H100/H200 numbers; see docs/cuda.md):
//  * 32 query rows per warp: each K/V fragment read from shared memory feeds
//    two m16 MMAs, halving shared-memory traffic per FLOP against 16 rows per
//    warp (FlashAttention-2's hdim-192 layout).
//  * 128x64 with 4 warps: 92 KB of shared memory, so two CTAs share an SM and
//    one's softmax overlaps the other's MMAs; the O accumulator (32 x 128 f32
//    per warp) plus S (32 x 64) fill the 255 registers, which is why its
//    Q Kᵀ loop is unrolled by 2 only.
//  * V dim 256 needs 16 rows per warp to keep O in registers.
// Candidates (bf16 only) are the alternatives measured against the default
// in bench/cuda_prefill_bench.cpp; docs/perf.md records the outcome.
inline constexpr PrefillTileConfig kPrefillTileConfigs[] = {
    // qk   v   bm   bn  warps minb unroll candidate
    {192, 128, 128, 64, 4, 2, 2, false, "qk192_v128_m128_n64_w4"},
    {96, 64, 128, 64, 4, 2, 0, false, "qk96_v64_m128_n64_w4"},
    {256, 256, 128, 64, 8, 1, 2, false, "qk256_v256_m128_n64_w8"},
    {192, 128, 256, 64, 8, 1, 2, true, "qk192_v128_m256_n64_w8"},
};
inline constexpr int kNumPrefillTileConfigs = int(sizeof(kPrefillTileConfigs) / sizeof(kPrefillTileConfigs[0]));

// Index of the default configuration for (qk, v), or -1 when unsupported.
constexpr int default_prefill_config(int head_dim_qk, int head_dim_v) {
  for (int i = 0; i < kNumPrefillTileConfigs; ++i) {
    const PrefillTileConfig& c = kPrefillTileConfigs[i];
    if (!c.candidate && c.head_dim_qk == head_dim_qk && c.head_dim_v == head_dim_v) return i;
  }
  return -1;
}

// "(192, 128), (96, 64), (256, 256)": the (qk, v) head dims with a kernel.
inline std::string supported_prefill_head_dims() {
  std::string s;
  for (const PrefillTileConfig& c : kPrefillTileConfigs) {
    if (c.candidate) continue;
    if (!s.empty()) s += ", ";
    // Appended piecewise: `"(" + std::to_string(...)` trips GCC 12's false -Wrestrict (bug 105329).
    s += '(';
    s += std::to_string(c.head_dim_qk);
    s += ", ";
    s += std::to_string(c.head_dim_v);
    s += ')';
  }
  return s;
}

}  // namespace lattn::cuda::sm80
