// Kernel logging. See log.hpp for the contract.
#include "log.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>

namespace anna {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarning)};
const char* kNames[] = {"debug", "info", "warning", "error"};
}  // namespace

bool set_log_level(const std::string& name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "warn") lower = "warning";
  if (lower == "critical") lower = "error";
  for (int i = 0; i < 4; ++i) {
    if (lower == kNames[i]) {
      g_level.store(i, std::memory_order_relaxed);
      return true;
    }
  }
  return false;
}

bool log_enabled(LogLevel level) {
  return static_cast<int>(level) >= g_level.load(std::memory_order_relaxed);
}

void log_at(LogLevel level, const std::string& message) {
  if (!log_enabled(level)) return;
  std::string line = "anna[" + std::string(kNames[static_cast<int>(level)]) + "] " + message + "\n";
  // One write(2) per line so lines from different threads do not interleave.
  ssize_t rc = ::write(STDERR_FILENO, line.data(), line.size());
  (void)rc;
}

}  // namespace anna
