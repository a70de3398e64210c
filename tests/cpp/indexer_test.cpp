// The lightning indexer (lattn/sparse.h): its key cache write, the logits
// (cpu against the fp64 reference), causal top-k against a brute-force sort
// (ties to the lower position, NaN last, -1 padding), NaN-poisoned slots no
// token owns never read, and bad input refused with nothing written; the
// cuda backend (GPU machines) against the host: identical key bytes, logits
// within f32 error of the fp64 reference, top-k equal to a brute-force sort
// of its own logits, and equal to the host's top-k on heavy ties over 131072
// positions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "lattn/errors.h"
#include "lattn/sparse.h"
#include "support/backend_driver.h"
#include "support/error_text.h"
#include "support/gpu.h"
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

// Every token's top-k global slots `out` (host [T, k] int32) against a brute-force sort of
// its own logits (`width` per token, causal: the positions it may see), mapped through its
// request's block table. `what` names the case in a failure.
void expect_topk_equals_brute_force(const OwnedTensor& out, const float* logits, int64_t width, const Data& d,
                                    const Case& c, int k, const std::string& what) {
  int t = 0;
  for (size_t r = 0; r < c.q_lens.size(); ++r) {
    for (int j = 0; j < c.q_lens[r]; ++j, ++t) {
      const int visible = c.seq_lens[r] - c.q_lens[r] + j + 1;
      const std::vector<int32_t> want = brute_topk(logits + int64_t(t) * width, visible, k);
      for (int i = 0; i < k; ++i) {
        int32_t slot = -1;
        if (want[size_t(i)] >= 0) {
          const int32_t blk =
              d.block_table.data_as<int32_t>()[r * d.block_table.tensor().stride(0) + want[size_t(i)] / c.block_size];
          slot = blk * c.block_size + want[size_t(i)] % c.block_size;
        }
        ASSERT_EQ(out.data_as<int32_t>()[t * k + i], slot) << what << " k " << k << " token " << t << " rank " << i;
      }
    }
  }
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
      ASSERT_NO_FATAL_FAILURE(expect_topk_equals_brute_force(out, logits.data_as<float>(), 64, d, c, k, backend));
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
      for (int i = 0; i < k; ++i)
        ASSERT_EQ(out.data_as<int32_t>()[t * k + i], want[size_t(i)]) << "k " << k << " row " << t << " rank " << i;
    }
  }
}

TEST(Indexer, BadInputIsRefusedWithNothingWritten) {
  const Data d = make(Case{});
  OwnedTensor out = OwnedTensor::zeros({d.T, 8}, DType::i32);
  const uint64_t before = test::hash_bytes(out);
  OwnedTensor empty = OwnedTensor::zeros({d.T, 0}, DType::i32);
  EXPECT_NE(test::error_text<ValueError>([&] {
              indexer_topk(d.args(), d.cache, empty);
            }).find("argument 'topk_indices' must have shape [7, topk >= 1], got [7, 0]"),
            std::string::npos);
  IndexerArgs bad = d.args();
  OwnedTensor bt = OwnedTensor::empty({3, 4}, DType::i32);
  fill(bt, 0.f);
  bt.data_as<int32_t>()[1] = 40;  // request 0's block 1: one past the cache
  bad.block_table = bt;
  const std::string msg = test::error_text<ValueError>([&] { indexer_topk(bad, d.cache, out); });
  EXPECT_NE(msg.find("argument 'block_table' must hold block ids in [0, 40), got 40 at [0, 1]"), std::string::npos)
      << msg;
  IndexerArgs wrong = d.args();
  OwnedTensor w64 = OwnedTensor::zeros({d.T, 8}, DType::bf16);
  wrong.weights = w64;
  EXPECT_NE(test::error_text<ValueError>([&] {
              indexer_topk(wrong, d.cache, out);
            }).find("argument 'weights' must have dtype f32"),
            std::string::npos);
  EXPECT_NE(
      test::error_text<ValueError>([&] { indexer_topk(d.args(), d.cache, out, "gpu"); }).find("argument 'backend'"),
      std::string::npos);
  EXPECT_EQ(test::hash_bytes(out), before);
}

// ---------------------------------------------------------------------------
// cuda

// The device copy of a host case: cache bytes, q, weights; index arrays on
// the device too when `device_arrays` (then max_seq_len is given).
struct DeviceData {
  OwnedIndexerKeyCache cache;
  OwnedTensor q, weights, block_table, qsl, seq_lens;
  IndexerArgs args;
};

