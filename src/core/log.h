// Per-communicator logger: lines look like NCCL's, "host:pid:tid [rank] CHORUS INFO ...".
// Thread-safe (spdlog's sink is mutex-protected). Never log inside a polling loop.
#pragma once

#include <spdlog/fmt/fmt.h>

#include <memory>
#include <string>

#include "src/core/config.h"

namespace chorus {

class Logger {
 public:
  Logger() = default;
  Logger(LogLevel level, uint32_t subsys, int rank);

  bool enabled(LogLevel level, uint32_t subsys) const { return level <= level_ && (subsys & subsys_) != 0; }
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

}  // namespace chorus
