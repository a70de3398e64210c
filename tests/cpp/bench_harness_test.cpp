// The benchmark harness: work by the counts of docs/bench-method.md, the roofline
// arithmetic, the JSON shape tools read, and a real (tiny) timed case per
// phase with both CPU backends. Nothing here asserts a speed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "harness/case_step.h"
#include "harness/harness.h"
#include "lattn/errors.h"
#include "lattn/kernel_label.h"
#include "lattn/tensor.h"

namespace lattn::bench {
namespace {

TEST(BenchHarness, WorkFollowsTargetsFormulas) {
  const std::vector<BenchCase> cases = cpu_target_cases();
  ASSERT_EQ(cases.size(), 4u);
  // Prefill causal 1 x 1024, H16, Dqk 192, Dv 128: 2 H (Dqk + Dv) (S^2 - S (S - 1) / 2).
  EXPECT_DOUBLE_EQ(work_of(cases[0]).flops, 2.0 * 16 * 320 * (1024.0 * 1024 - 1024.0 * 1023 / 2));
  // + 8192 context tokens, non-causal: + 2 H (Dqk + Dv) S_q S_ctx.
  EXPECT_DOUBLE_EQ(work_of(cases[1]).flops, work_of(cases[0]).flops + 2.0 * 16 * 320 * 1024 * 8192);
  // Decode B8 S4096: 2 H s_q sum S_k (L + R + L); bytes = sum S_k (L + R) 2.
  EXPECT_DOUBLE_EQ(work_of(cases[2]).flops, 2.0 * 16 * 1 * 8 * 4096 * 1088);
  EXPECT_DOUBLE_EQ(work_of(cases[2]).bytes, 8.0 * 4096 * 576 * 2);
  BenchCase fp8 = cases[3];
  fp8.kv_cache_dtype = DType::fp8_e4m3;
  EXPECT_DOUBLE_EQ(work_of(fp8).bytes, 8.0 * 4096 * 576);
  EXPECT_EQ(cases[3].block_size, 64);
}

TEST(BenchHarness, RooflinePicksTheLargerTerm) {
  Ceilings c;
  c.f32_gflops = 100, c.bf16_gflops = 200, c.bandwidth_gbps = 10;
  EXPECT_EQ(c.compute_gflops(DType::bf16), 200);
  EXPECT_EQ(c.compute_gflops(DType::f16), 100);  // no f16 rate: judged by f32
  BenchCase decode = cpu_target_cases()[2];
  const Work w = work_of(decode);
  Measurement m;
  m.median_us = m.min_us = 10000;
  const Row r = make_row(decode, m, c);
  const double compute_us = w.flops / 200e3, memory_us = w.bytes / 10e3;
  EXPECT_DOUBLE_EQ(r.roofline_us, std::max(compute_us, memory_us));
  EXPECT_EQ(r.bound, compute_us >= memory_us ? "compute" : "memory");
  EXPECT_DOUBLE_EQ(r.roofline_fraction, r.roofline_us / 10000);
  EXPECT_DOUBLE_EQ(r.gflops, w.flops / 1e-2 / 1e9);
}

TEST(BenchHarness, CeilingDriftFlagsACaseWhoseCeilingsMoved) {
  const BenchCase decode = cpu_target_cases()[2];  // bf16: judged by the bf16 peak and the bandwidth
  Ceilings run;
  run.f32_gflops = 100, run.bf16_gflops = 200, run.bandwidth_gbps = 10;
  Measurement m;
  m.median_us = m.min_us = m.max_us = 1000;
  Row steady = make_row(decode, m, run);
  EXPECT_FALSE(steady.ceilings_checked);
  Ceilings close = run;
  close.bf16_gflops = 190, close.f32_gflops = 10;  // the f32 peak does not judge a bf16 case
  check_ceiling_drift(steady, run, {run, close});
  EXPECT_TRUE(steady.ceilings_checked);
  EXPECT_FALSE(steady.ceilings_moved);
  EXPECT_NEAR(steady.ceiling_drift, -0.05, 1e-12);

  Row loaded = make_row(decode, m, run);
  Ceilings starved = run;
  starved.bandwidth_gbps = 4;
  check_ceiling_drift(loaded, run, {close, starved});
  EXPECT_TRUE(loaded.ceilings_moved);
  EXPECT_NEAR(loaded.ceiling_drift, -0.6, 1e-12);
  const nlohmann::json j = nlohmann::json::parse(to_json(run, {steady, loaded}));
  EXPECT_FALSE(j["rows"][0]["ceilings_moved"].get<bool>());
  EXPECT_TRUE(j["rows"][1]["ceilings_moved"].get<bool>());
  EXPECT_DOUBLE_EQ(j["rows"][1]["max_us"].get<double>(), 1000);
  EXPECT_NE(format_table(run, {steady, loaded}).find("MOVED"), std::string::npos);
}

TEST(BenchHarness, PairedCeilingsJudgeEachRepeatByItsOwnCeilings) {
  BenchCase decode = cpu_target_cases()[2];
  const Work w = work_of(decode);
  Measurement m;
  m.samples_us = {1000, 2000, 4000};
  m.median_us = 2000;
  m.min_us = 1000;
  for (double peak : {100.0, 25.0, 400.0}) {
    Ceilings c;
    c.bf16_gflops = c.f32_gflops = peak;
    c.bandwidth_gbps = 1e9;  // compute-bound
    m.paired_ceilings.push_back(c);
  }
  Ceilings overall;
  overall.bf16_gflops = 400, overall.bandwidth_gbps = 1e9;
  const Row r = make_row(decode, m, overall);
  EXPECT_TRUE(r.paired);
  // Fractions (µs): (F/100)/1000, (F/25)/2000 (the largest), (F/400)/4000; the median is the first.
  const double f0 = w.flops / 100e3 / 1000;
  EXPECT_DOUBLE_EQ(r.roofline_fraction, f0);
  const nlohmann::json j = nlohmann::json::parse(to_json(overall, {r}));
  EXPECT_EQ(j["rows"][0]["paired_fractions"].size(), 3u);
  EXPECT_TRUE(j["rows"][0]["paired_ceilings"].get<bool>());
}

TEST(BenchHarness, CasesAreValidated) {
  BenchCase c = cpu_target_cases()[2];
  c.seq_len = 0;
  EXPECT_THROW(c.validate(), ValueError);
  c = cpu_target_cases()[1];
  c.context_chunks = 0;
  EXPECT_THROW(c.validate(), ValueError);
  EXPECT_THROW(parse_phase("train"), ValueError);
}

TEST(BenchHarness, TimesTinyCasesOfBothPhasesAndWritesJson) {
  auto runner = make_cpu_runner(1);
  Ceilings ceilings;  // measured ceilings take a second; these are made up
  ceilings.device = "cpu";
  ceilings.f32_gflops = ceilings.bf16_gflops = 10;
  ceilings.bandwidth_gbps = 1;
  std::vector<Row> rows;
  for (const std::string backend : {"cpu", "reference"}) {
    BenchCase prefill;
    prefill.phase = Phase::prefill;
    prefill.backend = backend;
    prefill.dims = {2, 32, 16, 8, 24};
    prefill.query_len = 9;
    prefill.context_len = 20;
    prefill.context_chunks = 3;
    prefill.batch = 2;
    prefill.num_threads = 1;
    BenchCase decode = prefill;
    decode.phase = Phase::decode;
    decode.query_len = 2;
    decode.seq_len = 37;
    decode.block_size = 5;
    decode.kv_cache_dtype = DType::fp8_e4m3;
    for (const BenchCase& c : {prefill, decode}) {
      const Measurement m = time_case(*runner, c, {1, 3, 5});
      ASSERT_EQ(m.samples_us.size(), 3u);
      EXPECT_GT(m.median_us, 0);
      EXPECT_LE(m.min_us, m.median_us);
      EXPECT_LE(m.median_us, m.max_us);
      rows.push_back(make_row(c, m, ceilings));
    }
  }
  const nlohmann::json j = nlohmann::json::parse(to_json(ceilings, rows));
  EXPECT_EQ(j["ceilings"]["bf16_gflops"], 10);
  ASSERT_EQ(j["rows"].size(), 4u);
  for (const char* key : {"phase", "backend", "num_heads", "batch", "median_us", "gflops", "gbps", "roofline_fraction",
                          "bound", "flops", "bytes"}) {
    EXPECT_TRUE(j["rows"][0].contains(key)) << key;
  }
  EXPECT_EQ(j["rows"][1]["kv_cache_dtype"], "fp8_e4m3");
  EXPECT_EQ(j["rows"][2]["backend"], "reference");
  EXPECT_NE(format_table(ceilings, rows).find("decode H2 B2 S37 sq2 bs5 bf16/fp8_e4m3 cpu"), std::string::npos);
}

// A tiny CPU case of each phase (bf16, three context chunks for prefill).
std::vector<BenchCase> tiny_cases(const std::string& backend) {
  BenchCase prefill;
  prefill.phase = Phase::prefill;
  prefill.backend = backend;
  prefill.dims = {2, 32, 16, 8, 24};
  prefill.query_len = 9;
  prefill.context_len = 20;
  prefill.context_chunks = 3;
  prefill.batch = 2;
  prefill.num_threads = 1;
  BenchCase decode = prefill;
  decode.phase = Phase::decode;
  decode.query_len = 1;
  decode.seq_len = 37;
  decode.block_size = 5;
  return {prefill, decode};
}

// A host tensor's values as f32 (the CPU cases' outputs are contiguous).
std::vector<float> host_floats(const Tensor& t) {
  OwnedTensor f32 = OwnedTensor::empty({t.numel()}, DType::f32);
  copy_host(t.view({t.numel()}), f32.tensor());
  const float* p = f32.tensor().data_as<const float>();
  return {p, p + t.numel()};
}

TEST(BenchHarness, TheSeedFixesTheInputs) {
  for (const BenchCase& c : tiny_cases("cpu")) {
    CaseStep a = build_case(c, 7), b = build_case(c, 7), other = build_case(c, 8);
    for (CaseStep* s : {&a, &b, &other}) s->run();
    EXPECT_EQ(host_floats(a.output()), host_floats(b.output())) << c.name();
    EXPECT_NE(host_floats(a.output()), host_floats(other.output())) << c.name();
  }
}

TEST(BenchHarness, RowsNameTheBackendInstancesKernels) {
  for (const std::string backend : {"cpu", "reference"}) {
    for (const BenchCase& c : tiny_cases(backend)) {
      CaseStep step = build_case(c, 1);
      step.run();
      EXPECT_EQ(step.kernel_label(), backend_kernel_label(backend, c.device, c.dtype)) << c.name();
    }
  }
  auto runner = make_cpu_runner(1);
  const Measurement m = time_case(*runner, tiny_cases("cpu")[1], {0, 1, 1});
  EXPECT_EQ(m.kernel_label, "cpu: " + cpu_kernel_label(DType::bf16));
}

TEST(BenchHarness, RunnerAndCaseDevicesMustAgree) {
  auto runner = make_cpu_runner(1);
  BenchCase c = cpu_target_cases()[2];
  c.device = Device::cuda(0);
  EXPECT_THROW(time_case(*runner, c), ValueError);
}

}  // namespace
}  // namespace lattn::bench
