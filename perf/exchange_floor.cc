// The floor under a small all-reduce between processes of one host, with no library at all: n
// processes share one mapping, each owns a cache line holding a sequence number and a float; per
// iteration each writes its value and number (release), waits until every other's number has
// reached the iteration (acquire), and sums the values. What is left is the hardware's and the
// scheduler's part of a small exchange: cache lines crossing cores, and with more processes than
// cores, the context switches that every iteration needs.
//
//   build/perf/exchange_floor -n 2 -w spin        # ranks with a core each, busy-polling
//   build/perf/exchange_floor -n 4 -w yield       # 4 processes on 2 cores, yielding while waiting
//
// Prints the mean time per iteration of each run (-r runs, -i iterations after -W warm-up ones),
// as rank 0 saw it, and checks every sum.
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

struct alignas(64) Box {
  std::atomic<uint64_t> seq{0};
  float value = 0;
};

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [-n ranks] [-w spin|yield] [-i iterations] [-W warmup] [-r runs]\n", argv0);
  std::exit(2);
}

// One rank's part of one run; returns the seconds its timed iterations took, or -1 when a sum
// was wrong.
double runRank(Box* boxes, int n, int me, bool spin, long warmup, long iters, uint64_t base) {
  std::chrono::steady_clock::time_point start;
  for (long i = 1; i <= warmup + iters; ++i) {
    if (i == warmup + 1) start = std::chrono::steady_clock::now();
    const uint64_t want = base + static_cast<uint64_t>(i);
    boxes[me].value = static_cast<float>(me + 1);
    boxes[me].seq.store(want, std::memory_order_release);
    float sum = 0;
    for (int r = 0; r < n; ++r) {
      while (boxes[r].seq.load(std::memory_order_acquire) < want) {
        if (!spin) sched_yield();
      }
      sum += boxes[r].value;
    }
    // Each rank writes its own constant, so a rank already an iteration ahead wrote the same value.
    if (sum != static_cast<float>(n * (n + 1) / 2)) return -1;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  int n = 2;
  bool spin = true;
  long iters = 200000;
  long warmup = 10000;
  int runs = 3;
  for (int a = 1; a < argc; ++a) {
    const std::string f = argv[a];
    if (a + 1 >= argc) usage(argv[0]);
    const char* v = argv[++a];
    if (f == "-n") {
      n = std::atoi(v);
    } else if (f == "-w") {
      if (std::strcmp(v, "spin") != 0 && std::strcmp(v, "yield") != 0) usage(argv[0]);
      spin = std::strcmp(v, "spin") == 0;
    } else if (f == "-i") {
      iters = std::atol(v);
    } else if (f == "-W") {
      warmup = std::atol(v);
    } else if (f == "-r") {
      runs = std::atoi(v);
    } else {
      usage(argv[0]);
    }
  }
  if (n < 2 || n > 64 || iters < 1 || warmup < 0 || runs < 1) usage(argv[0]);
  // A box per rank, and one result slot per rank after them.
  const size_t bytes = sizeof(Box) * static_cast<size_t>(n) + sizeof(double) * static_cast<size_t>(n);
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  auto* boxes = new (mem) Box[n];
  auto* results = reinterpret_cast<double*>(static_cast<char*>(mem) + sizeof(Box) * static_cast<size_t>(n));
  std::printf("# exchange floor: %d processes, %s waits, %ld iterations after %ld warm-up, %d CPUs usable\n", n,
              spin ? "spinning" : "yielding", iters, warmup, [] {
                cpu_set_t set;
                CPU_ZERO(&set);
                return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : -1;
              }());
  std::printf("# run  us/iteration (rank 0)  slowest rank us/iteration\n");
  int failed = 0;
  for (int run = 0; run < runs; ++run) {
    const uint64_t base = static_cast<uint64_t>(run) * static_cast<uint64_t>(warmup + iters);
    for (int r = 1; r < n; ++r) {
      const pid_t pid = fork();
      if (pid < 0) {
        std::perror("fork");
        return 1;
      }
      if (pid == 0) {
        results[r] = runRank(boxes, n, r, spin, warmup, iters, base);
        _exit(0);
      }
    }
    results[0] = runRank(boxes, n, 0, spin, warmup, iters, base);
    for (int r = 1; r < n; ++r) wait(nullptr);
    double slowest = 0;
    for (int r = 0; r < n; ++r) {
      if (results[r] < 0) ++failed;
      if (results[r] > slowest) slowest = results[r];
    }
    std::printf("%5d %26.3f %26.3f\n", run, results[0] / static_cast<double>(iters) * 1e6,
                slowest / static_cast<double>(iters) * 1e6);
  }
  if (failed) {
    std::fprintf(stderr, "exchange_floor: %d rank runs summed wrong\n", failed);
    return 1;
  }
  return 0;
}
