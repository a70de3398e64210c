// A sparse MlaAttention layer (config.index_topk > 0, lattn/attention.h)
// against an in-test fp64 formula: per token, the top-k positions of its
// indexer logits (brute-force sort, ties to the lower position), then naive
// attention over exactly those cached latents with the layer's W_UK / W_UV.
// Mixed batches (decodes, prefills with and without context), permuted
// block tables, NaN-poisoned unowned slots, padding rows, bf16 and
// fp8_ds_mla caches, every backend pair; top-k >= the tokens equals the
// dense layer; refused input writes nothing; on a GPU, the layer with the
// cuda indexer and sparse kernel against the same formula.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "lattn/attention.h"
#include "lattn/errors.h"
#include "lattn/metadata.h"
#include "lattn/ops.h"
#include "lattn/sparse.h"
#include "support/gpu.h"
#include "support/test_data.h"

namespace lattn {
namespace {

struct Req {
  int context = 0, query = 1;
};

struct LayerCase {
  MlaDims dims{4, 128, 16, 16, 24};  // L a multiple of 128 (fp8_ds_mla tiles)
  int H = 4, D = 32, topk = 8, block_size = 16, num_blocks = 24, pad_rows = 0;
  DType dtype = DType::bf16, cache_dtype = DType::bf16;
  std::vector<Req> decodes{{37, 1}, {0, 1}, {20, 1}}, prefills{{0, 9}, {21, 6}, {40, 13}};
  std::string sparse_backend, indexer_backend;
  uint64_t seed = 1;
};

// One step's inputs, caches (with every request's context already cached)
// and metadata.
struct Step {
  OwnedLatentCache cache;
  OwnedIndexerKeyCache icache;
  OwnedTensor q, kv_c, k_pe, iq, ik, iw, kv_b, out;
  MlaMetadata md;
  int T = 0, Tc = 0;
};

Step make_step(const LayerCase& c) {
  std::mt19937_64 rng(c.seed);
  Step s;
  const MlaDims& d = c.dims;
  const int L = d.kv_lora_rank, R = d.qk_rope_head_dim, N = d.num_heads;
  s.cache = OwnedLatentCache(c.num_blocks, c.block_size, d, c.cache_dtype);
  s.icache = OwnedIndexerKeyCache(c.num_blocks, c.block_size, c.D);
  fill_bytes(s.cache.cache().data, 0xff);  // NaN wherever no token lives
  fill_bytes(s.icache.cache().data, 0xff);

  std::vector<int32_t> free_blocks(size_t(c.num_blocks));
  std::iota(free_blocks.begin(), free_blocks.end(), 0);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  size_t next = 0;
  std::vector<RequestSpec> specs;
  std::vector<Req> all = c.decodes;
  all.insert(all.end(), c.prefills.begin(), c.prefills.end());
  for (const Req& r : all) {
    RequestSpec spec{r.query, r.context, {}};
    const int blocks = (r.context + r.query + c.block_size - 1) / c.block_size;
    for (int b = 0; b < blocks; ++b) spec.block_table.push_back(free_blocks.at(next++));
    specs.push_back(spec);
    s.Tc += r.query;
    // The context was cached by earlier steps.
    if (r.context == 0) continue;
    OwnedTensor kv = OwnedTensor::empty({r.context, L}, c.dtype), pe = OwnedTensor::empty({r.context, R}, c.dtype),
                k = OwnedTensor::empty({r.context, c.D}, c.dtype), slots = OwnedTensor::empty({r.context}, DType::i64);
    test::fill_normal(kv, rng, 1.f);
    test::fill_normal(pe, rng, 1.f);
    test::fill_normal(k, rng, 1.f);
    for (int p = 0; p < r.context; ++p) {
      slots.data_as<int64_t>()[p] =
          int64_t(spec.block_table[size_t(p / c.block_size)]) * c.block_size + p % c.block_size;
    }
    concat_and_cache_mla(kv, pe, s.cache, slots);
    indexer_k_cache_write(k, s.icache, slots);
  }
  MetadataBuilderConfig bc;
  bc.block_size = c.block_size;
  bc.context_chunk_workspace_size = 256;
  bc.num_cache_blocks = c.num_blocks;
  s.md = MlaMetadataBuilder(bc).build(specs);

  s.T = s.Tc + c.pad_rows;
  s.q = OwnedTensor::empty({s.T, N, d.qk_head_dim()}, c.dtype);
  s.kv_c = OwnedTensor::empty({s.T, L}, c.dtype);
  s.k_pe = OwnedTensor::empty({s.T, R}, c.dtype);
  s.iq = OwnedTensor::empty({s.T, c.H, c.D}, c.dtype);
  s.ik = OwnedTensor::empty({s.T, c.D}, c.dtype);
  s.iw = OwnedTensor::empty({s.T, c.H}, DType::f32);
  s.kv_b = OwnedTensor::empty({int64_t(N) * (d.qk_nope_head_dim + d.v_head_dim), L}, DType::f32);
  for (const OwnedTensor* t : {&s.q, &s.kv_c, &s.k_pe, &s.iq, &s.ik}) test::fill_normal(*t, rng, 1.f);
  test::fill_normal(s.iw, rng, 0.2f);
  test::fill_normal(s.kv_b, rng, 1.f / std::sqrt(float(L)));
  s.out = OwnedTensor::empty({s.T, int64_t(N) * d.v_head_dim}, c.dtype);
  test::poison(s.out);
  return s;
}

MlaAttentionConfig layer_config(const LayerCase& c) {
  MlaAttentionConfig ac;
  ac.dims = c.dims;
  ac.dtype = c.dtype;
  ac.kv_cache_dtype = c.cache_dtype;
  ac.block_size = c.block_size;
  ac.index_topk = c.topk;
  ac.index_n_heads = c.H;
  ac.index_head_dim = c.D;
  ac.sparse_backend = c.sparse_backend;
  ac.indexer_backend = c.indexer_backend;
  return ac;
}

IndexerInputs inputs(const Step& s) { return {s.iq.tensor(), s.ik.tensor(), s.iw.tensor(), &s.icache.cache()}; }

// Cached latent entry of `slot` in fp64: [kv_c (L) | k_pe (R)].
std::vector<double> entry(const LatentCache& cache, int64_t slot) {
  const int L = int(cache.kv_lora_rank), R = int(cache.qk_rope_head_dim);
  std::vector<double> e(size_t(L + R));
  const Tensor row = cache.data.view({-1, cache.data.size(2)}).narrow(0, slot, 1);
  if (cache.dtype() == kFp8DsMla) {
    fp8_ds_mla_decode_f64(row.data_as<const uint8_t>(), L, R, e.data());
  } else {
    const OwnedTensor f = test::to_host_f32(row);
    for (int i = 0; i < L + R; ++i) e[size_t(i)] = f.data_as<const float>()[i];
  }
  return e;
}

// The expected layer output [Tc, N*V] (fp64 math, f32 result), computed from
// the caches after the layer's forward (which wrote this step's entries).
OwnedTensor expected(const LayerCase& c, const Step& s, const MlaAttention& layer) {
  const MlaDims& d = c.dims;
  const int N = d.num_heads, L = d.kv_lora_rank, P = d.qk_nope_head_dim, R = d.qk_rope_head_dim, V = d.v_head_dim;
  const OwnedTensor q = test::to_host_f32(s.q), wuk = test::to_host_f32(layer.W_UK_T()),
                    wuv = test::to_host_f32(layer.W_UV());
  // Indexer logits from the reference (its own test checks it against a formula).
  int longest = 0;
  for (int r = 0; r < s.md.num_reqs; ++r) longest = std::max(longest, s.md.seq_lens_cpu.data_as<const int32_t>()[r]);
  OwnedTensor logits = OwnedTensor::empty({s.Tc, longest}, DType::f32);
  IndexerArgs ia{s.iq.tensor().narrow(0, 0, s.Tc), s.iw.tensor().narrow(0, 0, s.Tc), s.md.block_table_cpu,
                 s.md.query_start_loc_cpu, s.md.seq_lens_cpu};
  indexer_logits(ia, s.icache, logits, "reference");

  OwnedTensor out = OwnedTensor::empty({s.Tc, int64_t(N) * V}, DType::f32);
  const float scale = layer.config().scale;
  for (int r = 0; r < s.md.num_reqs; ++r) {
    const int q0 = s.md.query_start_loc_cpu.data_as<const int32_t>()[r];
    const int q1 = s.md.query_start_loc_cpu.data_as<const int32_t>()[r + 1];
    const int len = s.md.seq_lens_cpu.data_as<const int32_t>()[r];
    for (int t = q0; t < q1; ++t) {
      const int visible = len - (q1 - q0) + (t - q0) + 1;
      const float* lg = logits.data_as<const float>() + int64_t(t) * longest;
      std::vector<int> pos(static_cast<size_t>(visible));
      std::iota(pos.begin(), pos.end(), 0);
      std::stable_sort(pos.begin(), pos.end(), [&](int a, int b) { return lg[a] > lg[b]; });
      pos.resize(size_t(std::min(visible, c.topk)));
      std::vector<std::vector<double>> keys;
      for (int p : pos) {
        const int32_t block =
            s.md.block_table_cpu.data_as<const int32_t>()[r * s.md.block_table_cpu.stride(0) + p / c.block_size];
        keys.push_back(entry(s.cache, int64_t(block) * c.block_size + p % c.block_size));
      }
      for (int n = 0; n < N; ++n) {
        const float* qn = q.data_as<const float>() + (int64_t(t) * N + n) * (P + R);
        std::vector<double> ql(size_t(L), 0.0);
        for (int p = 0; p < P; ++p) {
          for (int l = 0; l < L; ++l)
            ql[size_t(l)] += double(qn[p]) * wuk.data_as<const float>()[(int64_t(n) * P + p) * L + l];
        }
        std::vector<double> score(keys.size());
        double mx = -INFINITY;
        for (size_t j = 0; j < keys.size(); ++j) {
          double acc = 0;
          for (int l = 0; l < L; ++l) acc += ql[size_t(l)] * keys[j][size_t(l)];
          for (int i = 0; i < R; ++i) acc += double(qn[P + i]) * keys[j][size_t(L + i)];
          score[j] = acc * scale;
          mx = std::max(mx, score[j]);
        }
        double sum = 0;
        for (double& v : score) sum += (v = std::exp(v - mx));
        std::vector<double> o(size_t(L), 0.0);
        for (size_t j = 0; j < keys.size(); ++j) {
          for (int l = 0; l < L; ++l) o[size_t(l)] += score[j] / sum * keys[j][size_t(l)];
        }
        for (int v = 0; v < V; ++v) {
          double acc = 0;
          for (int l = 0; l < L; ++l) acc += o[size_t(l)] * wuv.data_as<const float>()[(int64_t(n) * L + l) * V + v];
          out.data_as<float>()[int64_t(t) * N * V + n * V + v] = float(acc);
        }
      }
    }
  }
  return out;
}

void run_and_check(const LayerCase& c) {
  SCOPED_TRACE("topk " + std::to_string(c.topk) + " dtype " + dtype_name(c.dtype) + " cache " +
               (c.cache_dtype == kFp8DsMla ? "fp8_ds_mla" : dtype_name(c.cache_dtype)) + " backends '" +
               c.sparse_backend + "'/'" + c.indexer_backend + "'");
  Step s = make_step(c);
  MlaAttention layer(layer_config(c));
  layer.process_weights_after_loading(s.kv_b);
  ASSERT_NE(layer.sparse_backend(), nullptr);
  layer.forward(s.q, s.kv_c, s.k_pe, s.cache, s.md, inputs(s), s.out);
  // The layer reports what ran: its one sparse backend, for both kinds of rows.
  EXPECT_EQ(layer.prefill_kernel_label(), layer.sparse_backend()->name());
  EXPECT_EQ(layer.decode_kernel_label(), layer.sparse_backend()->name());
  const OwnedTensor ref = expected(c, s, layer);
  const test::ErrorReport e = test::compare(s.out.tensor().narrow(0, 0, s.Tc), ref);
  EXPECT_EQ(e.nan_mismatches, 0) << e.str();
  EXPECT_LE(e.rel_l2, test::rel_tolerance(c.dtype)) << e.str();
  if (c.pad_rows > 0) {  // padding rows are zeros
    const OwnedTensor pad = test::to_host_f32(s.out.tensor().narrow(0, s.Tc, c.pad_rows));
    for (int64_t i = 0; i < pad.tensor().numel(); ++i) ASSERT_EQ(pad.data_as<const float>()[i], 0.f) << i;
  }
}

TEST(SparseLayer, MixedBatchMatchesFormulaOnEveryBackendPair) {
  for (const char* sparse : {"", "reference"}) {
    for (const char* indexer : {"", "reference"}) {
      LayerCase c;
      c.sparse_backend = sparse;
      c.indexer_backend = indexer;
      run_and_check(c);
    }
  }
}

TEST(SparseLayer, RandomCases) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 6; ++i) {
    LayerCase c;
    c.seed = 100 + uint64_t(i);
    c.topk = int(std::uniform_int_distribution<int>(1, 40)(rng));
    c.block_size = i % 3 == 0 ? 1 : (i % 3 == 1 ? 16 : 7);
    c.num_blocks = 200 / c.block_size + 12;
    c.dims.num_heads = 1 + i % 5;
    c.H = 1 + (i * 3) % 7;
    c.pad_rows = i % 2;
    c.dtype = i % 2 ? DType::f32 : DType::bf16;
    c.cache_dtype = i % 3 == 2 ? kFp8DsMla : DType::bf16;
    c.decodes = {{int(rng() % 60), 1}, {int(rng() % 5), 1}};
    c.prefills = {{int(rng() % 50), 1 + int(rng() % 12)}};
    run_and_check(c);
  }
}

