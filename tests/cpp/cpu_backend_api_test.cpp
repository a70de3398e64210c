// The `cpu` backend's surface: instruction-set selection (API and
// LATTN_CPU_ISA), its classes as the registry and the selector see them on a
// machine without a GPU, and its refusals (every bad argument is named and
// nothing is written).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/backends/unchecked_decode_run.h"
#include "lattn/attention.h"
#include "lattn/backend.h"
#include "lattn/cpu.h"
#include "lattn/errors.h"
#include "lattn/registry.h"
#include "lattn/selector.h"
#include "support/test_data.h"

namespace lattn {
namespace {

TEST(CpuIsa, NamesRoundTripAndUnknownNamesAreRefused) {
  for (CpuIsa isa : {CpuIsa::scalar, CpuIsa::avx2, CpuIsa::avx512, CpuIsa::avx512_bf16}) {
    EXPECT_EQ(parse_cpu_isa(cpu_isa_name(isa)), isa);
  }
  try {
    parse_cpu_isa("sse9");
    FAIL() << "no exception";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "unknown CPU instruction-set path 'sse9' (expected one of: scalar, avx2, avx512, avx512bf16)");
  }
}

TEST(CpuIsa, SupportedPathsAreOrderedAndForcible) {
  const std::vector<CpuIsa> supported = cpu_isas_supported();
  ASSERT_FALSE(supported.empty());
  EXPECT_EQ(supported.front(), CpuIsa::scalar);
  for (size_t i = 1; i < supported.size(); ++i) EXPECT_LT(supported[i - 1], supported[i]);
  EXPECT_EQ(cpu_isa_best(), supported.back());
  for (CpuIsa isa : supported) {
    set_cpu_isa(isa);
    EXPECT_EQ(cpu_isa(), isa);
  }
  set_cpu_isa(std::nullopt);
  EXPECT_EQ(cpu_isa(), cpu_isa_best());  // LATTN_CPU_ISA is not set in the test environment
}

TEST(CpuIsa, ForcingAPathTheCpuLacksIsRefused) {
  const std::vector<CpuIsa> supported = cpu_isas_supported();
  if (supported.back() == CpuIsa::avx512_bf16) GTEST_SKIP() << "this CPU runs every path";
  const CpuIsa missing = CpuIsa(int(supported.back()) + 1);
  EXPECT_THROW(set_cpu_isa(missing), ValueError);
  EXPECT_EQ(cpu_isa(), cpu_isa_best());
}

// LATTN_CPU_ISA is read once, at first use: each check runs in a fresh process.
TEST(CpuIsaDeathTest, EnvironmentVariableForcesAPath) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("LATTN_CPU_ISA", "scalar", 1);
        std::exit(cpu_isa() == CpuIsa::scalar ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        setenv("LATTN_CPU_ISA", "bogus", 1);
        try {
          (void)cpu_isa();
        } catch (const ValueError& e) {
          std::fprintf(stderr, "%s\n", e.what());
          std::exit(3);
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(3), "unknown CPU instruction-set path 'bogus'");
}

SelectorConfig cpu_config(DType dtype, DType cache_dtype = DType::bf16) {
  return SelectorConfig::for_dims(MlaDims::deepseek_v3(16), dtype, cache_dtype, Device::cpu(), 1, 8);
}

TEST(CpuBackendClasses, ValidOnTheCpuForEveryDtypeAndRefuseCudaDevices) {
  const auto prefill = cpu_prefill_backend_class();
  const auto decode = cpu_decode_backend_class();
  EXPECT_EQ(prefill->name(), "cpu");
  EXPECT_EQ(decode->name(), "cpu");
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (DType cache_dt : {DType::f16, DType::bf16, DType::fp8_e4m3}) {
      EXPECT_TRUE(prefill->validate_configuration(std::nullopt, cpu_config(dt, cache_dt)).empty());
      EXPECT_TRUE(decode->validate_configuration(std::nullopt, cpu_config(dt, cache_dt)).empty());
    }
  }
  EXPECT_EQ(prefill->validate_configuration(DeviceCapability{9, 0}, cpu_config(DType::bf16)),
            std::vector<std::string>{"compute capability 9.0 not supported"});
  EXPECT_EQ(decode->validate_configuration(DeviceCapability{8, 0}, cpu_config(DType::bf16)),
            std::vector<std::string>{"compute capability 8.0 not supported"});
  // Non-DeepSeek dims, odd head counts, block size 1, many query tokens: all fine.
  SelectorConfig odd = SelectorConfig::for_dims({3, 24, 5, 4, 7}, DType::bf16, DType::fp8_e4m3, Device::cpu(), 1, 64);
  EXPECT_TRUE(prefill->validate_configuration(std::nullopt, odd).empty());
  EXPECT_TRUE(decode->validate_configuration(std::nullopt, odd).empty());
}

