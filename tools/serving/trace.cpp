// Synthetic traces and JSON-lines trace files.
#include "serving/trace.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "serving/random.h"

namespace lattn::serving {
namespace {

std::string format_message(const std::string& path, int line, const std::string& message) {
  if (line <= 0) return "trace file '" + path + "': " + message;
  return "trace file '" + path + "', line " + std::to_string(line) + ": " + message;
}

// nlohmann's parse errors read "[json.exception.parse_error.101] parse error at
// line 1, column 4: syntax error while parsing value - ...": keep the part
// after the line number (the line is ours to name), i.e. "column 4: ...".
std::string describe_parse_error(const nlohmann::json::parse_error& e) {
  const std::string what = e.what();
  const auto column = what.find("column ");
  if (column != std::string::npos) return "not valid JSON (" + what.substr(column) + ")";
  const auto bracket = what.find("] ");
  return "not valid JSON (" + (bracket == std::string::npos ? what : what.substr(bracket + 2)) + ")";
}

std::string type_name_of(const nlohmann::json& v) { return v.type_name(); }

// Reads a required/optional integer field >= 1.
int32_t read_length(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end()) throw std::invalid_argument(std::string("missing \"") + key + "\" (an integer >= 1)");
  const nlohmann::json& v = *it;
  const bool integral = v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                                  v.get<double>() == std::floor(v.get<double>()));
  if (!integral) {
    throw std::invalid_argument(std::string("\"") + key + "\" must be an integer >= 1, got " + v.dump() + " (" +
                                type_name_of(v) + ")");
  }
  const double value = v.get<double>();
  if (value < 1 || value > double(std::numeric_limits<int32_t>::max())) {
    throw std::invalid_argument(std::string("\"") + key + "\" must be an integer >= 1, got " + v.dump());
  }
  return int32_t(value);
}

}  // namespace

void TraceConfig::validate() const {
  auto require = [](bool ok, const std::string& message) {
    if (!ok) throw std::invalid_argument(message);
  };
  require(num_requests >= 1, "the number of requests must be at least 1, got " + std::to_string(num_requests));
  // Finite and bounded parameters only: exp(mu + sigma * z) of an infinite or
  // huge one is inf or NaN, which no integer clamp can repair.
  require(request_rate > 0, "the request rate must be > 0 requests per second (inf: all arrive at t = 0), got " +
                                std::to_string(request_rate));
  require(prompt_len_median >= 1 && prompt_len_median <= 1e9,
          "the median prompt length must be a number of tokens in [1, 1e9], got " + std::to_string(prompt_len_median));
  require(prompt_len_sigma >= 0 && prompt_len_sigma <= 10,
          "the prompt length sigma must be in [0, 10] (natural log), got " + std::to_string(prompt_len_sigma));
  require(max_prompt_len >= 1, "the maximum prompt length must be at least 1 token");
  require(output_len_mean >= 1 && output_len_mean <= 1e9,
          "the mean output length must be a number of tokens in [1, 1e9], got " + std::to_string(output_len_mean));
  require(max_output_len >= 1, "the maximum output length must be at least 1 token");
}

std::vector<Request> generate_trace(const TraceConfig& config) {
  config.validate();
  // Separate streams, so changing e.g. the rate does not reshuffle the lengths.
  Rng arrivals(hash_combine(config.seed, 1)), prompts(hash_combine(config.seed, 2)),
      outputs(hash_combine(config.seed, 3));
  const bool all_at_once = !(config.request_rate > 0) || std::isinf(config.request_rate);
  const double mu = std::log(config.prompt_len_median);

  std::vector<Request> trace(size_t(config.num_requests));
  double clock = 0.0;
  for (int i = 0; i < config.num_requests; ++i) {
    Request& r = trace[size_t(i)];
    r.id = i;
    if (!all_at_once && i > 0) clock += arrivals.exponential(1.0 / config.request_rate);
    r.arrival_s = clock;
    // Clamp as doubles, then round: llround of a value past long long is undefined.
    const double prompt = std::exp(mu + config.prompt_len_sigma * prompts.normal());
    const double clamped = std::isnan(prompt) ? 1.0 : std::clamp(prompt, 1.0, double(config.max_prompt_len));
    r.prompt_len = int32_t(std::llround(clamped));
    r.output_len = int32_t(std::clamp<int64_t>(outputs.geometric(config.output_len_mean), 1, config.max_output_len));
  }
  return trace;
}

TraceError::TraceError(const std::string& path, int line, const std::string& message)
    : std::runtime_error(format_message(path, line, message)), path_(path), line_(line) {}

std::vector<Request> load_trace_jsonl(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw TraceError(path, 0, "is a directory, not a JSON-lines file");
  std::ifstream in(path);
  if (!in) throw TraceError(path, 0, "cannot be opened for reading");
  return read_trace_jsonl(in, path);
}

std::vector<Request> read_trace_jsonl(std::istream& in, const std::string& path) {
  std::vector<Request> trace;
  std::string text;
  int line = 0;
  while (std::getline(in, text)) {
    ++line;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json object;
    try {
      object = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      throw TraceError(path, line, describe_parse_error(e));
    } catch (const nlohmann::json::exception& e) {
      // Not a syntax error: e.g. a number past double's range ("70E544",
      // out_of_range.406), which used to escape as an internal error (exit 1).
      const std::string what = e.what();
      const auto bracket = what.find("] ");
      throw TraceError(path, line,
                       "not valid JSON (" + (bracket == std::string::npos ? what : what.substr(bracket + 2)) + ")");
    }
    if (!object.is_object()) {
      throw TraceError(
          path, line,
          "expected a JSON object like {\"prompt_len\": 512, \"output_len\": 64}, got " + type_name_of(object));
    }
    Request r;
    r.id = int64_t(trace.size());
    try {
      for (const auto& [key, value] : object.items()) {
        if (key != "prompt_len" && key != "output_len" && key != "arrival_s") {
          throw std::invalid_argument("unknown key \"" + key + "\" (the keys are prompt_len, output_len, arrival_s)");
        }
      }
      r.prompt_len = read_length(object, "prompt_len");
      r.output_len = read_length(object, "output_len");
      if (const auto it = object.find("arrival_s"); it != object.end()) {
        if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0) {
          throw std::invalid_argument("\"arrival_s\" must be a number of seconds >= 0, got " + it->dump());
        }
        r.arrival_s = it->get<double>();
      }
    } catch (const std::invalid_argument& e) {
      throw TraceError(path, line, e.what());
    }
    trace.push_back(r);
  }
  if (in.bad()) throw TraceError(path, line, "read failed");
  if (trace.empty()) throw TraceError(path, 0, "holds no requests (expected one JSON object per line)");
  std::stable_sort(trace.begin(), trace.end(),
                   [](const Request& a, const Request& b) { return a.arrival_s < b.arrival_s; });
  return trace;
}

void save_trace_jsonl(const std::vector<Request>& requests, const std::string& path) {
  std::ofstream out(path);
  if (!out) throw TraceError(path, 0, "cannot be opened for writing");
  for (const Request& r : requests) {
    nlohmann::json line = {{"prompt_len", r.prompt_len}, {"output_len", r.output_len}, {"arrival_s", r.arrival_s}};
    out << line.dump() << '\n';
  }
  if (!out) throw TraceError(path, 0, "write failed");
}

}  // namespace lattn::serving
