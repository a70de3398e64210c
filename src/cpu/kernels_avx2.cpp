// The AVX2 + FMA kernel table (f32 FMA, 8 lanes). Compiled with AVX2 flags only.
#include "cpu/attention_kernels_impl.h"
#include "cpu/isa_avx2.h"

namespace lattn::cpu {
namespace {

constexpr int kTileRows = 2 * Avx2::W;

MathPath f32_prefill(DType) { return MathPath::f32_fma; }
MathPath f32_decode(DType, DType) { return MathPath::f32_fma; }
size_t prefill_scratch(int dqk, int dv) { return prefill_scratch_bytes_f32<Avx2>(kTileRows, dqk, dv); }
size_t decode_scratch(int lanes, int latent, int rope) { return decode_scratch_bytes_f32<Avx2>(lanes, latent, rope); }
void prefill_tile(const PrefillTileJob& job) { prefill_tile_f32<Avx2>(job); }
void decode_split(const DecodeSplitJob& job) { decode_split_f32<Avx2>(job); }
void pack_value_pairs(const uint16_t* even, const uint16_t* odd, int64_t n, uint32_t* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = uint32_t(even[i]) | (odd ? uint32_t(odd[i]) << 16 : 0u);
}

const KernelTable kAvx2{CpuIsa::avx2,   Avx2::W,        kTileRows,    f32_prefill,  f32_decode,      prefill_scratch,
                        decode_scratch, prefill_tile,   decode_split, Avx2::to_f32, Avx2::from_f32, pack_value_pairs};

}  // namespace

const KernelTable& kernels_avx2() { return kAvx2; }

}  // namespace lattn::cpu
