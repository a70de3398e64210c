// The lightning indexer (lattn/sparse.h): its key cache write, the logits
// (cpu against the fp64 reference), causal top-k against a brute-force sort
// (ties to the lower position, NaN last, -1 padding), NaN-poisoned slots no
// token owns never read, and bad input refused with nothing written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "lattn/errors.h"
#include "lattn/sparse.h"
#include "support/backend_driver.h"
#include "support/error_text.h"
#include "support/test_data.h"

namespace lattn {
namespace {

constexpr int D = 128;

struct Case {
  int H = 8, block_size = 16, num_blocks = 40;
  std::vector<int> q_lens{1, 5, 1}, seq_lens{37, 60, 1};
  DType dtype = DType::bf16;
  uint64_t seed = 1;
};

struct Data {
  OwnedIndexerKeyCache cache;
  OwnedTensor q, weights, block_table, qsl, seq_lens;
  int T = 0;
  IndexerArgs args() const {
    return {q.tensor(), weights.tensor(), block_table.tensor(), qsl.tensor(), seq_lens.tensor()};
  }
};

Data make(const Case& c) {
  std::mt19937_64 rng(c.seed);
  Data d;
  d.cache = OwnedIndexerKeyCache(c.num_blocks, c.block_size, D);
  fill_bytes(d.cache.cache().data, 0xff);  // NaN keys and NaN scales wherever no token lives
  const int B = int(c.seq_lens.size());
  d.T = std::accumulate(c.q_lens.begin(), c.q_lens.end(), 0);
  int max_blocks = 0;
  for (int len : c.seq_lens) max_blocks = std::max(max_blocks, (len + c.block_size - 1) / c.block_size);
  d.block_table = OwnedTensor::empty({B, max_blocks + 2}, DType::i32);
  std::vector<int32_t> blocks(size_t(c.num_blocks));
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  size_t next = 0;
  for (int r = 0; r < B; ++r) {
    for (int b = 0; b < max_blocks + 2; ++b) {
      const bool used = b < (c.seq_lens[size_t(r)] + c.block_size - 1) / c.block_size;
      d.block_table.data_as<int32_t>()[r * (max_blocks + 2) + b] = used ? blocks[next++] : 1 << 30;  // past the cache
    }
  }
  // Keys of every owned position, written through the op.
  int total = 0;
  for (int len : c.seq_lens) total += len;
  OwnedTensor k = OwnedTensor::empty({total, D}, DType::bf16), slots = OwnedTensor::empty({total}, DType::i64);
  test::fill_normal(k, rng, 1.f);
  int row = 0;
  for (int r = 0; r < B; ++r) {
    for (int p = 0; p < c.seq_lens[size_t(r)]; ++p) {
      const int32_t blk = d.block_table.data_as<int32_t>()[r * (max_blocks + 2) + p / c.block_size];
      slots.data_as<int64_t>()[row++] = int64_t(blk) * c.block_size + p % c.block_size;
    }
  }
  indexer_k_cache_write(k, d.cache, slots);
  d.q = OwnedTensor::empty({d.T, c.H, D}, c.dtype);
  test::fill_normal(d.q, rng, 1.f);
  d.weights = OwnedTensor::empty({d.T, c.H}, DType::f32);
  test::fill_normal(d.weights, rng, 0.3f);
  d.qsl = OwnedTensor::empty({B + 1}, DType::i32);
  d.seq_lens = OwnedTensor::empty({B}, DType::i32);
  d.qsl.data_as<int32_t>()[0] = 0;
  for (int r = 0; r < B; ++r) {
    d.qsl.data_as<int32_t>()[r + 1] = d.qsl.data_as<int32_t>()[r] + c.q_lens[size_t(r)];
    d.seq_lens.data_as<int32_t>()[r] = c.seq_lens[size_t(r)];
  }
  return d;
}

// Brute force: sort all visible positions by (logit desc, position asc), NaN last.
std::vector<int32_t> brute_topk(const float* logits, int n, int k) {
  std::vector<int32_t> pos(static_cast<size_t>(n));
  std::iota(pos.begin(), pos.end(), 0);
  std::stable_sort(pos.begin(), pos.end(), [&](int32_t a, int32_t b) {
    const float x = logits[a], y = logits[b];
    if (std::isnan(x) || std::isnan(y)) return !std::isnan(x) && std::isnan(y);
    return x > y;
  });
  pos.resize(size_t(k), -1);
  return pos;
}

TEST(IndexerKeyCache, WriteQuantizesPerTokenAndSkipsPadSlots) {
  OwnedIndexerKeyCache cache(3, 4, D);
  fill_bytes(cache.cache().data, 0x33);
  std::mt19937_64 rng(2);
  OwnedTensor k = OwnedTensor::empty({3, D}, DType::f32), slots = OwnedTensor::empty({3}, DType::i64);
  test::fill_normal(k, rng, 4.f);
  k.data_as<float>()[5] = INFINITY;
  const int64_t sv[] = {7, -1, 0};
  std::memcpy(slots.data(), sv, sizeof(sv));
  indexer_k_cache_write(k, cache, slots);
  const uint8_t* base = static_cast<const uint8_t*>(cache.cache().data.data());
  for (int t : {0, 2}) {
    const uint8_t* e = base + sv[t] * (D + 4);
    float amax = 0;
    for (int i = 0; i < D; ++i) {
      const float x = k.data_as<float>()[t * D + i];
      if (std::isfinite(x)) amax = std::max(amax, std::fabs(x));
    }
    float s;
    std::memcpy(&s, e + D, 4);
    EXPECT_EQ(s, amax / 448.f);
    for (int i = 0; i < D; ++i) ASSERT_EQ(e[i], f32_to_fp8e4m3(k.data_as<float>()[t * D + i] / s)) << t << " " << i;
  }
  EXPECT_EQ(base[7 * (D + 4) + 5], 0x7e);  // +inf saturates to 448
  for (int64_t s = 0; s < 12; ++s) {
    if (s == 7 || s == 0) continue;
    for (int i = 0; i < D + 4; ++i) ASSERT_EQ(base[s * (D + 4) + i], 0x33) << "slot " << s;
  }
}

TEST(Indexer, CpuLogitsMatchTheFp64Reference) {
  for (DType dtype : {DType::bf16, DType::f32}) {
    Case c;
    c.dtype = dtype;
    c.seq_lens = {1500, 60, 1};  // more than one GEMM chunk
    c.num_blocks = 110;
    const Data d = make(c);
    OwnedTensor ref = OwnedTensor::empty({d.T, 1600}, DType::f32), got = OwnedTensor::empty({d.T, 1600}, DType::f32);
    test::poison(got);
    indexer_logits(d.args(), d.cache, ref, "reference");
    indexer_logits(d.args(), d.cache, got, "cpu");
    const test::ErrorReport e = test::compare(got, ref);
    EXPECT_EQ(e.nan_mismatches, 0) << e.str();
    // Only finite entries enter the L2 norm (-inf past each token's position matches exactly).
    double num = 0, den = 0;
    for (int64_t i = 0; i < int64_t(d.T) * 1600; ++i) {
      const float g = got.data_as<float>()[i], r = ref.data_as<float>()[i];
      if (std::isinf(r)) {
        ASSERT_EQ(g, r) << i;
        continue;
      }
      num += (double(g) - r) * (double(g) - r);
      den += double(r) * r;
    }
    EXPECT_LE(std::sqrt(num / den), test::rel_tolerance(DType::f32)) << dtype_name(dtype);
    // Causal: token 1 (request 1, first of 5 queries) sits at position 55.
    EXPECT_TRUE(std::isfinite(got.data_as<float>()[1 * 1600 + 55]));
    EXPECT_EQ(got.data_as<float>()[1 * 1600 + 56], -INFINITY);
  }
}

TEST(Indexer, TopkEqualsABruteForceSortOfTheLogits) {
  for (const char* backend : {"reference", "cpu"}) {
    for (int k : {1, 7, 64, 2048}) {
      Case c;
      c.seed = uint64_t(k);
      const Data d = make(c);
      OwnedTensor logits = OwnedTensor::empty({d.T, 64}, DType::f32);
      indexer_logits(d.args(), d.cache, logits, backend);
      OwnedTensor out = OwnedTensor::empty({d.T, k}, DType::i32);
      test::poison(out);
      indexer_topk(d.args(), d.cache, out, backend);
      int t = 0;
      for (size_t r = 0; r < c.q_lens.size(); ++r) {
        for (int j = 0; j < c.q_lens[r]; ++j, ++t) {
          const int visible = c.seq_lens[r] - c.q_lens[r] + j + 1;
          const std::vector<int32_t> want = brute_topk(logits.data_as<float>() + t * 64, visible, k);
          for (int i = 0; i < k; ++i) {
            int32_t slot = -1;
            if (want[size_t(i)] >= 0) {
              const int32_t blk = d.block_table.data_as<int32_t>()[r * d.block_table.tensor().stride(0) + want[size_t(i)] / c.block_size];
              slot = blk * c.block_size + want[size_t(i)] % c.block_size;
            }
            ASSERT_EQ(out.data_as<int32_t>()[t * k + i], slot) << backend << " k " << k << " token " << t << " rank " << i;
          }
        }
      }
    }
  }
}

TEST(Indexer, TopkBreaksTiesToTheLowerPositionAndPutsNanLast) {
  std::mt19937_64 rng(4);
  const int n = 5000;
  OwnedTensor logits = OwnedTensor::empty({3, n}, DType::f32), lengths = OwnedTensor::empty({3}, DType::i32);
  std::uniform_int_distribution<int> few(-3, 3);
  for (int i = 0; i < 3 * n; ++i) logits.data_as<float>()[i] = float(few(rng)) * 0.5f;  // heavy ties
  for (int i = 0; i < n; i += 7) logits.data_as<float>()[i] = NAN;
  for (int i = 3; i < n; i += 11) logits.data_as<float>()[n + i] = i % 2 ? -0.f : 0.f;  // -0 and +0 tie
  for (int i = 0; i < n; ++i) logits.data_as<float>()[2 * n + i] = -INFINITY;
  logits.data_as<float>()[2 * n + 4000] = NAN;
  const int32_t lens[] = {n, 4321, 4500};
  std::memcpy(lengths.data(), lens, sizeof(lens));
  for (int k : {1, 100, 2048, 4999}) {
    OwnedTensor out = OwnedTensor::empty({3, k}, DType::i32);
    topk_positions(logits, lengths, out);
    for (int t = 0; t < 3; ++t) {
      std::vector<float> row(logits.data_as<float>() + t * n, logits.data_as<float>() + t * n + lens[t]);
      for (float& v : row) v = v == 0.f ? 0.f : v;  // the brute force sees -0 as +0 too
      const std::vector<int32_t> want = brute_topk(row.data(), lens[t], k);
      for (int i = 0; i < k; ++i) ASSERT_EQ(out.data_as<int32_t>()[t * k + i], want[size_t(i)]) << "k " << k << " row " << t << " rank " << i;
    }
  }
}

TEST(Indexer, BadInputIsRefusedWithNothingWritten) {
  const Data d = make(Case{});
  OwnedTensor out = OwnedTensor::zeros({d.T, 8}, DType::i32);
  const uint64_t before = test::hash_bytes(out);
  OwnedTensor empty = OwnedTensor::zeros({d.T, 0}, DType::i32);
  EXPECT_NE(test::error_text<ValueError>([&] { indexer_topk(d.args(), d.cache, empty); }).find("argument 'topk_indices' must have shape [7, topk >= 1], got [7, 0]"),
            std::string::npos);
  IndexerArgs bad = d.args();
  OwnedTensor bt = OwnedTensor::empty({3, 4}, DType::i32);
  fill(bt, 0.f);
  bt.data_as<int32_t>()[1] = 40;  // request 0's block 1: one past the cache
  bad.block_table = bt;
  const std::string msg = test::error_text<ValueError>([&] { indexer_topk(bad, d.cache, out); });
  EXPECT_NE(msg.find("argument 'block_table' must hold block ids in [0, 40), got 40 at [0, 1]"), std::string::npos) << msg;
  IndexerArgs wrong = d.args();
  OwnedTensor w64 = OwnedTensor::zeros({d.T, 8}, DType::bf16);
  wrong.weights = w64;
  EXPECT_NE(test::error_text<ValueError>([&] { indexer_topk(wrong, d.cache, out); }).find("argument 'weights' must have dtype f32"),
            std::string::npos);
  EXPECT_NE(test::error_text<ValueError>([&] { indexer_topk(d.args(), d.cache, out, "gpu"); }).find("argument 'backend'"),
            std::string::npos);
  EXPECT_EQ(test::hash_bytes(out), before);
}

}  // namespace
}  // namespace lattn
