#include "src/common/log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "src/common/os.h"
#include "src/common/settings.h"

namespace chorus {
namespace {

// CHORUS_DEBUG_FILE as NCCL_DEBUG_FILE: %h is the host name, %p the pid.
std::string debugFilePath(const char* pattern) {
  std::string out;
  for (const char* p = pattern; *p; ++p) {
    if (p[0] == '%' && p[1] == 'h') {
      out += hostName();
      ++p;
    } else if (p[0] == '%' && p[1] == 'p') {
      out += std::to_string(::getpid());
      ++p;
    } else {
      out += *p;
    }
  }
  return out;
}

// One sink for the process, stderr or CHORUS_DEBUG_FILE: either is process-wide, and the sink's
// mutex keeps lines from different communicators whole. resetLogSink makes a new one; the old one
// stays alive and reachable in retiredSinks (a line being written through it must not lose its
// logger), one per reset. Neither is ever destroyed: threads may still log during exit.
const TextSetting kDebugFile{"CHORUS_DEBUG_FILE", SettingScope::kProcess,
                             "the log goes to this file instead of stderr (%h host, %p pid)"};

spdlog::logger* makeSink() {
  spdlog::sink_ptr s;
  std::string fallback;
  if (const std::string name = kDebugFile.raw(); !name.empty()) {
    const char* file = name.c_str();
    const std::string path = debugFilePath(file);
    makePrivateFile(path);  // 0600: a log may say where ranks listen
    try {
      s = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path);
    } catch (const std::exception& e) {
      fallback = "CHORUS_DEBUG_FILE=" + std::string(file) + ": cannot write " + path + " (" + e.what() +
                 "); logging to stderr";
    }
  }
  if (!s) s = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto* l = new spdlog::logger("chorus", s);
  l->set_pattern("%v");
  l->set_level(spdlog::level::trace);
  l->flush_on(spdlog::level::trace);
  if (!fallback.empty()) l->info("{}:{} CHORUS WARN {}", hostName(), ::getpid(), fallback);
  return l;
}

std::atomic<spdlog::logger*>& currentSink() {
  static std::atomic<spdlog::logger*> logger{makeSink()};
  return logger;
}

spdlog::logger& sink() { return *currentSink().load(std::memory_order_acquire); }

}  // namespace

void resetLogSink() {
  static std::mutex mu;
  static auto* retiredSinks = new std::vector<spdlog::logger*>();
  std::lock_guard<std::mutex> lock(mu);
  retiredSinks->push_back(currentSink().exchange(makeSink(), std::memory_order_acq_rel));
}

Logger::Logger(LogLevel level, uint32_t subsys, int rank) : level_(level), subsys_(subsys), rank_(rank) {}

void Logger::write(LogLevel level, const std::string& msg) const {
  static const std::string host = hostName();
  const char* name = level == LogLevel::kWarn ? "WARN" : (level == LogLevel::kInfo ? "INFO" : "TRACE");
  sink().info("{}:{}:{} [{}] CHORUS {} {}", host, ::getpid(), static_cast<long>(::syscall(SYS_gettid)), rank_, name,
              msg);
}

}  // namespace chorus