TEST(SparseLayer, Fp8DsMlaCacheAndOnlyDecodesOrPrefills) {
  LayerCase c;
  c.cache_dtype = kFp8DsMla;
  run_and_check(c);
  c.prefills.clear();
  run_and_check(c);
  c = LayerCase();
  c.decodes.clear();
  c.topk = 1;
  run_and_check(c);
}

// With top-k >= every request's tokens, each token sees its whole causal
// context: the sparse layer is the dense layer.
TEST(SparseLayer, TopkCoveringEveryTokenEqualsDense) {
  for (DType dtype : {DType::bf16, DType::f32}) {
    LayerCase c;
    c.dtype = dtype;
    c.topk = 64;  // longest request: 53 tokens
    Step s = make_step(c);
    MlaAttention sparse(layer_config(c));
    sparse.process_weights_after_loading(s.kv_b);
    sparse.forward(s.q, s.kv_c, s.k_pe, s.cache, s.md, inputs(s), s.out);

    Step s2 = make_step(c);  // the same seed: the same caches and inputs
    MlaAttentionConfig dc = layer_config(c);
    dc.index_topk = 0;
    dc.prefill_backend = dc.decode_backend = "reference";
    MlaAttention dense(dc);
    dense.process_weights_after_loading(s2.kv_b);
    dense.forward(s2.q, s2.kv_c, s2.k_pe, s2.cache, s2.md, s2.out);
    const test::ErrorReport e = test::compare(s.out, test::to_host_f32(s2.out));
    EXPECT_EQ(e.nan_mismatches, 0) << e.str();
    // The bf16 cache bounds the difference even for f32 activations: the dense
    // prefill attends over this step's unrounded latents, the sparse layer
    // (absorbed, like a decode) over their bf16 cache entries.
    EXPECT_LE(e.rel_l2, test::rel_tolerance(DType::bf16)) << dtype_name(dtype) << ": " << e.str();
  }
}

