// The plain C++ kernel table (f32, 8-lane arrays): the fallback for CPUs
// without AVX2, and the readable baseline the vector paths are tested with.
#include "cpu/attention_kernels_impl.h"
#include "cpu/isa_scalar.h"

namespace lattn::cpu {
namespace {

constexpr int kTileRows = 2 * Scalar::W;

MathPath f32_prefill(DType) { return MathPath::f32_fma; }
MathPath f32_decode(DType, DType) { return MathPath::f32_fma; }
size_t prefill_scratch(int dqk, int dv) { return prefill_scratch_bytes_f32<Scalar>(kTileRows, dqk, dv); }
size_t decode_scratch(int lanes, int latent, int rope) { return decode_scratch_bytes_f32<Scalar>(lanes, latent, rope); }
void prefill_tile(const PrefillTileJob& job) { prefill_tile_f32<Scalar>(job); }
size_t prefill_query_bytes(int dqk) { return prefill_query_bytes_f32<Scalar>(kTileRows, dqk); }
void pack_prefill_queries(const PrefillTileJob& job, void* dst) { pack_prefill_queries_f32<Scalar>(job, dst); }
void decode_split(const DecodeSplitJob& job) { decode_split_f32<Scalar>(job); }

const KernelTable kScalar = [] {
  KernelTable t;
  t.isa = CpuIsa::scalar;
  t.lanes_per_group = Scalar::W;
  t.prefill_tile_rows = kTileRows;
  t.prefill_path = f32_prefill;
  t.decode_path = f32_decode;
  t.prefill_scratch_bytes = prefill_scratch;
  t.decode_scratch_bytes = decode_scratch;
  t.prefill_tile = prefill_tile;
  t.decode_split = decode_split;
  t.prefill_query_bytes = prefill_query_bytes;
  t.pack_prefill_queries = pack_prefill_queries;
  t.to_f32 = Scalar::to_f32;
  t.from_f32 = Scalar::from_f32;
  t.pack_value_pairs = Scalar::pack_value_pairs;
  return t;
}();

}  // namespace

const KernelTable& kernels_scalar() { return kScalar; }

}  // namespace lattn::cpu