DeviceData to_gpu(const Data& d, bool device_arrays) {
  const Device gpu = Device::cuda(0);
  DeviceData g;
  const Tensor& hc = d.cache.cache().data;
  g.cache = OwnedIndexerKeyCache(hc.size(0), hc.size(1), D, gpu);
  copy_tensor(hc, g.cache.cache().data);
  g.q = test::to_device(d.q, gpu);
  g.weights = test::to_device(d.weights, gpu);
  g.args = {g.q.tensor(), g.weights.tensor(), d.block_table.tensor(), d.qsl.tensor(), d.seq_lens.tensor()};
  if (device_arrays) {
    g.block_table = test::to_device(d.block_table, gpu);
    g.qsl = test::to_device(d.qsl, gpu);
    g.seq_lens = test::to_device(d.seq_lens, gpu);
    g.args.block_table = g.block_table;
    g.args.query_start_loc = g.qsl;
    g.args.seq_lens = g.seq_lens;
    int longest = 0;
    for (int64_t r = 0; r < d.seq_lens.tensor().numel(); ++r)
      longest = std::max(longest, d.seq_lens.data_as<int32_t>()[r]);
    g.args.max_seq_len = longest;
  }
  return g;
}

TEST(IndexerCuda, KeyWriteMatchesTheHostBitForBit) {
  LATTN_REQUIRE_GPU();
  for (DType dtype : {DType::bf16, DType::f32, DType::f16}) {
    std::mt19937_64 rng(11);
    OwnedIndexerKeyCache host(5, 4, D), dev(5, 4, D, Device::cuda(0));
    fill_bytes(host.cache().data, 0x33);
    fill_bytes(dev.cache().data, 0x33);
    OwnedTensor k = OwnedTensor::empty({9, D}, dtype), slots = OwnedTensor::empty({9}, DType::i64);
    test::fill_normal(k, rng, 3.f);
    store_from_f32(k.data(), dtype, 5, INFINITY);
    store_from_f32(k.data(), dtype, 2 * D + 3, NAN);
    store_from_f32(k.data(), dtype, 3 * D + 4, -NAN);
    store_from_f32(k.data(), dtype, 4 * D + 5, -INFINITY);
    const int64_t sv[] = {7, -1, 0, 19, 3, -1, 12, 1, 8};
    std::memcpy(slots.data(), sv, sizeof(sv));
    indexer_k_cache_write(k, host, slots);
    const OwnedTensor dk = test::to_device(k), ds = test::to_device(slots);
    indexer_k_cache_write(dk, dev, ds);
    OwnedTensor back = OwnedTensor::empty({5, 4, D + 4}, DType::u8);
    copy_tensor(dev.cache().data, back);
    EXPECT_EQ(0, std::memcmp(back.data(), host.cache().data.data(), size_t(5 * 4 * (D + 4)))) << dtype_name(dtype);
  }
}

TEST(IndexerCuda, LogitsMatchTheFp64Reference) {
  LATTN_REQUIRE_GPU();
  for (DType dtype : {DType::bf16, DType::f32}) {
    for (bool device_arrays : {false, true}) {
      Case c;
      c.dtype = dtype;
      c.H = 64;
      c.seq_lens = {1500, 60, 1};
      c.num_blocks = 110;
      const Data d = make(c);
      const DeviceData g = to_gpu(d, device_arrays);
      OwnedTensor ref = OwnedTensor::empty({d.T, 1600}, DType::f32);
      indexer_logits(d.args(), d.cache, ref, "reference");
      OwnedTensor dev = OwnedTensor::empty({d.T, 1600}, DType::f32, Device::cuda(0));
      test::poison(dev);
      indexer_logits(g.args, g.cache, dev, "cuda");
      const OwnedTensor got = test::to_host_f32(dev);
      double num = 0, den = 0;
      for (int64_t i = 0; i < int64_t(d.T) * 1600; ++i) {
        const float x = got.data_as<float>()[i], r = ref.data_as<float>()[i];
        if (std::isinf(r)) {
          ASSERT_EQ(x, r) << i;
          continue;
        }
        ASSERT_TRUE(std::isfinite(x)) << i;
        num += (double(x) - r) * (double(x) - r);
        den += double(r) * r;
      }
      EXPECT_LE(std::sqrt(num / den), test::rel_tolerance(DType::f32)) << dtype_name(dtype) << " " << device_arrays;
    }
  }
}

