// The CUDA cache and attention-state ops (src/cuda/smxx), called through the
// public API (lattn/ops.h: validation, then the CUDA hooks) where it has one,
// against plain host loops written here: concat_and_cache_mla, gather_cache,
// merge_attn_states, copy_blocks, swap_blocks, and the hooks advance_step and
// quantize_fp8. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/ops/device_ops.h"
#include "lattn/cache.h"
#include "lattn/ops.h"
#include "lattn/tensor.h"
#include "support/gpu.h"
#include "support/test_data.h"

namespace lattn {
namespace {

using test::to_device;
const Device kGpu = Device::cuda(0);

std::vector<uint8_t> bytes_of(const Tensor& t) {
  std::vector<uint8_t> v(t.nbytes());
  OwnedTensor host = OwnedTensor::empty(t.shape(), t.dtype());
  copy_tensor(t, host.tensor());
  std::memcpy(v.data(), host.data(), v.size());
  return v;
}

struct ConcatCase {
  DType input, cache;
  int L, R, block_size;
};

class ConcatAndCacheMla : public ::testing::TestWithParam<ConcatCase> {};

// Every non-PAD token lands bit-exactly where its slot says (fp8: fp8(x / scale)
// with the host's rounding); PAD tokens and tokens past slot_mapping.size(0)
// write nothing; strided input rows are read correctly.
TEST_P(ConcatAndCacheMla, WritesSlotsSkipsPadMatchesHostRounding) {
  LATTN_REQUIRE_GPU();
  const ConcatCase c = GetParam();
  std::mt19937_64 rng(7);
  const int T = 37, T_mapped = 33, D = c.L + c.R;
  const int num_blocks = (T_mapped + 12) / c.block_size + 2;  // more slots than tokens: no two tokens share one
  const float scale = c.cache == DType::fp8_e4m3 ? 0.37f : 1.f;
  // kv_c rows strided inside a wider buffer; k_pe as [T, 1, R].
  OwnedTensor kv_wide = OwnedTensor::empty({T, c.L + 24}, c.input);
  test::fill_normal(kv_wide.tensor(), rng, 2.f);
  OwnedTensor kpe = OwnedTensor::empty({T, 1, c.R}, c.input);
  test::fill_normal(kpe.tensor(), rng, 2.f);
  std::vector<int64_t> slots(size_t(num_blocks) * c.block_size);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(T_mapped);
  for (int t : {3, 10, 11, 30}) slots[size_t(t)] = -1;  // PAD_SLOT_ID
  OwnedTensor slot_host = OwnedTensor::empty({T_mapped}, DType::i64);
  std::memcpy(slot_host.data(), slots.data(), slots.size() * 8);

  OwnedTensor kv_dev = to_device(kv_wide.tensor());
  OwnedTensor kpe_dev = to_device(kpe.tensor());
  OwnedTensor slot_dev = to_device(slot_host.tensor());
  OwnedLatentCache cache(num_blocks, c.block_size, MlaDims{1, c.L, 16, c.R, 16}, c.cache, kGpu, scale);
  fill_bytes(cache.cache().data, 0xab);
  const Tensor kv_view = kv_dev.tensor().narrow(1, 0, c.L);  // stride(0) = L + 24
  concat_and_cache_mla(kv_view, kpe_dev.tensor(), cache, slot_dev.tensor(), nullptr);

  const std::vector<uint8_t> got = bytes_of(cache.cache().data);
  const int es = dtype_size(c.cache);
  std::vector<uint8_t> want(got.size(), 0xab);
  for (int t = 0; t < T_mapped; ++t) {
    if (slots[size_t(t)] < 0) continue;
    for (int d = 0; d < D; ++d) {
      const float x = d < c.L ? load_as_f32(kv_wide.data(), c.input, int64_t(t) * (c.L + 24) + d)
                              : load_as_f32(kpe.data(), c.input, int64_t(t) * c.R + (d - c.L));
      uint8_t* dst = want.data() + (size_t(slots[size_t(t)]) * D + d) * es;
      std::vector<uint8_t> tmp(static_cast<size_t>(es));
      store_from_f32(tmp.data(), c.cache, 0, c.cache == DType::fp8_e4m3 ? x / scale : x);
      std::memcpy(dst, tmp.data(), size_t(es));
    }
  }
  int64_t mismatches = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      if (first < 0) first = int64_t(i);
      ++mismatches;
    }
  }
  EXPECT_EQ(mismatches, 0) << "first differing byte " << first;
}

