// Network faults between namespace hosts in the middle of collectives of every kind (run by
// tests/multihost/net_fault.sh, which runs it under netns_run.sh and checks that the ranks agree).
// Every rank loops over all-reduce, all-gather, reduce-scatter, broadcast, reduce, all-to-all and
// a ring of send/receive pairs, each result checked element by element against values computed
// here; one rank injects the fault from a thread of its own (tests/multihost/netfault.sh), so it
// lands in the middle of a transfer. The last host is the one the faults hit.
//
//   net_fault loss PCT MAXBYTES     sizes 8 B .. MAXBYTES, each kind, clean then with PCT% of the
//                                   packets lost both ways: every result exact; prints the slowdown
//   net_fault throttle RATE MAXBYTES  the same with the last host's link at RATE (tc: 100mbit)
//   net_fault flap SECONDS          the last host blackholed for SECONDS, then restored
//   net_fault slow SECONDS          a rank of the last host calls SECONDS late, once
//   net_fault stop SECONDS          a rank of the last host is SIGSTOPped for SECONDS (its kernel
//                                   still acknowledges), then continued
//   net_fault blackhole BOUND       the last host blackholed for good: every rank must fail within
//                                   BOUND seconds of the fault, naming a rank of the other side
//   net_fault kill-host BOUND       the last host blackholed and every process on it SIGKILLed at
//                                   once: every survivor must fail within BOUND s naming a rank of it
//   net_fault reset                 every TCP packet to the last host answered with a reset for 2 s
//   net_fault corrupt PERMILLE      bits flipped in PERMILLE in 1000 TCP packets between hosts for 3 s
//                                   (with CHORUS_NET_CHECKSUM=1 a rank must fail saying so)
//
// Each surviving rank prints "OUTCOME completed" (every collective exact) or "OUTCOME failed"
// (an error naming a rank, which for blackhole and kill-host must be across the cut) and exits 0;
// a wrong result, a wrong name or a late failure exits 1. Which outcome is expected, and that
// every rank saw the same, is for net_fault.sh to check.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "chorus/chorus.h"

