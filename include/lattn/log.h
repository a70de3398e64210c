// lattn/log.h — a small leveled logger.
//
// The level comes from the environment variable LATTN_LOG_LEVEL
// (debug|info|warning|error|off; default warning) read once, or from
// set_log_level(). Messages go to stderr as "[lattn INFO] text".
// info_once/debug_once print a given text only the first time, as vLLM's
// logger.info_once does (the seeds' selector logs use it).
#pragma once

#include <string>

namespace lattn {

enum class LogLevel { debug = 0, info = 1, warning = 2, error = 3, off = 4 };

LogLevel log_level();
void set_log_level(LogLevel level);
// Parses "debug", "info", "warning", "error", "off" (case-insensitive).
// Throws ValueError naming the accepted values otherwise.
LogLevel parse_log_level(const std::string& text);

void log(LogLevel level, const std::string& message);
inline void log_debug(const std::string& m) { log(LogLevel::debug, m); }
inline void log_info(const std::string& m) { log(LogLevel::info, m); }
inline void log_warning(const std::string& m) { log(LogLevel::warning, m); }
inline void log_error(const std::string& m) { log(LogLevel::error, m); }

// Logs `message` at `level` only the first time this exact text is seen.
// Returns true when it was logged (or would have been, at a lower level).
bool log_once(LogLevel level, const std::string& message);
inline bool info_once(const std::string& m) { return log_once(LogLevel::info, m); }
inline bool debug_once(const std::string& m) { return log_once(LogLevel::debug, m); }

// Redirects log output (tests): every message that passes the level filter is
// appended to *sink as "LEVEL text\n" instead of stderr. nullptr restores stderr.
void set_log_sink(std::string* sink);

}  // namespace lattn
