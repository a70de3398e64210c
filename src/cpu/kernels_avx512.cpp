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

size_t f32_query_bytes(int dqk) { return prefill_query_bytes_f32<Avx512>(kTileRows, dqk); }
void f32_pack_queries(const PrefillTileJob& job, void* dst) { pack_prefill_queries_f32<Avx512>(job, dst); }
size_t both_query_bytes(int dqk) {
  const size_t a = f32_query_bytes(dqk), b = prefill_query_bytes_bf16(kTileRows, dqk);
  return a > b ? a : b;
}
void any_pack_queries(const PrefillTileJob& job, void* dst) {
  if (job.path == MathPath::bf16_dot) {
    pack_prefill_query_pairs(job, static_cast<uint32_t*>(dst));
  } else {
    pack_prefill_queries_f32<Avx512>(job, dst);
  }
}

const KernelTable kAvx512 = [] {
  KernelTable t;
  t.isa = CpuIsa::avx512;
  t.lanes_per_group = Avx512::W;
  t.prefill_tile_rows = kTileRows;
  t.to_f32 = Avx512::to_f32;
  t.from_f32 = Avx512::from_f32;
  t.pack_value_pairs = Avx512::pack_value_pairs;
  t.prefill_path = always_f32_prefill;
  t.decode_path = always_f32_decode;
  t.prefill_scratch_bytes = f32_prefill_scratch;
  t.decode_scratch_bytes = f32_decode_scratch;
  t.prefill_tile = f32_prefill_tile;
  t.decode_split = f32_decode_split;
  t.prefill_query_bytes = f32_query_bytes;
  t.pack_prefill_queries = f32_pack_queries;
  return t;
}();
const KernelTable kAvx512Bf16 = [] {
  KernelTable t;
  t.isa = CpuIsa::avx512_bf16;
  t.lanes_per_group = Avx512::W;
  t.prefill_tile_rows = kTileRows;
  t.to_f32 = Avx512::to_f32;
  t.from_f32 = Avx512::from_f32;
  t.pack_value_pairs = Avx512::pack_value_pairs;
  t.prefill_path = bf16_prefill;
  t.decode_path = bf16_decode;
  t.prefill_scratch_bytes = both_prefill_scratch;
  t.decode_scratch_bytes = both_decode_scratch;
  t.prefill_tile = any_prefill_tile;
  t.decode_split = any_decode_split;
  t.prefill_query_bytes = both_query_bytes;
  t.pack_prefill_queries = any_pack_queries;
  return t;
}();

}  // namespace

const KernelTable& kernels_avx512() { return kAvx512; }
const KernelTable& kernels_avx512_bf16() { return kAvx512Bf16; }

}  // namespace lattn::cpu
