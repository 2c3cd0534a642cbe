// What a communicator costs as it grows: for n ranks as threads of this process
// (chorusCommInitAll), the time to initialise, and the threads, memory (resident and mapped),
// file descriptors and connections it holds after init, after one all-reduce (ring
// connections), and after one all-to-all (a connection per ordered pair of ranks). Each
// communicator set is destroyed before the next is made, so every row starts from the same base.
//
//   comm_scale [n ...]        default: 2 4 8 16 32 64
//
// Rows are per stage; "per rank" divides the growth over the base by n.
#include <dirent.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"

namespace {

struct Usage {
  long threads = 0;
  long rssKiB = 0;
  long vmKiB = 0;
  long fds = 0;
};

Usage sample() {
  Usage u;
  std::ifstream f("/proc/self/status");
  std::string key;
  while (f >> key) {
    if (key == "Threads:") f >> u.threads;
    if (key == "VmRSS:") f >> u.rssKiB;
    if (key == "VmSize:") f >> u.vmKiB;
  }
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d)) ++u.fds;
    closedir(d);
    u.fds -= 3;  // ".", ".." and the directory itself
  }
  return u;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void check(chorusResult_t r, const char* what) {
  if (r == chorusSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, chorusGetLastError(nullptr));
  std::exit(1);
}

void row(const char* stage, int n, const Usage& base, const Usage& u, double seconds) {
  std::printf("%6d %-12s %10.1f %8ld %8.2f %10.1f %8.2f %10.1f %7ld %8.2f\n", n, stage, seconds * 1e3,
              u.threads - base.threads, double(u.threads - base.threads) / n, (u.rssKiB - base.rssKiB) / 1024.0,
              (u.rssKiB - base.rssKiB) / 1024.0 / n, (u.vmKiB - base.vmKiB) / 1024.0, u.fds - base.fds,
              double(u.fds - base.fds) / n);
}

// Runs one collective on every rank of the set at once (one thread per rank).
template <typename F>
double onAll(int n, F f) {
  const double t0 = now();
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) ts.emplace_back([&, r] { f(r); });
  for (auto& t : ts) t.join();
  return now() - t0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atoi(argv[i]));
  if (sizes.empty()) sizes = {2, 4, 8, 16, 32, 64};
  std::printf("# ranks as threads of one process; growth over the process before init\n");
  std::printf("# %4s %-12s %10s %8s %8s %10s %8s %10s %7s %8s\n", "ranks", "stage", "time ms", "threads", "per rank",
              "RSS MiB", "per rank", "mapped MiB", "fds", "per rank");
  for (int n : sizes) {
    const Usage base = sample();
    std::vector<chorusComm_t> comms(n);
    double t0 = now();
    check(chorusCommInitAll(comms.data(), n, nullptr), "chorusCommInitAll");
    row("init", n, base, sample(), now() - t0);
    std::vector<std::vector<float>> bufs(n, std::vector<float>(1024 * n, 1.0f));
    std::vector<std::vector<float>> outs(n, std::vector<float>(1024 * n, 0.0f));
    double dt = onAll(n, [&](int r) {
      check(chorusAllReduce(bufs[r].data(), outs[r].data(), 1024 * n, chorusFloat32, chorusSum, comms[r], nullptr),
            "chorusAllReduce");
    });
    row("all-reduce", n, base, sample(), dt);
    dt = onAll(n, [&](int r) {
      check(chorusAlltoAll(bufs[r].data(), outs[r].data(), 1024, chorusFloat32, comms[r], nullptr), "chorusAlltoAll");
    });
    row("all-to-all", n, base, sample(), dt);
    t0 = now();
    for (auto c : comms) check(chorusCommDestroy(c), "chorusCommDestroy");
    row("destroyed", n, base, sample(), now() - t0);
  }
  return 0;
}
