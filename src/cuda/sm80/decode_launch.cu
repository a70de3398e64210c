// Runtime -> compile-time dispatch of the tensor-core decode kernel: tile
// configuration x activation dtype x cache dtype, each paired with one
// instantiation file (instantiations/decode_m{M}_n{N}_w{W}_{dtype}_{cache}.cu).
#include "cuda/sm80/decode_launch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "cuda/sm80/decode_launcher.h"
#include "cuda/sm80/decode_traits.h"
#include "lattn/errors.h"

namespace lattn::cuda::sm80 {

namespace {

// The configurations that are instantiated, in order of preference.
constexpr DecodeTileConfig kConfigs[] = {{64, 64, 8}, {64, 32, 8}, {16, 64, 8}, {16, 32, 4}};

// Calls fn.template operator()<Traits>() for the configuration and dtypes.
template <class Fn>
auto with_traits(DecodeTileConfig c, DType dtype, DType cache_dtype, Fn&& fn) {
  auto by_types = [&](auto t_tag, auto c_tag) {
    using T = decltype(t_tag);
    using C = decltype(c_tag);
    if (c.block_m == 64 && c.block_n == 64 && c.warps == 8) return fn.template operator()<DecodeTraits<64, 64, 8, T, C>>();
    if (c.block_m == 64 && c.block_n == 32 && c.warps == 8) return fn.template operator()<DecodeTraits<64, 32, 8, T, C>>();
    if (c.block_m == 16 && c.block_n == 64 && c.warps == 8) return fn.template operator()<DecodeTraits<16, 64, 8, T, C>>();
    if (c.block_m == 16 && c.block_n == 32 && c.warps == 4) return fn.template operator()<DecodeTraits<16, 32, 4, T, C>>();
    throw NotImplementedError("decode: tile configuration " + c.str() +
                              " is not instantiated (instantiated: m64 n64 w8, m64 n32 w8, m16 n64 w8, m16 n32 w4)");
  };
  const bool fp8 = cache_dtype == DType::fp8_e4m3;
  if (cache_dtype != dtype && !fp8) {
    throw NotImplementedError(std::string("decode: the tensor-core kernel needs the cache dtype to equal the activation "
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

template <int M, int N, int W>
constexpr size_t smem_of(bool fp8) {
  return fp8 ? DecodeTraits<M, N, W, __nv_bfloat16, __nv_fp8_e4m3>::kSmemBytes
             : DecodeTraits<M, N, W, __nv_bfloat16, __nv_bfloat16>::kSmemBytes;
}

}  // namespace

size_t decode_smem_bytes(DecodeTileConfig c, bool fp8) {
  if (c.block_m == 64 && c.block_n == 64) return smem_of<64, 64, 8>(fp8);
  if (c.block_m == 64 && c.block_n == 32) return smem_of<64, 32, 8>(fp8);
  if (c.block_m == 16 && c.block_n == 64) return smem_of<16, 64, 8>(fp8);
  return smem_of<16, 32, 4>(fp8);
}

DecodeTileConfig choose_decode_tiles(int rows, int max_smem, bool fp8) {
  for (const DecodeTileConfig& c : kConfigs) {
    if (rows <= 16 && c.block_m != 16) continue;  // 64-row tiles would be 3/4 padding
    if (decode_smem_bytes(c, fp8) <= size_t(max_smem)) return c;
  }
  throw NotImplementedError("decode: no tile configuration fits in " + std::to_string(max_smem) +
                            " bytes of shared memory per block (the smallest needs " +
                            std::to_string(decode_smem_bytes(kConfigs[3], fp8)) + ")");
}

namespace {
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
}  // namespace

int decode_ctas_per_sm(DecodeTileConfig c, DType dtype, DType cache_dtype) {
  return with_traits(c, dtype, cache_dtype, CtasPerSm{});
}

void launch_decode_sm80(const DecodeParams& p, DecodeTileConfig c, DType dtype, DType cache_dtype, int m_tiles,
                        cudaStream_t stream) {
  with_traits(c, dtype, cache_dtype, Launch{p, m_tiles, stream});
}

}  // namespace lattn::cuda::sm80
