// Kernel logging to stderr, filtered by one process-wide level.
//
// Contract: log_at(level, msg) writes "anna[<level>] <msg>\n" to stderr as one write when
// level >= the current threshold (default WARNING). set_log_level accepts "debug", "info",
// "warning", "error" (case-insensitive) and returns false for anything else. Thread-safe;
// only called off the request fast path (errors, membership changes, start/stop).
#pragma once

#include <string>

namespace anna {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

bool set_log_level(const std::string& name);
bool log_enabled(LogLevel level);
void log_at(LogLevel level, const std::string& message);

inline void log_debug(const std::string& m) { log_at(LogLevel::kDebug, m); }
inline void log_info(const std::string& m) { log_at(LogLevel::kInfo, m); }
inline void log_warning(const std::string& m) { log_at(LogLevel::kWarning, m); }
inline void log_error(const std::string& m) { log_at(LogLevel::kError, m); }

}  // namespace anna
