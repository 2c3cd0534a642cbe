// The soak test: thousands of collectives with random collective, type, operator, count, root and
// placement, on two communicators at once (the world and a split of it into halves), each driven
// by its own thread on its own host stream, every result checked element by element (the grid's
// cases and reference, tests/grid). After a warm-up (the pairwise grid once), each process
// records its descriptors, threads, shared-memory mappings and resident memory; after the random
// operations they must not have grown (resident memory by at most 32 MiB, what allocator caches
// may keep).
//
//   soak threads NRANKS OPS [SEED]   ranks as threads of this process
//   soak proc OPS [SEED]             one rank per process, under chorusrun (chorusCommInitFromEnv)
//
// OPS counts the operations of each rank on both communicators together. Every rank draws the
// same sequence per communicator from SEED, so all members issue the same operations.
#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/grid/grid.h"
#include "tests/proc_count.h"

using chorus::test::Case;
using chorus::test::CaseResult;

namespace {

using chorus::test::countDir;

struct Usage {
  int fds = 0, threads = 0, shmMaps = 0;
  long rssKiB = 0;
};

Usage usage() {
  Usage u;
  u.fds = countDir("/proc/self/fd");
  u.threads = countDir("/proc/self/task");
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) u.shmMaps += line.find("memfd:") != std::string::npos;
  std::ifstream status("/proc/self/status");
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) u.rssKiB = std::atol(line.c_str() + 6);
  }
  return u;
}

// One communicator's share of a rank's work: `ops` random grid cases on `stream`.
struct Driver {
  chorusComm_t comm = nullptr;
  chorusStream_t stream = nullptr;
  std::vector<Case> cases;  // the grid of this communicator's size
  std::mt19937_64 rng;
  int done = 0;
  std::string error;

  bool step() {
    const Case& c = cases[rng() % cases.size()];
    CaseResult r = chorus::test::runCase(comm, c, stream);
    ++done;
    if (!r.ok) error = c.describe() + ": " + r.error;
    return r.ok;
  }
};

// The ranks of this process meet here twice: after the warm-up and after their last operation.
// The last to arrive takes the process's usage, so nothing of any rank is half built or half
// torn down when it is read.
struct ProcessSync {
  int drivers = 0;  // two per rank of this process
  std::atomic<int> warm{0};
  std::atomic<int> end{0};
  Usage before, after;

