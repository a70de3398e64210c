// The `cpu` backends against plain float64 loops written here, for every
// instruction-set path this machine can run (forced with set_cpu_isa) and
// for 1 and all threads: causal prefill, context chunks (including empty
// ones), and decode over a paged cache with hostile data (permuted block
// tables, NaN in every cache slot no request may read, partial last blocks,
// block sizes 1/5/16/64, fp8/f16/bf16 caches, s_q > 1, odd head counts,
// non-DeepSeek and odd dims, long requests that are split).
// The shared backend driver (cpu vs reference) complements this file.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "lattn/backend.h"
#include "lattn/cache.h"
#include "lattn/cpu.h"
#include "lattn/errors.h"
#include "lattn/metadata.h"
#include "support/test_data.h"

namespace lattn {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

OwnedTensor i32_tensor(const std::vector<int32_t>& values, std::vector<int64_t> shape = {}) {
  if (shape.empty()) shape = {int64_t(values.size())};
  OwnedTensor t = OwnedTensor::empty(shape, DType::i32);
  std::copy(values.begin(), values.end(), t.data_as<int32_t>());
  return t;
}

std::vector<double> to_f64(const Tensor& t) {
  OwnedTensor f = test::to_host_f32(t);
  return std::vector<double>(f.data_as<float>(), f.data_as<float>() + t.numel());
}

std::vector<int32_t> offsets_of(const std::vector<int>& lengths) {
  std::vector<int32_t> o(1, 0);
  for (int n : lengths) o.push_back(o.back() + n);
  return o;
}

// Softmax-attention of one query row against `keys` rows (f64): returns the
// output row and the natural-log LSE (-inf, zeros when there is no key).
double attend_row(const std::vector<double>& q, const std::vector<std::vector<double>>& keys,
                  const std::vector<std::vector<double>>& values, double scale, std::vector<double>& out) {
  std::fill(out.begin(), out.end(), 0.0);
  if (keys.empty()) return kNegInf;
  std::vector<double> s(keys.size());
  double m = kNegInf;
  for (size_t j = 0; j < keys.size(); ++j) {
    double dot = 0;
    for (size_t d = 0; d < q.size(); ++d) dot += q[d] * keys[j][d];
    s[j] = dot * scale;
    m = std::max(m, s[j]);
  }
  double sum = 0;
  for (size_t j = 0; j < keys.size(); ++j) {
    const double p = std::exp(s[j] - m);
    sum += p;
    for (size_t d = 0; d < out.size(); ++d) out[d] += p * values[j][d];
  }
  for (double& o : out) o /= sum;
  return m + std::log(sum);
}

struct IsaCase {
  CpuIsa isa;
  bool all_threads;
};

std::string isa_case_name(const ::testing::TestParamInfo<IsaCase>& info) {
  return std::string(cpu_isa_name(info.param.isa)) + (info.param.all_threads ? "_all_threads" : "_1_thread");
}

class CpuBackendTest : public ::testing::TestWithParam<IsaCase> {
 protected:
  void SetUp() override {
    const auto supported = cpu_isas_supported();
    if (std::find(supported.begin(), supported.end(), GetParam().isa) == supported.end()) {
      GTEST_SKIP() << "this CPU cannot run the " << cpu_isa_name(GetParam().isa) << " path";
    }
    set_cpu_isa(GetParam().isa);
  }
  void TearDown() override { set_cpu_isa(std::nullopt); }

