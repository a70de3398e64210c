// Leveled logger (see lattn/log.h).
#include "lattn/log.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>

#include "lattn/errors.h"

namespace lattn {
namespace {

struct LoggerState {
  std::mutex mutex;
  LogLevel level = LogLevel::warning;
  std::string* sink = nullptr;
  std::set<std::string> seen_once;

  LoggerState() {
    if (const char* env = std::getenv("LATTN_LOG_LEVEL"); env && *env) {
      try {
        level = parse_log_level(env);
      } catch (const ValueError& e) {
        std::fprintf(stderr, "[lattn WARNING] ignoring LATTN_LOG_LEVEL: %s\n", e.what());
      }
    }
  }
};

LoggerState& state() {
  static LoggerState s;
  return s;
}

const char* level_tag(LogLevel l) {
  switch (l) {
    case LogLevel::debug:
      return "DEBUG";
    case LogLevel::info:
      return "INFO";
    case LogLevel::warning:
      return "WARNING";
    case LogLevel::error:
      return "ERROR";
    case LogLevel::off:
      return "OFF";
  }
  return "?";
}

void emit_locked(LoggerState& s, LogLevel level, const std::string& message) {
  if (level < s.level || s.level == LogLevel::off) return;
  if (s.sink) {
    *s.sink += std::string(level_tag(level)) + " " + message + "\n";
  } else {
    std::fprintf(stderr, "[lattn %s] %s\n", level_tag(level), message.c_str());
  }
}

}  // namespace

LogLevel parse_log_level(const std::string& text) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (t == "debug") return LogLevel::debug;
  if (t == "info") return LogLevel::info;
  if (t == "warning" || t == "warn") return LogLevel::warning;
  if (t == "error") return LogLevel::error;
  if (t == "off" || t == "none") return LogLevel::off;
  throw ValueError("unknown log level '" + text + "'; expected one of debug, info, warning, error, off");
}

LogLevel log_level() {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  return s.level;
}

void set_log_level(LogLevel level) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  s.level = level;
}

void set_log_sink(std::string* sink) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  s.sink = sink;
}

void log(LogLevel level, const std::string& message) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  emit_locked(s, level, message);
}

bool log_once(LogLevel level, const std::string& message) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.seen_once.insert(message).second) return false;
  emit_locked(s, level, message);
  return true;
}

}  // namespace lattn