TEST(CpuBackendClasses, RegisteredAsCpuAndPickedWithoutAGpu) {
  EXPECT_EQ(mla_prefill_backend_registry().get_class("cpu"), cpu_prefill_backend_class());
  EXPECT_EQ(mla_decode_backend_registry().get_class("cpu"), cpu_decode_backend_class());
  clear_mla_backend_selection_cache();
  for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
    EXPECT_EQ(auto_select_mla_prefill_backend(std::nullopt, cpu_config(dt))->name(), "cpu");
    EXPECT_EQ(auto_select_mla_decode_backend(std::nullopt, cpu_config(dt, DType::fp8_e4m3))->name(), "cpu");
  }
}

TEST(CpuBackendClasses, CreateRefusesUnusableParameters) {
  PrefillBackendParams p;
  p.num_heads = 16, p.scale = 0.1f, p.kv_lora_rank = 512, p.qk_nope_head_dim = 128, p.qk_rope_head_dim = 64;
  p.v_head_dim = 128;
  EXPECT_NO_THROW(cpu_prefill_backend_class()->create(p));
  PrefillBackendParams bad = p;
  bad.context.device = Device::cuda(0);
  EXPECT_THROW(cpu_prefill_backend_class()->create(bad), ValueError);
  bad = p;
  bad.scale = 0.f;
  EXPECT_THROW(cpu_prefill_backend_class()->create(bad), ValueError);
  bad = p;
  bad.dtype = DType::fp8_e4m3;
  EXPECT_THROW(cpu_prefill_backend_class()->create(bad), ValueError);

  DecodeBackendParams d;
  d.num_heads = 16, d.scale = 0.1f, d.kv_lora_rank = 512, d.qk_rope_head_dim = 64;
  EXPECT_NO_THROW(cpu_decode_backend_class()->create(d));
  DecodeBackendParams dbad = d;
  dbad.kv_cache_dtype = DType::f32;
  try {
    cpu_decode_backend_class()->create(dbad);
    FAIL() << "no exception";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("params.kv_cache_dtype"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------
// Refusals at run time leave the outputs untouched.

bool all_nan(const Tensor& t) {
  OwnedTensor f = test::to_host_f32(t);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (!std::isnan(f.data_as<float>()[i])) return false;
  }
  return true;
}

OwnedTensor i32(std::vector<int32_t> v, std::vector<int64_t> shape = {}) {
  if (shape.empty()) shape = {int64_t(v.size())};
  OwnedTensor t = OwnedTensor::empty(shape, DType::i32);
  std::copy(v.begin(), v.end(), t.data_as<int32_t>());
  return t;
}

TEST(CpuPrefillRefusals, BadArgumentsAreNamedAndNothingIsWritten) {
  PrefillBackendParams p;
  p.num_heads = 2, p.scale = 0.1f, p.qk_nope_head_dim = 8, p.qk_rope_head_dim = 4, p.v_head_dim = 8;
  auto backend = cpu_prefill_backend_class()->create(p);
  OwnedTensor q = OwnedTensor::zeros({5, 2, 12}, DType::bf16), k = OwnedTensor::zeros({5, 2, 12}, DType::bf16);
  OwnedTensor v = OwnedTensor::zeros({5, 2, 8}, DType::bf16), out = OwnedTensor::empty({5, 2, 8}, DType::bf16);
  OwnedTensor lse = OwnedTensor::empty({2, 5}, DType::f32);
  test::poison(out);
  test::poison(lse);
  const auto expect_refusal = [&](auto&& call, const std::string& needle) {
    try {
      call();
      ADD_FAILURE() << "no exception; expected one naming " << needle;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_TRUE(all_nan(out));
    EXPECT_TRUE(all_nan(lse));
  };
  expect_refusal([&] { backend->run_prefill_new_tokens(q, k, v, true, out, lse); }, "prepare_metadata");

  PrefillMetadata md;
  OwnedTensor qsl = i32({0, 2, 5});
  md.num_prefills = 2, md.num_prefill_tokens = 5;
  md.query_start_loc_cpu = md.query_start_loc = qsl;
  backend->prepare_metadata(md);
  OwnedTensor short_k = OwnedTensor::zeros({5, 2, 11}, DType::bf16);
  expect_refusal([&] { backend->run_prefill_new_tokens(q, short_k, v, true, out, lse); }, "argument 'k'");
  OwnedTensor f16_v = OwnedTensor::zeros({5, 2, 8}, DType::f16);
  expect_refusal([&] { backend->run_prefill_new_tokens(q, k, f16_v, true, out, lse); }, "argument 'v'");
  OwnedTensor wrong_lse = OwnedTensor::empty({5, 2}, DType::f32);
  expect_refusal([&] { backend->run_prefill_new_tokens(q, k, v, true, out, wrong_lse); }, "argument 'lse'");
  OwnedTensor bad_qsl = i32({0, 3, 2});
  md.query_start_loc_cpu = bad_qsl;
  expect_refusal([&] { backend->run_prefill_new_tokens(q, k, v, true, out, lse); }, "non-decreasing");
  md.query_start_loc_cpu = qsl;
  expect_refusal([&] { backend->run_prefill_context_chunk(0, q, k, v, out, lse); }, "chunk_idx");

  // fp8 output: out must be fp8_e4m3 and the scale one f32 element.
  OwnedTensor scale = OwnedTensor::empty({1}, DType::f32);
  *scale.data_as<float>() = 0.5f;
  expect_refusal([&] { backend->run_prefill_new_tokens(q, k, v, true, out, lse, scale); }, "argument 'out'");
  OwnedTensor f16_scale = OwnedTensor::zeros({1}, DType::f16);
  OwnedTensor fp8_out = OwnedTensor::empty({5, 2, 8}, DType::fp8_e4m3);
  expect_refusal([&] { backend->run_prefill_new_tokens(q, k, v, true, fp8_out, lse, f16_scale); },
                 "argument 'output_scale'");
  EXPECT_NO_THROW(backend->run_prefill_new_tokens(q, k, v, true, fp8_out, lse, scale));
}

TEST(CpuDecodeRefusals, BadBlockIdsAndLengthsAreNamedAndNothingIsWritten) {
  DecodeBackendParams p;
  p.num_heads = 2, p.scale = 0.1f, p.kv_lora_rank = 16, p.qk_rope_head_dim = 4;
  auto backend = cpu_decode_backend_class()->create(p);
  OwnedLatentCache cache(4, 8, MlaDims{2, 16, 8, 4, 8}, DType::bf16);
  fill(cache.cache().data, 0.f);
  OwnedTensor ql = OwnedTensor::zeros({2, 2, 16}, DType::bf16), qpe = OwnedTensor::zeros({2, 2, 4}, DType::bf16);
  OwnedTensor out = OwnedTensor::empty({2, 2, 16}, DType::bf16), lse = OwnedTensor::empty({2, 2}, DType::f32);
  test::poison(out);
  test::poison(lse);
  DecodeMetadata md;
  OwnedTensor qsl = i32({0, 1, 2}), seq = i32({9, 3}), bt = i32({0, 1, 2, 7}, {2, 2});  // block 7 does not exist
  md.num_decodes = 2, md.num_decode_tokens = 2, md.block_size = 8;
  md.query_start_loc_cpu = md.query_start_loc = qsl;
  md.seq_lens_cpu = md.seq_lens = seq;
  md.block_table_cpu = md.block_table = bt;
  // Request 1 needs one block (3 tokens): column 1's 7 is padding nobody reads.
  EXPECT_NO_THROW(backend->run(ql, qpe, cache, md, out, lse));
  test::poison(out);
  test::poison(lse);
  OwnedTensor seq_long = i32({9, 12});  // now request 1 needs block 7
  md.seq_lens_cpu = seq_long;
  try {
    backend->run(ql, qpe, cache, md, out, lse);
    ADD_FAILURE() << "no exception";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("block 7 at column 1"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(all_nan(out));
  EXPECT_TRUE(all_nan(lse));
  OwnedTensor seq_short = i32({9, 0});  // shorter than its query
  md.seq_lens_cpu = seq_short;
  EXPECT_THROW(backend->run(ql, qpe, cache, md, out, lse), ValueError);
  OwnedLatentCache fp8_cache(4, 8, MlaDims{2, 16, 8, 4, 8}, DType::fp8_e4m3);
  md.seq_lens_cpu = seq;
  EXPECT_THROW(backend->run(ql, qpe, fp8_cache, md, out, lse), ValueError);  // not the backend's cache dtype
  EXPECT_TRUE(all_nan(out));
}

// MlaAttention::forward validates a step once and then calls the `cpu`
// decode backend's unchecked entry (core/backends/unchecked_decode_run.h):
// it must give run()'s bits and still refuse what the layer does not check.
TEST(CpuDecodeUnchecked, GivesRunsBitsAndRefusesAStridedBlockTable) {
  DecodeBackendParams p;
  p.num_heads = 3, p.scale = 0.1f, p.kv_lora_rank = 16, p.qk_rope_head_dim = 4;
  auto backend = cpu_decode_backend_class()->create(p);
  auto* unchecked = dynamic_cast<detail::UncheckedDecodeRun*>(backend.get());
  ASSERT_NE(unchecked, nullptr);
  std::mt19937_64 rng(16);
  OwnedLatentCache cache(6, 4, MlaDims{3, 16, 8, 4, 8}, DType::bf16);
  test::fill_uniform(cache.cache().data, rng);
  // Two requests, the second with two query tokens (s_q 2): 3 decode tokens.
  OwnedTensor ql = OwnedTensor::empty({3, 3, 16}, DType::bf16), qpe = OwnedTensor::empty({3, 3, 4}, DType::bf16);
  test::fill_uniform(ql, rng);
  test::fill_uniform(qpe, rng);
  DecodeMetadata md;
  OwnedTensor qsl = i32({0, 1, 3}), seq = i32({10, 7}), bt = i32({5, 0, 3, 2, 4, 1}, {2, 3});
  md.num_decodes = 2, md.num_decode_tokens = 3, md.block_size = 4;
  md.query_start_loc_cpu = md.query_start_loc = qsl;
  md.seq_lens_cpu = md.seq_lens = seq;
  md.block_table_cpu = md.block_table = bt;
  backend->prepare_metadata(md);
  OwnedTensor out_a = OwnedTensor::empty({3, 3, 16}, DType::bf16), lse_a = OwnedTensor::empty({3, 3}, DType::f32);
  OwnedTensor out_b = OwnedTensor::empty({3, 3, 16}, DType::bf16), lse_b = OwnedTensor::empty({3, 3}, DType::f32);
  for (const OwnedTensor* t : {&out_a, &lse_a, &out_b, &lse_b}) test::poison(*t);
  backend->run(ql, qpe, cache, md, out_a, lse_a);
  unchecked->run_unchecked(ql, qpe, cache, md, out_b, lse_b);
  EXPECT_EQ(std::memcmp(out_a.data(), out_b.data(), size_t(out_a.tensor().numel()) * 2), 0);
  EXPECT_EQ(std::memcmp(lse_a.data(), lse_b.data(), size_t(lse_a.tensor().numel()) * 4), 0);
  const OwnedTensor written = test::to_host_f32(out_a);  // every row written: no poison left
  for (int64_t i = 0; i < written.tensor().numel(); ++i) ASSERT_FALSE(std::isnan(written.data_as<float>()[i])) << i;

  // The same ids every second column of a [2, 6] table: the rows the kernel
  // reads with unit stride would be wrong, so the entry refuses it.
  OwnedTensor wide = i32({5, 9, 0, 9, 3, 9, 2, 9, 4, 9, 1, 9}, {2, 6});
  const int64_t shape[] = {2, 3}, strides[] = {6, 2};
  md.block_table_cpu = Tensor(wide.data(), DType::i32, shape, strides, Device::cpu());
  test::poison(out_b);
  try {
    unchecked->run_unchecked(ql, qpe, cache, md, out_b, lse_b);
    ADD_FAILURE() << "no exception";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("metadata.block_table_cpu"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(all_nan(out_b));
}

TEST(CpuDecodeUnchecked, TheLayersCpuDecodeBackendHasIt) {
  MlaAttentionConfig c;
  c.dims = MlaDims{2, 16, 8, 4, 8};
  c.prefill_backend = "cpu";
  c.decode_backend = "cpu";
  MlaAttention layer(c);
  EXPECT_NE(dynamic_cast<const detail::UncheckedDecodeRun*>(&layer.decode_backend()), nullptr);
  MlaAttentionConfig r = c;
  r.decode_backend = "reference";  // the oracle keeps its checks: no unchecked entry
  MlaAttention reference_layer(r);
  EXPECT_EQ(dynamic_cast<const detail::UncheckedDecodeRun*>(&reference_layer.decode_backend()), nullptr);
}

}  // namespace
}  // namespace lattn
