// Synthetic traces and JSON-lines trace files.
#include "serving/trace.h"

#include <algorithm>
#include <cmath>
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
  const bool integral = v.is_number_integer() ||
                        (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>()));
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
  require(!std::isnan(request_rate), "the request rate must be a number of requests per second (or inf)");
  require(prompt_len_median >= 1, "the median prompt length must be at least 1 token");
  require(prompt_len_sigma >= 0 && std::isfinite(prompt_len_sigma), "the prompt length sigma must be >= 0");
  require(max_prompt_len >= 1, "the maximum prompt length must be at least 1 token");
  require(output_len_mean >= 1, "the mean output length must be at least 1 token");
  require(max_output_len >= 1, "the maximum output length must be at least 1 token");
}

std::vector<Request> generate_trace(const TraceConfig& config) {
  config.validate();
  // Separate streams, so changing e.g. the rate does not reshuffle the lengths.
  Rng arrivals(hash_combine(config.seed, 1)), prompts(hash_combine(config.seed, 2)), outputs(hash_combine(config.seed, 3));
  const bool all_at_once = !(config.request_rate > 0) || std::isinf(config.request_rate);
  const double mu = std::log(config.prompt_len_median);

  std::vector<Request> trace(size_t(config.num_requests));
  double clock = 0.0;
  for (int i = 0; i < config.num_requests; ++i) {
    Request& r = trace[size_t(i)];
    r.id = i;
    if (!all_at_once && i > 0) clock += arrivals.exponential(1.0 / config.request_rate);
    r.arrival_s = clock;
    const double prompt = std::exp(mu + config.prompt_len_sigma * prompts.normal());
    r.prompt_len = int32_t(std::clamp(std::llround(prompt), 1ll, (long long)config.max_prompt_len));
    r.output_len = int32_t(std::min<int64_t>(outputs.geometric(config.output_len_mean), config.max_output_len));
  }
  return trace;
}

TraceError::TraceError(const std::string& path, int line, const std::string& message)
    : std::runtime_error(format_message(path, line, message)), path_(path), line_(line) {}

std::vector<Request> load_trace_jsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw TraceError(path, 0, "cannot be opened for reading");

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
    }
    if (!object.is_object()) {
      throw TraceError(path, line,
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
  std::stable_sort(trace.begin(), trace.end(), [](const Request& a, const Request& b) { return a.arrival_s < b.arrival_s; });
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
