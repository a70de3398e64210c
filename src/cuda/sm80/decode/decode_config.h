// src/cuda/sm80/decode/decode_config.h — the tile configurations of the tensor-core
// decode kernel (plain C++: no CUDA header, so backends and tests can name them).
#pragma once

#include <string>

namespace lattn::cuda::sm80 {

// The kernel's fixed dims: the tensor-core path serves these (L, R) only.
constexpr int kDecodeL = 512, kDecodeR = 64;

struct DecodeTileConfig {
  int block_m = 0;  // packed rows (heads x query tokens) per CTA
  int block_n = 0;  // keys per KV tile
  int warps = 0;
  int stages = 0;  // KV tiles in the cp.async ring
  std::string str() const {
    return "m" + std::to_string(block_m) + "n" + std::to_string(block_n) + "w" + std::to_string(warps) + "s" +
           std::to_string(stages);
  }
  friend bool operator==(const DecodeTileConfig&, const DecodeTileConfig&) = default;
};

}  // namespace lattn::cuda::sm80

// Every instantiated configuration (instantiations/ has one file per
// configuration x dtype x cache dtype), in order of preference (measured on an
// H200: docs/perf.md):
//   m64n64w8s2   Hopper (227 KB shared memory), > 16 rows
//   m16n64w8s3   Hopper, <= 16 rows: Q in registers, two 64-key tiles in flight
//   m16n64w8s2   Hopper, <= 16 rows: Q in shared memory, one tile in flight
//   m64n32w8s2   A100 (163 KB), > 16 rows
//   m16n32w4s2   A100 <= 16 rows, and 99 KB parts (sm86/89/120) for any rows (16-row tiles)
#define LATTN_DECODE_CONFIGS(X) \
  X(64, 64, 8, 2)               \
  X(16, 64, 8, 3)               \
  X(16, 64, 8, 2)               \
  X(64, 32, 8, 2)               \
  X(16, 32, 4, 2)
