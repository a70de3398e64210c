// tools/run_output.h — the summary `lattn run` prints, as text or JSON.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "layer_options.h"
#include "serving/engine.h"

namespace lattn::cli {

// What was run (for the header and the JSON's "config").
struct RunDescription {
  LayerSetup layer;
  int num_layers = 0;
  serving::SchedulerConfig scheduler;
  std::string trace;  // "48 generated requests (seed 0, ...)" or "trace.jsonl (20 requests)"
  nlohmann::ordered_json trace_json;
  uint64_t seed = 0;
  bool virtual_clock = false;  // --clock virtual: step times are modelled, not measured
};

void print_run_header(std::FILE* out, const RunDescription& run);
void print_run_summary(std::FILE* out, const RunDescription& run, const serving::RunReport& report);
nlohmann::ordered_json run_report_json(const RunDescription& run, const serving::RunReport& report);

}  // namespace lattn::cli