INSTANTIATE_TEST_SUITE_P(Cuda, ConcatAndCacheMla,
                         ::testing::Values(ConcatCase{DType::bf16, DType::bf16, 512, 64, 16},
                                           ConcatCase{DType::f16, DType::f16, 512, 64, 1},
                                           ConcatCase{DType::bf16, DType::fp8_e4m3, 512, 64, 64},
                                           ConcatCase{DType::f32, DType::bf16, 256, 32, 16},
                                           ConcatCase{DType::f16, DType::fp8_e4m3, 100, 12, 3}),  // scalar path
                         [](const ::testing::TestParamInfo<ConcatCase>& info) {
                           const ConcatCase& c = info.param;
                           return std::string(dtype_name(c.input)) + "_to_" + dtype_name(c.cache) + "_L" +
                                  std::to_string(c.L) + "_R" + std::to_string(c.R) + "_block" +
                                  std::to_string(c.block_size);
                         });

struct GatherCase {
  DType cache, dst;
  int L, R, block_size;
};
class GatherCache : public ::testing::TestWithParam<GatherCase> {};

// Context tokens come from the right (permuted) blocks and offsets, fp8 is
// dequantized with the host's arithmetic, rows past the total stay untouched.
TEST_P(GatherCache, GathersPermutedBlocksAndDequantizes) {
  LATTN_REQUIRE_GPU();
  const GatherCase c = GetParam();
  std::mt19937_64 rng(11);
  const int D = c.L + c.R, batch = 4, num_blocks = 40, max_blocks = 10;
  const float scale = c.cache == DType::fp8_e4m3 ? 0.5f : 1.f;
  OwnedTensor cache_host = OwnedTensor::empty({num_blocks, c.block_size, D}, c.cache);
  test::fill_normal(cache_host.tensor(), rng, 3.f);
  std::vector<int32_t> table(size_t(batch) * max_blocks);
  std::vector<int32_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (size_t i = 0; i < table.size(); ++i) table[i] = perm[i % size_t(num_blocks)];
  // Request b gathers n[b] tokens starting at block starts[b] / block_size.
  const std::vector<int32_t> n = {5, 0, 3 * c.block_size + 1, 2};
  const std::vector<int32_t> starts = {0, c.block_size, c.block_size * 2, c.block_size * 6};
  std::vector<int32_t> cu(batch + 1, 0);
  for (int b = 0; b < batch; ++b) cu[size_t(b) + 1] = cu[size_t(b)] + n[size_t(b)];
  const int rows = cu[batch] + 3;
  auto i32 = [](const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
    OwnedTensor t = OwnedTensor::empty(shape, DType::i32);
    std::memcpy(t.data(), v.data(), v.size() * 4);
    return t;
  };
  OwnedTensor table_t = i32(table, {batch, max_blocks}), cu_t = i32(cu, {batch + 1}), st_t = i32(starts, {batch});
  OwnedTensor cache_dev = to_device(cache_host.tensor());
  LatentCache cache{cache_dev.tensor(), c.L, c.R, scale};
  OwnedTensor dst = OwnedTensor::empty({rows, D}, c.dst, kGpu);
  test::poison(dst.tensor());
  OwnedTensor table_d = to_device(table_t.tensor()), cu_d = to_device(cu_t.tensor()), st_d = to_device(st_t.tensor());
  gather_cache(cache, dst.tensor(), table_d.tensor(), cu_d.tensor(), batch, st_d.tensor(), nullptr);
  OwnedTensor got = test::to_host_f32(dst.tensor());
  int64_t bad = 0;
  for (int b = 0; b < batch; ++b) {
    for (int j = 0; j < n[size_t(b)]; ++j) {
      const int block = table[size_t(b) * max_blocks + starts[size_t(b)] / c.block_size + j / c.block_size];
      for (int d = 0; d < D; ++d) {
        float want =
            load_as_f32(cache_host.data(), c.cache, (int64_t(block) * c.block_size + j % c.block_size) * D + d);
        if (c.cache == DType::fp8_e4m3) want *= scale;
        want = round_through(want, c.dst);
        const float g = got.data_as<float>()[int64_t(cu[size_t(b)] + j) * D + d];
        if (!(g == want)) ++bad;
      }
    }
  }
  EXPECT_EQ(bad, 0);
  for (int r = cu[batch]; r < rows; ++r) EXPECT_TRUE(std::isnan(got.data_as<float>()[int64_t(r) * D])) << "row " << r;
}

