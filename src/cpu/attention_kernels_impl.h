// src/cpu/attention_kernels_impl.h — the flash-attention kernels of the
// `cpu` backend (f32 FMA path), written once over an instruction-set policy
// `I` (internal): the shared primitives (attention_tile_primitives.h, where
// the policy's contract and the algorithm are described), the prefill tile
// (attention_prefill_tile.h) and the decode split (attention_decode_split.h).
// The bf16 dot-product path is attention_bf16_impl.h.
//
// Include only from kernels_<isa>.cpp files: everything has internal linkage,
// so each ISA's copy stays in its own object file.
#pragma once

#include "cpu/attention_decode_split.h"
#include "cpu/attention_prefill_tile.h"
#include "cpu/attention_tile_primitives.h"

namespace lattn::cpu {
namespace {

// The f32 FMA kernel table of ISA policy I with prefill tiles of TileRows
// query rows: what every kernels_<isa>.cpp starts from (the AVX512-BF16
// table then swaps in its bf16_dot entries). The entries are captureless
// lambdas, so each ISA's file gets its own copies (internal linkage).
template <class I, int TileRows>
KernelTable f32_kernel_table(CpuIsa isa) {
  KernelTable t;
  t.isa = isa;
  t.lanes_per_group = I::W;
  t.prefill_tile_rows = TileRows;
  t.prefill_path = [](DType) { return MathPath::f32_fma; };
  t.decode_path = [](DType, DType) { return MathPath::f32_fma; };
  t.prefill_scratch_bytes = [](int dqk, int dv) { return prefill_scratch_bytes_f32<I>(TileRows, dqk, dv); };
  t.decode_scratch_bytes = [](int lanes, int latent, int rope) {
    return decode_scratch_bytes_f32<I>(lanes, latent, rope);
  };
  t.prefill_tile = [](const PrefillTileJob& job) { prefill_tile_f32<I>(job); };
  t.decode_split = [](const DecodeSplitJob& job) { decode_split_f32<I>(job); };
  t.prefill_query_bytes = [](int dqk) { return prefill_query_bytes_f32<I>(TileRows, dqk); };
  t.pack_prefill_queries = [](const PrefillTileJob& job, void* dst) { pack_prefill_queries_f32<I>(job, dst); };
  t.to_f32 = I::to_f32;
  t.from_f32 = I::from_f32;
  t.combine_row = combine_row<I>;
  return t;
}

}  // namespace
}  // namespace lattn::cpu