TEST(SparseLayer, CudaLayerMatchesFormula) {
  LATTN_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  for (DType cache_dtype : {DType::bf16, kFp8DsMla}) {
    LayerCase c;
    c.cache_dtype = cache_dtype;
    c.pad_rows = 2;
    c.topk = 12;
    Step s = make_step(c);
    OwnedLatentCache dcache(c.num_blocks, c.block_size, c.dims, c.cache_dtype, gpu);
    copy_tensor(s.cache.cache().data, dcache.cache().data);
    OwnedIndexerKeyCache dic(c.num_blocks, c.block_size, c.D, gpu);
    copy_tensor(s.icache.cache().data, dic.cache().data);
    MlaMetadata md = s.md;
    md.to_device(gpu);
    const OwnedTensor q = test::to_device(s.q), kv = test::to_device(s.kv_c), pe = test::to_device(s.k_pe),
                      iq = test::to_device(s.iq), ik = test::to_device(s.ik), iw = test::to_device(s.iw);
    OwnedTensor out = OwnedTensor::empty({s.T, int64_t(c.dims.num_heads) * c.dims.v_head_dim}, c.dtype, gpu);
    test::poison(out);
    MlaAttentionConfig ac = layer_config(c);
    ac.device = gpu;
    MlaAttention layer(ac);
    layer.process_weights_after_loading(s.kv_b);
    EXPECT_EQ(layer.sparse_backend()->name(), "cuda");
    layer.forward(q, kv, pe, dcache, md, IndexerInputs{iq.tensor(), ik.tensor(), iw.tensor(), &dic.cache()}, out);
    // The formula reads the caches the layer wrote.
    copy_tensor(dcache.cache().data, s.cache.cache().data);
    copy_tensor(dic.cache().data, s.icache.cache().data);
    const OwnedTensor got = test::to_host_f32(out);
    const OwnedTensor ref = expected(c, s, layer);
    const test::ErrorReport e = test::compare(got.tensor().narrow(0, 0, s.Tc), ref);
    EXPECT_EQ(e.nan_mismatches, 0) << e.str();
    EXPECT_LE(e.rel_l2, test::rel_tolerance(c.dtype)) << e.str();
    for (int64_t i = int64_t(s.Tc) * got.tensor().size(1); i < got.tensor().numel(); ++i) {
      ASSERT_EQ(got.data_as<const float>()[i], 0.f) << "padding row element " << i;
    }
  }
}