INSTANTIATE_TEST_SUITE_P(Cuda, GatherCache,
                         ::testing::Values(GatherCase{DType::bf16, DType::bf16, 512, 64, 16},
                                           GatherCase{DType::f16, DType::f16, 512, 64, 1},
                                           GatherCase{DType::fp8_e4m3, DType::bf16, 512, 64, 64},
                                           GatherCase{DType::fp8_e4m3, DType::f32, 256, 32, 16},
                                           GatherCase{DType::bf16, DType::bf16, 100, 12, 5}),
                         [](const ::testing::TestParamInfo<GatherCase>& info) {
                           const GatherCase& c = info.param;
                           return std::string(dtype_name(c.cache)) + "_to_" + dtype_name(c.dst) + "_L" +
                                  std::to_string(c.L) + "_R" + std::to_string(c.R) + "_block" +
                                  std::to_string(c.block_size);
                         });

// merge_attn_states against the formula in float64, with the robust cases
// (+inf, one side -inf, both -inf) planted, out aliasing prefix_out.
TEST(CudaMergeAttnStates, MatchesFormulaIncludingInfinities) {
  LATTN_REQUIRE_GPU();
  for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
    for (int D : {128, 512, 36}) {
      std::mt19937_64 rng(3);
      const int T = 19, N = 5;
      OwnedTensor po = OwnedTensor::empty({T, N, D}, dtype), so = OwnedTensor::empty({T, N, D}, dtype);
      test::fill_normal(po.tensor(), rng);
      test::fill_normal(so.tensor(), rng);
      OwnedTensor pl = OwnedTensor::empty({N, T}, DType::f32), sl = OwnedTensor::empty({N, T}, DType::f32);
      test::fill_uniform(pl.tensor(), rng, -3.f, 3.f);
      test::fill_uniform(sl.tensor(), rng, -3.f, 3.f);
      const float inf = std::numeric_limits<float>::infinity();
      float* p = pl.data_as<float>();
      float* s = sl.data_as<float>();
      p[0] = inf;                // FA2 empty prefix
      p[1] = -inf;               // empty prefix
      s[2] = -inf;               // empty suffix
      p[3] = -inf, s[3] = -inf;  // both empty
      p[4] = inf, s[4] = inf;    // both empty, FA2 style
      OwnedTensor po_d = to_device(po.tensor()), so_d = to_device(so.tensor());
      OwnedTensor pl_d = to_device(pl.tensor()), sl_d = to_device(sl.tensor());
      OwnedTensor lse_d = OwnedTensor::empty({N, T}, DType::f32, kGpu);
      test::poison(lse_d.tensor());
      // out aliases prefix_out (allowed: elementwise).
      merge_attn_states(po_d.tensor(), lse_d.tensor(), po_d.tensor(), pl_d.tensor(), so_d.tensor(), sl_d.tensor(),
                        nullptr);
      OwnedTensor want = OwnedTensor::empty({T, N, D}, DType::f32), want_lse = OwnedTensor::empty({N, T}, DType::f32);
      for (int t = 0; t < T; ++t) {
        for (int n = 0; n < N; ++n) {
          double a = p[n * T + t], b = s[n * T + t];
          if (a == inf) a = -inf;
          if (b == inf) b = -inf;
          const double m = std::max(a, b);
          const double wa = m == -inf ? 0 : std::exp(a - m), wb = m == -inf ? 0 : std::exp(b - m);
          const double sum = wa + wb;
          want_lse.data_as<float>()[n * T + t] = float(m == -inf ? -inf : m + std::log(sum));
          for (int d = 0; d < D; ++d) {
            const int64_t i = (int64_t(t) * N + n) * D + d;
            const double v =
                m == -inf ? 0.0 : (wa * load_as_f32(po.data(), dtype, i) + wb * load_as_f32(so.data(), dtype, i)) / sum;
            want.data_as<float>()[i] = float(v);
          }
        }
      }
      const test::ErrorReport e = test::compare(po_d.tensor(), want.tensor());
      EXPECT_LE(e.rel_l2, test::rel_tolerance(dtype)) << dtype_name(dtype) << " D=" << D << " " << e.str();
      EXPECT_EQ(e.nan_mismatches, 0);
      const test::ErrorReport el = test::compare(lse_d.tensor(), want_lse.tensor());
      EXPECT_LE(el.max_abs, 1e-5) << el.str();
      EXPECT_EQ(el.nan_mismatches, 0) << el.str();
    }
  }
}