  int threads() const { return GetParam().all_threads ? std::max(2, omp_get_max_threads()) : 1; }
  std::mt19937_64 rng_{20240611};
};

// ---------------------------------------------------------------------------
// Prefill

struct PrefillDims {
  int heads, nope, rope, v;
};

struct PrefillCheck {
  PrefillDims dims;
  DType dtype;
  std::vector<int> query_lens;
  std::vector<int> key_lens;  // empty: causal new tokens (keys = the queries' own tokens)
  bool lse = true;
  bool strided_q = false;  // q as a narrowed view of a wider tensor
};

void run_prefill_check(const PrefillCheck& c, int threads, std::mt19937_64& rng) {
  const bool causal = c.key_lens.empty();
  const int n = c.dims.heads, dqk = c.dims.nope + c.dims.rope, dv = c.dims.v;
  const std::vector<int32_t> q_off = offsets_of(c.query_lens);
  const std::vector<int32_t> k_off = causal ? q_off : offsets_of(c.key_lens);
  const int64_t tq = q_off.back(), tk = k_off.back();
  const float scale = 1.f / std::sqrt(float(dqk));

  OwnedTensor q_wide = OwnedTensor::empty({tq, n, dqk + (c.strided_q ? 5 : 0)}, c.dtype);
  const Tensor q = q_wide.tensor().narrow(2, 0, dqk);
  OwnedTensor k = OwnedTensor::empty({tk, n, dqk}, c.dtype), v = OwnedTensor::empty({tk, n, dv}, c.dtype);
  test::fill_uniform(q_wide, rng, -2.f, 2.f);
  test::fill_uniform(k, rng, -2.f, 2.f);
  test::fill_uniform(v, rng);
  OwnedTensor out = OwnedTensor::empty({tq, n, dv}, c.dtype), lse = OwnedTensor::empty({n, tq}, DType::f32);
  test::poison(out);
  test::poison(lse);

  PrefillMetadata md;
  OwnedTensor qsl = i32_tensor(q_off);
  md.num_prefills = int(c.query_lens.size());
  md.num_prefill_tokens = int(tq);
  md.query_start_loc_cpu = md.query_start_loc = qsl;
  OwnedTensor cu = i32_tensor(k_off, {1, int64_t(k_off.size())});
  if (!causal) {
    md.chunks.num_chunks = 1;
    md.chunks.cu_seq_lens_cpu = md.chunks.cu_seq_lens = cu;
    md.chunks.seq_tot = {int32_t(tk)};
  }

  PrefillBackendParams params;
  params.num_heads = n;
  params.scale = scale;
  params.qk_nope_head_dim = c.dims.nope;
  params.qk_rope_head_dim = c.dims.rope;
  params.v_head_dim = dv;
  params.kv_lora_rank = 512;
  params.dtype = c.dtype;
  params.context.num_threads = threads;
  auto backend = cpu_prefill_backend_class()->create(params);
  backend->prepare_metadata(md);
  if (causal) {
    backend->run_prefill_new_tokens(q, k, v, c.lse, out, c.lse ? lse.tensor() : Tensor());
  } else {
    backend->run_prefill_context_chunk(0, q, k, v, out, lse);
  }

  // Reference from the same (rounded) inputs.
  const std::vector<double> qd = to_f64(q), kd = to_f64(k), vd = to_f64(v);
  OwnedTensor ref_out = OwnedTensor::empty({tq, n, dv}, DType::f32), ref_lse = OwnedTensor::empty({n, tq}, DType::f32);
  std::vector<double> row(static_cast<size_t>(dv)), qrow(static_cast<size_t>(dqk));
  for (size_t r = 0; r < c.query_lens.size(); ++r) {
    for (int h = 0; h < n; ++h) {
      for (int i = 0; i < c.query_lens[r]; ++i) {
        const int64_t t = q_off[r] + i;
        const int visible = causal ? i + 1 : k_off[r + 1] - k_off[r];
        std::vector<std::vector<double>> keys, values;
        for (int j = 0; j < visible; ++j) {
          const int64_t kt = k_off[r] + j;
          keys.emplace_back(kd.begin() + (kt * n + h) * dqk, kd.begin() + (kt * n + h + 1) * dqk);
          values.emplace_back(vd.begin() + (kt * n + h) * dv, vd.begin() + (kt * n + h + 1) * dv);
        }
        std::copy(qd.begin() + (t * n + h) * dqk, qd.begin() + (t * n + h + 1) * dqk, qrow.begin());
        const double l = attend_row(qrow, keys, values, scale, row);
        for (int d = 0; d < dv; ++d) ref_out.data_as<float>()[(t * n + h) * dv + d] = float(row[size_t(d)]);
        ref_lse.data_as<float>()[h * tq + t] = float(l);
      }
    }
  }
  const test::ErrorReport eo = test::compare(out, ref_out);
  EXPECT_LE(eo.rel_l2, test::rel_tolerance(c.dtype)) << "out: " << eo.str();
  if (c.lse) {
    const test::ErrorReport el = test::compare(lse, ref_lse);
    // LSE is f32 math on exact products of the rounded inputs, for every dtype.
    EXPECT_LE(el.rel_l2, 1e-5) << "lse: " << el.str();
  } else {
    const std::vector<double> untouched = to_f64(lse);
    EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](double x) { return std::isnan(x); }))
        << "lse was written although return_softmax_lse is false";
  }
}