TEST(SparseLayer, RefusedInputWritesNothing) {
  LayerCase c;
  Step s = make_step(c);
  MlaAttention layer(layer_config(c));
  layer.process_weights_after_loading(s.kv_b);
  const std::vector<uint8_t> before(s.cache.cache().data.data_as<const uint8_t>(),
                                    s.cache.cache().data.data_as<const uint8_t>() + s.cache.cache().data.numel() * 2);
  const std::vector<uint8_t> ibefore(s.icache.cache().data.data_as<const uint8_t>(),
                                     s.icache.cache().data.data_as<const uint8_t>() + s.icache.cache().data.numel());
  const auto unchanged = [&] {
    EXPECT_EQ(0, std::memcmp(before.data(), s.cache.cache().data.data(), before.size()));
    EXPECT_EQ(0, std::memcmp(ibefore.data(), s.icache.cache().data.data(), ibefore.size()));
  };
  // The plain forward: a sparse layer needs the indexer's inputs.
  try {
    layer.forward(s.q, s.kv_c, s.k_pe, s.cache, s.md, s.out);
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("index_topk = 8"), std::string::npos) << e.what();
  }
  unchanged();
  // Wrong indexer query width.
  OwnedTensor bad_q = OwnedTensor::empty({s.T, c.H, c.D + 1}, c.dtype);
  IndexerInputs in = inputs(s);
  in.q = bad_q;
  try {
    layer.forward(s.q, s.kv_c, s.k_pe, s.cache, s.md, in, s.out);
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("indexer.q"), std::string::npos) << e.what();
  }
  unchanged();
  // No indexer cache; an indexer cache of other blocks.
  in = inputs(s);
  in.cache = nullptr;
  EXPECT_THROW(layer.forward(s.q, s.kv_c, s.k_pe, s.cache, s.md, in, s.out), ValueError);
  OwnedIndexerKeyCache small(c.num_blocks - 1, c.block_size, c.D);
  in = inputs(s);
  in.cache = &small.cache();
  try {
    layer.forward(s.q, s.kv_c, s.k_pe, s.cache, s.md, in, s.out);
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("indexer.cache"), std::string::npos) << e.what();
  }
  unchanged();
  // Weights in the wrong dtype.
  OwnedTensor bad_w = OwnedTensor::empty({s.T, c.H}, DType::bf16);
  in = inputs(s);
  in.weights = bad_w;
  EXPECT_THROW(layer.forward(s.q, s.kv_c, s.k_pe, s.cache, s.md, in, s.out), ValueError);
  unchanged();

  // A dense layer refuses the indexer's inputs, and fp8_ds_mla.
  MlaAttentionConfig dc = layer_config(c);
  dc.index_topk = 0;
  MlaAttention dense(dc);
  dense.process_weights_after_loading(s.kv_b);
  EXPECT_THROW(dense.forward(s.q, s.kv_c, s.k_pe, s.cache, s.md, inputs(s), s.out), ValueError);
  EXPECT_EQ(dense.sparse_backend(), nullptr);
  EXPECT_EQ(dense.prefill_kernel_label(), dense.prefill_backend().kernel_label());
  EXPECT_EQ(dense.decode_kernel_label(), dense.decode_backend().kernel_label());
  EXPECT_THROW((void)layer.prefill_backend(), ValueError);
  unchanged();
  dc.kv_cache_dtype = kFp8DsMla;
  try {
    MlaAttention bad(dc);
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("index_topk > 0"), std::string::npos) << e.what();
  }
  dc = layer_config(c);
  dc.index_topk = -1;
  EXPECT_THROW(MlaAttention{dc}, ValueError);
  dc = layer_config(c);
  dc.indexer_backend = "gpu";
  try {
    MlaAttention bad(dc);
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("config.indexer_backend"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lattn