// copy_blocks copies whole blocks within every layer's cache; others untouched.
TEST(CudaCopyBlocks, CopiesWholeBlocksInEveryLayer) {
  LATTN_REQUIRE_GPU();
  std::mt19937_64 rng(5);
  const MlaDims dims{1, 512, 128, 64, 128};
  std::vector<OwnedTensor> hosts;
  std::vector<OwnedTensor> devs;
  std::vector<LatentCache> caches;
  for (int layer = 0; layer < 3; ++layer) {
    hosts.push_back(OwnedTensor::empty({12, 16, 576}, DType::bf16));
    test::fill_normal(hosts.back().tensor(), rng);
  }
  for (auto& h : hosts) {
    devs.push_back(to_device(h.tensor()));
    caches.push_back(LatentCache{devs.back().tensor(), dims.kv_lora_rank, dims.qk_rope_head_dim, 1.f});
  }
  const std::vector<int64_t> pairs = {0, 5, 3, 4, 7, 11, 2, 1};  // fresh destinations (docs/mla.md)
  OwnedTensor mapping = OwnedTensor::empty({4, 2}, DType::i64);
  std::memcpy(mapping.data(), pairs.data(), pairs.size() * 8);
  copy_blocks(caches, mapping.tensor(), nullptr);
  const size_t block_bytes = 16 * 576 * 2;
  for (size_t layer = 0; layer < caches.size(); ++layer) {
    std::vector<uint8_t> want(static_cast<uint8_t*>(hosts[layer].data()),
                              static_cast<uint8_t*>(hosts[layer].data()) + hosts[layer].tensor().nbytes());
    const std::vector<uint8_t> before = want;
    for (size_t i = 0; i < pairs.size(); i += 2) {
      std::memcpy(want.data() + size_t(pairs[i + 1]) * block_bytes, before.data() + size_t(pairs[i]) * block_bytes,
                  block_bytes);
    }
    EXPECT_TRUE(bytes_of(caches[layer].data) == want) << "layer " << layer;
  }
}

// swap_blocks between host and device caches, both directions, and on device.
TEST(CudaSwapBlocks, MovesBlocksBetweenHostAndDevice) {
  LATTN_REQUIRE_GPU();
  std::mt19937_64 rng(9);
  const MlaDims dims{1, 256, 64, 32, 64};
  OwnedLatentCache host_src(6, 4, dims, DType::f16), dev(6, 4, dims, DType::f16, kGpu),
      host_dst(6, 4, dims, DType::f16), dev2(6, 4, dims, DType::f16, kGpu);
  test::fill_normal(host_src.cache().data, rng);
  fill_bytes(dev.cache().data, 0);
  fill_bytes(dev2.cache().data, 0);
  fill_bytes(host_dst.cache().data, 0);
  const std::vector<int64_t> pairs = {1, 4, 5, 0};
  OwnedTensor mapping = OwnedTensor::empty({2, 2}, DType::i64);
  std::memcpy(mapping.data(), pairs.data(), 32);
  swap_blocks(host_src, dev, mapping.tensor(), nullptr);  // host -> device: dev[4]=src[1], dev[0]=src[5]
  const std::vector<int64_t> on_device = {4, 1, 0, 2};
  OwnedTensor dd_map = OwnedTensor::empty({2, 2}, DType::i64);
  std::memcpy(dd_map.data(), on_device.data(), 32);
  swap_blocks(dev, dev2, dd_map.tensor(), nullptr);  // device -> device: dev2[1]=src[1], dev2[2]=src[5]
  const std::vector<int64_t> back = {1, 4, 2, 0};
  OwnedTensor back_map = OwnedTensor::empty({2, 2}, DType::i64);
  std::memcpy(back_map.data(), back.data(), 32);
  swap_blocks(dev2, host_dst, back_map.tensor(), nullptr);  // device -> host: dst[4]=src[1], dst[0]=src[5]
  const size_t bb = 4 * 288 * 2;
  const auto* src = static_cast<const uint8_t*>(host_src.cache().data.data());
  const auto* dst = static_cast<const uint8_t*>(host_dst.cache().data.data());
  EXPECT_EQ(std::memcmp(dst + 4 * bb, src + 1 * bb, bb), 0);
  EXPECT_EQ(std::memcmp(dst + 0 * bb, src + 5 * bb, bb), 0);
  for (int b : {1, 2, 3, 5}) {
    EXPECT_TRUE(std::all_of(dst + b * bb, dst + (b + 1) * bb, [](uint8_t v) { return v == 0; })) << "block " << b;
  }
}

