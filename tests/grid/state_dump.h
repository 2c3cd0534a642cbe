// For the device tests that read a communicator's state back (cuda_flight_test, cuda_queue_test):
// EXPECT, which counts a failure and goes on, and the state dump with its lines.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "include/chorus/chorus.h"

namespace chorus::test {

// The failures EXPECT counted so far in this program.
inline int& expectFailures() {
  static int n = 0;
  return n;
}

}  // namespace chorus::test

// A check that counts a failure and says which, with a printf-style message, and goes on.
#define EXPECT(cond, ...)                                         \
  do {                                                            \
    if (!(cond)) {                                                \
      ++chorus::test::expectFailures();                           \
      std::printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::printf(__VA_ARGS__);                                   \
      std::printf("\n");                                          \
    }                                                             \
  } while (0)

namespace chorus::test {

inline bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

inline std::string readFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The communicator's state dump, as chorusCommDumpState writes it (through a file under /tmp
// named by `tag`, removed after).
inline std::string stateDump(chorusComm_t comm, const char* tag) {
  static int n = 0;
  const std::string path =
      std::string("/tmp/chorus_") + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(n++);
  EXPECT(chorusCommDumpState(comm, path.c_str()) == chorusSuccess, "dump state: %s", chorusGetLastError(nullptr));
  std::string d = readFile(path);
  std::remove(path.c_str());
  return d;
}

// The dump's line for the device entry whose text starts with `what` (e.g. "device AllReduce
// seq 2"); empty when there is none.
inline std::string dumpLine(const std::string& d, const std::string& what) {
  const size_t at = d.find(what + " ");
  if (at == std::string::npos) return "";
  return d.substr(at, d.find('\n', at) - at);
}

}  // namespace chorus::test
