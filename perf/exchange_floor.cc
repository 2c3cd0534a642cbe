// The floor under an all-reduce between processes of one host, with no library at all: n
// processes share one mapping, each owns a cache line holding a sequence number and a float; per
// iteration each writes its value and number (release), waits until every other's number has
// reached the iteration (acquire), and sums the values. What is left is the hardware's and the
// scheduler's part of a small exchange: cache lines crossing cores, and with more processes than
// cores, the context switches that every iteration needs.
//
// With -b BYTES each iteration also moves data as a copy-through-shared-memory all-reduce must:
// each rank copies its BYTES of floats into a buffer of its own in the mapping (two, used in turn,
// so a peer still reading the last one is not overwritten), publishes it, and adds every peer's
// buffer to its own input into its output. That is the direct all-reduce's data path with nothing
// else: the rate at which cache lines written on one core are read on another bounds it.
//
//   build/perf/exchange_floor -n 2 -w spin             # ranks with a core each, busy-polling
//   build/perf/exchange_floor -n 4 -w yield            # 4 processes on 2 cores, yielding while waiting
//   build/perf/exchange_floor -n 2 -b 64K -i 20000     # the data path of a 64 KiB all-reduce
//
// Prints the mean time per iteration of each run (-r runs, -i iterations after -W warm-up ones),
// as rank 0 saw it and of the slowest rank, and checks every sum.
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
#include <vector>

namespace {

struct alignas(64) Box {
  std::atomic<uint64_t> seq{0};   // the iteration whose value (and data) is published
  std::atomic<uint64_t> done{0};  // the iteration whose peers' data this rank has read
  float value = 0;
};

// Where rank r's data buffer of iteration i is: two per rank, used in turn.
float* dataOf(char* data, size_t bytes, int r, uint64_t i) {
  return reinterpret_cast<float*>(data + (static_cast<size_t>(r) * 2 + i % 2) * bytes);
}

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [-n ranks] [-w spin|yield] [-b bytes] [-i iterations] [-W warmup] [-r runs]\n",
               argv0);
  std::exit(2);
}

void waitFor(const std::atomic<uint64_t>& word, uint64_t want, bool spin) {
  while (word.load(std::memory_order_acquire) < want) {
    if (!spin) sched_yield();
  }
}

// One rank's part of one run; returns the seconds its timed iterations took, or -1 when a sum
// was wrong. `data`: the ranks' buffers (bytes > 0).
double runRank(Box* boxes, char* data, size_t bytes, int n, int me, bool spin, long warmup, long iters, uint64_t base) {
  const size_t count = bytes / sizeof(float);
  std::vector<float> input(count, static_cast<float>(me + 1));
  std::vector<float> output(count, 0.0f);
  const float want = static_cast<float>(n * (n + 1) / 2);
  std::chrono::steady_clock::time_point start;
  for (long i = 1; i <= warmup + iters; ++i) {
    if (i == warmup + 1) start = std::chrono::steady_clock::now();
    const uint64_t it = base + static_cast<uint64_t>(i);
    if (count) {
      // This rank's buffer of this parity was last read two iterations ago: every peer is past it.
      for (int r = 0; r < n; ++r) {
        if (r != me && it > 2) waitFor(boxes[r].done, it - 2, spin);
      }
      std::memcpy(dataOf(data, bytes, me, it), input.data(), bytes);
    }
    boxes[me].value = static_cast<float>(me + 1);
    boxes[me].seq.store(it, std::memory_order_release);
    float sum = 0;
    for (int r = 0; r < n; ++r) {
      waitFor(boxes[r].seq, it, spin);
      // Each rank writes its own constant, so a rank already an iteration ahead wrote the same value.
      sum += boxes[r].value;
    }
    if (sum != want) return -1;
    if (count) {
      // One pass per peer, the first from this rank's input: the fewest bytes a fold can touch.
      const float* from = input.data();
      for (int r = 0; r < n; ++r) {
        if (r == me) continue;
        const float* peer = dataOf(data, bytes, r, it);
        for (size_t k = 0; k < count; ++k) output[k] = from[k] + peer[k];
        from = output.data();
      }
      boxes[me].done.store(it, std::memory_order_release);
      if (output[0] != want || output[count - 1] != want) return -1;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (size_t k = 0; k < count; ++k) {
    if (output[k] != want) return -1;
  }
  return seconds;
}

// "64K", "1M": a size as nccl-tests take it.
size_t parseBytes(const char* v) {
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v, &end, 10);
  const size_t scale = *end == 'K' || *end == 'k' ? 1024 : *end == 'M' || *end == 'm' ? 1024 * 1024 : 1;
  return static_cast<size_t>(x) * scale;
}

}  // namespace

int main(int argc, char** argv) {
  int n = 2;
  bool spin = true;
  long iters = 200000;
  long warmup = 10000;
  int runs = 3;
  size_t bytes = 0;
  for (int a = 1; a < argc; ++a) {
    const std::string f = argv[a];
    if (a + 1 >= argc) usage(argv[0]);
    const char* v = argv[++a];
    if (f == "-n") {
      n = std::atoi(v);
    } else if (f == "-w") {
      if (std::strcmp(v, "spin") != 0 && std::strcmp(v, "yield") != 0) usage(argv[0]);
      spin = std::strcmp(v, "spin") == 0;
    } else if (f == "-b") {
      bytes = parseBytes(v);
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
  if (n < 2 || n > 64 || iters < 1 || warmup < 0 || runs < 1 || bytes % 64 != 0) usage(argv[0]);
  // A box per rank, one result slot per rank, then two data buffers per rank.
  const size_t head = sizeof(Box) * static_cast<size_t>(n) + sizeof(double) * static_cast<size_t>(n);
  const size_t dataOffset = (head + 4095) / 4096 * 4096;
  const size_t total = dataOffset + 2 * bytes * static_cast<size_t>(n);
  void* mem = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  auto* boxes = new (mem) Box[n];
  auto* results = reinterpret_cast<double*>(static_cast<char*>(mem) + sizeof(Box) * static_cast<size_t>(n));
  char* data = static_cast<char*>(mem) + dataOffset;
  std::printf(
      "# exchange floor: %d processes, %s waits, %zu bytes each, %ld iterations after %ld warm-up, %d CPUs "
      "usable\n",
      n, spin ? "spinning" : "yielding", bytes, iters, warmup, [] {
        cpu_set_t set;
        CPU_ZERO(&set);
        return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : -1;
      }());
  std::printf("# run  us/iteration (rank 0)  slowest rank us/iteration  GB/s of the message (slowest)\n");
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
        results[r] = runRank(boxes, data, bytes, n, r, spin, warmup, iters, base);
        _exit(0);
      }
    }
    results[0] = runRank(boxes, data, bytes, n, 0, spin, warmup, iters, base);
    for (int r = 1; r < n; ++r) wait(nullptr);
    double slowest = 0;
    for (int r = 0; r < n; ++r) {
      if (results[r] < 0) ++failed;
      if (results[r] > slowest) slowest = results[r];
    }
    const double us = slowest / static_cast<double>(iters) * 1e6;
    std::printf("%5d %26.3f %26.3f %30.2f\n", run, results[0] / static_cast<double>(iters) * 1e6, us,
                bytes ? static_cast<double>(bytes) / us / 1e3 : 0.0);
  }
  if (failed) {
    std::fprintf(stderr, "exchange_floor: %d rank runs summed wrong\n", failed);
    return 1;
  }
  return 0;
}