// quantize_fp8 (MlaAttention's fp8 output): bit-exact with the host's
// fp8(x / scale), strided source rows, vector and element paths.
TEST(CudaQuantizeFp8, MatchesHostRoundingBitExactly) {
  LATTN_REQUIRE_GPU();
  for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
    for (int cols : {256, 36}) {
      std::mt19937_64 rng(13);
      const int rows = 21;
      OwnedTensor src = OwnedTensor::empty({rows, cols + 8}, dtype);
      test::fill_normal(src.tensor(), rng, 300.f);  // some values past fp8's 448 / scale range
      OwnedTensor scale = OwnedTensor::empty({1}, DType::f32);
      scale.data_as<float>()[0] = 0.7f;
      OwnedTensor src_d = to_device(src.tensor()), scale_d = to_device(scale.tensor());
      OwnedTensor dst = OwnedTensor::empty({rows, cols}, DType::fp8_e4m3, kGpu);
      test::poison(dst.tensor());
      detail::cuda_device_ops().quantize_fp8(src_d.tensor().narrow(1, 0, cols), dst.tensor(), scale_d.tensor(),
                                             nullptr);
      const std::vector<uint8_t> got = bytes_of(dst.tensor());
      int64_t bad = 0;
      for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < cols; ++c) {
          const float x = load_as_f32(src.data(), dtype, int64_t(r) * (cols + 8) + c);
          if (got[size_t(r) * cols + c] != f32_to_fp8e4m3(x / 0.7f)) ++bad;
        }
      }
      EXPECT_EQ(bad, 0) << dtype_name(dtype) << " cols " << cols;
    }
  }
}

// advance_step: real queries take their sampled token and grow by one, with
// the slot of the new position; padded rows are reset (docs/metadata.md).
TEST(CudaAdvanceStep, UpdatesQueriesAndResetsPaddedRows) {
  LATTN_REQUIRE_GPU();
  const int num_seqs = 6, num_queries = 4, block_size = 4, max_blocks = 5;
  std::vector<int64_t> tokens(num_seqs, 99), positions(num_seqs, 99), slots(num_seqs, 99), sampled = {11, 12, 13, 14};
  std::vector<int32_t> seq_lens = {1, 4, 7, 19, 3, 3};
  std::vector<int32_t> table(size_t(num_seqs) * max_blocks);
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(100 + i);
  auto mk64 = [](const std::vector<int64_t>& v, std::initializer_list<int64_t> shape) {
    OwnedTensor t = OwnedTensor::empty(shape, DType::i64);
    std::memcpy(t.data(), v.data(), v.size() * 8);
    return test::to_device(t.tensor());
  };
  auto mk32 = [](const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
    OwnedTensor t = OwnedTensor::empty(shape, DType::i32);
    std::memcpy(t.data(), v.data(), v.size() * 4);
    return test::to_device(t.tensor());
  };
  OwnedTensor tok = mk64(tokens, {num_seqs}), pos = mk64(positions, {num_seqs}), sl = mk64(slots, {num_seqs});
  OwnedTensor smp = mk64(sampled, {num_queries, 1});
  OwnedTensor lens = mk32(seq_lens, {num_seqs}), bt = mk32(table, {num_seqs, max_blocks});
  detail::cuda_device_ops().advance_step(num_seqs, num_queries, block_size, tok.tensor(), smp.tensor(), pos.tensor(),
                                         lens.tensor(), sl.tensor(), bt.tensor(), nullptr);
  auto get64 = [](const Tensor& t) {
    OwnedTensor h = OwnedTensor::empty(t.shape(), t.dtype());
    copy_tensor(t, h.tensor());
    return std::vector<int64_t>(h.data_as<int64_t>(), h.data_as<int64_t>() + t.numel());
  };
  auto get32 = [](const Tensor& t) {
    OwnedTensor h = OwnedTensor::empty(t.shape(), t.dtype());
    copy_tensor(t, h.tensor());
    return std::vector<int32_t>(h.data_as<int32_t>(), h.data_as<int32_t>() + t.numel());
  };
  const auto got_tok = get64(tok.tensor()), got_pos = get64(pos.tensor()), got_slot = get64(sl.tensor());
  const auto got_len = get32(lens.tensor());
  for (int q = 0; q < num_queries; ++q) {
    const int s = seq_lens[size_t(q)];
    EXPECT_EQ(got_tok[size_t(q)], sampled[size_t(q)]);
    EXPECT_EQ(got_pos[size_t(q)], s);
    EXPECT_EQ(got_len[size_t(q)], s + 1);
    EXPECT_EQ(got_slot[size_t(q)],
              int64_t(table[size_t(q) * max_blocks + s / block_size]) * block_size + s % block_size);
  }
  for (int q = num_queries; q < num_seqs; ++q) {
    EXPECT_EQ(got_tok[size_t(q)], 0);
    EXPECT_EQ(got_pos[size_t(q)], 0);
    EXPECT_EQ(got_slot[size_t(q)], -1);
    EXPECT_EQ(got_len[size_t(q)], seq_lens[size_t(q)]);  // padded sequences do not grow
  }
}

}  // namespace
}  // namespace lattn
