// tests/cpp/support/backend_driver.h — one driver that runs MlaAttention
// with any prefill/decode backend pair on any device and compares it with
// the `reference` backend (ggml's test-backend-ops idea), plus the f64 naive
// computation the reference itself is checked against.
//
// Each BackendCase is a whole step: a mixed batch (decodes first, then
// prefills; metadata from MlaMetadataBuilder), dims, dtypes, block size,
// context-chunk workspace, and hostile
// data on request: permuted block tables, block-table padding pointing past
// the cache, NaN in every cache entry no token owns (unused pages and the
// tails of partial blocks) and in padded token rows. Outputs are poisoned
// before every run, so a row a backend forgets to write fails.
//
// Every registered backend already runs every case (backend_driver_test.cpp
// walks the registries). A backend's own sweep (ISA paths, threads) calls it:
//   for (const auto& c : lattn::test::all_forward_cases())
//     EXPECT_TRUE(lattn::test::check(lattn::test::run_backend_case(c, "cpu", "cpu", lattn::Device::cpu())));
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "lattn/attention.h"
#include "lattn/cache.h"
#include "lattn/config.h"
#include "lattn/metadata.h"
#include "lattn/tensor.h"
#include "support/test_data.h"

namespace lattn::test {

// One request of a case: its cached context and its new tokens.
struct CaseRequest {
  int context_len = 0;  // tokens already in the cache
  int query_len = 1;    // new tokens this step
};

// A non-finite value planted in a case's inputs (docs/mla.md, "NaN and
// inf"): the output must be NaN exactly where the reference's is — in the
// rows that attend to it, and nowhere else.
struct Plant {
  enum class Where {
    query,          // q[row of `token` of `request`, head, element], element < P+R
    new_token,      // the latent of new token `token`: element < L is kv_c, else k_pe[element - L]
    context_token,  // cached context position `token` of `request` (its latent element)
  };
  Where where = Where::query;
  int request = 0;  // index over decodes, then prefills
  int token = 0;
  int head = 0;  // query only
  int element = 0;
  float value = 0.f;  // NaN, +inf or -inf
};

struct BackendCase {
  std::string name;
  MlaDims dims = MlaDims::deepseek_v3(16);
  DType dtype = DType::bf16;           // activations
  DType kv_cache_dtype = DType::bf16;  // f16, bf16 or fp8_e4m3
  float cache_scale = 1.f;             // fp8 caches: stored = fp8(x / cache_scale)
  int block_size = 16;
  // Decodes first, then prefills, as MlaMetadataBuilder classifies them: the
  // builder's reorder threshold is the longest decode query, so every
  // prefill's query_len must exceed every decode's.
  std::vector<CaseRequest> decodes;  // query_len > 1: speculative / MTP decode
  std::vector<CaseRequest> prefills;
  int64_t workspace_rows = 0;  // context-chunk workspace; 0 = room for every context at once
  int pad_tokens = 0;          // token rows past the real ones (slot PAD_SLOT_ID)
  bool hostile = true;         // permuted tables, NaN-poisoned unused entries and pad rows
  float poison_value = 0.f;    // hostile: 0 = NaN bytes (0xff); else this value (e.g. +inf) in them
  std::vector<Plant> plants;   // non-finite values in the inputs
  float output_scale = 0.f;    // > 0: fp8_e4m3 output, out = fp8(o / output_scale)
  uint64_t seed = 1;

  int64_t num_tokens() const;  // all token rows, padding included
  std::string str() const;     // name and shape summary, for failure messages
};

// gtest prints a case parameter by its summary.
inline void PrintTo(const BackendCase& c, std::ostream* os) { *os << c.str(); }

// What one forward produced, copied to the host.
struct BackendRun {
  OwnedTensor out;                   // [T, N*V] f32 (fp8 values, unscaled, when quantized)
  std::vector<uint8_t> cache_bytes;  // the whole cache after the forward
};

struct CaseResult {
  std::string case_name;
  std::string against;                 // "reference" or "naive f64"
  ErrorReport output;                  // the backend's output vs the oracle's
  double tolerance = 0;                // bound on output.rel_l2 (rel_tolerance of the output dtype)
  int64_t cache_bytes_differing = -1;  // vs the oracle's cache; -1 = not compared
  bool cache_must_match = false;       // f16/bf16 caches are written bit-exactly by every backend
  bool ok() const;
  std::string str() const;  // verdict, error numbers and the worst element
};

// One case made ready to run: data generated from c.seed, an MlaAttention
// with the given backends and its weights loaded, the cache (context
// written, hostile poison in place), the metadata and the inputs, all on
// `device`. Tests may change any of it before calling forward().
class PreparedStep {
 public:
  PreparedStep(const BackendCase& c, const std::string& prefill_backend, const std::string& decode_backend,
               Device device = Device::cpu());
  ~PreparedStep();
  PreparedStep(const PreparedStep&) = delete;
  PreparedStep& operator=(const PreparedStep&) = delete;

  const BackendCase& test_case() const;
  MlaAttention& attention();
  const LatentCache& cache() const;
  MlaMetadata& metadata();             // host arrays are writable (then call metadata().to_device again)
  const Tensor& q() const;             // [T, N, P+R]
  const Tensor& kv_c() const;          // [T, L]
  const Tensor& k_pe() const;          // [T, R]
  const Tensor& out() const;           // [T, N*V] (fp8_e4m3 when the case quantizes)
  const Tensor& output_scale() const;  // [1] f32, or undefined
  // Poisons out, then runs forward(q, kv_c, k_pe, cache, metadata, out, output_scale).
  Tensor forward();
  std::vector<uint8_t> cache_bytes() const;  // the whole cache, copied to the host
  BackendRun result() const;                 // out (as f32) and the cache bytes

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Runs the case with the given backends on `device` and with `reference` on
// the CPU, and compares outputs (and cache bytes).
CaseResult run_backend_case(const BackendCase& c, const std::string& prefill_backend, const std::string& decode_backend,
                            Device device = Device::cpu());
// Runs the case with `reference` on the CPU and compares with naive_forward.
CaseResult run_reference_vs_naive(const BackendCase& c);

// Lower level: one forward of the case (fresh data from c.seed each call).
BackendRun run_forward(const BackendCase& c, const std::string& prefill_backend, const std::string& decode_backend,
                       Device device = Device::cpu());
// The step computed independently of lattn's attention code, in fp64, from
// the formulas of docs/mla.md (up-project every key, ordinary causal MHA over
// [context | new]): [T, N*V] f32, padded rows 0. Values the forward reads
// back from the cache (context; every key of a decode) are rounded through
// the cache dtype as the cache stores them.
OwnedTensor naive_forward(const BackendCase& c);

// The case tables: every kind of batch, hostile data, dims, dtypes and block
// sizes (all), and a quick subset with small dims (small). Both include the
// non-finite cases (nonfinite_forward_cases: NaN/inf planted in queries,
// cached context, new tokens, padded rows and unowned cache entries).
std::vector<BackendCase> all_forward_cases();
std::vector<BackendCase> small_forward_cases();
std::vector<BackendCase> nonfinite_forward_cases();

// FNV-1a hash of a tensor's bytes (host or device; contiguous): "the cache is
// unchanged" checks after a refused call.
uint64_t hash_bytes(const Tensor& t);

// gtest adapter: success, or the result's description.
::testing::AssertionResult check(const CaseResult& result);

}  // namespace lattn::test