// Rows of 3000 positions take one CTA per token; rows of 9000 (longer than
// the 4096-position chunk) the split top-k, whose last chunk is partial and
// whose shorter rows leave chunks empty.
TEST(IndexerCuda, TopkEqualsABruteForceSortOfItsLogits) {
  LATTN_REQUIRE_GPU();
  for (bool long_rows : {false, true})
    for (bool device_arrays : {false, true}) {
      for (int k : {1, 7, 64, 2048, 4096}) {
        Case c;
        c.seed = uint64_t(k) + 3 + (long_rows ? 100 : 0);
        // One request longer than k, one shorter (-1 padding).
        c.seq_lens = long_rows ? std::vector<int>{9000, 37, 4100} : std::vector<int>{37, 3000, 1};
        c.q_lens = long_rows ? std::vector<int>{2, 1, 3} : std::vector<int>{1, 5, 1};
        c.num_blocks = long_rows ? 900 : 200;
        const int width = long_rows ? 9000 : 3000;
        const Data d = make(c);
        const DeviceData g = to_gpu(d, device_arrays);
        OwnedTensor dl = OwnedTensor::empty({d.T, width}, DType::f32, Device::cuda(0));
        indexer_logits(g.args, g.cache, dl, "cuda");
        const OwnedTensor logits = test::to_host_f32(dl);
        OwnedTensor dev = OwnedTensor::empty({d.T, k}, DType::i32, Device::cuda(0));
        test::poison(dev);
        indexer_topk(g.args, g.cache, dev, "");
        OwnedTensor out = OwnedTensor::empty({d.T, k}, DType::i32);
        copy_tensor(dev, out);
        ASSERT_NO_FATAL_FAILURE(expect_topk_equals_brute_force(
            out, logits.data_as<float>(), width, d, c, k,
            "long rows " + std::to_string(long_rows) + " device arrays " + std::to_string(device_arrays)));
      }
    }
}

TEST(IndexerCuda, TopkPositionsEqualTheHostOnTiesOver128kPositions) {
  LATTN_REQUIRE_GPU();
  std::mt19937_64 rng(5);
  const int n = 131072;
  OwnedTensor logits = OwnedTensor::empty({4, n}, DType::f32), lengths = OwnedTensor::empty({4}, DType::i32);
  std::uniform_int_distribution<int> few(-50, 50);
  std::normal_distribution<float> normal;
  for (int i = 0; i < n; ++i) {
    logits.data_as<float>()[i] = float(few(rng)) * 0.25f;                     // heavy ties
    logits.data_as<float>()[n + i] = normal(rng);                             // distinct
    logits.data_as<float>()[2 * n + i] = i % 5 ? (i % 2 ? -0.f : 0.f) : NAN;  // -0 = +0, NaN last
    logits.data_as<float>()[3 * n + i] = -INFINITY;
  }
  const int32_t lens[] = {n, n - 17, 100000, 1000};
  std::memcpy(lengths.data(), lens, sizeof(lens));
  const OwnedTensor dl = test::to_device(logits), dlen = test::to_device(lengths);
  // The default splits each row across CTAs; LATTN_TOPK_SPLIT=0 keeps one CTA per row.
  for (const char* split : {"", "0"}) {
    setenv("LATTN_TOPK_SPLIT", split, 1);
    for (int k : {1, 2048, 4096}) {
      OwnedTensor want = OwnedTensor::empty({4, k}, DType::i32),
                  dev = OwnedTensor::empty({4, k}, DType::i32, Device::cuda(0));
      topk_positions(logits, lengths, want);
      test::poison(dev);
      topk_positions(dl, dlen, dev);
      OwnedTensor got = OwnedTensor::empty({4, k}, DType::i32);
      copy_tensor(dev, got);
      for (int i = 0; i < 4 * k; ++i)
        ASSERT_EQ(got.data_as<int32_t>()[i], want.data_as<int32_t>()[i])
            << "LATTN_TOPK_SPLIT '" << split << "' k " << k << " at " << i;
    }
  }
  unsetenv("LATTN_TOPK_SPLIT");
}

TEST(IndexerCuda, RefusesWhatItCannotDo) {
  LATTN_REQUIRE_GPU();
  const Data d = make(Case{});
  const DeviceData g = to_gpu(d, true);
  OwnedTensor big = OwnedTensor::empty({d.T, 4097}, DType::i32, Device::cuda(0));
  EXPECT_NE(test::error_text<ValueError>([&] { indexer_topk(g.args, g.cache, big); }).find("up to 4096"),
            std::string::npos);
  OwnedTensor out = OwnedTensor::empty({d.T, 8}, DType::i32, Device::cuda(0));
  EXPECT_NE(
      test::error_text<ValueError>([&] { indexer_topk(g.args, g.cache, out, "reference"); }).find("host tensors only"),
      std::string::npos);
  IndexerArgs no_len = g.args;
  no_len.max_seq_len = 0;
  EXPECT_NE(test::error_text<ValueError>([&] { indexer_topk(no_len, g.cache, out); }).find("argument 'max_seq_len'"),
            std::string::npos);
}

}  // namespace
}  // namespace lattn
