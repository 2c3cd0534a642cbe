#include "src/core/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "src/core/os.h"

namespace chorus {
namespace {

// One stderr sink for the process: stderr itself is process-wide, and the sink's mutex keeps
// lines from different communicators whole.
spdlog::logger& sink() {
  static spdlog::logger* logger = [] {
    auto s = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    auto* l = new spdlog::logger("chorus", s);
    l->set_pattern("%v");
    l->set_level(spdlog::level::trace);
    l->flush_on(spdlog::level::trace);
    return l;
  }();
  return *logger;
}

}  // namespace

Logger::Logger(LogLevel level, uint32_t subsys, int rank) : level_(level), subsys_(subsys), rank_(rank) {}

void Logger::write(LogLevel level, const std::string& msg) const {
  static const std::string host = hostName();
  const char* name = level == LogLevel::kWarn ? "WARN" : (level == LogLevel::kInfo ? "INFO" : "TRACE");
  sink().info("{}:{}:{} [{}] CHORUS {} {}", host, ::getpid(), static_cast<long>(::syscall(SYS_gettid)), rank_, name,
              msg);
}

}  // namespace chorus
