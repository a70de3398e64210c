// src/cpu/indexer_cpu.h — host implementations of the lightning indexer
// (lattn/sparse.h), on validated arguments (internal).
#pragma once

#include <cstdint>
#include <vector>

#include "lattn/sparse.h"

namespace lattn::cpu {

// Per-token facts the indexer ops derive from IndexerArgs once: the request
// and the position of every token (it sees positions [0, position]).
struct IndexerTokens {
  std::vector<int32_t> request, position;
};

//   k [T, D], slot_mapping [T'] int64 (host)
void indexer_k_cache_write(const Tensor& k, const IndexerKeyCache& cache, const Tensor& slot_mapping);

// logits[p] for p <= position of token t (count = position + 1), f64 math
// (reference) or the fast path (cpu).
void indexer_token_logits_reference(const IndexerArgs& a, const IndexerKeyCache& cache, const IndexerTokens& tok, int t,
                                    float* logits);
// The fast path; `threads` splits the positions (1: the calling thread only).
void indexer_token_logits_cpu(const IndexerArgs& a, const IndexerKeyCache& cache, const IndexerTokens& tok, int t,
                              float* logits, int threads);

// The device-ops table's entries (indexer_host.cpp): every token of the
// batch, on checked arguments with host index arrays.
void indexer_logits(const IndexerArgs& a, const IndexerKeyCache& cache, const Tensor& logits, bool reference);
void indexer_topk(const IndexerArgs& a, const IndexerKeyCache& cache, const Tensor& topk_indices, bool reference);
//   logits [T, S] f32, lengths [T] i32 (host), out [T, topk] i32
void topk_positions(const Tensor& logits, const Tensor& lengths, const Tensor& out);

// The top-k positions of logits [n] into out [k]: logit descending, ties to
// the lower position, NaN last; -1 past n. Radix selection: O(n), no sort of n.
void topk_one_row(const float* logits, int n, int k, int32_t* out);

}  // namespace lattn::cpu
