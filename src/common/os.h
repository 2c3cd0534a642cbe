// Owners of operating-system resources and small wrappers over system calls.
//
// Every descriptor and mapping has a move-only owner here; no other file calls close() or munmap().
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string>

#include "src/common/status.h"

namespace chorus {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// A shared mapping of a memfd (or of anonymous memory when fd < 0).
class Mapping {
 public:
  Mapping() = default;
  Mapping(Mapping&& o) noexcept { *this = std::move(o); }
  Mapping& operator=(Mapping&& o) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { reset(); }

  static Result<Mapping> map(int fd, size_t bytes);
  void* data() const { return data_; }
  size_t size() const { return size_; }
  void reset();

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// A memfd of `bytes` bytes, sealed against shrinking; `name` shows in /proc/<pid>/fd.
Result<UniqueFd> makeMemfd(const char* name, size_t bytes);

// A second descriptor of the same open file.
Result<UniqueFd> dupFd(int fd);
// The size of the file behind `fd`.
Result<size_t> fileSize(int fd);

// Futex on a 32-bit word that may live in memory shared between processes.
// Waits while *word == expected, at most `timeoutNs`; spurious returns are allowed.
void futexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeoutNs);
void futexWakeAll(std::atomic<uint32_t>* word);

using Clock = std::chrono::steady_clock;
inline int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}
// nowNs() as of the kernel's last tick (a few milliseconds behind at most), on the same time
// line, for a quarter of the cost: for times only reports read, at a millisecond's grain.
inline int64_t coarseNowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::string hostName();
// The CPUs this process may run on (its affinity mask), at least 1.
int usableCpus();

// Watching another process of this machine for its end: a pidfd (Linux 5.3+), invalid where the
// kernel has none or the process is not there; it polls readable once the process has exited.
UniqueFd openPidfd(int pid);
bool pidfdExited(int pidfd);
// The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat), 0 if
// unknown: with the pid, it names one process even after the pid is reused.
uint64_t processStartTicks(int pid);
// 64-bit FNV-1a of `n` bytes, continuing from `h` (the standard offset basis by default).
inline uint64_t fnv1a(const void* p, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}
// The state letter of a process (/proc/<pid>/stat field 3: R, S, D, T stopped, t traced, Z...),
// or 0 when it cannot be read.
char processState(int pid);
// This process's pid namespace and boot, hashed: processes with equal values see each other's pids.
uint64_t pidSpaceId();

// Names the calling thread (at most 15 characters show) so top -H, gdb and perf tell them apart.
void setThreadName(const char* name);
// 64 random bits from the kernel's generator.
uint64_t randomU64();
// A TCP port nothing listens on now (on 127.0.0.1 when `loopback`, else on any address), drawn at
// random below the kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range), or -1. A
// port the kernel hands out (bind to 0) lies inside that range, where a connection made before the
// port's future owner binds it may take it as its source port; that listen then fails EADDRINUSE.
int freeTcpPort(bool loopback);

// Makes the file at `path` readable and writable by its owner only (0600), creating it empty when
// it does not exist, before a log, dump or trace is written to it: what Chorus writes may say
// where a job's ranks listen and what they run. Only a regular file this user owns is changed
// (never /dev/null or another's file). Best effort: a file that cannot be created or changed is
// left to the writer that opens it next, which reports the failure.
void makePrivateFile(const std::string& path);

}  // namespace chorus
