// The lightning indexer's host entries of the CPU device-ops table
// (core/ops/device_ops.h): per-token loops over the kernels of
// indexer_cpu.cpp, on arguments the core has checked (index arrays on the host).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/indexer_cpu.h"

namespace lattn::cpu {
namespace {

int32_t i32_at(const Tensor& t, int64_t i) { return t.data_as<const int32_t>()[i * t.stride(0)]; }

// Every token's request and position (it sees positions [0, position]).
IndexerTokens indexer_tokens(const IndexerArgs& a) {
  const int64_t T = a.q.size(0), B = a.seq_lens.size(0);
  IndexerTokens tok;
  tok.request.resize(size_t(T));
  tok.position.resize(size_t(T));
  for (int64_t r = 0; r < B; ++r) {
    const int32_t q0 = i32_at(a.query_start_loc, r), q1 = i32_at(a.query_start_loc, r + 1), len = i32_at(a.seq_lens, r);
    for (int32_t t = q0; t < q1; ++t) {
      tok.request[size_t(t)] = int32_t(r);
      tok.position[size_t(t)] = len - (q1 - q0) + (t - q0);
    }
  }
  return tok;
}

}  // namespace

void indexer_logits(const IndexerArgs& a, const IndexerKeyCache& cache, const Tensor& logits, bool reference) {
  const IndexerTokens tok = indexer_tokens(a);
  const int threads = omp_get_max_threads();
  for (int64_t t = 0; t < a.q.size(0); ++t) {
    float* row = logits.data_as<float>() + t * logits.stride(0);
    if (reference) {
      indexer_token_logits_reference(a, cache, tok, int(t), row);
    } else {
      indexer_token_logits_cpu(a, cache, tok, int(t), row, threads);
    }
    std::fill(row + tok.position[size_t(t)] + 1, row + logits.size(1), -INFINITY);
  }
}

void indexer_topk(const IndexerArgs& a, const IndexerKeyCache& cache, const Tensor& topk_indices, bool reference) {
  const IndexerTokens tok = indexer_tokens(a);
  const int64_t T = a.q.size(0);
  const int k = int(topk_indices.size(1));
  const int64_t bs = cache.block_size();
  const int threads = omp_get_max_threads();
  // Position p of token t -> its slot.
  const auto to_slots = [&](int64_t t, int32_t* row) {
    const int r = tok.request[size_t(t)];
    for (int i = 0; i < k; ++i) {
      if (row[i] < 0) continue;
      const int32_t block =
          a.block_table.data_as<const int32_t>()[r * a.block_table.stride(0) + (row[i] / bs) * a.block_table.stride(1)];
      row[i] = int32_t(block * bs + row[i] % bs);
    }
  };
  // Many tokens: one per thread (serial logits each); few: each token's logits over all threads.
  const bool per_token_threads = T >= threads;
  int64_t longest = 0;
  for (int32_t p : tok.position) longest = std::max<int64_t>(longest, int64_t(p) + 1);
#pragma omp parallel num_threads(per_token_threads ? threads : 1)
  {
    std::vector<float> logits(static_cast<size_t>(longest));
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < T; ++t) {
      if (reference) {
        indexer_token_logits_reference(a, cache, tok, int(t), logits.data());
      } else {
        indexer_token_logits_cpu(a, cache, tok, int(t), logits.data(), per_token_threads ? 1 : threads);
      }
      int32_t* row = topk_indices.data_as<int32_t>() + t * topk_indices.stride(0);
      topk_one_row(logits.data(), tok.position[size_t(t)] + 1, k, row);
      to_slots(t, row);
    }
  }
}

void topk_positions(const Tensor& logits, const Tensor& lengths, const Tensor& out) {
  const int64_t T = logits.size(0);
  // One row needs no team: waking a second thread costs more than the row
  // (tens of ms on a loaded machine).
#pragma omp parallel for schedule(dynamic, 1) if (T > 1)
  for (int64_t t = 0; t < T; ++t) {
    topk_one_row(logits.data_as<const float>() + t * logits.stride(0), i32_at(lengths, t), int(out.size(1)),
                 out.data_as<int32_t>() + t * out.stride(0));
  }
}

}  // namespace lattn::cpu
