// bench/harness/sparse_cases.h — the sparse-MLA benchmark cases (host):
// sparse decode / prefill over given top-k slots and the lightning indexer
// (logits + top-k), timed as the other cases are (median µs of repeats
// after warm-up) and judged against the same-run CPU ceilings.
//
// Work (sparse attention, per token): FLOPs = 2 N topk (L + R + L);
// bytes = topk · entry bytes (1152 for bf16, 656 for fp8_ds_mla) — every
// selected row read once for all heads. Indexer (per token over S
// positions): FLOPs = 2 H D S, bytes = S (D + 4).
#pragma once

#include <string>
#include <vector>

#include "harness/ceilings.h"
#include "lattn/dtype.h"

namespace lattn::bench {

enum class SparsePhase { decode, prefill, indexer };
const char* sparse_phase_name(SparsePhase p);  // "sparse-decode", "sparse-prefill", "indexer"

struct SparseCase {
  SparsePhase phase = SparsePhase::decode;
  std::string backend = "cpu";
  int num_heads = 16;  // attention heads (indexer: indexer heads)
  int tokens = 8;      // decode: batch (s_q 1); prefill: query tokens
  int topk = 2048;
  int positions = 65536;               // cached positions the indices / indexer range over
  DType kv_cache_dtype = DType::bf16;  // bf16 or kFp8DsMla (sparse phases)
  int threads = 0;                     // 0 = all
  std::string name() const;
};

struct SparseRow {
  SparseCase c;
  double median_us = 0, flops = 0, bytes = 0;
  double min_us = 0;   // the fastest repeat
  double topk_us = 0;  // indexer: the top-k step alone
  double gflops() const { return flops / median_us * 1e-3; }
  double gbps() const { return bytes / median_us * 1e-3; }
  // bf16 activations: the bf16 dot-product peak bounds compute (f32 for the indexer's f32 reduction).
  bool phase_is_bf16() const { return c.phase != SparsePhase::indexer; }
  // Roofline time = max(bytes / bandwidth, flops / peak); fraction = roofline / measured.
  double roofline_fraction(const Ceilings& ceil) const;
};

// The target cases: sparse decode H16 B8 topk 2048 (bf16 and fp8_ds_mla),
// sparse prefill 64 tokens, indexer one token over 128k positions.
std::vector<SparseCase> sparse_target_cases(const std::vector<SparsePhase>& phases);
SparseRow time_sparse_case(const SparseCase& c, int repeats = 10);
std::string format_sparse_table(const Ceilings& ceil, const std::vector<SparseRow>& rows);

}  // namespace lattn::bench
