// Registered buffers between processes. Run under `chorusrun -n N` (N >= 2), one host:
//   1. chorusCommRegister / chorusCommDeregister reject bad arguments with the right code;
//   2. all-reduces on registered chorusMemAlloc buffers (read in place by the peers) give the
//      exact sums, element by element, in and out of place, over many allocate / register /
//      deregister / free cycles, and the peers' mappings of retired allocations go away: the
//      process's descriptors and chorus-mem mappings return to what they were;
//   3. a rank whose buffers are registered while its neighbours' are not fails promptly with an
//      error that says so (REGISTER_TEST_MISMATCH=1 runs only this, as its own communicator);
//   4. ranks that pass different counts on registered buffers (REGISTER_TEST_MISMATCH=counts):
//      each would read its peers' buffers in place past their end; every rank fails promptly and
//      nothing past a rank's own count is written.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "chorus/chorus.h"

namespace {

int failures = 0;
int rank = 0;
int nranks = 0;

#define EXPECT(cond, ...)                                        \
  do {                                                           \
    if (!(cond)) {                                               \
      std::fprintf(stderr, "rank %d: FAILED %s: ", rank, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                         \
      std::fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);    \
      ++failures;                                                \
    }                                                            \
  } while (0)

void check(chorusResult_t r, const char* what) {
  if (r == chorusSuccess) return;
  std::fprintf(stderr, "rank %d: %s: %s\n", rank, what, chorusGetLastError(nullptr));
  std::exit(1);
}

int countFds() {
  int n = 0;
  for (int fd = 0; fd < 4096; ++fd) {
    if (fcntl(fd, F_GETFD) != -1) ++n;
  }
  return n;
}

// Mappings of chorusMemAlloc memory, this process's own and its peers'.
int countMemMappings() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int n = 0;
  while (std::getline(maps, line)) {
    if (line.find("memfd:chorus-mem") != std::string::npos) ++n;
  }
  return n;
}

// f() once it returns `want`, or once it gives the same value twice 50 ms apart (want < 0), within
// two seconds.
int settled(int (*f)(), int want) {
  int last = f();
  for (int i = 0; i < 40; ++i) {
    if (want >= 0 && last == want) return last;
    usleep(50000);
    const int now = f();
    if (want < 0 && now == last) return now;
    last = now;
  }
  return last;
}

// Rank r's element i: exact in float for the sums checked here.
float input(int r, size_t i) { return static_cast<float>((i * 7 + static_cast<size_t>(r) * 3) % 1024); }

// One all-reduce of `count` floats on registered memory, checked element by element.
void allReduceChecked(chorusComm_t comm, float* send, float* recv, size_t count, bool inPlace, const char* what) {
  for (size_t i = 0; i < count; ++i) send[i] = input(rank, i);
  float* out = inPlace ? send : recv;
  if (!inPlace) std::memset(recv, 0xff, count * sizeof(float));
  check(chorusAllReduce(send, out, count, chorusFloat32, chorusSum, comm, nullptr), what);
  size_t wrong = 0;
  size_t first = 0;
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int r = 0; r < nranks; ++r) want += input(r, i);
    if (out[i] != want && wrong++ == 0) first = i;
  }
  EXPECT(wrong == 0, "%s: %zu of %zu elements wrong, first at %zu: got %g", what, wrong, count, first,
         static_cast<double>(out[first]));
  if (!inPlace) {
    for (size_t i = 0; i < count; ++i) {
      if (send[i] != input(rank, i)) {
        EXPECT(false, "%s: the send buffer changed at %zu", what, i);
        break;
      }
    }
  }
}

void badArguments(chorusComm_t comm) {
  void* mem = nullptr;
  check(chorusMemAlloc(&mem, 4096), "chorusMemAlloc");
  void* h = nullptr;
  EXPECT(chorusCommRegister(comm, mem, 4096, nullptr) == chorusInvalidArgument, "null handle pointer");
  EXPECT(chorusCommRegister(comm, nullptr, 4096, &h) == chorusInvalidArgument, "null buffer");
  EXPECT(chorusCommRegister(comm, mem, 0, &h) == chorusInvalidArgument, "size 0");
  EXPECT(chorusCommRegister(comm, mem, SIZE_MAX, &h) == chorusInvalidArgument, "size wraps");
  EXPECT(chorusCommRegister(nullptr, mem, 4096, &h) != chorusSuccess, "null communicator");
  EXPECT(chorusCommDeregister(comm, nullptr) == chorusInvalidArgument, "null handle");
  check(chorusCommRegister(comm, mem, 4096, &h), "chorusCommRegister");
  check(chorusCommDeregister(comm, h), "chorusCommDeregister");
  EXPECT(chorusCommDeregister(comm, h) == chorusInvalidArgument, "deregistering twice");
  EXPECT(std::strstr(chorusGetLastError(comm), "chorusCommRegister") != nullptr, "message: %s",
         chorusGetLastError(comm));
  // Memory that is not from chorusMemAlloc registers (it gains nothing) and collectives on it work.
  std::vector<float> plain(1 << 16);
  std::vector<float> plainOut(1 << 16);
  check(chorusCommRegister(comm, plain.data(), plain.size() * sizeof(float), &h), "registering plain memory");
  allReduceChecked(comm, plain.data(), plainOut.data(), plain.size(), false, "plain registered memory");
  check(chorusCommDeregister(comm, h), "chorusCommDeregister");
  check(chorusMemFree(mem), "chorusMemFree");
}

