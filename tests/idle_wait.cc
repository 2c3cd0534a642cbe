// How much CPU a rank burns while it waits for a busy peer. Run under `chorusrun -n 2`: rank 1
// stays away for IDLE_WAIT_MS (1000) before joining each all-reduce, and rank 0 measures its own
// process's CPU time (getrusage: every thread of the process, user + system) across the call.
// Checked on the NULL stream (the calling thread waits) and on a host stream (the stream's worker
// waits, the caller sleeps in chorusStreamSynchronize). Prints the share of a core used;
// exits non-zero when it is above IDLE_WAIT_MAX_PCT (10), or when a wait was too short to measure
// while the share is checked (a limit of 100 or more checks nothing). Then, as training does, rank 0 computes
// on its own thread while an all-reduce waits on a host stream, and prints its compute rate
// against the same work with nothing pending (reported, not checked: it is a speed).
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "chorus/chorus.h"

namespace {

double cpuSeconds() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

double wallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void check(chorusResult_t r, const char* what) {
  if (r == chorusSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, chorusGetLastError(nullptr));
  std::exit(1);
}

}  // namespace

int main() {
  const char* ms = std::getenv("IDLE_WAIT_MS");
  const char* pct = std::getenv("IDLE_WAIT_MAX_PCT");
  const int waitMs = ms ? std::atoi(ms) : 1000;
  const double maxPct = pct ? std::atof(pct) : 10.0;
  chorusComm_t comm;
  check(chorusCommInitFromEnv(&comm, nullptr), "chorusCommInitFromEnv");
  int rank = 0;
  int n = 0;
  check(chorusCommUserRank(comm, &rank), "chorusCommUserRank");
  check(chorusCommCount(comm, &n), "chorusCommCount");
  chorusStream_t stream;
  check(chorusStreamCreate(&stream), "chorusStreamCreate");
  // IDLE_WAIT_FIRST_MS: the other ranks stay away this long before the first collective too,
  // which is where connections are made (tests/startup_check.sh looks for the stall warning).
  if (const char* first = std::getenv("IDLE_WAIT_FIRST_MS"); first && rank != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(first)));
  }
  float x[256];
  bool ok = true;
  for (int useStream = 0; useStream < 2; ++useStream) {
    for (float& v : x) v = static_cast<float>(rank + 1);
    check(chorusAllReduce(x, x, 256, chorusFloat32, chorusSum, comm, nullptr), "warm-up all-reduce");
    if (rank != 0) std::this_thread::sleep_for(std::chrono::milliseconds(waitMs));
    for (float& v : x) v = static_cast<float>(rank + 1);
    const double c0 = cpuSeconds();
    const double t0 = wallSeconds();
    chorusStream_t s = useStream ? stream : nullptr;
    check(chorusAllReduce(x, x, 256, chorusFloat32, chorusSum, comm, s), "all-reduce");
    check(chorusStreamSynchronize(s), "chorusStreamSynchronize");
    const double wall = wallSeconds() - t0;
    const double cpu = cpuSeconds() - c0;
    for (float v : x) ok = ok && v == static_cast<float>(n * (n + 1) / 2);
    if (rank == 0) {
      const double share = 100.0 * cpu / wall;
      std::printf("%s: waited %.3f s, used %.3f s of CPU: %.1f%% of a core (limit %.0f%%)\n",
                  useStream ? "host stream" : "NULL stream", wall, cpu, share, maxPct);
      // A wait shorter than half the peer's delay measured nothing: a failure where the share is
      // checked (a limit under one core), a note where it is not (tests/startup_check.sh's 10 ms
      // waits, which a loaded machine can let pass before the measurement starts).
      const bool checked = maxPct < 100;
      if (wall < 0.5 * waitMs / 1000.0) {
        std::printf("  the wait was shorter than the peer's delay: nothing measured%s\n",
                    checked ? "" : " (the share is not checked)");
        ok = ok && !checked;
      }
      ok = ok && share <= maxPct;
    }
  }
  // Compute while the stream waits for the peer, against compute alone.
  auto compute = [](double seconds) {
    volatile double acc = 0;
    long iters = 0;
    const double end = wallSeconds() + seconds;
    while (wallSeconds() < end) {
      for (int i = 0; i < 1000; ++i) acc = acc * 0.999 + i;
      ++iters;
    }
    return static_cast<double>(iters) / seconds;
  };
  const double computeS = 0.5 * waitMs / 1000.0;
  const double alone = rank == 0 ? compute(computeS) : 0;
  check(chorusAllReduce(x, x, 256, chorusFloat32, chorusSum, comm, nullptr), "barrier all-reduce");
  if (rank != 0) std::this_thread::sleep_for(std::chrono::milliseconds(waitMs));
  check(chorusAllReduce(x, x, 256, chorusFloat32, chorusSum, comm, stream), "overlapped all-reduce");
  if (rank == 0) {
    const double overlapped = compute(computeS);
    std::printf("compute while an all-reduce waits on a host stream: %.2f of its rate alone\n", overlapped / alone);
  }
  check(chorusStreamSynchronize(stream), "chorusStreamSynchronize");
  check(chorusStreamDestroy(stream), "chorusStreamDestroy");
  check(chorusCommDestroy(comm), "chorusCommDestroy");
  if (!ok) std::printf("FAILED\n");
  return ok ? 0 : 1;
}
