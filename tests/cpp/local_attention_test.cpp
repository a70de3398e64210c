// Local-attention virtual batches: the seed's worked example (TV_LOCAL_1),
// the divisibility assertion and block_size checks (TV_LOCAL_2), and random
// inputs against a literal, array-at-a-time port of the seed's numpy code.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <vector>

#include "lattn/errors.h"
#include "lattn/local_attention.h"
#include "support/metadata_test_util.h"

namespace lattn {
namespace {

using V32 = std::vector<int32_t>;
using test::to_rows;

struct Table {
  std::vector<int32_t> data;
  Tensor tensor;
};

Table iota_table(int rows, int cols) {
  Table t;
  t.data.resize(size_t(rows) * size_t(cols));
  std::iota(t.data.begin(), t.data.end(), 0);
  t.tensor = Tensor(t.data.data(), DType::i32, {rows, cols});
  return t;
}

TEST(LocalAttention, TV_LOCAL_1) {
  const Table table = iota_table(3, 10);
  const V32 qsl = {0, 4, 14, 19}, seq_lens = {6, 17, 9};
  const LocalAttentionVirtualBatches v = make_local_attention_virtual_batches(4, qsl, seq_lens, table.tensor, 2);
  EXPECT_EQ(v.virtual_batches(), 8);
  EXPECT_EQ(v.seqlens_q_local, (V32{2, 2, 1, 4, 4, 1, 4, 1}));
  EXPECT_EQ(v.cu_seqlens_q_local, (V32{0, 2, 4, 5, 9, 13, 14, 18, 19}));
  EXPECT_EQ(v.seqlens_k_local, (V32{4, 2, 4, 4, 4, 1, 4, 1}));
  EXPECT_EQ(
      to_rows(v.block_table_local.tensor()),
      (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}, {12, 13}, {14, 15}, {16, 17}, {18, 19}, {22, 23}, {24, 25}}));
}

TEST(LocalAttention, TV_LOCAL_2) {
  const Table table = iota_table(3, 10);
  const V32 qsl = {0, 4, 14, 19}, seq_lens = {6, 17, 9};
  try {
    make_local_attention_virtual_batches(4, qsl, seq_lens, table.tensor, 3);
    ADD_FAILURE() << "no exception";
  } catch (const AssertionError& e) {
    EXPECT_STREQ(e.what(), "attn_chunk_size 4 is not divisible by block_size 3");
  }
  EXPECT_THROW(make_local_attention_virtual_batches(4, qsl, seq_lens, table.tensor, 0), ValueError);
  EXPECT_THROW(make_local_attention_virtual_batches(4, qsl, seq_lens, table.tensor, -2), ValueError);
  EXPECT_THROW(make_local_attention_virtual_batches(0, qsl, seq_lens, table.tensor, 2), ValueError);
  const V32 empty_query = {0, 4, 4, 9};
  EXPECT_THROW(make_local_attention_virtual_batches(4, empty_query, seq_lens, table.tensor, 2), ValueError);
  const V32 short_seq = {3, 17, 9};
  EXPECT_THROW(make_local_attention_virtual_batches(4, qsl, short_seq, table.tensor, 2), ValueError);
  const V32 short_qsl = {0, 4, 14};
  EXPECT_THROW(make_local_attention_virtual_batches(4, short_qsl, seq_lens, table.tensor, 2), ValueError);
}

// ---- literal port of the seed (numpy ops on whole arrays) ----------------------

using VL = std::vector<int64_t>;
int64_t py_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t py_mod(int64_t a, int64_t b) { return a - py_floordiv(a, b) * b; }
VL repeat(const VL& values, const VL& counts) {
  VL out;
  for (size_t i = 0; i < values.size(); ++i) out.insert(out.end(), size_t(counts[i]), values[i]);
  return out;
}
VL cumsum(const VL& v) {
  VL out(v.size());
  std::partial_sum(v.begin(), v.end(), out.begin());
  return out;
}

struct SeedResult {
  VL seqlens_q_local, cu_seqlens_q_local, seqlens_k_local;
  std::vector<VL> block_table_local;
};