  void meet(std::atomic<int>& at, Usage* u) {
    if (at.fetch_add(1) + 1 == drivers) {
      *u = usage();
      at.fetch_add(1);  // drivers + 1: the snapshot is taken
    }
    while (at.load() <= drivers) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
};

// Runs one rank: `world` is its communicator of n ranks. Returns its number of failures; the
// usage check is the caller's (once per process).
int runRank(chorusComm_t world, int ops, uint64_t seed, ProcessSync& sync) {
  int rank = 0, n = 1;
  chorusCommUserRank(world, &rank);
  chorusCommCount(world, &n);
  chorusComm_t half = nullptr;
  if (chorusCommSplit(world, rank % 2, rank, &half, nullptr) != chorusSuccess) {
    std::printf("rank %d: split: %s\n", rank, chorusGetLastError(world));
    std::exit(1);  // the other ranks would wait at the meeting points forever
  }
  int halfN = 1;
  chorusCommCount(half, &halfN);
  chorus::test::GridOptions opts;
  opts.large = false;  // counts up to the loop boundaries; the soak is about many, not big
  std::vector<Driver> d(2);
  d[0].comm = world;
  d[0].cases = chorus::test::makeGrid(n, opts);
  d[0].rng.seed(seed);
  d[1].comm = half;
  d[1].cases = chorus::test::makeGrid(halfN, opts);
  d[1].rng.seed(seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(rank % 2 + 1)));
  for (auto& x : d) {
    if (chorusStreamCreate(&x.stream) != chorusSuccess) std::exit(1);
  }
  const int perComm = ops / 2;
  // Both communicators at once, each on its own thread and stream. The warm-up runs the pairwise
  // grid once, in order, so every kind of connection a communicator makes on demand (ring,
  // direct, point-to-point, per peer) exists before the first count. A driver that fails keeps
  // going to the meeting points (without more operations) so no one waits for it.
  chorus::test::GridOptions pairwise = opts;
  pairwise.full = false;
  auto run = [&](Driver& x, int size) {
    bool ok = true;
    for (const Case& c : chorus::test::makeGrid(size, pairwise)) {
      if (!ok) break;
      CaseResult r = chorus::test::runCase(x.comm, c, x.stream);
      if (!r.ok) {
        x.error = "warm-up " + c.describe() + ": " + r.error;
        ok = false;
      }
    }
    sync.meet(sync.warm, &sync.before);
    for (int i = 0; i < perComm && ok; ++i) ok = x.step();
    sync.meet(sync.end, &sync.after);
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::thread other([&] { run(d[1], halfN); });
  run(d[0], n);
  other.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int failures = 0;
  for (auto& x : d) {
    if (!x.error.empty()) {
      std::printf("rank %d: FAIL after %d operations: %s\n", rank, x.done, x.error.c_str());
      ++failures;
    }
  }
  std::printf("rank %d: %d operations checked (world of %d ranks, half of %d) in %.2f s\n", rank, d[0].done + d[1].done,
              n, halfN, secs);
  for (auto& x : d) chorusStreamDestroy(x.stream);
  chorusCommDestroy(half);
  return failures;
}

// The process's usage after the warm-up and at the end: nothing may have grown.
int checkUsage(const ProcessSync& sync) {
  const Usage& b = sync.before;
  const Usage& a = sync.after;
  std::printf("process: fds %d -> %d, threads %d -> %d, shared-memory mappings %d -> %d, resident %ld -> %ld KiB\n",
              b.fds, a.fds, b.threads, a.threads, b.shmMaps, a.shmMaps, b.rssKiB, a.rssKiB);
  int failures = 0;
  if (a.fds != b.fds || a.threads != b.threads || a.shmMaps != b.shmMaps) {
    std::printf("FAIL: descriptors, threads or shared-memory mappings grew\n");
    ++failures;
  }
  if (a.rssKiB - b.rssKiB > 32 * 1024) {
    std::printf("FAIL: resident memory grew by %ld KiB\n", a.rssKiB - b.rssKiB);
    ++failures;
  }
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "threads" && argc >= 4) {
    const int n = std::atoi(argv[2]);
    const int ops = std::atoi(argv[3]);
    const uint64_t seed = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 1;
    std::printf("soak threads %d ranks, %d operations each, seed %llu\n", n, ops,
                static_cast<unsigned long long>(seed));
    std::vector<chorusComm_t> comms(n);
    if (chorusCommInitAll(comms.data(), n, nullptr) != chorusSuccess) {
      std::printf("chorusCommInitAll: %s\n", chorusGetLastError(nullptr));
      return 1;
    }
    std::vector<int> result(n);
    std::vector<std::thread> t;
    ProcessSync sync;
    sync.drivers = 2 * n;
    for (int r = 0; r < n; ++r) t.emplace_back([&, r] { result[r] = runRank(comms[r], ops, seed, sync); });
    for (auto& x : t) x.join();
    int failures = checkUsage(sync);
    for (int r = 0; r < n; ++r) {
      failures += result[r];
      chorusCommDestroy(comms[r]);
    }
    std::printf("%s\n", failures ? "FAILED" : "every operation checked, nothing grew");
    return failures ? 1 : 0;
  }
  if (mode == "proc" && argc >= 3) {
    const int ops = std::atoi(argv[2]);
    const uint64_t seed = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1;
    chorusComm_t world = nullptr;
    if (chorusCommInitFromEnv(&world, nullptr) != chorusSuccess) {
      std::printf("chorusCommInitFromEnv: %s\n", chorusGetLastError(nullptr));
      return 1;
    }
    ProcessSync sync;
    sync.drivers = 2;
    int failures = runRank(world, ops, seed, sync);
    failures += checkUsage(sync);
    chorusCommDestroy(world);
    std::printf("%s\n", failures ? "FAILED" : "every operation checked, nothing grew");
    return failures ? 1 : 0;
  }
  std::fprintf(stderr, "usage: soak threads NRANKS OPS [SEED] | soak proc OPS [SEED] (under chorusrun)\n");
  return 2;
}
