// tools/serving/trace.h — the requests a serving run replays: generated from
// seeded distributions, or read from a JSON-lines file.
#pragma once

#include <cstdint>
#include <istream>
#include <stdexcept>
#include <string>
#include <vector>

namespace lattn::serving {

struct Request {
  int64_t id = 0;          // position in the trace (0-based); names the request in messages
  double arrival_s = 0.0;  // seconds after the start of the run (engine clock)
  int32_t prompt_len = 1;  // tokens of the prompt (>= 1)
  int32_t output_len = 1;  // tokens to generate (>= 1); the first comes from the last prefill step
};

// A synthetic trace. Shapes follow what public chat traces (ShareGPT-style)
// look like: prompt lengths are log-normal (a long right tail), output
// lengths geometric (each step ends the answer with a fixed probability),
// arrivals a Poisson process.
struct TraceConfig {
  uint64_t seed = 0;
  int num_requests = 64;
  double request_rate = 32.0;      // requests per second (Poisson), > 0; inf: all arrive at t = 0
  double prompt_len_median = 256;  // tokens; log-normal median e^mu
  double prompt_len_sigma = 0.8;   // log-normal sigma (natural log)
  int32_t max_prompt_len = 2048;   // clamp of the log-normal tail
  double output_len_mean = 48;     // geometric mean (tokens)
  int32_t max_output_len = 512;    // clamp of the geometric tail

  // Throws std::invalid_argument with a sentence naming the bad field.
  void validate() const;
};

std::vector<Request> generate_trace(const TraceConfig& config);

// A trace file could not be read or a line is not a request.
class TraceError : public std::runtime_error {
 public:
  TraceError(const std::string& path, int line, const std::string& message);
  const std::string& path() const { return path_; }
  int line() const { return line_; }  // 1-based; 0 when the file as a whole is at fault

 private:
  std::string path_;
  int line_;
};

// Reads a JSON-lines trace: one JSON object per line,
//   {"prompt_len": 812, "output_len": 64, "arrival_s": 0.25}
// prompt_len and output_len are required integers >= 1; arrival_s is an
// optional number >= 0 (default 0). Blank lines are skipped. Any other key is
// an error (it is most likely a typo). Requests are returned sorted by
// arrival (stable), with ids in file order. Throws TraceError naming the file
// and line.
std::vector<Request> load_trace_jsonl(const std::string& path);
// The same from a stream; `path` names it in messages (the fuzz target's entry).
std::vector<Request> read_trace_jsonl(std::istream& in, const std::string& path);

// Writes a trace in the format load_trace_jsonl reads.
void save_trace_jsonl(const std::vector<Request>& requests, const std::string& path);

}  // namespace lattn::serving
