// A network logger (chorusNetLogger_t) that keeps every line it hears, for tests to look for
// (the socket, OFI and ibverbs networks' tests). One log per Tag type, so that each test file
// reads only its own lines. Lines start with WARN or INFO (or the level's number).
#pragma once

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "include/chorus/net.h"

namespace chorus {
namespace testing {

template <typename Tag>
class NetLog {
 public:
  static void log(chorusNetLogLevel_t level, unsigned long, const char*, int, const char* fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    const std::string prefix = level == chorusNetLogWarn   ? "WARN "
                               : level == chorusNetLogInfo ? "INFO "
                                                           : std::to_string(int(level)) + " ";
    std::lock_guard<std::mutex> g(state().mu);
    state().lines.push_back(prefix + buf);
  }
  // Whether a line so far contains `part`.
  static bool has(const std::string& part) {
    std::lock_guard<std::mutex> g(state().mu);
    const std::vector<std::string>& l = state().lines;
    return std::any_of(l.begin(), l.end(), [&](const std::string& s) { return s.find(part) != std::string::npos; });
  }
  static std::string text() {
    std::lock_guard<std::mutex> g(state().mu);
    std::string all;
    for (const std::string& s : state().lines) all += s + "\n";
    return all;
  }
  static void clear() {
    std::lock_guard<std::mutex> g(state().mu);
    state().lines.clear();
  }

 private:
  struct State {
    std::mutex mu;
    std::vector<std::string> lines;
  };
  static State& state() {
    static State s;
    return s;
  }
};

}  // namespace testing
}  // namespace chorus