TEST_P(CpuBackendTest, PrefillCausalDeepSeekDims) {
  for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
    SCOPED_TRACE(dtype_name(dt));
    run_prefill_check({{2, 128, 64, 128}, dt, {1, 37, 100}, {}}, threads(), rng_);
  }
}

TEST_P(CpuBackendTest, PrefillCausalOddDimsOddHeadsStridedQuery) {
  for (DType dt : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(dtype_name(dt));
    PrefillCheck c{{3, 5, 4, 7}, dt, {3, 70, 1}, {}};
    c.strided_q = true;
    run_prefill_check(c, threads(), rng_);
  }
}

TEST_P(CpuBackendTest, PrefillWithoutLseLeavesItUntouched) {
  PrefillCheck c{{2, 16, 8, 16}, DType::bf16, {5, 33}, {}};
  c.lse = false;
  run_prefill_check(c, threads(), rng_);
}

TEST_P(CpuBackendTest, PrefillContextChunkNonCausalWithEmptyChunks) {
  for (DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    // Request 0 has no context in this chunk (output 0, LSE -inf); odd key counts.
    run_prefill_check({{2, 128, 64, 128}, dt, {20, 33, 5}, {0, 131, 7}}, threads(), rng_);
  }
  run_prefill_check({{1, 9, 3, 5}, DType::f32, {40}, {200}}, threads(), rng_);
}

// ---------------------------------------------------------------------------
// Decode

struct DecodeCheck {
  int heads, latent, rope;
  DType dtype, cache_dtype;
  int block_size;
  std::vector<int> seq_lens;
  int s_q = 1;
  bool lse = true;
};