SeedResult seed_port(int64_t C, const VL& qsl, const VL& seq_lens, const std::vector<VL>& block_table, int64_t bs) {
  const size_t B = seq_lens.size();
  VL q_seqlens(B), q_first(B), last(B), local_blocks(B);
  for (size_t i = 0; i < B; ++i) {
    q_seqlens[i] = qsl[i + 1] - qsl[i];
    q_first[i] = std::min(C - py_mod(seq_lens[i] - q_seqlens[i], C), q_seqlens[i]);
    last[i] = C + py_mod(seq_lens[i], -C);
    local_blocks[i] = 1 + -py_floordiv(-(q_seqlens[i] - q_first[i]), C);  // cdiv(a, b) = -(a // -b)
  }
  const VL cu_num_blocks = cumsum(local_blocks);
  const int64_t vb = cu_num_blocks.back();
  VL starts(B);
  for (size_t i = 0; i < B; ++i) starts[i] = cu_num_blocks[i] - local_blocks[i];
  const VL block_offsets = repeat(starts, local_blocks);
  VL arange(static_cast<size_t>(vb)), rarange(static_cast<size_t>(vb));
  const VL rep_blocks = repeat(local_blocks, local_blocks);
  for (int64_t v = 0; v < vb; ++v) {
    arange[size_t(v)] = v - block_offsets[size_t(v)];
    rarange[size_t(v)] = rep_blocks[size_t(v)] - arange[size_t(v)] - 1;
  }
  VL rest(B);
  for (size_t i = 0; i < B; ++i) rest[i] = q_seqlens[i] - q_first[i];
  SeedResult r;
  r.seqlens_q_local = repeat(rest, local_blocks);
  const VL rep_first = repeat(q_first, local_blocks);
  for (int64_t v = 0; v < vb; ++v) {
    const int64_t a = arange[size_t(v)];
    r.seqlens_q_local[size_t(v)] =
        a == 0 ? rep_first[size_t(v)] : std::min(r.seqlens_q_local[size_t(v)] - C * (a - 1), C);
  }
  r.cu_seqlens_q_local = {0};
  for (int64_t x : cumsum(r.seqlens_q_local)) r.cu_seqlens_q_local.push_back(x);
  r.seqlens_k_local.assign(size_t(vb), C);
  for (size_t i = 0; i < B; ++i) r.seqlens_k_local[size_t(cu_num_blocks[i] - 1)] = last[i];
  const VL rep_seq = repeat(seq_lens, local_blocks), rep_last = repeat(last, local_blocks);
  const int64_t ppl = C / bs;
  const VL batch = repeat(
      [&] {
        VL b(B);
        std::iota(b.begin(), b.end(), 0);
        return b;
      }(),
      local_blocks);
  for (int64_t v = 0; v < vb; ++v) {
    const int64_t k_start = rep_seq[size_t(v)] - (rarange[size_t(v)] * C + rep_last[size_t(v)]);
    const int64_t block_start = py_floordiv(k_start, bs);
    VL row;
    for (int64_t k = 0; k < ppl; ++k) {
      const int64_t col = std::min<int64_t>(block_start + k, int64_t(block_table[0].size()) - 1);
      row.push_back(block_table[size_t(batch[size_t(v)])][size_t(col)]);
    }
    r.block_table_local.push_back(row);
  }
  return r;
}

TEST(LocalAttention, RandomInputsMatchTheSeedPort) {
  std::mt19937_64 rng(99);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int iter = 0; iter < 2000; ++iter) {
    const int bs = uniform(1, 8);
    const int C = bs * uniform(1, 6);
    const int B = uniform(1, 6);
    const int width = uniform(1, 12);
    V32 qsl{0}, seq;
    for (int i = 0; i < B; ++i) {
      const int q = uniform(1, 3 * C + 2);
      qsl.push_back(qsl.back() + q);
      seq.push_back(q + uniform(0, 3 * C));
    }
    std::vector<int32_t> data(size_t(B * width));
    for (int32_t& x : data) x = uniform(0, 1000);
    const Tensor table(data.data(), DType::i32, {B, width});
    const LocalAttentionVirtualBatches got = make_local_attention_virtual_batches(C, qsl, seq, table, bs);

    std::vector<VL> rows;
    for (int i = 0; i < B; ++i) rows.emplace_back(data.begin() + i * width, data.begin() + (i + 1) * width);
    const SeedResult want = seed_port(C, VL(qsl.begin(), qsl.end()), VL(seq.begin(), seq.end()), rows, bs);
    SCOPED_TRACE("iteration " + std::to_string(iter));
    ASSERT_EQ(VL(got.seqlens_q_local.begin(), got.seqlens_q_local.end()), want.seqlens_q_local);
    ASSERT_EQ(VL(got.cu_seqlens_q_local.begin(), got.cu_seqlens_q_local.end()), want.cu_seqlens_q_local);
    ASSERT_EQ(VL(got.seqlens_k_local.begin(), got.seqlens_k_local.end()), want.seqlens_k_local);
    ASSERT_EQ(to_rows(got.block_table_local.tensor()), want.block_table_local);
    // Every virtual request's queries fit its keys, and its keys fit a chunk.
    for (int v = 0; v < got.virtual_batches(); ++v) {
      ASSERT_LE(got.seqlens_q_local[size_t(v)], got.seqlens_k_local[size_t(v)]);
      ASSERT_GE(got.seqlens_k_local[size_t(v)], 1);
      ASSERT_LE(got.seqlens_k_local[size_t(v)], C);
    }
  }
}

}  // namespace
}  // namespace lattn
