// A rank killed while the communicator is being built: after it joined the bootstrap root, during
// the address exchange or the first connections. Four processes forked from this one (which hosts
// the root and is no rank); rank 1 kills itself a few milliseconds into chorusCommInitRank, at
// several delays. Every survivor whose init fails must fail within 5 s (the timeout is 30 s) and
// name rank 1 first, never a healthy rank that merely waited on it. A survivor whose init
// succeeded (the victim died after init) or that waited for the victim's hello at the root (it
// died before joining: the root cannot tell) makes the round inconclusive; at least one round
// must be conclusive.
//
//   init_kill [NRANKS]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"

namespace {

constexpr int kVictim = 1;

// The rank's line: "ok", or "failed <seconds> <message>".
[[noreturn]] void rankMain(chorusUniqueId id, int rank, int n, int killAfterMs, int out) {
  if (rank == kVictim) {
    std::thread([killAfterMs] {
      std::this_thread::sleep_for(std::chrono::milliseconds(killAfterMs));
      raise(SIGKILL);
    }).detach();
  }
  const auto t0 = std::chrono::steady_clock::now();
  chorusComm_t comm = nullptr;
  const chorusResult_t rc = chorusCommInitRank(&comm, n, id, rank);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string line = rc == chorusSuccess ? "ok" : "failed " + std::to_string(s) + " " + chorusGetLastError(nullptr);
  line = std::to_string(rank) + " " + line + "\n";
  (void)!write(out, line.data(), line.size());
  if (comm) chorusCommAbort(comm);
  _exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 4;
  setenv("CHORUS_TIMEOUT", "30", 1);
  int conclusive = 0;
  int failures = 0;
  for (int delay : {3, 6, 10, 15, 20, 30}) {
    chorusUniqueId id;
    if (chorusGetUniqueId(&id) != chorusSuccess) return 1;
    int fds[2];
    if (pipe(fds) != 0) return 1;
    std::vector<pid_t> pids;
    for (int r = 0; r < n; ++r) {
      const pid_t p = fork();
      if (p == 0) {
        close(fds[0]);
        rankMain(id, r, n, delay, fds[1]);
      }
      pids.push_back(p);
    }
    close(fds[1]);
    std::string all;
    char buf[4096];
    ssize_t got;
    while ((got = read(fds[0], buf, sizeof(buf))) > 0) all.append(buf, static_cast<size_t>(got));
    close(fds[0]);
    for (pid_t p : pids) waitpid(p, nullptr, 0);
    std::printf("-- rank %d killed %d ms into init:\n%s", kVictim, delay, all.c_str());
    bool inconclusive = false;
    bool bad = false;
    std::regex lineRe("([0-9]+) failed ([0-9.]+) (.*)");
    size_t pos = 0;
    while (pos < all.size()) {
      const size_t end = all.find('\n', pos);
      const std::string line = all.substr(pos, end - pos);
      pos = end == std::string::npos ? all.size() : end + 1;
      std::smatch m;
      if (line.find(" ok") != std::string::npos) {
        inconclusive = true;
        continue;
      }
      if (!std::regex_match(line, m, lineRe)) continue;
      const double secs = std::stod(m[2]);
      const std::string msg = m[3];
      if (msg.find("waiting for all ranks to join") != std::string::npos ||
          msg.find("never did") != std::string::npos) {
        inconclusive = true;
        continue;
      }
      std::smatch r;
      const bool named = std::regex_search(msg, r, std::regex("rank ([0-9]+) \\("));
      if (secs > 5.0 || !named || std::stoi(r[1]) != kVictim) {
        std::printf("FAIL: rank %s took %.2f s or did not name rank %d first\n", std::string(m[1]).c_str(), secs,
                    kVictim);
        bad = true;
      }
    }
    if (bad) ++failures;
    if (!bad && !inconclusive) ++conclusive;
  }
  std::printf("%d conclusive rounds, %d failed\n", conclusive, failures);
  if (failures || conclusive == 0) {
    std::printf("FAILED\n");
    return 1;
  }
  std::printf("every survivor of a rank killed in init named it within 5 s\n");
  return 0;
}
