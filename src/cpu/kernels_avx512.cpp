// The AVX-512 kernel tables: `avx512` (f32 FMA, 16 lanes) and `avx512bf16`
// (adds the bf16_dot path for bf16 data and the decode straight from
// fp8_ds_mla entries). Compiled with AVX-512 flags only.
#include "cpu/attention_bf16_impl.h"
#include "cpu/attention_ds_mla_impl.h"
#include "cpu/attention_kernels_impl.h"
#include "cpu/isa_avx512.h"

namespace lattn::cpu {
namespace {

constexpr int kTileRows = 2 * Avx512::W;  // 2 groups: see Avx512's register blocks

// bf16 data only: f16 and f32 would lose precision rounded to bf16, and an
// f16 cache read as bf16 would too. fp8 values are exact in bf16.
MathPath bf16_prefill(DType act) { return act == DType::bf16 ? MathPath::bf16_dot : MathPath::f32_fma; }
MathPath bf16_decode(DType act, DType cache) {
  return act == DType::bf16 && (cache == DType::bf16 || cache == DType::fp8_e4m3) ? MathPath::bf16_dot
                                                                                  : MathPath::f32_fma;
}

const KernelTable kAvx512 = [] {
  KernelTable t = f32_kernel_table<Avx512, kTileRows>(CpuIsa::avx512);
  t.pack_value_pairs = Avx512::pack_value_pairs;
  return t;
}();

size_t both_prefill_scratch(int dqk, int dv) {
  const size_t a = kAvx512.prefill_scratch_bytes(dqk, dv), b = prefill_scratch_bytes_bf16(kTileRows, dqk, dv);
  return a > b ? a : b;
}
size_t both_decode_scratch(int lanes, int latent, int rope) {
  const size_t a = kAvx512.decode_scratch_bytes(lanes, latent, rope),
               b = decode_scratch_bytes_bf16(lanes, latent, rope);
  return a > b ? a : b;
}

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

size_t both_query_bytes(int dqk) {
  const size_t a = kAvx512.prefill_query_bytes(dqk), b = prefill_query_bytes_bf16(kTileRows, dqk);
  return a > b ? a : b;
}
void any_pack_queries(const PrefillTileJob& job, void* dst) {
  if (job.path == MathPath::bf16_dot) {
    pack_prefill_query_pairs(job, static_cast<uint32_t*>(dst));
  } else {
    pack_prefill_queries_f32<Avx512>(job, dst);
  }
}

// The f32 table with the bf16_dot path beside it.
const KernelTable kAvx512Bf16 = [] {
  KernelTable t = kAvx512;
  t.isa = CpuIsa::avx512_bf16;
  t.prefill_path = bf16_prefill;
  t.decode_path = bf16_decode;
  t.prefill_scratch_bytes = both_prefill_scratch;
  t.decode_scratch_bytes = both_decode_scratch;
  t.prefill_tile = any_prefill_tile;
  t.decode_split = any_decode_split;
  t.prefill_query_bytes = both_query_bytes;
  t.pack_prefill_queries = any_pack_queries;
  t.decode_ds_mla_scratch_bytes = decode_scratch_bytes_ds;
  t.decode_split_ds_mla = decode_split_ds_mla;
  return t;
}();

}  // namespace

const KernelTable& kernels_avx512() { return kAvx512; }
const KernelTable& kernels_avx512_bf16() { return kAvx512Bf16; }

}  // namespace lattn::cpu
