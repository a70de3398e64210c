// src/cuda/sm80/decode_config.h — the tile configurations of the tensor-core
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
  std::string str() const {
    return "m" + std::to_string(block_m) + " n" + std::to_string(block_n) + " w" + std::to_string(warps);
  }
};

}  // namespace lattn::cuda::sm80