// Two chorusMemAlloc buffers of `bytes`, their first `registered` bytes registered with `comm`.
struct RegisteredPair {
  void* send = nullptr;
  void* recv = nullptr;
  void* hs = nullptr;
  void* hr = nullptr;
  RegisteredPair(chorusComm_t comm, size_t bytes, size_t registered) {
    check(chorusMemAlloc(&send, bytes), "chorusMemAlloc");
    check(chorusMemAlloc(&recv, bytes), "chorusMemAlloc");
    check(chorusCommRegister(comm, send, registered, &hs), "chorusCommRegister");
    check(chorusCommRegister(comm, recv, registered, &hr), "chorusCommRegister");
  }
  void release(chorusComm_t comm) {
    check(chorusCommDeregister(comm, hs), "chorusCommDeregister");
    check(chorusCommDeregister(comm, hr), "chorusCommDeregister");
    check(chorusMemFree(send), "chorusMemFree");
    check(chorusMemFree(recv), "chorusMemFree");
  }
};

void cycles(chorusComm_t comm) {
  // A buffer that stays registered: the op after the loop carries the last retire notices.
  const size_t keepCount = 1 << 16;
  void* keep = nullptr;
  void* keepHandle = nullptr;
  check(chorusMemAlloc(&keep, keepCount * sizeof(float) * 2), "chorusMemAlloc");
  check(chorusCommRegister(comm, keep, keepCount * sizeof(float) * 2, &keepHandle), "chorusCommRegister");
  auto* keepF = static_cast<float*>(keep);
  allReduceChecked(comm, keepF, keepF + keepCount, keepCount, false, "kept buffer");
  allReduceChecked(comm, keepF, keepF + keepCount, keepCount, false, "kept buffer again");
  // A descriptor server closes its side of a peer's import just after handing the descriptor
  // over: counts are taken once they stop moving.
  const int fds0 = settled(countFds, -1);
  const int maps0 = countMemMappings();
  const size_t counts[] = {1 << 15, 100003, 1 << 20, 3 << 18};
  for (int cycle = 0; cycle < 12; ++cycle) {
    const size_t count = counts[cycle % 4];
    const size_t bytes = count * sizeof(float);
    RegisteredPair p(comm, bytes, bytes);
    for (int rep = 0; rep < 3; ++rep) {
      allReduceChecked(comm, static_cast<float*>(p.send), static_cast<float*>(p.recv), count, rep == 1, "cycle");
    }
    p.release(comm);
  }
  // Retire notices ride on the next descriptors: two ops reach every peer.
  allReduceChecked(comm, keepF, keepF + keepCount, keepCount, false, "kept buffer after the cycles");
  allReduceChecked(comm, keepF, keepF + keepCount, keepCount, true, "kept buffer in place");
  const int fds1 = settled(countFds, fds0);
  EXPECT(fds1 == fds0, "descriptors: %d before the cycles, %d after", fds0, fds1);
  EXPECT(countMemMappings() == maps0, "chorus-mem mappings: %d before the cycles, %d after", maps0, countMemMappings());
  check(chorusCommDeregister(comm, keepHandle), "chorusCommDeregister");
  check(chorusMemFree(keep), "chorusMemFree");
}

