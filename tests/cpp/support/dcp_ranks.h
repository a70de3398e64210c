// tests/cpp/support/dcp_ranks.h — what the decode-context-parallel tests
// (dcp_test, dcp_layer_test, dcp_prefill_test) share: ranks on threads, the
// communicators of a case, one rank's cache holding only its share of every
// request's context, and the check of every rank against one rank.
#pragma once

#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "lattn/cache.h"
#include "lattn/communicator.h"
#include "lattn/dcp.h"
#include "lattn/kv_cache_spec.h"
#include "lattn/tensor.h"

namespace lattn::test {

// Runs fn(rank) on world_size threads, one a rank; after all have joined,
// rethrows the first rank's exception (each is also printed).
template <class Fn>
void on_every_rank(int world_size, Fn fn) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d failed: %s\n", r, e.what());
        errors[size_t(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// A case's group: world_size in-process communicators on `device`, or
// (nccl) one NCCL communicator of world size 1.
std::vector<std::unique_ptr<Communicator>> make_group(int world_size, Device device, bool nccl);

// One request as a rank cache holds it: its context rows (kv [max(c, 1), L],
// pe [max(c, 1), R], on the cache's device) and the tokens its block table
// needs room for (context + the tokens the test's steps write).
struct RankRequest {
  int context;
  int64_t tokens;
  const Tensor* kv;
  const Tensor* pe;
};

// One rank's cache (DcpConfig{} = the single-rank run): NaN-poisoned, blocks
// in a permuted order (seeded by `seed`), the context positions this rank
// owns written at their local slots. tables[i] = request i's local block
// table: room for its share of `tokens`, plus one spare block never read.
struct RankCache {
  std::unique_ptr<OwnedLatentCache> cache;
  std::vector<std::vector<int32_t>> tables;
};
RankCache make_rank_cache(const DcpConfig& dcp, const std::vector<RankRequest>& reqs, const KvCacheSpec& spec,
                          Device device, uint64_t seed);

// results[0], the single-rank output, is a real result (finite, not all
// zero), so a match means something; results[1 + r], rank r's, matches it
// within the bf16 bound, NaN exactly where it is NaN.
void expect_ranks_match_one_rank(const std::vector<OwnedTensor>& results, int world_size);

}  // namespace lattn::test