void run_decode_check(const DecodeCheck& c, int threads, std::mt19937_64& rng) {
  const int n = c.heads, dim = c.latent + c.rope, requests = int(c.seq_lens.size());
  const float scale = 1.f / std::sqrt(192.f);
  const float cache_scale = c.cache_dtype == DType::fp8_e4m3 ? 0.05f : 1.f;
  std::vector<int> blocks_of(static_cast<size_t>(requests));
  int total_blocks = 0, max_blocks = 1;
  for (int r = 0; r < requests; ++r) {
    blocks_of[size_t(r)] = (c.seq_lens[size_t(r)] + c.block_size - 1) / c.block_size;
    total_blocks += blocks_of[size_t(r)];
    max_blocks = std::max(max_blocks, blocks_of[size_t(r)]);
  }
  const int num_blocks = total_blocks + 3;  // spare blocks nobody owns
  // Blocks handed out in a random order: block tables are permutations.
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> table(size_t(requests) * max_blocks, -1);  // unused columns hold -1
  int next = 0;
  for (int r = 0; r < requests; ++r) {
    for (int b = 0; b < blocks_of[size_t(r)]; ++b) table[size_t(r) * max_blocks + b] = ids[size_t(next++)];
  }

  MlaDims dims{n, c.latent, 128, c.rope, 128};
  OwnedLatentCache owned(num_blocks, c.block_size, dims, c.cache_dtype, Device::cpu(), cache_scale);
  const LatentCache& cache = owned.cache();
  test::poison(cache.data);  // every slot no request owns stays NaN
  {
    OwnedTensor rows = OwnedTensor::empty({1, dim}, DType::f32);
    for (int r = 0; r < requests; ++r) {
      for (int pos = 0; pos < c.seq_lens[size_t(r)]; ++pos) {
        const int block = table[size_t(r) * max_blocks + pos / c.block_size];
        test::fill_uniform(rows, rng, -2.f, 2.f);
        for (int d = 0; d < dim; ++d) {
          const float x = rows.data_as<float>()[d] / cache_scale;  // stored = x / scale
          store_from_f32(cache.data.data(), c.cache_dtype,
                         (int64_t(block) * c.block_size + pos % c.block_size) * dim + d, x);
        }
      }
    }
  }

  const int t = requests * c.s_q;
  OwnedTensor ql = OwnedTensor::empty({t, n, c.latent}, c.dtype), qpe = OwnedTensor::empty({t, n, c.rope}, c.dtype);
  test::fill_uniform(ql, rng, -1.f, 1.f);
  test::fill_uniform(qpe, rng, -1.f, 1.f);
  OwnedTensor out = OwnedTensor::empty({t, n, c.latent}, c.dtype), lse = OwnedTensor::empty({n, t}, DType::f32);
  test::poison(out);
  test::poison(lse);

  std::vector<int32_t> seq(c.seq_lens.begin(), c.seq_lens.end());
  OwnedTensor qsl = i32_tensor(offsets_of(std::vector<int>(size_t(requests), c.s_q)));
  OwnedTensor seq_t = i32_tensor(seq), bt = i32_tensor(table, {requests, max_blocks});
  DecodeMetadata md;
  md.num_decodes = requests;
  md.num_decode_tokens = t;
  md.max_decode_query_len = c.s_q;
  md.max_decode_seq_len = *std::max_element(seq.begin(), seq.end());
  md.block_size = c.block_size;
  md.query_start_loc_cpu = md.query_start_loc = qsl;
  md.seq_lens_cpu = md.seq_lens = seq_t;
  md.block_table_cpu = md.block_table = bt;

  DecodeBackendParams params;
  params.num_heads = n;
  params.scale = scale;
  params.kv_lora_rank = c.latent;
  params.qk_rope_head_dim = c.rope;
  params.dtype = c.dtype;
  params.kv_cache_dtype = c.cache_dtype;
  params.context.num_threads = threads;
  auto backend = cpu_decode_backend_class()->create(params);
  backend->prepare_metadata(md);
  backend->run(ql, qpe, cache, md, out, c.lse ? lse.tensor() : Tensor());

  // Reference: dequantized cache rows in f64.
  const std::vector<double> qld = to_f64(ql), qped = to_f64(qpe);
  OwnedTensor ref_out = OwnedTensor::empty({t, n, c.latent}, DType::f32),
              ref_lse = OwnedTensor::empty({n, t}, DType::f32);
  std::vector<double> row(static_cast<size_t>(c.latent)), qrow(static_cast<size_t>(dim));
  for (int r = 0; r < requests; ++r) {
    const int len = c.seq_lens[size_t(r)];
    std::vector<std::vector<double>> keys, values;
    for (int pos = 0; pos < len; ++pos) {
      const int block = table[size_t(r) * max_blocks + pos / c.block_size];
      std::vector<double> key(static_cast<size_t>(dim));
      for (int d = 0; d < dim; ++d) {
        key[size_t(d)] = double(load_as_f32(cache.data.data(), c.cache_dtype,
                                            (int64_t(block) * c.block_size + pos % c.block_size) * dim + d)) *
                         cache_scale;
      }
      values.emplace_back(key.begin(), key.begin() + c.latent);
      keys.push_back(std::move(key));
    }
    for (int j = 0; j < c.s_q; ++j) {
      const int visible = len - c.s_q + j + 1;
      const std::vector<std::vector<double>> kv(keys.begin(), keys.begin() + visible);
      const std::vector<std::vector<double>> vv(values.begin(), values.begin() + visible);
      const int64_t tok = int64_t(r) * c.s_q + j;
      for (int h = 0; h < n; ++h) {
        for (int d = 0; d < c.latent; ++d) qrow[size_t(d)] = qld[size_t((tok * n + h) * c.latent + d)];
        for (int d = 0; d < c.rope; ++d) qrow[size_t(c.latent + d)] = qped[size_t((tok * n + h) * c.rope + d)];
        const double l = attend_row(qrow, kv, vv, scale, row);
        for (int d = 0; d < c.latent; ++d)
          ref_out.data_as<float>()[(tok * n + h) * c.latent + d] = float(row[size_t(d)]);
        ref_lse.data_as<float>()[h * t + tok] = float(l);
      }
    }
  }
  const test::ErrorReport eo = test::compare(out, ref_out);
  EXPECT_LE(eo.rel_l2, test::rel_tolerance(c.dtype)) << "out: " << eo.str();
  if (c.lse) {
    const test::ErrorReport el = test::compare(lse, ref_lse);
    EXPECT_LE(el.rel_l2, 1e-5) << "lse: " << el.str();
  }
}

