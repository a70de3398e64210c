// Sparse absorbed MLA (lattn/sparse.h): the reference against an in-test
// fp64 formula, every backend against the reference on random and
// adversarial index sets (duplicates, all -1, k = 1, k beyond the valid
// tokens, slots past the cache, NaN in every slot no index points to), bf16
// and fp8_ds_mla caches, the attention sink; sparse over all positions equals
// dense decode; bad input is refused with nothing written; the selector.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "lattn/backend.h"
#include "lattn/cpu.h"
#include "lattn/device.h"
#include "lattn/errors.h"
#include "lattn/ops.h"
#include "lattn/registry.h"
#include "lattn/sparse.h"
#include "support/backend_driver.h"
#include "support/error_text.h"
#include "support/gpu.h"
#include "support/scoped_env.h"
#include "support/test_data.h"

namespace lattn {
namespace {

struct SparseCase {
  int T = 4, N = 16, L = 512, R = 64, topk = 64;
  int num_blocks = 12, block_size = 16;
  DType dtype = DType::bf16, cache_dtype = DType::bf16;
  bool sink = false;
  uint64_t seed = 1;
  // index pattern: 0 random distinct, 1 duplicates, 2 with -1 holes, 3 row 1 all -1
  int pattern = 0;
  int valid_per_row = -1;  // < topk: k beyond the owned tokens (the rest -1)
};

struct SparseData {
  OwnedLatentCache cache;
  OwnedTensor q, indices, sink, out, lse;
  std::vector<int64_t> owned;  // slots written (everything else is NaN)
};

SparseData make_case(const SparseCase& c) {
  std::mt19937_64 rng(c.seed);
  SparseData d;
  const MlaDims dims{c.N, c.L, 128, c.R, 128};
  d.cache = OwnedLatentCache(c.num_blocks, c.block_size, dims, c.cache_dtype);
  // NaN everywhere first: slots that no index points to must never leak.
  fill_bytes(d.cache.cache().data, c.cache_dtype == kFp8DsMla ? 0xff : 0xff);
  const int64_t capacity = int64_t(c.num_blocks) * c.block_size;
  std::vector<int64_t> perm(static_cast<size_t>(capacity));
  for (int64_t i = 0; i < capacity; ++i) perm[size_t(i)] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  const int64_t owned = capacity * 3 / 4;
  d.owned.assign(perm.begin(), perm.begin() + owned);
  OwnedTensor kv = OwnedTensor::empty({owned, c.L}, DType::f32), pe = OwnedTensor::empty({owned, c.R}, DType::f32);
  OwnedTensor slots = OwnedTensor::empty({owned}, DType::i64);
  test::fill_normal(kv, rng, 1.f);
  test::fill_normal(pe, rng, 1.f);
  std::memcpy(slots.data(), d.owned.data(), size_t(owned) * 8);
  concat_and_cache_mla(kv, pe, d.cache, slots);

  d.q = OwnedTensor::empty({c.T, c.N, c.L + c.R}, c.dtype);
  test::fill_normal(d.q, rng, 0.5f);
  d.indices = OwnedTensor::empty({c.T, c.topk}, DType::i32);
  std::uniform_int_distribution<int64_t> pick(0, owned - 1);
  for (int t = 0; t < c.T; ++t) {
    std::vector<int64_t> order = d.owned;
    std::shuffle(order.begin(), order.end(), rng);
    for (int j = 0; j < c.topk; ++j) {
      int32_t v = int32_t(order[size_t(j) % order.size()]);
      if (c.pattern == 1 && j % 3 == 1) v = int32_t(order[0]);   // duplicates
      if (c.pattern == 2 && j % 4 == 2) v = -1;                  // holes
      if (c.pattern == 3 && t == 1) v = -1;                      // a row with no key
      if (c.valid_per_row >= 0 && j >= c.valid_per_row) v = -1;  // k > valid tokens
      d.indices.data_as<int32_t>()[t * c.topk + j] = v;
    }
  }
  if (c.sink) {
    d.sink = OwnedTensor::empty({c.N}, DType::f32);
    test::fill_normal(d.sink, rng, 2.f);
  }
  d.out = OwnedTensor::empty({c.T, c.N, c.L}, c.dtype);
  d.lse = OwnedTensor::empty({c.N, c.T}, DType::f32);
  return d;
}

SparseMlaArgs args_of(const SparseData& d, float scale) {
  SparseMlaArgs a;
  a.q = d.q;
  a.indices = d.indices;
  a.attn_sink = d.sink.tensor();
  a.out = d.out;
  a.lse = d.lse;
  a.scale = scale;
  return a;
}

float scale_of(const SparseCase& c) { return 1.f / std::sqrt(float(128 + c.R)); }

// The formulas, written again in fp64 from the cache decoded in the test.
void naive(const SparseCase& c, const SparseData& d, std::vector<double>& out, std::vector<double>& lse) {
  const int D = c.L + c.R;
  const LatentCache& cache = d.cache;
  std::vector<double> key(static_cast<size_t>(D));
  std::vector<float> keyf(static_cast<size_t>(D));
  out.assign(size_t(c.T) * c.N * c.L, 0.0);
  lse.assign(size_t(c.N) * c.T, -INFINITY);
  for (int t = 0; t < c.T; ++t) {
    std::vector<std::vector<double>> keys;
    for (int j = 0; j < c.topk; ++j) {
      const int32_t s = d.indices.data_as<int32_t>()[t * c.topk + j];
      if (s < 0) continue;
      if (cache.is_fp8_ds_mla()) {
        fp8_ds_mla_decode_f64(static_cast<const uint8_t*>(cache.data.data()) + s * cache.entry_dim(), c.L, c.R,
                              key.data());
      } else {
        for (int i = 0; i < D; ++i) key[size_t(i)] = load_as_f32(cache.data.data(), cache.dtype(), s * D + i);
      }
      keys.push_back(key);
    }
    for (int h = 0; h < c.N; ++h) {
      if (keys.empty()) continue;
      std::vector<double> s(keys.size());
      double m = -INFINITY;
      for (size_t j = 0; j < keys.size(); ++j) {
        double dot = 0;
        for (int i = 0; i < D; ++i)
          dot += double(load_as_f32(d.q.data(), c.dtype, (int64_t(t) * c.N + h) * D + i)) * keys[j][size_t(i)];
        s[j] = dot * scale_of(c);
        m = std::max(m, s[j]);
      }
      double z = 0;
      for (double& v : s) z += (v = std::exp(v - m));
      const double l = m + std::log(z);
      double f = 1.0 / z;
      if (c.sink) f *= 1.0 / (1.0 + std::exp(double(d.sink.data_as<float>()[h]) - l));
      for (size_t j = 0; j < keys.size(); ++j) {
        for (int i = 0; i < c.L; ++i) out[(size_t(t) * c.N + h) * c.L + i] += s[j] * f * keys[j][size_t(i)];
      }
      lse[size_t(h) * c.T + t] = l;
    }
  }
}

void expect_matches(const SparseCase& c, const SparseData& got, const Tensor& ref_out, const Tensor& ref_lse,
                    double tol) {
  const test::ErrorReport e = test::compare(got.out, ref_out);
  EXPECT_LE(e.rel_l2, tol) << e.str();
  EXPECT_EQ(e.nan_mismatches, 0) << e.str();
  for (int64_t i = 0; i < int64_t(c.N) * c.T; ++i) {
    const float g = got.lse.data_as<float>()[i], r = ref_lse.data_as<const float>()[i];
    if (std::isinf(r)) {
      EXPECT_EQ(g, r) << "lse " << i;
    } else if (std::isnan(r)) {
      EXPECT_TRUE(std::isnan(g)) << "lse " << i << ": " << g;  // the row attended to a NaN
    } else {
      // A score's error is about the dtype's unit roundoff times the size of
      // its terms (fp8_ds_mla keys are dequantized to bf16 on the cpu path).
      EXPECT_NEAR(g, r, tol * std::max(1.f, std::fabs(r))) << "lse " << i;
    }
  }
}

// The case on the `cpu` backend against `reference`, both after plant(data)
// (a change to the generated case, e.g. planted bytes), outputs poisoned
// first; returns the cpu run's data for further checks.
template <class Plant>
SparseData cpu_matches_reference(const SparseCase& c, Plant plant) {
  SparseData ref = make_case(c);
  plant(ref);
  sparse_mla(args_of(ref, scale_of(c)), ref.cache, "reference");
  SparseData got = make_case(c);
  plant(got);
  test::poison(got.out);
  test::poison(got.lse);
  sparse_mla(args_of(got, scale_of(c)), got.cache, "cpu");
  expect_matches(c, got, ref.out, ref.lse, test::rel_tolerance(c.dtype));
  return got;
}

TEST(SparseMlaReference, MatchesTheFormulasInFp64) {
  for (int pattern : {0, 1, 2, 3}) {
    for (DType cache_dtype : {DType::bf16, kFp8DsMla}) {
      SparseCase c;
      c.N = 3;
      c.topk = 40;
      c.pattern = pattern;
      c.cache_dtype = cache_dtype;
      c.dtype = DType::f32;
      c.sink = pattern == 2;
      SparseData d = make_case(c);
      test::poison(d.out);
      test::poison(d.lse);
      sparse_mla(args_of(d, scale_of(c)), d.cache, "reference");
      std::vector<double> out, lse;
      naive(c, d, out, lse);
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_NEAR(d.out.data_as<float>()[i], out[i], 1e-5 * (1 + std::fabs(out[i])))
            << "pattern " << pattern << " i " << i;
      }
      for (size_t i = 0; i < lse.size(); ++i) {
        if (std::isinf(lse[i]))
          ASSERT_EQ(d.lse.data_as<float>()[i], -INFINITY);
        else
          ASSERT_NEAR(d.lse.data_as<float>()[i], lse[i], 1e-5 * (1 + std::fabs(lse[i])));
      }
      if (pattern == 3) {
        for (int h = 0; h < c.N; ++h) EXPECT_EQ(d.lse.data_as<float>()[h * c.T + 1], -INFINITY);
        for (int i = 0; i < c.N * c.L; ++i) ASSERT_EQ(d.out.data_as<float>()[c.N * c.L + i], 0.f);
      }
    }
  }
}

std::vector<SparseCase> backend_cases() {
  std::vector<SparseCase> cases;
  uint64_t seed = 100;
  for (DType cache_dtype : {DType::bf16, kFp8DsMla}) {
    for (int pattern : {0, 1, 2, 3}) {
      SparseCase c;
      c.cache_dtype = cache_dtype;
      c.pattern = pattern;
      c.seed = seed++;
      cases.push_back(c);
    }
    SparseCase k1;  // k = 1
    k1.cache_dtype = cache_dtype, k1.topk = 1, k1.seed = seed++;
    cases.push_back(k1);
    SparseCase beyond;  // k larger than the tokens a row has (the rest -1)
    beyond.cache_dtype = cache_dtype, beyond.topk = 300, beyond.valid_per_row = 37, beyond.seed = seed++;
    cases.push_back(beyond);
    SparseCase sink;
    sink.cache_dtype = cache_dtype, sink.sink = true, sink.pattern = 2, sink.N = 5, sink.seed = seed++;
    cases.push_back(sink);
    SparseCase big;  // a long row split across threads
    big.cache_dtype = cache_dtype, big.T = 1, big.topk = 1500, big.num_blocks = 128, big.seed = seed++;
    cases.push_back(big);
  }
  SparseCase f32;  // other activation / cache dtypes on the host
  f32.dtype = DType::f32, f32.cache_dtype = DType::f16, f32.seed = seed++;
  cases.push_back(f32);
  SparseCase fp8;
  fp8.dtype = DType::f16, fp8.cache_dtype = DType::fp8_e4m3, fp8.seed = seed++;
  cases.push_back(fp8);
  SparseCase f32_ds;  // f32 queries on fp8_ds_mla: f32's error model, not bf16's
  f32_ds.dtype = DType::f32, f32_ds.cache_dtype = kFp8DsMla, f32_ds.pattern = 1, f32_ds.seed = seed++;
  cases.push_back(f32_ds);
  SparseCase small_dims;  // non-DeepSeek dims (a 128-multiple latent for fp8_ds_mla)
  small_dims.L = 256, small_dims.R = 32, small_dims.N = 7, small_dims.cache_dtype = kFp8DsMla, small_dims.seed = seed++;
  cases.push_back(small_dims);
  SparseCase bs1;
  bs1.block_size = 1, bs1.num_blocks = 200, bs1.seed = seed++;
  cases.push_back(bs1);
  // A block size that is not a power of two: the cpu backend finds a slot's
  // block by division there (by shift and mask otherwise).
  for (DType cache_dtype : {DType::bf16, kFp8DsMla}) {
    SparseCase odd_block;
    odd_block.cache_dtype = cache_dtype, odd_block.block_size = 5, odd_block.num_blocks = 40, odd_block.pattern = 2;
    odd_block.seed = seed++;
    cases.push_back(odd_block);
  }
  // fp8_ds_mla with 40 heads (two 16-lane groups and a partial one: every
  // register block of the kernel that reads entries in place) and a top-k
  // that leaves a partial key tile with an odd key count.
  SparseCase heads40;
  heads40.N = 40, heads40.topk = 101, heads40.pattern = 2, heads40.cache_dtype = kFp8DsMla, heads40.seed = seed++;
  cases.push_back(heads40);
  return cases;
}

// Where fp8_ds_mla cases run: every instruction-set path this machine has
// (AVX512-BF16 reads the entries in place, the others dequantize rows first).
std::vector<SparseCase> ds_mla_cases() {
  std::vector<SparseCase> cases;
  for (const SparseCase& c : backend_cases()) {
    if (c.cache_dtype == kFp8DsMla) cases.push_back(c);
  }
  return cases;
}

TEST(SparseMlaCpu, MatchesTheReferenceOnAdversarialIndexSets) {
  for (const SparseCase& c : backend_cases()) {
    SCOPED_TRACE("case seed " + std::to_string(c.seed));
    SparseData ref = make_case(c);
    sparse_mla(args_of(ref, scale_of(c)), ref.cache, "reference");
    SparseData got = make_case(c);
    test::poison(got.out);
    test::poison(got.lse);
    sparse_mla(args_of(got, scale_of(c)), got.cache, "cpu");
    expect_matches(c, got, ref.out, ref.lse, test::rel_tolerance(c.dtype));
  }
}

TEST(SparseMlaCpu, Fp8DsMlaMatchesTheReferenceOnEveryInstructionSet) {
  for (CpuIsa isa : cpu_isas_supported()) {
    set_cpu_isa(isa);
    for (const SparseCase& c : ds_mla_cases()) {
      SCOPED_TRACE(std::string(cpu_isa_name(isa)) + ", case seed " + std::to_string(c.seed));
      cpu_matches_reference(c, [](SparseData&) {});
    }
  }
  set_cpu_isa(std::nullopt);
}

// Non-finite fp8_ds_mla bytes in a selected entry: a NaN latent value (byte
// 0xff) makes its token's rows NaN, a NaN rope value (bf16) too, and the
// other tokens stay finite and correct; a subnormal-heavy tile (tiny values)
// and a saturated one (values past 448 · scale) are read exactly.
TEST(SparseMlaCpu, Fp8DsMlaNonFiniteAndExtremeBytesMatchTheReference) {
  for (CpuIsa isa : cpu_isas_supported()) {
    set_cpu_isa(isa);
    for (int where : {7, 300, 512 + 16 + 2 * 5}) {  // latent tile 0, latent tile 2, rope element 5
      SparseCase c;
      c.T = 3, c.N = 20, c.topk = 70, c.cache_dtype = kFp8DsMla, c.seed = 77;
      SCOPED_TRACE(std::string(cpu_isa_name(isa)) + ", NaN at byte " + std::to_string(where));
      auto plant = [&](SparseData& d) {
        const int32_t slot = d.indices.data_as<int32_t>()[0 * c.topk + 9];  // token 0's 10th key
        uint8_t* e = static_cast<uint8_t*>(d.cache.cache().data.data()) + int64_t(slot) * d.cache.cache().entry_dim();
        e[where] = 0xff;
        if (where >= 512) e[where + 1] = 0xff;  // a bf16 NaN
        // Token 1's 3rd key: tile 1 all subnormal magnitudes, tile 3 saturated.
        const int32_t other = d.indices.data_as<int32_t>()[1 * c.topk + 2];
        uint8_t* f = static_cast<uint8_t*>(d.cache.cache().data.data()) + int64_t(other) * d.cache.cache().entry_dim();
        for (int i = 128; i < 256; ++i) f[i] = uint8_t((i % 8) | (i % 3 == 0 ? 0x80 : 0));
        for (int i = 384; i < 512; ++i) f[i] = i % 2 ? 0x7e : 0xfe;
      };
      const SparseData got = cpu_matches_reference(c, plant);
      for (int h = 0; h < c.N; ++h) {
        EXPECT_TRUE(std::isnan(got.lse.data_as<float>()[h * c.T])) << "head " << h;
        EXPECT_TRUE(std::isfinite(got.lse.data_as<float>()[h * c.T + 1])) << "head " << h;
      }
    }
  }
  set_cpu_isa(std::nullopt);
}

// Every selected entry holds only e4m3 subnormal codes (m · 2^-9, both
// signs) with scale 1 and zero rope: the outputs are made of those values
// alone, so a wrong subnormal conversion shows at full size.
TEST(SparseMlaCpu, Fp8DsMlaSubnormalValuesAreExact) {
  for (CpuIsa isa : cpu_isas_supported()) {
    set_cpu_isa(isa);
    SCOPED_TRACE(cpu_isa_name(isa));
    SparseCase c;
    c.T = 2, c.N = 17, c.topk = 9, c.cache_dtype = kFp8DsMla, c.seed = 91;
    auto plant = [&](SparseData& d) {
      for (int j = 0; j < c.T * c.topk; ++j) {
        const int32_t slot = d.indices.data_as<int32_t>()[j];
        uint8_t* e = static_cast<uint8_t*>(d.cache.cache().data.data()) + int64_t(slot) * d.cache.cache().entry_dim();
        for (int i = 0; i < c.L; ++i) e[i] = uint8_t(((i + slot) % 8) | ((i / 3 + slot) % 2 ? 0x80 : 0));
        const float one = 1.f;
        for (int t = 0; t < c.L / 128; ++t) std::memcpy(e + c.L + 4 * t, &one, 4);
        std::memset(e + c.L + 4 * (c.L / 128), 0, size_t(c.R) * 2);
      }
    };
    cpu_matches_reference(c, plant);
  }
  set_cpu_isa(std::nullopt);
}

TEST(SparseMlaCpu, Fp8DsMlaStaysWithinFp8ErrorOfTheBf16Cache) {
  SparseCase c;
  c.T = 3;
  c.topk = 200;
  SparseData bf = make_case(c);
  sparse_mla(args_of(bf, scale_of(c)), bf.cache, "reference");
  c.cache_dtype = kFp8DsMla;
  SparseData fp = make_case(c);
  sparse_mla(args_of(fp, scale_of(c)), fp.cache, "cpu");
  const test::ErrorReport e = test::compare(fp.out, bf.out);
  EXPECT_LE(e.rel_l2, test::rel_tolerance(DType::fp8_e4m3)) << e.str();
  EXPECT_GT(e.rel_l2, 0.0) << "fp8 rounding should show";
}

// Sparse attention over every position of a request equals dense absorbed
// decode over its paged cache.
TEST(SparseMlaCpu, AllPositionsSelectedEqualsDenseDecode) {
  const int N = 8, L = 512, R = 64, bs = 16, seq_len = 70, blocks = 8;
  std::mt19937_64 rng(3);
  OwnedLatentCache cache(blocks, bs, MlaDims::deepseek_v3(N), DType::bf16);
  test::fill_normal(cache.cache().data, rng, 1.f);
  const int32_t table[] = {5, 2, 7, 0, 3};  // permuted block table
  OwnedTensor bt = OwnedTensor::empty({1, 5}, DType::i32), qsl = OwnedTensor::empty({2}, DType::i32),
              sl = OwnedTensor::empty({1}, DType::i32);
  std::memcpy(bt.data(), table, sizeof(table));
  qsl.data_as<int32_t>()[0] = 0, qsl.data_as<int32_t>()[1] = 1, sl.data_as<int32_t>()[0] = seq_len;
  DecodeMetadata md;
  md.num_decodes = 1, md.num_decode_tokens = 1, md.max_decode_seq_len = seq_len, md.block_size = bs;
  md.query_start_loc_cpu = md.query_start_loc = qsl;
  md.seq_lens_cpu = md.seq_lens = sl;
  md.block_table_cpu = md.block_table = bt;
  OwnedTensor q = OwnedTensor::empty({1, N, L + R}, DType::bf16);
  test::fill_normal(q, rng, 0.5f);
  const float scale = 1.f / std::sqrt(192.f);
  for (const char* backend : {"reference", "cpu"}) {
    DecodeBackendParams p{N, scale, L, R, DType::bf16, DType::bf16, {}};
    auto dense = mla_decode_backend_registry().get_class(backend)->create(p);
    dense->prepare_metadata(md);
    OwnedTensor dout = OwnedTensor::empty({1, N, L}, DType::bf16), dlse = OwnedTensor::empty({N, 1}, DType::f32);
    dense->run(q.tensor().narrow(2, 0, L), q.tensor().narrow(2, L, R), cache, md, dout, dlse);

    OwnedTensor idx = OwnedTensor::empty({1, seq_len}, DType::i32);
    for (int j = 0; j < seq_len; ++j) idx.data_as<int32_t>()[j] = table[j / bs] * bs + j % bs;
    SparseMlaArgs a;
    OwnedTensor sout = OwnedTensor::empty({1, N, L}, DType::bf16), slse = OwnedTensor::empty({N, 1}, DType::f32);
    a.q = q, a.indices = idx, a.out = sout, a.lse = slse, a.scale = scale;
    sparse_mla(a, cache, backend);
    const test::ErrorReport e = test::compare(sout, dout);
    EXPECT_LE(e.rel_l2, std::string(backend) == "reference" ? 0.0 : test::rel_tolerance(DType::bf16))
        << backend << e.str();
    for (int h = 0; h < N; ++h) EXPECT_NEAR(slse.data_as<float>()[h], dlse.data_as<float>()[h], 1e-4) << backend;
  }
}

TEST(SparseMla, BadInputIsRefusedWithNothingWritten) {
  SparseCase c;
  c.T = 2;
  c.topk = 8;
  SparseData d = make_case(c);
  fill(d.out, 0.f);
  fill(d.lse, 0.f);
  const uint64_t out_hash = test::hash_bytes(d.out), lse_hash = test::hash_bytes(d.lse);
  const auto refused = [&](SparseMlaArgs a, const std::string& needle, const LatentCache& cache) {
    const std::string msg = test::error_text<ValueError>([&] { sparse_mla(a, cache, "cpu"); });
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_EQ(test::hash_bytes(d.out), out_hash);
    EXPECT_EQ(test::hash_bytes(d.lse), lse_hash);
  };
  const int64_t capacity = int64_t(c.num_blocks) * c.block_size;
  d.indices.data_as<int32_t>()[11] = int32_t(capacity);  // one past the cache
  refused(args_of(d, scale_of(c)),
          "argument 'indices' must hold slots in [0, num_blocks * block_size = 192) or -1, got 192 at [1, 3]", d.cache);
  d.indices.data_as<int32_t>()[11] = -2;
  refused(args_of(d, scale_of(c)), "got -2 at [1, 3]", d.cache);
  d.indices.data_as<int32_t>()[11] = 0;
  SparseMlaArgs a = args_of(d, scale_of(c));
  a.indices = d.indices.tensor().narrow(1, 0, 0);  // topk 0
  refused(a, "argument 'indices' must have topk >= 1 columns, got [2, 0]", d.cache);
  OwnedTensor idx64 = OwnedTensor::zeros({2, 8}, DType::i64);
  a = args_of(d, scale_of(c));
  a.indices = idx64;
  refused(a, "argument 'indices' must have dtype i32, got i64", d.cache);
  a = args_of(d, scale_of(c));
  OwnedTensor wrong_out = OwnedTensor::zeros({2, 16, 576}, DType::bf16);
  a.out = wrong_out;
  refused(a, "argument 'out' must have shape [2, 16, 512]", d.cache);
  a = args_of(d, 0.f);
  refused(a, "argument 'scale' must be finite and positive", d.cache);
  a = args_of(d, scale_of(c));
  OwnedTensor q_wrong = OwnedTensor::zeros({2, 16, 192}, DType::bf16);
  a.q = q_wrong;
  refused(a, "argument 'q' must have shape [*, *, 576]", d.cache);
}

TEST(SparseMlaSelector, PicksCpuOnTheHostAndExplainsRefusals) {
  SparseSelectorConfig config;
  config.num_heads = 16;
  config.kv_cache_dtype = kFp8DsMla;
  EXPECT_EQ(get_sparse_mla_backend(config)->name(), "cpu");
  config.backend = "cuda";
  const std::string msg = test::error_text<ValueError>([&] { get_sparse_mla_backend(config); });
  EXPECT_NE(msg.find("Selected sparse MLA backend cuda is not valid for this configuration. Reason: [compute "
                     "capability none (cpu) not supported"),
            std::string::npos)
      << msg;
  config.backend = "nope";
  EXPECT_NE(test::error_text<ValueError>([&] {
              get_sparse_mla_backend(config);
            }).find("Valid options are: cuda, cpu, reference"),
            std::string::npos);
  const auto explained = explain_sparse_mla_backends(SparseSelectorConfig{});
  ASSERT_GE(explained.size(), 3u);
  EXPECT_EQ(explained[0].first, "cuda");
  EXPECT_FALSE(explained[0].second.empty());
  EXPECT_TRUE(explained[1].second.empty());  // cpu
}

TEST(SparseMlaGpu, CudaMatchesTheReference) {
  LATTN_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  for (SparseCase c : backend_cases()) {
    if (c.dtype != DType::bf16 || (c.cache_dtype != DType::bf16 && c.cache_dtype != kFp8DsMla)) continue;
    SCOPED_TRACE("case seed " + std::to_string(c.seed));
    SparseData ref = make_case(c);
    sparse_mla(args_of(ref, scale_of(c)), ref.cache, "reference");
    SparseData host = make_case(c);
    OwnedLatentCache dev(c.num_blocks, c.block_size, MlaDims{c.N, c.L, 128, c.R, 128}, c.cache_dtype, gpu);
    copy_tensor(host.cache.cache().data, dev.cache().data);
    const OwnedTensor q = test::to_device(host.q, gpu), idx = test::to_device(host.indices, gpu);
    OwnedTensor sink = c.sink ? test::to_device(host.sink, gpu) : OwnedTensor{};
    OwnedTensor out = OwnedTensor::empty({c.T, c.N, c.L}, c.dtype, gpu),
                lse = OwnedTensor::empty({c.N, c.T}, DType::f32, gpu);
    test::poison(out);
    test::poison(lse);
    SparseMlaArgs a;
    a.q = q, a.indices = idx, a.attn_sink = sink.tensor(), a.out = out, a.lse = lse, a.scale = scale_of(c);
    sparse_mla(a, dev, "cuda");
    copy_tensor(out, host.out);
    copy_tensor(lse, host.lse);
    expect_matches(c, host, ref.out, ref.lse, test::rel_tolerance(c.dtype));
  }
}

using test::ScopedEnv;  // the sparse kernel switches are read at each call

// Whether the Hopper (wgmma) sparse kernel can run here: an sm 9.0 GPU and a
// library with sm_90a code (the hopper decode backend needs the same).
bool hopper_sparse_kernel_runs() {
  const auto cap = device_capability(0);
  return cap && cap->major == 9 && cap->minor == 0 && mla_decode_backend_registry().get_class("hopper")->is_available();
}

// DeepSeek's dims (L 512, R 64) run on the tensor-core kernels — the
// mma.sync kernel (64- and 16-head tiles) and, on Hopper, the wgmma kernel
// (more than 16 heads; fp8_ds_mla rows loaded 8 and 4 at a time), each forced
// with LATTN_SPARSE_KERNEL, and whatever runs by default: index rows that are
// not a whole number of 64-slot tiles, duplicates, -1 holes, rows with no
// key, k beyond the valid slots (whole tiles of -1), block size 1, the sink,
// and on the device slots past the cache (treated as -1), a NaN inside a
// selected key, over a cache whose every unowned slot is NaN.
TEST(SparseMlaGpu, TensorCoreKernelMatchesTheReferenceOnHostileCases) {
  LATTN_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  struct Kernel {
    const char* kernel;     // LATTN_SPARSE_KERNEL ("" = the default choice)
    const char* fp8_batch;  // LATTN_SPARSE_FP8_BATCH
  };
  std::vector<Kernel> kernels = {{"", "8"}, {"mma", "8"}};
  if (hopper_sparse_kernel_runs()) {
    kernels.push_back({"wgmma", "8"});
    kernels.push_back({"wgmma", "4"});
  }
  // LATTN_SPARSE_TEST_KERNEL=wgmma keeps only that kernel's passes (for the
  // slow sanitizer runs).
  if (const char* only = std::getenv("LATTN_SPARSE_TEST_KERNEL"); only && *only) {
    std::erase_if(kernels, [&](const Kernel& k) { return std::string(k.kernel) != only; });
  }
  std::vector<SparseCase> cases;
  uint64_t seed = 500;
  for (DType cache_dtype : {DType::bf16, kFp8DsMla}) {
    auto add = [&](int N, int T, int topk, int pattern, int valid_per_row, bool sink, int block_size, int num_blocks) {
      SparseCase c;
      c.cache_dtype = cache_dtype, c.N = N, c.T = T, c.topk = topk, c.pattern = pattern;
      c.valid_per_row = valid_per_row, c.sink = sink, c.block_size = block_size, c.num_blocks = num_blocks;
      c.seed = seed++;
      cases.push_back(c);
    };
    add(128, 2, 700, 0, -1, false, 16, 64);  // 64-head tiles, 11 tiles of which the last is partial
    add(65, 3, 130, 1, -1, true, 16, 12);    // odd heads: a second tile with one head; duplicates; sink
    add(33, 3, 96, 3, -1, false, 16, 12);    // token 1 has no key
    add(128, 2, 300, 2, 37, false, 16, 12);  // holes, then -1 from slot 37 on: tiles 1-4 have no key
    add(16, 4, 200, 2, -1, true, 1, 300);    // 16-head tile, block size 1, holes, sink
    add(3, 2, 64, 1, -1, false, 16, 12);     // 3 heads in a 16-row tile
    add(100, 2, 150, 4, -1, false, 16, 12);  // slots past the cache (device only): as -1
    add(64, 2, 128, 5, -1, false, 16, 12);   // a NaN in a selected key of token 0: its rows are NaN
  }
  for (const Kernel& k : kernels) {
    const ScopedEnv kernel_env("LATTN_SPARSE_KERNEL", k.kernel), batch_env("LATTN_SPARSE_FP8_BATCH", k.fp8_batch);
    for (const SparseCase& c : cases) {
      if (std::string(k.kernel) == "wgmma" && c.N <= 16) continue;  // refused: the 16-row tiles serve these
      SCOPED_TRACE(std::string("kernel '") + k.kernel + "' fp8 batch " + k.fp8_batch + " case seed " +
                   std::to_string(c.seed) + " N " + std::to_string(c.N) + " topk " + std::to_string(c.topk));
      // Pattern 5: element 7 of the key token 0 lists at position 5 becomes NaN.
      auto plant_nan = [&](SparseData& d) {
        if (c.pattern != 5) return;
        const int64_t slot = d.indices.data_as<int32_t>()[5];
        uint8_t* entry = static_cast<uint8_t*>(d.cache.cache().data.data()) +
                         slot * d.cache.cache().data.stride(1) * d.cache.cache().data.element_size();
        if (c.cache_dtype == kFp8DsMla) {
          entry[7] = 0xff;  // e4m3 NaN
        } else {
          entry[14] = entry[15] = 0xff;  // bf16 NaN
        }
      };
      SparseData host = make_case(c);
      plant_nan(host);
      const int64_t capacity = int64_t(c.num_blocks) * c.block_size;
      int32_t* ix = host.indices.data_as<int32_t>();
      if (c.pattern == 4) {
        for (int64_t i = 0; i < int64_t(c.T) * c.topk; ++i) {
          if (i % 5 == 3) ix[i] = int32_t(capacity + i % 7);
        }
      }
      const OwnedTensor q = test::to_device(host.q, gpu), idx = test::to_device(host.indices, gpu);
      OwnedTensor sink = c.sink ? test::to_device(host.sink, gpu) : OwnedTensor{};
      OwnedLatentCache dev(c.num_blocks, c.block_size, MlaDims{c.N, c.L, 128, c.R, 128}, c.cache_dtype, gpu);
      copy_tensor(host.cache.cache().data, dev.cache().data);
      OwnedTensor out = OwnedTensor::empty({c.T, c.N, c.L}, c.dtype, gpu),
                  lse = OwnedTensor::empty({c.N, c.T}, DType::f32, gpu);
      test::poison(out);
      test::poison(lse);
      SparseMlaArgs a;
      a.q = q, a.indices = idx, a.attn_sink = sink.tensor(), a.out = out, a.lse = lse, a.scale = scale_of(c);
      sparse_mla(a, dev, "cuda");
      copy_tensor(out, host.out);
      copy_tensor(lse, host.lse);

      SparseData ref = make_case(c);  // the same data; slots past the cache become -1 on the host
      plant_nan(ref);
      if (c.pattern == 4) {
        int32_t* rx = ref.indices.data_as<int32_t>();
        for (int64_t i = 0; i < int64_t(c.T) * c.topk; ++i) {
          if (i % 5 == 3) rx[i] = -1;
        }
      }
      sparse_mla(args_of(ref, scale_of(c)), ref.cache, "reference");
      expect_matches(c, host, ref.out, ref.lse, test::rel_tolerance(c.dtype));
      if (c.pattern == 3) {
        for (int h = 0; h < c.N; ++h) EXPECT_EQ(host.lse.data_as<float>()[h * c.T + 1], -INFINITY);
      }
      if (c.pattern == 5) {
        for (int h = 0; h < c.N; ++h) EXPECT_TRUE(std::isnan(host.lse.data_as<float>()[h * c.T])) << "head " << h;
      }
    }
  }
}

// A forced kernel that cannot serve the call is an error naming the reason,
// not a silent fallback (so the test above knows which kernel ran).
TEST(SparseMlaGpu, ForcedKernelThatCannotServeIsAnError) {
  LATTN_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  SparseCase c;
  c.N = 16, c.T = 2, c.topk = 64;
  SparseData host = make_case(c);
  OwnedLatentCache dev(c.num_blocks, c.block_size, MlaDims{c.N, c.L, 128, c.R, 128}, c.cache_dtype, gpu);
  copy_tensor(host.cache.cache().data, dev.cache().data);
  const OwnedTensor q = test::to_device(host.q, gpu), idx = test::to_device(host.indices, gpu);
  OwnedTensor out = OwnedTensor::empty({c.T, c.N, c.L}, c.dtype, gpu),
              lse = OwnedTensor::empty({c.N, c.T}, DType::f32, gpu);
  SparseMlaArgs a;
  a.q = q, a.indices = idx, a.out = out, a.lse = lse, a.scale = scale_of(c);
  {
    const ScopedEnv env("LATTN_SPARSE_KERNEL", "wgmma");  // 16 heads: refused on every GPU
    EXPECT_THROW(sparse_mla(a, dev, "cuda"), ValueError);
  }
  {
    const ScopedEnv env("LATTN_SPARSE_KERNEL", "bogus");
    EXPECT_THROW(sparse_mla(a, dev, "cuda"), ValueError);
  }
  const ScopedEnv env("LATTN_SPARSE_KERNEL", "simple");
  EXPECT_NO_THROW(sparse_mla(a, dev, "cuda"));
}

}  // namespace
}  // namespace lattn
