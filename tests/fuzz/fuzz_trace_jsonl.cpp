// libFuzzer target: the JSON-lines trace parser behind `lattn run --trace`.
// Any input is either a trace whose every request holds the documented
// ranges, or a TraceError naming a line.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include "serving/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    const auto trace = lattn::serving::read_trace_jsonl(in, "fuzz.jsonl");
    double previous_arrival = 0;
    for (const auto& r : trace) {
      // The parser's promises: lengths >= 1, arrivals finite, >= 0 and sorted.
      if (r.prompt_len < 1 || r.output_len < 1 || !(r.arrival_s >= 0) || r.arrival_s < previous_arrival) std::abort();
      previous_arrival = r.arrival_s;
    }
  } catch (const lattn::serving::TraceError&) {
    // refused with a message: fine
  }
  return 0;
}