namespace {

using Clock = std::chrono::steady_clock;

int64_t monoNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

enum Kind { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce, kAllToAll, kSendRecv, kKinds };
const char* const kKindNames[kKinds] = {"allreduce", "allgather", "reducescatter", "broadcast",
                                        "reduce",    "alltoall",  "sendrecv"};

// Rank r's element i in round k: small integers, so every sum is exact in int32.
int32_t value(int r, size_t i, int k) { return static_cast<int32_t>((r * 131 + i * 7 + k * 13) % 1000); }

struct Job {
  chorusComm_t comm = nullptr;
  int rank = 0;
  int n = 0;
  int host = 0;
  std::vector<int> hostOf;  // by rank, from NETNS_LAYOUT
  int nhosts = 0;
  std::string faultScript;  // tests/multihost/netfault.sh
  std::string faultDir;     // where the injector writes when it struck
  std::vector<int32_t> send, recv;
  std::string firstBad;  // the first wrong element seen
};

// One collective of `kind` over `count` int32 elements (a multiple of n) in round k; false with
// the library's error when it fails, true once the result is checked (job.firstBad if wrong).
bool runOne(Job& job, Kind kind, size_t count, int k, std::string* error) {
  const int n = job.n;
  const int rank = job.rank;
  const size_t c = count / static_cast<size_t>(n);
  job.send.resize(count);
  job.recv.assign(count, -1);
  for (size_t i = 0; i < count; ++i) job.send[i] = value(rank, i, k);
  const int root = k % n;
  chorusResult_t rc = chorusSuccess;
  switch (kind) {
    case kAllReduce:
      rc = chorusAllReduce(job.send.data(), job.recv.data(), count, chorusInt32, chorusSum, job.comm, nullptr);
      break;
    case kAllGather:
      rc = chorusAllGather(job.send.data(), job.recv.data(), c, chorusInt32, job.comm, nullptr);
      break;
    case kReduceScatter:
      rc = chorusReduceScatter(job.send.data(), job.recv.data(), c, chorusInt32, chorusSum, job.comm, nullptr);
      break;
    case kBroadcast:
      rc = chorusBroadcast(job.send.data(), job.recv.data(), count, chorusInt32, root, job.comm, nullptr);
      break;
    case kReduce:
      rc = chorusReduce(job.send.data(), job.recv.data(), count, chorusInt32, chorusMax, root, job.comm, nullptr);
      break;
    case kAllToAll:
      rc = chorusAlltoAll(job.send.data(), job.recv.data(), c, chorusInt32, job.comm, nullptr);
      break;
    case kSendRecv:
      chorusGroupStart();
      chorusSend(job.send.data(), count, chorusInt32, (rank + 1) % n, job.comm, nullptr);
      chorusRecv(job.recv.data(), count, chorusInt32, (rank + n - 1) % n, job.comm, nullptr);
      rc = chorusGroupEnd();
      break;
    default:
      break;
  }
  if (rc != chorusSuccess) {
    *error = chorusGetLastError(job.comm);
    return false;
  }
  auto expect = [&](size_t i) -> int64_t {
    switch (kind) {
      case kAllReduce: {
        int64_t s = 0;
        for (int r = 0; r < n; ++r) s += value(r, i, k);
        return s;
      }
      case kAllGather:
        return value(static_cast<int>(i / c), i % c, k);
      case kReduceScatter: {
        int64_t s = 0;
        for (int r = 0; r < n; ++r) s += value(r, static_cast<size_t>(rank) * c + i, k);
        return s;
      }
      case kBroadcast:
        return value(root, i, k);
      case kReduce: {
        int64_t m = 0;
        for (int r = 0; r < n; ++r) m = std::max<int64_t>(m, value(r, i, k));
        return m;
      }
      case kAllToAll:
        return value(static_cast<int>(i / c), static_cast<size_t>(rank) * c + i % c, k);
      case kSendRecv:
        return value((rank + n - 1) % n, i, k);
      default:
        return 0;
    }
  };
  size_t checked = count;
  if (kind == kReduceScatter) checked = c;
  if (kind == kReduce && rank != root) checked = 0;
  for (size_t i = 0; i < checked && job.firstBad.empty(); ++i) {
    if (job.recv[i] != expect(i)) {
      job.firstBad = std::string(kKindNames[kind]) + " of " + std::to_string(count) + " elements, round " +
                     std::to_string(k) + ": element " + std::to_string(i) + " is " + std::to_string(job.recv[i]) +
                     ", expected " + std::to_string(expect(i));
    }
  }
  return true;
}

size_t countFor(size_t bytes, int n) {
  size_t count = std::max<size_t>(bytes / sizeof(int32_t), 1);
  return (count + static_cast<size_t>(n) - 1) / static_cast<size_t>(n) * static_cast<size_t>(n);
}

void fault(const Job& job, const std::string& args) {
  std::fflush(stdout);
  const std::string cmd = "bash " + job.faultScript + " " + args;
  const int rc = std::system(cmd.c_str());
  std::printf("rank %d: `netfault.sh %s` at %.3f exited %d\n", job.rank, args.c_str(), monoNs() / 1e9, rc);
  std::fflush(stdout);
}

// The injector notes when it struck, for the other ranks to measure against.
void noteStruck(const Job& job) { std::ofstream(job.faultDir + "/at") << monoNs() << "\n"; }

int64_t struckAt(const Job& job) {
  int64_t at = 0;
  std::ifstream(job.faultDir + "/at") >> at;
  return at;
}

// The first "rank N (host" of an error: the rank it blames.
int blamed(const std::string& msg) {
  std::smatch m;
  return std::regex_search(msg, m, std::regex("rank ([0-9]+) \\(host ")) ? std::stoi(m[1]) : -1;
}

// Loops collectives of every kind (1 MiB, with one of 8 B in between) until rank 0 says stop: it
// does once `stopAt` (steady ns) has passed. Returns false with the error if one fails.
bool loopUntil(Job& job, const std::function<int64_t()>& stopAt, const std::function<void(int)>& beforeRound,
               std::string* error) {
  const size_t big = countFor(1 << 20, job.n);
  for (int k = 0;; ++k) {
    if (beforeRound) beforeRound(k);
    if (!runOne(job, static_cast<Kind>(k % kKinds), k % 2 ? big : countFor(8, job.n), k, error)) return false;
    // The stop vote: rank 0's word, taken by every rank through an all-reduce.
    int32_t stop = job.rank == 0 && stopAt() > 0 && monoNs() >= stopAt() ? 1 : 0;
    if (chorusAllReduce(&stop, &stop, 1, chorusInt32, chorusMax, job.comm, nullptr) != chorusSuccess) {
      *error = chorusGetLastError(job.comm);
      return false;
    }
    if (stop) return true;
  }
}

int finish(Job& job, bool ok, const std::string& error) {
  if (!job.firstBad.empty()) {
    std::printf("rank %d: FAILED: a wrong result: %s\n", job.rank, job.firstBad.c_str());
    std::printf("OUTCOME wrong\n");
    chorusCommAbort(job.comm);
    return 1;
  }
  if (ok) {
    std::printf("OUTCOME completed\n");
    return chorusCommDestroy(job.comm) == chorusSuccess ? 0 : 1;
  }
  std::printf("rank %d: error: %s\n", job.rank, error.c_str());
  std::printf("OUTCOME failed\n");
  chorusCommAbort(job.comm);
  return blamed(error) >= 0 ? 0 : (std::printf("rank %d: FAILED: the error names no rank\n", job.rank), 1);
}

// loss / throttle: the sizes clean, then under the fault; every result exact.
int sweep(Job& job, const std::string& faultArgs, size_t maxBytes) {
  std::vector<size_t> sizes;
  for (size_t b = 8; b <= maxBytes; b *= 8) sizes.push_back(b);
  if (sizes.back() != maxBytes) sizes.push_back(maxBytes);
  std::vector<double> ms[2];
  std::string error;
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) {
      if (job.rank == 0) fault(job, faultArgs);
      int32_t x = 0;  // every rank past the fault's start before the timed pass
      if (chorusAllReduce(&x, &x, 1, chorusInt32, chorusSum, job.comm, nullptr) != chorusSuccess) {
        return finish(job, false, chorusGetLastError(job.comm));
      }
    }
    int k = 0;
    for (size_t bytes : sizes) {
      // Enough of each size for the fault to hit it many times: 4 MiB's worth, 3 to 30 times.
      const int reps = static_cast<int>(std::clamp<size_t>((size_t(4) << 20) / bytes, 3, 30));
      std::vector<double> t;
      for (int rep = 0; rep < reps; ++rep) {
        const int64_t t0 = monoNs();
        for (int kind = 0; kind < kKinds; ++kind) {
          if (!runOne(job, static_cast<Kind>(kind), countFor(bytes, job.n), k++, &error)) {
            if (pass == 1 && job.rank == 0) {
              fault(job, "stats");
              fault(job, "clear");
            }
            return finish(job, false, error);
          }
        }
        t.push_back((monoNs() - t0) / 1e6);
      }
      std::sort(t.begin(), t.end());
      ms[pass].push_back(t[t.size() / 2]);
    }
  }
  if (job.rank == 0) {
    fault(job, "stats");
    fault(job, "clear");
    std::printf("%12s %12s %12s %8s   (all 7 kinds once, median of 3-30)\n", "bytes", "clean ms", "fault ms", "ratio");
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::printf("%12zu %12.2f %12.2f %8.2f\n", sizes[i], ms[0][i], ms[1][i], ms[1][i] / ms[0][i]);
    }
  }
  return finish(job, true, "");
}

}  // namespace

