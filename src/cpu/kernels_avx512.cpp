// The AVX-512 kernel tables: `avx512` (f32 FMA, 16 lanes) and `avx512bf16`
// (adds the bf16_dot path for bf16 data). Compiled with AVX-512 flags only.
#include "cpu/attention_bf16_impl.h"
#include "cpu/attention_kernels_impl.h"
#include "cpu/isa_avx512.h"

namespace lattn::cpu {
namespace {

constexpr int kTileRows = 2 * Avx512::W;  // 2 groups: see Avx512's register blocks

MathPath always_f32_prefill(DType) { return MathPath::f32_fma; }
MathPath always_f32_decode(DType, DType) { return MathPath::f32_fma; }

// bf16 data only: f16 and f32 would lose precision rounded to bf16, and an
// f16 cache read as bf16 would too. fp8 values are exact in bf16.
MathPath bf16_prefill(DType act) { return act == DType::bf16 ? MathPath::bf16_dot : MathPath::f32_fma; }
MathPath bf16_decode(DType act, DType cache) {
  return act == DType::bf16 && (cache == DType::bf16 || cache == DType::fp8_e4m3) ? MathPath::bf16_dot
                                                                                   : MathPath::f32_fma;
}

size_t f32_prefill_scratch(int dqk, int dv) { return prefill_scratch_bytes_f32<Avx512>(kTileRows, dqk, dv); }
size_t f32_decode_scratch(int lanes, int latent, int rope) {
  return decode_scratch_bytes_f32<Avx512>(lanes, latent, rope);
}
size_t both_prefill_scratch(int dqk, int dv) {
  const size_t a = f32_prefill_scratch(dqk, dv), b = prefill_scratch_bytes_bf16(kTileRows, dqk, dv);
  return a > b ? a : b;
}
size_t both_decode_scratch(int lanes, int latent, int rope) {
  const size_t a = f32_decode_scratch(lanes, latent, rope), b = decode_scratch_bytes_bf16(lanes, latent, rope);
  return a > b ? a : b;
}

void f32_prefill_tile(const PrefillTileJob& job) { prefill_tile_f32<Avx512>(job); }
void f32_decode_split(const DecodeSplitJob& job) { decode_split_f32<Avx512>(job); }
void any_prefill_tile(const PrefillTileJob& job) {
  if (job.path == MathPath::bf16_dot) {
    prefill_tile_bf16(job);
  } else {
    prefill_tile_f32<Avx512>(job);
  }
}
void any_decode_split(const DecodeSplitJob& job) {
  if (job.path == MathPath::bf16_dot) {
    decode_split_bf16(job);
  } else {
    decode_split_f32<Avx512>(job);
  }
}

const KernelTable kAvx512{CpuIsa::avx512,     Avx512::W,          kTileRows,
                          always_f32_prefill, always_f32_decode,  f32_prefill_scratch,
                          f32_decode_scratch, f32_prefill_tile,   f32_decode_split,
                          Avx512::to_f32, Avx512::from_f32,     Avx512::pack_value_pairs};
const KernelTable kAvx512Bf16{CpuIsa::avx512_bf16, Avx512::W,           kTileRows,
                              bf16_prefill,        bf16_decode,         both_prefill_scratch,
                              both_decode_scratch, any_prefill_tile,    any_decode_split,
                              Avx512::to_f32, Avx512::from_f32,      Avx512::pack_value_pairs};

}  // namespace

const KernelTable& kernels_avx512() { return kAvx512; }
const KernelTable& kernels_avx512_bf16() { return kAvx512Bf16; }

}  // namespace lattn::cpu