// Only rank 0 registers: every rank must fail at once, rank 1 naming registration.
void mismatch(chorusComm_t comm) {
  const size_t count = 1 << 18;
  const size_t bytes = count * sizeof(float);
  void* send = nullptr;
  void* recv = nullptr;
  std::vector<float> plainSend(count, 1.0f);
  std::vector<float> plainRecv(count);
  void* hs = nullptr;
  void* hr = nullptr;
  float* sb = plainSend.data();
  float* rb = plainRecv.data();
  if (rank == 0) {
    check(chorusMemAlloc(&send, bytes), "chorusMemAlloc");
    check(chorusMemAlloc(&recv, bytes), "chorusMemAlloc");
    check(chorusCommRegister(comm, send, bytes, &hs), "chorusCommRegister");
    check(chorusCommRegister(comm, recv, bytes, &hr), "chorusCommRegister");
    sb = static_cast<float*>(send);
    rb = static_cast<float*>(recv);
  }
  // First a matched all-reduce, which makes every connection: a rank that fails while a peer is
  // still connecting would hand it a connection error instead of the reason.
  allReduceChecked(comm, plainSend.data(), plainRecv.data(), count, false, "warm-up");
  // A rank whose part of the warm-up is over may start the next call while a slower rank still
  // finishes it; that rank must not meet the failure inside the warm-up.
  usleep(300000);
  const auto t0 = std::chrono::steady_clock::now();
  const chorusResult_t r = chorusAllReduce(sb, rb, count, chorusFloat32, chorusSum, comm, nullptr);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string msg = chorusGetLastError(comm);
  std::printf("rank %d: mismatched registration: %s after %.2f s: %s\n", rank, chorusGetErrorString(r), secs,
              msg.c_str());
  // Rank 1 always meets rank 0's hello (published before rank 0 can fail) and must say why:
  // itself (invalid usage), or through the failure notice of a rank that found it first (a
  // remote error that carries that rank's reason). The others fail too, promptly.
  EXPECT(r != chorusSuccess, "the mismatched all-reduce succeeded");
  EXPECT(secs < 10, "took %.2f s", secs);
  if (rank == 1) {
    EXPECT(r == chorusInvalidUsage || r == chorusRemoteError, "got %s", chorusGetErrorString(r));
    EXPECT(msg.find("register") != std::string::npos, "message: %s", msg.c_str());
  }
  check(chorusCommAbort(comm), "chorusCommAbort");
  if (rank == 0) {
    chorusMemFree(send);
    chorusMemFree(recv);
  }
}

// Rank r all-reduces 1M >> r floats (1M, 512K, ...) on registered chorusMemAlloc buffers, so
// every rank takes the slice schedule and reads its peers' memory in place.
void countMismatch(chorusComm_t comm) {
  const size_t most = 1 << 20;
  const size_t count = most >> rank;
  RegisteredPair p(comm, most * sizeof(float), count * sizeof(float));
  auto* sb = static_cast<float*>(p.send);
  auto* rb = static_cast<float*>(p.recv);
  // A matched all-reduce first, which makes every connection.
  allReduceChecked(comm, sb, rb, most >> (nranks - 1), false, "warm-up");
  usleep(300000);  // every rank out of the warm-up (see mismatch())
  for (size_t i = 0; i < most; ++i) sb[i] = 1.0f;
  for (size_t i = 0; i < most; ++i) rb[i] = -7.0f;
  const auto t0 = std::chrono::steady_clock::now();
  const chorusResult_t r = chorusAllReduce(sb, rb, count, chorusFloat32, chorusSum, comm, nullptr);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string msg = chorusGetLastError(comm);
  std::printf("rank %d: count %zu: %s after %.3f s: %s\n", rank, count, chorusGetErrorString(r), secs, msg.c_str());
  EXPECT(r != chorusSuccess, "the all-reduce with mismatched counts succeeded");
  EXPECT(secs < 5, "took %.2f s (the timeout is 20 s)", secs);
  EXPECT(msg.find("count") != std::string::npos, "message: %s", msg.c_str());
  size_t touched = 0;
  for (size_t i = count; i < most; ++i) touched += rb[i] != -7.0f;
  EXPECT(touched == 0, "%zu elements past this rank's count were written", touched);
  check(chorusCommAbort(comm), "chorusCommAbort");
  chorusMemFree(p.send);
  chorusMemFree(p.recv);
}

}  // namespace

int main() {
  chorusComm_t comm;
  check(chorusCommInitFromEnv(&comm, nullptr), "chorusCommInitFromEnv");
  check(chorusCommUserRank(comm, &rank), "chorusCommUserRank");
  check(chorusCommCount(comm, &nranks), "chorusCommCount");
  const char* m = std::getenv("REGISTER_TEST_MISMATCH");
  if (m && std::string(m) == "1") {
    mismatch(comm);
  } else if (m && std::string(m) == "counts") {
    countMismatch(comm);
  } else {
    badArguments(comm);
    cycles(comm);
    check(chorusCommDestroy(comm), "chorusCommDestroy");
  }
  std::printf("rank %d: %s\n", rank, failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}
