// Per-communicator logger: lines look like NCCL's, "host:pid:tid [rank] CHORUS INFO ...".
// Thread-safe (spdlog's sink is mutex-protected). Never log inside a polling loop.
#pragma once

#include <spdlog/fmt/fmt.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "src/common/config.h"

namespace chorus {

// Opens the process's log sink again from CHORUS_DEBUG_FILE (chorusResetDebugInit).
void resetLogSink();

class Logger {
 public:
  Logger() = default;
  Logger(LogLevel level, uint32_t subsys, int rank);

  // Warnings show whatever the subsystems selected (as NCCL's); INFO and TRACE lines only for
  // the selected ones.
  bool enabled(LogLevel level, uint32_t subsys) const {
    return level <= level_ && (level == LogLevel::kWarn || (subsys & subsys_) != 0);
  }
  void setRank(int rank) { rank_ = rank; }

  template <typename... Args>
  void warn(uint32_t subsys, fmt::format_string<Args...> f, Args&&... args) const {
    if (enabled(LogLevel::kWarn, subsys)) write(LogLevel::kWarn, fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  void info(uint32_t subsys, fmt::format_string<Args...> f, Args&&... args) const {
    if (enabled(LogLevel::kInfo, subsys)) write(LogLevel::kInfo, fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  void trace(uint32_t subsys, fmt::format_string<Args...> f, Args&&... args) const {
    if (enabled(LogLevel::kTrace, subsys)) write(LogLevel::kTrace, fmt::format(f, std::forward<Args>(args)...));
  }

 private:
  void write(LogLevel level, const std::string& msg) const;

  LogLevel level_ = LogLevel::kWarn;
  uint32_t subsys_ = kSubsysAll;
  int rank_ = -1;
};

// Warnings from one place that a peer can provoke at will (strangers on a listener): a burst
// goes through per window, the rest are counted, and the first line after the window (or the
// limiter's end) says how many were held back. Thread-compatible: one per loop.
class WarnLimiter {
 public:
  explicit WarnLimiter(const Logger& log, uint32_t subsys, int burst = 5,
                       std::chrono::nanoseconds window = std::chrono::seconds(10))
      : log_(log), subsys_(subsys), burst_(burst), window_(window) {}
  ~WarnLimiter() { flush(); }
  WarnLimiter(const WarnLimiter&) = delete;
  WarnLimiter& operator=(const WarnLimiter&) = delete;

  template <typename... Args>
  void warn(fmt::format_string<Args...> f, Args&&... args) {
    const auto now = std::chrono::steady_clock::now();
    if (now - windowStart_ >= window_) {
      flush();
      windowStart_ = now;
      sent_ = 0;
    }
    if (sent_ < burst_) {
      ++sent_;
      log_.warn(subsys_, f, std::forward<Args>(args)...);
    } else {
      ++held_;
    }
  }

 private:
  void flush() {
    if (held_ == 0) return;
    log_.warn(subsys_, "{} more warnings like the ones above were held back in the last {} s", held_,
              std::chrono::duration_cast<std::chrono::seconds>(window_).count());
    held_ = 0;
  }

  const Logger& log_;
  uint32_t subsys_;
  int burst_;
  std::chrono::nanoseconds window_;
  std::chrono::steady_clock::time_point windowStart_{};
  int sent_ = 0;
  uint64_t held_ = 0;
};

}  // namespace chorus
