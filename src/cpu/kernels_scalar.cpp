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
void decode_split(const DecodeSplitJob& job) { decode_split_f32<Scalar>(job); }

const KernelTable kScalar{CpuIsa::scalar,  Scalar::W,      kTileRows,    f32_prefill,    f32_decode,
                          prefill_scratch, decode_scratch, prefill_tile, decode_split,   Scalar::to_f32, Scalar::from_f32,
                          Scalar::pack_value_pairs};

}  // namespace

const KernelTable& kernels_scalar() { return kScalar; }

}  // namespace lattn::cpu