int main(int argc, char** argv) {
  const char* hostEnv = std::getenv("NETNS_HOST");
  const char* layout = std::getenv("NETNS_LAYOUT");
  const char* dir = std::getenv("NET_FAULT_DIR");
  if (!hostEnv || !layout || !dir || argc < 2) {
    std::fprintf(stderr, "net_fault runs under tests/multihost/net_fault.sh\n");
    return 2;
  }
  Job job;
  job.host = std::atoi(hostEnv);
  job.faultDir = dir;
  job.faultScript = CHORUS_NETFAULT;
  std::stringstream ls(layout);
  for (std::string part; std::getline(ls, part, ',');) {
    for (int i = 0; i < std::atoi(part.c_str()); ++i) job.hostOf.push_back(job.nhosts);
    ++job.nhosts;
  }
  if (chorusCommInitFromEnv(&job.comm, nullptr) != chorusSuccess) {
    std::printf("rank ?: init failed: %s\n", chorusGetLastError(nullptr));
    return 1;
  }
  chorusCommUserRank(job.comm, &job.rank);
  chorusCommCount(job.comm, &job.n);
  const std::string what = argv[1];
  const double arg = argc > 2 ? std::atof(argv[2]) : 0;
  const int lostHost = job.nhosts - 1;
  int firstOfLost = 0;
  while (job.hostOf[firstOfLost] != lostHost) ++firstOfLost;

  if (what == "loss") return sweep(job, std::string("loss ") + argv[2], std::strtoull(argv[3], nullptr, 10));
  if (what == "throttle") {
    return sweep(job, "throttle " + std::to_string(lostHost) + " " + argv[2], std::strtoull(argv[3], nullptr, 10));
  }

  // The rest loop 1 MiB and 8 B collectives of every kind while a thread of the injector strikes
  // 2 s in, and rank 0 stops the loop a few seconds after the fault is over.
  const int64_t start = monoNs();
  const int64_t strikeNs = start + int64_t(2e9);
  std::atomic<int64_t> stopAt{0};
  std::thread injector;
  auto strikeThen = [&](const std::string& args, double holdS, const std::string& undo) {
    injector = std::thread([&, args, holdS, undo] {
      std::this_thread::sleep_until(Clock::time_point(std::chrono::nanoseconds(strikeNs)));
      noteStruck(job);
      fault(job, args);
      if (!undo.empty()) {
        std::this_thread::sleep_for(std::chrono::duration<double>(holdS));
        fault(job, "stats");
        fault(job, undo);
      }
    });
  };
  std::function<void(int)> beforeRound;
  bool expectFailure = false;
  if (what == "flap" || what == "reset" || what == "corrupt") {
    const double hold = what == "flap" ? arg : what == "reset" ? 2.0 : 3.0;
    const std::string args = what == "flap"    ? "blackhole " + std::to_string(lostHost)
                             : what == "reset" ? "reset " + std::to_string(lostHost)
                                               : "corrupt " + std::string(argv[2]);
    if (job.rank == 0) strikeThen(args, hold, "clear");
    stopAt = strikeNs + int64_t((hold + 4) * 1e9);
  } else if (what == "blackhole") {
    if (job.rank == 0) strikeThen("blackhole " + std::to_string(lostHost), 0, "");
    expectFailure = true;
  } else if (what == "kill-host") {
    if (job.rank == firstOfLost) strikeThen("kill-host", 0, "");
    expectFailure = true;
  } else if (what == "slow") {
    beforeRound = [&](int k) {
      if (k == 10 && job.rank == firstOfLost) {
        noteStruck(job);
        std::this_thread::sleep_for(std::chrono::duration<double>(arg));
      }
      if (k == 10 && job.rank == 0) stopAt = monoNs() + int64_t(2e9);
    };
  } else if (what == "stop") {
    if (job.rank == firstOfLost) {
      injector = std::thread([&] {
        std::this_thread::sleep_until(Clock::time_point(std::chrono::nanoseconds(strikeNs)));
        noteStruck(job);
        const pid_t self = getpid();
        const pid_t child = fork();
        if (child == 0) {  // stops its parent whole, then lets it go on
          kill(self, SIGSTOP);
          usleep(static_cast<useconds_t>(arg * 1e6));
          kill(self, SIGCONT);
          _exit(0);
        }
        waitpid(child, nullptr, 0);
      });
    }
    stopAt = strikeNs + int64_t((arg + 3) * 1e9);
  } else {
    std::fprintf(stderr, "net_fault: unknown fault '%s'\n", what.c_str());
    return 2;
  }
  std::string error;
  const bool ok = loopUntil(
      job, [&] { return stopAt.load(); }, beforeRound, &error);
  const int64_t endedNs = monoNs();
  if (injector.joinable()) injector.join();
  if (!ok && expectFailure) {
    const double after = (endedNs - struckAt(job)) / 1e9;
    const int who = blamed(error);
    const bool across =
        who >= 0 && who < job.n && (job.host == lostHost ? job.hostOf[who] != lostHost : job.hostOf[who] == lostHost);
    std::printf("rank %d (host %d): failed %.1f s after the fault, naming rank %d\n", job.rank, job.host, after, who);
    if (!across) {
      std::printf("rank %d: FAILED: the rank named is not across the cut\n", job.rank);
      finish(job, false, error);
      return 1;
    }
    if (after > arg) {
      std::printf("rank %d: FAILED: %.1f s is past the bound of %.0f s\n", job.rank, after, arg);
      finish(job, false, error);
      return 1;
    }
  } else if (ok && expectFailure) {
    std::printf("rank %d: FAILED: the loop ended without an error\n", job.rank);
    return 1;
  }
  return finish(job, ok, error);
}
