// The numerical contract of docs/mla.md, on every backend this machine has
// (reference and cpu always, cuda where a GPU is usable, hopper on sm90):
//  * Precision: the error of a prefill row over a long cached context does
//    not grow with the number of context chunks (f32 running result, one
//    rounding): >= 100 chunks stay within 1.5x of the 1-chunk error, for
//    bf16 and f16 activations.
//  * Batch invariance (MlaAttentionConfig::batch_invariant): a request's
//    output rows are bit-identical alone, in a batch of 40 and at another
//    position of that batch — decodes with one and with three query tokens,
//    and prefills with a chunked context; on the GPU also decodes whose
//    lengths sit on both sides of the points where the split size changes,
//    and decodes at 32 heads (64-row tiles, hopper's wgmma kernel); on sm90
//    the request alone takes the one-launch kernel, the batches the three.
// (NaN/inf semantics are cases of the shared backend driver: nonfinite_*.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda/smxx/batch_invariant_split.h"
#include "lattn/attention.h"
#include "lattn/cache.h"
#include "lattn/device.h"
#include "lattn/metadata.h"
#include "support/backend_driver.h"
#include "support/gpu.h"
#include "support/scoped_env.h"
#include "support/test_data.h"

namespace lattn::test {
namespace {

struct Target {
  std::string prefill, decode;
  Device device;
};

// The backends as a test parameter (cuda skips without a usable GPU, hopper
// without an sm90 one).
class Numerics : public ::testing::TestWithParam<std::string> {
 protected:
  Target target() const {
    if (GetParam() == "cuda" || GetParam() == "hopper") return {GetParam(), GetParam(), Device::cuda(0)};
    return {GetParam(), GetParam(), Device::cpu()};
  }
  void SetUp() override {
    if (GetParam() == "cuda" || GetParam() == "hopper") LATTN_REQUIRE_GPU();
    if (GetParam() == "hopper") {
      const auto capability = device_capability(0);
      if (!capability || capability->major != 9) GTEST_SKIP() << "hopper needs an sm90 GPU";
    }
  }
};

// ---------------------------------------------------------------------------
// Precision vs the number of context chunks.

// One prefill (4 new tokens) over a 1600-token cached context, with the
// workspace giving 1 chunk or 100 (16-token chunks). Dims with a 96/64 head
// so the cuda prefill kernel serves them; DeepSeek's 192/128 head for
// hopper, whose sm_90a prefill kernel serves only those.
double chunked_error(DType dtype, const Target& t, int64_t workspace_rows) {
  BackendCase c;
  c.name = "chunk_precision";
  c.dims = t.prefill == "hopper" ? MlaDims{2, 512, 128, 64, 128} : MlaDims{3, 256, 64, 32, 64};
  c.dtype = c.kv_cache_dtype = dtype;
  c.prefills = {{1600, 4}};
  c.workspace_rows = workspace_rows;
  c.seed = 77;
  const BackendRun run = run_forward(c, t.prefill, t.decode, t.device);
  const OwnedTensor naive = naive_forward(c);
  const ErrorReport e = compare(run.out, naive);
  EXPECT_EQ(e.nan_mismatches, 0) << e.str();
  return e.rel_l2;
}

TEST_P(Numerics, ChunkCountPrecisionHundredChunksWithinOneAndAHalfTimesOneChunk) {
  const Target t = target();
  for (DType dtype : {DType::bf16, DType::f16}) {
    const double one = chunked_error(dtype, t, 2048);
    const double hundred = chunked_error(dtype, t, 16);
    SCOPED_TRACE(t.prefill + " " + dtype_name(dtype));
    EXPECT_LE(hundred, 1.5 * one) << "1 chunk: " << one << ", 100 chunks: " << hundred;
    EXPECT_LE(one, rel_tolerance(dtype));
    std::cout << "[ chunks   ] " << t.prefill << " " << dtype_name(dtype) << ": rel_l2 1 chunk " << one
              << ", 100 chunks " << hundred << "\n";
  }
}

// ---------------------------------------------------------------------------
// Batch invariance.

// DeepSeek per-head dims (the tensor-core kernels on cuda), 4 heads, pages of
// 16; the GPU cases of 32 heads use pages of 64 (hopper's wgmma decode).
const MlaDims kDims{4, 512, 128, 64, 128};
constexpr int kBlock = 16;

struct Req {
  int context_len = 0, query_len = 1;
  uint64_t seed = 0;  // the request's data (latents, queries) comes from this seed only
};

// Runs one batch (decodes first) in batch-invariant mode and returns each
// request's output rows as raw bytes [query_len * N * V * element size].
std::vector<std::vector<uint8_t>> run_batch(const std::vector<Req>& reqs, const Target& t, int heads, int block) {
  MlaDims dims = kDims;
  dims.num_heads = heads;
  const int64_t N = dims.num_heads, L = dims.kv_lora_rank, P = dims.qk_nope_head_dim, R = dims.qk_rope_head_dim,
                V = dims.v_head_dim;
  const DType dt = DType::bf16;
  int max_decode_q = 1, num_decodes = 0;
  int64_t T = 0, blocks = 0;
  for (const Req& r : reqs) {
    T += r.query_len;
    blocks += (r.context_len + r.query_len + block - 1) / block;
  }
  // Decodes are the requests before the first with query_len > 3.
  while (num_decodes < int(reqs.size()) && reqs[size_t(num_decodes)].query_len <= 3) {
    max_decode_q = std::max(max_decode_q, reqs[size_t(num_decodes)].query_len);
    ++num_decodes;
  }

  MlaAttentionConfig config;
  config.dims = dims;
  config.dtype = config.kv_cache_dtype = dt;
  config.device = t.device;
  config.prefill_backend = t.prefill;
  config.decode_backend = t.decode;
  config.block_size = block;
  config.max_query_tokens_per_request = 3;
  config.batch_invariant = true;
  MlaAttention attention(config);
  {
    std::mt19937_64 rng(2024);
    OwnedTensor w = OwnedTensor::empty({N * (P + V), L}, dt);
    fill_normal(w, rng, 1.f / std::sqrt(float(L)));
    if (t.device.is_cpu()) {
      attention.process_weights_after_loading(w);
    } else {
      attention.process_weights_after_loading(to_device(w.tensor(), t.device));
    }
  }

  // Per-request data; blocks handed out in request order.
  OwnedTensor q = OwnedTensor::empty({T, N, P + R}, dt), kv_c = OwnedTensor::empty({T, L}, dt),
              k_pe = OwnedTensor::empty({T, R}, dt);
  OwnedTensor cache_host = OwnedTensor::empty({blocks, block, L + R}, dt);
  fill_bytes(cache_host, 0xff);
  std::vector<RequestSpec> specs;
  int64_t row = 0;
  int32_t next_block = 0;
  for (const Req& r : reqs) {
    std::mt19937_64 rng(r.seed);
    fill_normal(q.tensor().narrow(0, row, r.query_len), rng);
    fill_normal(kv_c.tensor().narrow(0, row, r.query_len), rng);
    fill_normal(k_pe.tensor().narrow(0, row, r.query_len), rng);
    RequestSpec spec;
    spec.query_len = r.query_len;
    spec.num_computed_tokens = r.context_len;
    for (int b = 0; b < (r.context_len + r.query_len + block - 1) / block; ++b)
      spec.block_table.push_back(next_block++);
    OwnedTensor ctx = OwnedTensor::empty({std::max(r.context_len, 1), L + R}, dt);
    fill_normal(ctx, rng);
    for (int j = 0; j < r.context_len; ++j) {
      void* dst = cache_host.tensor().ptr_at({spec.block_table[size_t(j / block)], j % block});
      std::memcpy(dst, ctx.tensor().ptr_at({j}), size_t(L + R) * 2);
    }
    specs.push_back(std::move(spec));
    row += r.query_len;
  }

  MetadataBuilderConfig mb;
  mb.block_size = block;
  mb.context_chunk_workspace_size = 1024;
  mb.batch_invariant = true;
  mb.batch_invariant_context_chunk = 256;
  mb.reorder_batch_threshold = max_decode_q;
  mb.num_cache_blocks = blocks;
  MlaMetadata md = MlaMetadataBuilder(mb).build(specs);
  md.to_device(t.device);

  OwnedLatentCache cache(blocks, block, dims, dt, t.device);
  copy_tensor(cache_host.tensor(), cache.cache().data);
  // The inputs on the target's device (host tensors as they are).
  OwnedTensor qd, kvd, ped;
  if (!t.device.is_cpu()) {
    qd = to_device(q.tensor(), t.device);
    kvd = to_device(kv_c.tensor(), t.device);
    ped = to_device(k_pe.tensor(), t.device);
  }
  const bool host = t.device.is_cpu();
  OwnedTensor out = OwnedTensor::empty({T, N * V}, dt, t.device);
  poison(out);
  attention.forward(host ? q.tensor() : qd.tensor(), host ? kv_c.tensor() : kvd.tensor(),
                    host ? k_pe.tensor() : ped.tensor(), cache, md, out);
  OwnedTensor out_host = OwnedTensor::empty({T, N * V}, dt);
  copy_tensor(out.tensor(), out_host.tensor());

  std::vector<std::vector<uint8_t>> rows;
  row = 0;
  const size_t row_bytes = size_t(N * V) * 2;
  for (const Req& r : reqs) {
    const auto* p = static_cast<const uint8_t*>(out_host.tensor().ptr_at({row}));
    rows.emplace_back(p, p + row_bytes * size_t(r.query_len));
    row += r.query_len;
  }
  return rows;
}

// A batch of 40 random requests (decodes of 1..3 tokens with
// mate_keys..mate_keys + 1499 keys first, then prefills) with `target` at
// index `at` of its kind.
std::vector<Req> batch_with(const Req& target, bool target_is_decode, int at, uint64_t seed, int mate_keys = 0) {
  std::mt19937_64 rng(seed);
  std::vector<Req> decodes, prefills;
  for (int i = 0; i < 24; ++i) {
    decodes.push_back({mate_keys + int(rng() % 1500), 1 + int(rng() % 3), rng()});
  }
  for (int i = 0; i < 15; ++i) prefills.push_back({int(rng() % 900), 4 + int(rng() % 30), rng()});
  std::vector<Req>& kind = target_is_decode ? decodes : prefills;
  kind.insert(kind.begin() + at, target);
  decodes.insert(decodes.end(), prefills.begin(), prefills.end());
  return decodes;
}

struct InvarianceCase {
  const char* name;
  Req target;
  bool decode;
  int heads = kDims.num_heads, block = kBlock;
  int mate_keys = 0;  // the decode batchmates' shortest length
  int at_a = 3;       // the target's index among its kind in the first batch
  // LATTN_BATCH_INVARIANT_FOLD for the case: nullptr, each kernel's default
  // (hopper's wgmma kernel folds the splits of a part, the 16-row kernel
  // does not); "1": the 16-row kernel folds too; "0": neither does.
  const char* fold = nullptr;
};

// The rows of a request (raw bf16 bytes, [rows, N * V]) against the same
// request's rows from the `reference` backend: within the bf16 bound.
void expect_close_to_reference(const std::vector<uint8_t>& got, const std::vector<uint8_t>& ref, int heads) {
  ASSERT_EQ(got.size(), ref.size());
  const int64_t cols = int64_t(heads) * kDims.v_head_dim, rows = int64_t(got.size()) / (cols * 2);
  OwnedTensor g = OwnedTensor::empty({rows, cols}, DType::bf16), r = OwnedTensor::empty({rows, cols}, DType::bf16);
  std::memcpy(g.tensor().data(), got.data(), got.size());
  std::memcpy(r.tensor().data(), ref.data(), ref.size());
  const ErrorReport e = compare(g.tensor(), r.tensor());
  EXPECT_EQ(e.nan_mismatches, 0) << e.str();
  EXPECT_LE(e.rel_l2, rel_tolerance(DType::bf16)) << e.str();
}

TEST_P(Numerics, BatchInvarianceRowsIdenticalAloneInABatchOf40AndAtAnotherPosition) {
  std::vector<InvarianceCase> cases = {
      {"decode_1_token", {1300, 1, 11}, true},
      {"decode_3_tokens", {1100, 3, 12}, true},
      {"prefill_chunked_context", {700, 20, 13}, false},
      // cpu: a request of 512-1023 keys is cut into two halves (src/cpu/decode_plan.h).
      {"decode_1_token_700_keys", {699, 1, 20}, true},
  };
  const Target t = target();
  if (!t.device.is_cpu()) {
    // The GPU decode's split size follows the request's length
    // (src/cuda/smxx/batch_invariant_split.h): lengths on both sides of the
    // points where it changes (64-key tiles on an H100; 16 heads, rule 4:
    // 1-tile splits up to 63 tiles, 2-tile splits from 64; rule 2, e.g. on
    // A100-class parts without folding: 2-tile splits from 16 tiles, 4-tile
    // from 64), among batchmates whose lengths fall on other sides of them.
    cases.push_back({"decode_1_token_960_keys", {959, 1, 14}, true});
    cases.push_back({"decode_1_token_961_keys", {960, 1, 15}, true});
    cases.push_back({"decode_3_tokens_4032_keys", {4029, 3, 16}, true});
    cases.push_back({"decode_3_tokens_4033_keys", {4030, 3, 17}, true});
    // 32 heads: the kernel and its tiles follow the head count, not the
    // batch's longest query (64-row tiles; hopper's wgmma kernel on pages of
    // 64): one M tile alone, two in a batch with 3-token decodes.
    cases.push_back({"decode_1_token_h32", {1300, 1, 18}, true, 32, 64});
    cases.push_back({"decode_3_tokens_h32", {2500, 3, 19}, true, 32, 64});
    // Among long batchmates (3000-4500 keys); with LATTN_BATCH_INVARIANT_FOLD=1
    // the 16-row kernel's plan gives each part many consecutive splits
    // (sm80/decode/decode_split_fold.cuh): first in its batch, a short
    // request lies inside the first part, which folds its splits itself and
    // writes the output (alone: one part per split, folded by the merge); a
    // longer one is met by several parts (the first folds its splits into
    // one slot, the others write a slot per split, the combine folds them).
    for (const char* fold : {static_cast<const char*>(nullptr), "1"}) {
      cases.push_back({fold ? "decode_1_token_300_keys_long_mates_folded" : "decode_1_token_300_keys_long_mates",
                       {299, 1, 21},
                       true,
                       kDims.num_heads,
                       kBlock,
                       3000,
                       0,
                       fold});
      cases.push_back({fold ? "decode_3_tokens_2500_keys_long_mates_folded" : "decode_3_tokens_2500_keys_long_mates",
                       {2497, 3, 22},
                       true,
                       kDims.num_heads,
                       kBlock,
                       3000,
                       0,
                       fold});
    }
    cases.push_back({"decode_1_token_1300_keys_folded", {1300, 1, 11}, true, kDims.num_heads, kBlock, 0, 3, "1"});
    cases.push_back({"decode_3_tokens_4033_keys_folded", {4030, 3, 17}, true, kDims.num_heads, kBlock, 0, 3, "1"});
    // 32 heads among long batchmates: hopper's wgmma kernel folds by default
    // (sm90/decode/decode_split_fold.cuh; rule 1, one wave of 66 parts of
    // 2 M tiles, about 6 splits a part): first in its batch, the 300-key
    // request (5 splits) lies inside the first part, folded and written
    // there; the 2500-key one (10 splits) is met by two parts (the first
    // folds 6 splits into one slot, the second writes 4). Alone, every split
    // is a part of its own and the combine folds them. "0": the same cases
    // with every split written (the merge alone). `cuda` runs its 64-row
    // sm80 tiles, which never fold.
    for (const char* fold : {static_cast<const char*>(nullptr), "0"}) {
      cases.push_back(
          {fold ? "decode_1_token_300_keys_long_mates_h32_unfolded" : "decode_1_token_300_keys_long_mates_h32",
           {299, 1, 23},
           true,
           32,
           64,
           3000,
           0,
           fold});
      cases.push_back(
          {fold ? "decode_3_tokens_2500_keys_long_mates_h32_unfolded" : "decode_3_tokens_2500_keys_long_mates_h32",
           {2497, 3, 24},
           true,
           32,
           64,
           3000,
           0,
           fold});
    }
  }
  {
    // LATTN_INVARIANCE_CASES=A,B,... runs only the cases whose name holds
    // one of them, or ends with it where it ends with '$' (a GPU run short
    // of time re-checks the cases a change touches).
    const char* only = std::getenv("LATTN_INVARIANCE_CASES");
    const auto selected = [&](const std::string& name) {
      if (!only || !*only) return true;
      const std::string list = only;
      for (size_t b = 0; b <= list.size();) {
        const size_t e = std::min(list.find(',', b), list.size());
        std::string want = list.substr(b, e - b);
        const bool at_end = !want.empty() && want.back() == '$';
        if (at_end) want.pop_back();
        if (!want.empty() &&
            (at_end ? name.size() >= want.size() && name.compare(name.size() - want.size(), want.size(), want) == 0
                    : name.find(want) != std::string::npos))
          return true;
        b = e + 1;
      }
      return false;
    };
    for (const InvarianceCase& c : cases) {
      if (!selected(c.name)) continue;
      SCOPED_TRACE(t.prefill + "/" + t.decode + " " + c.name);
      // Read at each plan; restored after the case.
      const ScopedEnv fold_env("LATTN_BATCH_INVARIANT_FOLD", c.fold);
      const std::vector<std::vector<uint8_t>> alone = run_batch({c.target}, t, c.heads, c.block);
      const std::vector<Req> batch_a = batch_with(c.target, c.decode, c.at_a, 5, c.mate_keys);
      const std::vector<Req> batch_b = batch_with(c.target, c.decode, c.decode ? 20 : 11, 6, c.mate_keys);
      ASSERT_EQ(batch_a.size(), 40u);
      const auto index_of = [&](const std::vector<Req>& b) {
        for (size_t i = 0; i < b.size(); ++i) {
          if (b[i].seed == c.target.seed) return i;
        }
        return size_t(0);
      };
      const std::vector<std::vector<uint8_t>> in_a = run_batch(batch_a, t, c.heads, c.block);
      const std::vector<std::vector<uint8_t>> in_b = run_batch(batch_b, t, c.heads, c.block);
      EXPECT_TRUE(alone[0] == in_a[index_of(batch_a)]) << "alone vs in a batch of 40";
      EXPECT_TRUE(alone[0] == in_b[index_of(batch_b)]) << "alone vs at another position of another batch";
      size_t non_finite = 0;
      for (size_t i = 0; i + 1 < alone[0].size(); i += 2)
        non_finite += (alone[0][i + 1] & 0x7f) == 0x7f && (alone[0][i] & 0x80);
      EXPECT_EQ(non_finite, 0u) << "the target's rows were all written";
      // Identical bits are not enough: the GPU's split merges (the combine's
      // fold, the kernels' in-part folds) must also be right.
      if (!t.device.is_cpu()) {
        const Target ref{"reference", "reference", Device::cpu()};
        const std::vector<uint8_t> expected = run_batch({c.target}, ref, c.heads, c.block)[0];
        expect_close_to_reference(alone[0], expected, c.heads);
        expect_close_to_reference(in_a[index_of(batch_a)], expected, c.heads);
      }
    }
  }
}

// The split rule itself (host side; the kernels call the same functions):
// sizes at the points where they change, and the splits of every length up
// to 2^16 tiles tile [0, tiles) exactly, in between 2 sqrt(tiles) and
// 4 sqrt(tiles) parts from 16 tiles on.
TEST(BatchInvariantSplit, SizeFollowsTheLengthOnlyAndTheSplitsCoverItExactly) {
  using cuda::batch_invariant_num_splits;
  using cuda::batch_invariant_split_range;
  using cuda::batch_invariant_split_tiles;
  EXPECT_EQ(batch_invariant_num_splits(0), 0);
  EXPECT_EQ(batch_invariant_split_tiles(1), 1);
  EXPECT_EQ(batch_invariant_split_tiles(15), 1);
  EXPECT_EQ(batch_invariant_split_tiles(16), 2);
  EXPECT_EQ(batch_invariant_split_tiles(63), 2);
  EXPECT_EQ(batch_invariant_split_tiles(64), 4);
  EXPECT_EQ(batch_invariant_split_tiles(255), 4);
  EXPECT_EQ(batch_invariant_split_tiles(256), 8);
  EXPECT_EQ(batch_invariant_split_tiles(1 << 30), 16384);
  EXPECT_EQ(batch_invariant_split_tiles(2147483647), 16384);
  EXPECT_EQ(batch_invariant_num_splits(15), 15);
  EXPECT_EQ(batch_invariant_num_splits(16), 8);
  EXPECT_EQ(batch_invariant_num_splits(63), 32);
  EXPECT_EQ(batch_invariant_num_splits(64), 16);
  // Other rules (2^rule s^2 <= tiles): 4 cuts finer, 0 and -2 coarser.
  EXPECT_EQ(batch_invariant_split_tiles(63, 4), 1);
  EXPECT_EQ(batch_invariant_split_tiles(64, 4), 2);
  EXPECT_EQ(batch_invariant_split_tiles(255, 4), 2);
  EXPECT_EQ(batch_invariant_split_tiles(256, 4), 4);
  EXPECT_EQ(batch_invariant_split_tiles(3, 0), 1);
  EXPECT_EQ(batch_invariant_split_tiles(4, 0), 2);
  EXPECT_EQ(batch_invariant_split_tiles(64, 0), 8);
  EXPECT_EQ(batch_invariant_split_tiles(64, -2), 16);
  EXPECT_EQ(batch_invariant_split_tiles(2147483647, 6), 4096);
  EXPECT_EQ(batch_invariant_split_tiles(2147483647, -2), 16384);
  for (int rule = cuda::kBatchInvariantMinSplitRule; rule <= cuda::kBatchInvariantMaxSplitRule; ++rule) {
    const int max_tiles = rule == cuda::kBatchInvariantDefaultSplitRule ? 1 << 16 : 1 << 13;
    for (int tiles = 1; tiles <= max_tiles; ++tiles) {
      const int n = batch_invariant_num_splits(tiles, rule);
      int covered = 0;
      for (int i = 0; i < n; ++i) {
        int begin = 0, end = 0;
        batch_invariant_split_range(tiles, i, begin, end, rule);
        ASSERT_EQ(begin, covered) << "rule " << rule << " tiles " << tiles << " split " << i;
        ASSERT_GT(end, begin) << "rule " << rule << " tiles " << tiles << " split " << i;
        covered = end;
      }
      ASSERT_EQ(covered, tiles) << "rule " << rule;
      // Several splits at once cover the same tiles.
      int begin = 0, end = 0;
      cuda::batch_invariant_splits_range(tiles, 1, n, rule, begin, end);
      if (n >= 2) {
        int b1 = 0, e1 = 0;
        batch_invariant_split_range(tiles, 1, b1, e1, rule);
        ASSERT_EQ(begin, b1);
        ASSERT_EQ(end, tiles);
      }
      // Between sqrt(2^rule tiles) and 2 sqrt(2^rule tiles) parts where the
      // split is neither at its floor (1 tile) nor at its cap (16384 tiles).
      const double root = std::sqrt(std::ldexp(double(tiles), rule));
      if (root >= 4.0 && std::ldexp(1.0, rule) <= double(tiles) && batch_invariant_split_tiles(tiles, rule) < 16384) {
        ASSERT_GE(double(n), root - 1.0) << "rule " << rule << " tiles " << tiles;
        ASSERT_LT(double(n), 2.0 * root + 1.0) << "rule " << rule << " tiles " << tiles;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Numerics, ::testing::Values("reference", "cpu", "cuda", "hopper"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace lattn::test
