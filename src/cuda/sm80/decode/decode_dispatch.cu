// Runtime -> compile-time dispatch of the tensor-core decode kernel: tile
// configuration x activation dtype x cache dtype, each paired with one
// instantiation file (instantiations/decode_m{M}_n{N}_w{W}_s{S}_{dtype}_cache_{cache}.cu).
#include "cuda/sm80/decode/decode_dispatch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdio>
#include <cstdlib>

#include "cuda/sm80/decode/decode_kernel_launcher.h"
#include "cuda/sm80/decode/decode_traits.h"
#include "lattn/errors.h"

namespace lattn::cuda::sm80 {
namespace {

#define LATTN_CONFIG_ENTRY(M, N, W, S) DecodeTileConfig{M, N, W, S},
constexpr DecodeTileConfig kConfigs[] = {LATTN_DECODE_CONFIGS(LATTN_CONFIG_ENTRY)};
#undef LATTN_CONFIG_ENTRY

std::string instantiated_list() {
  std::string s;
  for (const DecodeTileConfig& c : kConfigs) s += (s.empty() ? "" : ", ") + c.str();
  return s;
}

// Calls fn.template operator()<Traits>() for the configuration and dtypes.
template <class Fn>
auto with_traits(DecodeTileConfig c, DType dtype, DType cache_dtype, Fn&& fn) {
  auto by_types = [&](auto t_tag, auto c_tag) {
    using T = decltype(t_tag);
    using C = decltype(c_tag);
#define LATTN_CONFIG_CASE(M, N, W, S)                                \
  if (c == DecodeTileConfig{M, N, W, S}) {                           \
    return fn.template operator()<DecodeTraits<M, N, W, S, T, C>>(); \
  }
    LATTN_DECODE_CONFIGS(LATTN_CONFIG_CASE)
#undef LATTN_CONFIG_CASE
    throw NotImplementedError("decode: tile configuration " + c.str() +
                              " is not instantiated (instantiated: " + instantiated_list() + ")");
  };
  const bool fp8 = cache_dtype == DType::fp8_e4m3;
  if (cache_dtype != dtype && !fp8) {
    throw NotImplementedError(
        std::string("decode: the tensor-core kernel needs the cache dtype to equal the activation "
                    "dtype or be fp8_e4m3, got cache ") +
        dtype_name(cache_dtype) + " with activations " + dtype_name(dtype));
  }
  switch (dtype) {
    case DType::bf16:
      return fp8 ? by_types(__nv_bfloat16{}, __nv_fp8_e4m3{}) : by_types(__nv_bfloat16{}, __nv_bfloat16{});
    case DType::f16:
      return fp8 ? by_types(__half{}, __nv_fp8_e4m3{}) : by_types(__half{}, __half{});
    default:
      throw NotImplementedError(std::string("decode: activation dtype ") + dtype_name(dtype) +
                                " is not supported by the tensor-core kernel (supported: f16, bf16)");
  }
}

struct SmemBytes {
  template <class K>
  size_t operator()() const {
    return K::kSmemBytes;
  }
};
struct CtasPerSm {
  template <class K>
  int operator()() const {
    return DecodeKernelLauncher<K>::ctas_per_sm();
  }
};
struct Launch {
  const DecodeParams& p;
  int m_tiles;
  cudaStream_t stream;
  template <class K>
  void operator()() const {
    DecodeKernelLauncher<K>::launch(p, m_tiles, stream);
  }
};

// LATTN_DECODE_TILES=m64n64w16s2 (for benchmarks and experiments) picks an
// instantiated configuration when it fits the device and the rows.
bool parse_override(DecodeTileConfig& c) {
  const char* env = std::getenv("LATTN_DECODE_TILES");
  if (!env || !*env) return false;
  DecodeTileConfig parsed;
  if (std::sscanf(env, "m%dn%dw%ds%d", &parsed.block_m, &parsed.block_n, &parsed.warps, &parsed.stages) != 4) {
    throw ValueError(std::string("LATTN_DECODE_TILES: expected mMnNwWsS (e.g. m64n64w8s2), got '") + env + "'");
  }
  for (const DecodeTileConfig& k : kConfigs) {
    if (k == parsed) {
      c = parsed;
      return true;
    }
  }
  throw ValueError(std::string("LATTN_DECODE_TILES: ") + env +
                   " is not instantiated (instantiated: " + instantiated_list() + ")");
}

}  // namespace

size_t decode_smem_bytes(DecodeTileConfig c, bool fp8) {
  return with_traits(c, DType::bf16, fp8 ? DType::fp8_e4m3 : DType::bf16, SmemBytes{});
}

DecodeTileConfig choose_decode_tiles(int rows, int max_smem, bool fp8) {
  DecodeTileConfig forced;
  if (parse_override(forced) && decode_smem_bytes(forced, fp8) <= size_t(max_smem) &&
      (forced.block_m == 16 || rows > 16)) {
    return forced;
  }
  for (const DecodeTileConfig& c : kConfigs) {
    if (rows <= 16 && c.block_m != 16) continue;  // 64-row tiles would be 3/4 padding
    if (decode_smem_bytes(c, fp8) <= size_t(max_smem)) return c;
  }
  throw NotImplementedError("decode: no tile configuration fits in " + std::to_string(max_smem) +
                            " bytes of shared memory per block (instantiated: " + instantiated_list() + ")");
}

int decode_ctas_per_sm(DecodeTileConfig c, DType dtype, DType cache_dtype) {
  return with_traits(c, dtype, cache_dtype, CtasPerSm{});
}

void launch_decode_sm80(const DecodeParams& p, DecodeTileConfig c, DType dtype, DType cache_dtype, int m_tiles,
                        cudaStream_t stream) {
  with_traits(c, dtype, cache_dtype, Launch{p, m_tiles, stream});
}

}  // namespace lattn::cuda::sm80
