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
size_t prefill_query_bytes(int dqk) { return prefill_query_bytes_f32<Avx2>(kTileRows, dqk); }
void pack_prefill_queries(const PrefillTileJob& job, void* dst) { pack_prefill_queries_f32<Avx2>(job, dst); }
void decode_split(const DecodeSplitJob& job) { decode_split_f32<Avx2>(job); }
void pack_value_pairs(const uint16_t* even, const uint16_t* odd, int64_t n, uint32_t* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = uint32_t(even[i]) | (odd ? uint32_t(odd[i]) << 16 : 0u);
}

const KernelTable kAvx2 = [] {
  KernelTable t;
  t.isa = CpuIsa::avx2;
  t.lanes_per_group = Avx2::W;
  t.prefill_tile_rows = kTileRows;
  t.prefill_path = f32_prefill;
  t.decode_path = f32_decode;
  t.prefill_scratch_bytes = prefill_scratch;
  t.decode_scratch_bytes = decode_scratch;
  t.prefill_tile = prefill_tile;
  t.decode_split = decode_split;
  t.prefill_query_bytes = prefill_query_bytes;
  t.pack_prefill_queries = pack_prefill_queries;
  t.to_f32 = Avx2::to_f32;
  t.from_f32 = Avx2::from_f32;
  t.pack_value_pairs = pack_value_pairs;
  return t;
}();

}  // namespace

const KernelTable& kernels_avx2() { return kAvx2; }

}  // namespace lattn::cpu
