// A host's network cut in the middle of all-reduces (run by tests/multihost/netns_run.sh, layout
// 2,2: ranks 0 and 1 on host 0, ranks 2 and 3 on host 1). The last rank takes its host's link
// down (`ip link set eth0 down` in its own namespace) after a few rounds: no connection closes,
// the sockets just go quiet. Every rank must fail within the timeout plus a few seconds, and the
// first rank its message names must be on the other host: the lost one, never a healthy
// neighbour of its own host that merely timed out first.
//
//   link_cut   (CHORUS_RANK, CHORUS_NRANKS, CHORUS_COMM_ID and NETNS_HOST from netns_run.sh)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"

int main() {
  const char* hostEnv = std::getenv("NETNS_HOST");
  if (!hostEnv) {
    std::fprintf(stderr, "link_cut runs under tests/multihost/netns_run.sh\n");
    return 2;
  }
  const int host = std::atoi(hostEnv);
  chorusComm_t comm;
  if (chorusCommInitFromEnv(&comm, nullptr) != chorusSuccess) {
    std::printf("init failed: %s\n", chorusGetLastError(nullptr));
    return 1;
  }
  int rank = 0;
  int n = 0;
  chorusCommUserRank(comm, &rank);
  chorusCommCount(comm, &n);
  const int perHost = n / 2;
  auto hostOf = [perHost](int r) { return r / perHost; };
  std::vector<float> v(1 << 18);
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  double cutAt = -1;
  for (int round = 0; round < 100000; ++round) {
    if (rank == n - 1 && round == 20) {
      cutAt = seconds();
      if (std::system("ip link set dev eth0 down") != 0) {
        std::printf("rank %d: could not take eth0 down\n", rank);
        return 1;
      }
    }
    for (auto& x : v) x = 1.0f;
    if (chorusAllReduce(v.data(), v.data(), v.size(), chorusFloat32, chorusSum, comm, nullptr) != chorusSuccess) {
      const std::string msg = chorusGetLastError(nullptr);
      std::smatch m;
      const bool named = std::regex_search(msg, m, std::regex("rank ([0-9]+) \\(host "));
      const int blamed = named ? std::stoi(m[1]) : -1;
      std::printf("rank %d (host %d): failed at %.1f s, round %d, naming rank %d: %s\n", rank, host, seconds(), round,
                  blamed, msg.c_str());
      chorusCommAbort(comm);
      if (blamed < 0 || hostOf(blamed) == host) {
        std::printf("rank %d: FAILED: the first rank named is not on the other host\n", rank);
        return 1;
      }
      return 0;
    }
    if (cutAt < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::printf("rank %d: FAILED: every all-reduce succeeded with the link down\n", rank);
  return 1;
}