TEST_P(CpuBackendTest, DecodeDeepSeekDimsEveryCacheDtypeAndBlockSize) {
  for (DType cache_dt : {DType::bf16, DType::fp8_e4m3, DType::f16}) {
    for (int bs : {16, 64, 1, 5}) {
      SCOPED_TRACE(std::string(dtype_name(cache_dt)) + " block " + std::to_string(bs));
      run_decode_check({16, 512, 64, DType::bf16, cache_dt, bs, {1, 77, 300}}, threads(), rng_);
    }
  }
}

TEST_P(CpuBackendTest, DecodeSeveralQueryTokensOddHeadsSmallDims) {
  for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
    SCOPED_TRACE(dtype_name(dt));
    const DType cache_dt = dt == DType::f32 ? DType::bf16 : dt;
    run_decode_check({5, 24, 8, dt, cache_dt, 16, {3, 50, 130}, 3}, threads(), rng_);
  }
}

TEST_P(CpuBackendTest, DecodeOddLatentWidth) {
  run_decode_check({3, 17, 4, DType::bf16, DType::bf16, 7, {9, 64, 65}, 2}, threads(), rng_);
  run_decode_check({3, 17, 4, DType::bf16, DType::fp8_e4m3, 7, {9, 64, 65}}, threads(), rng_);
}

TEST_P(CpuBackendTest, DecodeLongRequestIsSplitAndCombined) {
  // One long request and a tiny one: the long one is cut into splits whose
  // partial results are merged by LSE.
  run_decode_check({16, 512, 64, DType::bf16, DType::bf16, 64, {4000, 2}}, threads(), rng_);
  run_decode_check({20, 64, 16, DType::f16, DType::f16, 16, {2500}, 2}, threads(), rng_);
}

TEST_P(CpuBackendTest, DecodeLoneRequestAtSplitBoundaries) {
  // Lengths around the plan's split rule (no split under 512 keys, one job
  // per thread up to 2048, cuts on 64-key multiples): odd heads and latent
  // width (partial vector groups, ragged combine rows), two query tokens,
  // block size 7; then DeepSeek dims at 16 heads, the batch-1 case.
  for (int len : {1, 511, 512, 513, 1023, 1024, 1025, 1088, 2049}) {
    SCOPED_TRACE("len " + std::to_string(len));
    run_decode_check({3, 17, 4, DType::bf16, DType::bf16, 7, {len}, len > 1 ? 2 : 1}, threads(), rng_);
  }
  run_decode_check({16, 512, 64, DType::bf16, DType::bf16, 64, {1024}}, threads(), rng_);
  run_decode_check({16, 512, 64, DType::bf16, DType::fp8_e4m3, 64, {1025}}, threads(), rng_);
}

TEST_P(CpuBackendTest, DecodeWithoutLse) {
  DecodeCheck c{4, 32, 8, DType::bf16, DType::bf16, 16, {10, 20}};
  c.lse = false;
  run_decode_check(c, threads(), rng_);
}

INSTANTIATE_TEST_SUITE_P(Isa, CpuBackendTest,
                         ::testing::Values(IsaCase{CpuIsa::scalar, false}, IsaCase{CpuIsa::scalar, true},
                                           IsaCase{CpuIsa::avx2, false}, IsaCase{CpuIsa::avx2, true},
                                           IsaCase{CpuIsa::avx512, false}, IsaCase{CpuIsa::avx512, true},
                                           IsaCase{CpuIsa::avx512_bf16, false}, IsaCase{CpuIsa::avx512_bf16, true}),
                         isa_case_name);

}  // namespace
}  // namespace lattn
