// Request traces: seeded generation with the documented distributions, and
// JSON-lines files whose bad lines are named by number.
#include "serving/trace.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace lattn::serving {
namespace {

TEST(Trace, GenerationIsSeededAndFollowsItsDistributions) {
  TraceConfig config;
  config.seed = 5;
  config.num_requests = 4000;
  config.request_rate = 10.0;
  config.prompt_len_median = 300;
  config.prompt_len_sigma = 0.7;
  config.max_prompt_len = 100000;
  config.output_len_mean = 50;
  config.max_output_len = 100000;
  const auto trace = generate_trace(config);
  const auto again = generate_trace(config);
  ASSERT_EQ(trace.size(), 4000u);
  std::vector<int32_t> prompts;
  double output_sum = 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    EXPECT_EQ(trace[i].id, int64_t(i));
    EXPECT_EQ(trace[i].prompt_len, again[i].prompt_len);
    EXPECT_EQ(trace[i].arrival_s, again[i].arrival_s);
    if (i) {
      EXPECT_GE(trace[i].arrival_s, trace[i - 1].arrival_s);
    }
    EXPECT_GE(trace[i].prompt_len, 1);
    EXPECT_GE(trace[i].output_len, 1);
    prompts.push_back(trace[i].prompt_len);
    output_sum += trace[i].output_len;
  }
  std::nth_element(prompts.begin(), prompts.begin() + 2000, prompts.end());
  // 4000 samples: the sample median of a log-normal is within a few percent.
  EXPECT_NEAR(prompts[2000], 300, 300 * 0.06);
  EXPECT_NEAR(output_sum / 4000, 50, 50 * 0.06);
  // Poisson arrivals at 10/s: the last of 4000 arrives near t = 400 s.
  EXPECT_NEAR(trace.back().arrival_s, 400, 400 * 0.06);

  config.seed = 6;
  EXPECT_NE(generate_trace(config)[0].prompt_len + generate_trace(config)[1].prompt_len,
            trace[0].prompt_len + trace[1].prompt_len);
}

TEST(Trace, ClampsAndInfiniteRate) {
  TraceConfig config;
  config.num_requests = 500;
  config.request_rate = INFINITY;
  config.prompt_len_median = 1000;
  config.max_prompt_len = 1200;
  config.output_len_mean = 100;
  config.max_output_len = 30;
  for (const Request& r : generate_trace(config)) {
    EXPECT_EQ(r.arrival_s, 0.0);
    EXPECT_LE(r.prompt_len, 1200);
    EXPECT_LE(r.output_len, 30);
  }
  config.num_requests = 0;
  EXPECT_THROW(generate_trace(config), std::invalid_argument);
}

class TraceFile : public ::testing::Test {
 protected:
  // One file per test: ctest runs the tests of this fixture in parallel
  // processes, and a shared name let one test's TearDown delete another's file.
  std::string path_ = ::testing::TempDir() + "lattn_trace_test_" +
                      ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".jsonl";
  void write(const std::string& text) { std::ofstream(path_) << text; }
  void TearDown() override { std::remove(path_.c_str()); }
  // The message load_trace_jsonl throws for the current file.
  std::string error() {
    try {
      load_trace_jsonl(path_);
    } catch (const TraceError& e) {
      return e.what();
    }
    return "(no error)";
  }
};

TEST_F(TraceFile, ReadsRequestsSortedByArrival) {
  write(
      "{\"prompt_len\": 100, \"output_len\": 5, \"arrival_s\": 2.5}\n"
      "\n"
      "{\"output_len\": 7, \"prompt_len\": 30}\n");
  const auto trace = load_trace_jsonl(path_);
  ASSERT_EQ(trace.size(), 2u);
  EXPECT_EQ(trace[0].id, 1);  // arrives first (t = 0), second in the file
  EXPECT_EQ(trace[0].prompt_len, 30);
  EXPECT_EQ(trace[1].id, 0);
  EXPECT_EQ(trace[1].arrival_s, 2.5);
  EXPECT_EQ(trace[1].output_len, 5);
}

TEST_F(TraceFile, SaveThenLoadRoundTrips) {
  TraceConfig config;
  config.num_requests = 20;
  const auto trace = generate_trace(config);
  save_trace_jsonl(trace, path_);
  const auto loaded = load_trace_jsonl(path_);
  ASSERT_EQ(loaded.size(), trace.size());
  for (size_t i = 0; i < trace.size(); ++i) {
    EXPECT_EQ(loaded[i].prompt_len, trace[i].prompt_len);
    EXPECT_EQ(loaded[i].output_len, trace[i].output_len);
    EXPECT_DOUBLE_EQ(loaded[i].arrival_s, trace[i].arrival_s);
  }
}

TEST_F(TraceFile, BadLinesAreNamedByNumber) {
  const std::string ok = "{\"prompt_len\": 10, \"output_len\": 2}\n";
  write(ok + ok + "{\"prompt_len\": 10, \"output_len\": 2\n");
  EXPECT_EQ(error(), "trace file '" + path_ +
                         "', line 3: not valid JSON (column 35: syntax error while parsing object - unexpected "
                         "end of input; expected '}')");
  write(ok + "[1, 2]\n");
  EXPECT_EQ(error(), "trace file '" + path_ +
                         "', line 2: expected a JSON object like {\"prompt_len\": 512, \"output_len\": 64}, got array");
  write("{\"prompt_len\": 10}\n");
  EXPECT_EQ(error(), "trace file '" + path_ + "', line 1: missing \"output_len\" (an integer >= 1)");
  write(ok + "{\"prompt_len\": 0, \"output_len\": 2}\n");
  EXPECT_EQ(error(), "trace file '" + path_ + "', line 2: \"prompt_len\" must be an integer >= 1, got 0");
  write("{\"prompt_len\": \"12\", \"output_len\": 2}\n");
  EXPECT_EQ(error(), "trace file '" + path_ + "', line 1: \"prompt_len\" must be an integer >= 1, got \"12\" (string)");
  write("{\"prompt_len\": 12.5, \"output_len\": 2}\n");
  EXPECT_EQ(error(), "trace file '" + path_ + "', line 1: \"prompt_len\" must be an integer >= 1, got 12.5 (number)");
  write("{\"promt_len\": 12, \"output_len\": 2}\n");
  EXPECT_EQ(error(), "trace file '" + path_ +
                         "', line 1: unknown key \"promt_len\" (the keys are prompt_len, output_len, arrival_s)");
  write(ok + "{\"prompt_len\": 12, \"output_len\": 2, \"arrival_s\": -1}\n");
  EXPECT_EQ(error(), "trace file '" + path_ + "', line 2: \"arrival_s\" must be a number of seconds >= 0, got -1");
  write("\n\n");
  EXPECT_EQ(error(), "trace file '" + path_ + "': holds no requests (expected one JSON object per line)");
  std::remove(path_.c_str());
  EXPECT_EQ(error(), "trace file '" + path_ + "': cannot be opened for reading");
  try {
    write(ok + "x\n");
    load_trace_jsonl(path_);
  } catch (const TraceError& e) {
    EXPECT_EQ(e.line(), 2);
    EXPECT_EQ(e.path(), path_);
  }
}

}  // namespace
}  // namespace lattn::serving
