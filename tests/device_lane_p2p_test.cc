// The device executor (src/device/lane_exec.h) on blocks of host threads: point-to-point lanes by
// rounds and cut over channels, every byte checked at the receiver; and the host-staged transports
// (shm, and sockets with their proxies polling the FIFOs) carrying collectives' and point-to-point
// lanes through their FIFOs for kernels, host threads standing in for the kernels.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/lane_clique.h"

using namespace chorus;
using namespace chorus::device;
using namespace chorus::device::lanetest;

namespace {

using P2pSizes = std::vector<std::vector<std::vector<size_t>>>;

// Rank r sends each peer p the messages sizes[r][p] (bytes of a pattern of r, p and the offset),
// and p receives the same: every byte checked at the receiver, every rank's error record clear.
void exchangeChecked(Clique& clique, int n, const P2pSizes& sizes, unsigned threads, const P2pOptions& o = {}) {
  std::vector<std::vector<std::vector<char>>> sent(n, std::vector<std::vector<char>>(n));
  std::vector<std::vector<std::vector<char>>> got(n, std::vector<std::vector<char>>(n));
  std::vector<std::vector<const char*>> src(n, std::vector<const char*>(n));
  std::vector<std::vector<char*>> dst(n, std::vector<char*>(n));
  for (int r = 0; r < n; ++r) {
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      size_t total = 0;
      for (size_t b : sizes[r][p]) total += b;
      sent[r][p].resize(total);
      for (size_t i = 0; i < total; ++i) sent[r][p][i] = static_cast<char>((i * 131 + i / 4099 + r * 7 + p) & 0xff);
      src[r][p] = sent[r][p].data();
    }
  }
  for (int r = 0; r < n; ++r) {
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      got[r][p].assign(sent[p][r].size(), 0);
      dst[r][p] = got[r][p].data();
    }
  }
  const auto errors = clique.exchange(sizes, src, dst, threads, o);
  for (int r = 0; r < n; ++r) {
    REQUIRE(errors[r].status == 0);
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      REQUIRE(got[r][p].size() == sent[p][r].size());
      for (size_t i = 0; i < got[r][p].size(); ++i) {
        if (got[r][p][i] != sent[p][r][i]) FAIL("rank " << r << " from " << p << ": byte " << i << " differs");
      }
    }
  }
}

// Rank r sends every peer `perPeer` messages, checked byte by byte at the receiver.
void checkExchange(int n, size_t perPeer, ProtoKind proto, Wiring wiring) {
  INFO("ranks " << n << " messages per peer " << perPeer << " " << protoName(proto) << " wiring "
                << static_cast<int>(wiring));
  Clique clique(n, 1, 128, 2, wiring);
  clique.setProto(proto);
  // Rank r sends peer p perPeer messages of sizes 1 + (r + p + m * 37) % 300 bytes.
  P2pSizes sizes(n, std::vector<std::vector<size_t>>(n));
  for (int r = 0; r < n; ++r) {
    for (int p = 0; p < n; ++p) {
      for (size_t m = 0; p != r && m < perPeer; ++m)
        sizes[r][p].push_back(1 + (static_cast<size_t>(r + p) + m * 37) % 300);
    }
  }
  exchangeChecked(clique, n, sizes, 2);
  if (perPeer > kP2pChunk) CHECK(clique.lastLaunches() >= 2);
}

}  // namespace

TEST_CASE("device lanes on host threads: point-to-point by rounds, queues longer than a launch cut in chunks",
          "[device_lane]") {
  for (int n : {2, 3, 4}) {
    for (size_t perPeer : {size_t(1), size_t(5), kP2pChunk + 7}) {
      checkExchange(n, perPeer, perPeer == 5 ? ProtoKind::kLL : ProtoKind::kSimple, Wiring::kMemory);
    }
  }
}

// A device transfer is cut over the point-to-point channels its size gets (Tuner::p2pChannels:
// one per 128 KiB, up to the clique's), each part a block and a FIFO of its own, as the
// communicator plans it; transfers of one, some and all channels mixed on each queue, every
// byte checked, and the launch running a block per peer, direction and channel.
TEST_CASE("device lanes on host threads: point-to-point transfers cut over channels", "[device_lane]") {
  struct Shape {
    int n;
    int channels;
    Wiring wiring;
    bool bySize;  // each lane's protocol from its size (LL up to 16 KiB); else Simple throughout
  };
  for (const Shape& sh :
       {Shape{2, 4, Wiring::kMemory, true}, Shape{3, 2, Wiring::kMemory, false}, Shape{2, 2, Wiring::kShm, true}}) {
    const int n = sh.n;
    INFO("ranks " << n << " channels " << sh.channels << " wiring " << static_cast<int>(sh.wiring));
    Clique clique(n, 1, 4096, 4, sh.wiring, sh.channels);
    clique.setProto(ProtoKind::kSimple);
    // Every channel (the last part short), one channel (LL by size), two channels, one channel of
    // Simple just past 128 KiB.
    P2pSizes sizes(n, std::vector<std::vector<size_t>>(n));
    for (int r = 0; r < n; ++r) {
      for (int p = 0; p < n; ++p) {
        if (p != r) {
          sizes[r][p] = {(1 << 20) + 13 + static_cast<size_t>(r), 5000 + static_cast<size_t>(p), 300 * 1024 + 3,
                         129 * 1024};
        }
      }
    }
    P2pOptions o;
    o.protoBySize = sh.bySize;
    exchangeChecked(clique, n, sizes, 2, o);
    CHECK(clique.lastBlocks() == static_cast<size_t>(2 * (n - 1) * sh.channels));
  }
}

// What a FIFO for kernels in host memory carries when the transports build it: the shm segment
// (kernels of both sides poll it: Simple and LL) and two socket FIFOs with the proxies between
// (Simple: the tuner keeps LL off sockets), each lane's data checked as everywhere here.
TEST_CASE("device lanes through host-staged FIFOs: shm, and sockets with proxies polling them", "[device_lane]") {
  const ProtoKind ll = ProtoKind::kLL;
  const ProtoKind simple = ProtoKind::kSimple;
  for (int n : {2, 3}) {
    for (unsigned threads : {1u, 3u}) {
      checkAllReduce<float>(Algo::kRing, n, 2, threads, 1000, false, simple, ll, Wiring::kShm);
      checkAllReduce<int32_t>(Algo::kTree, n, 1, threads, 777, true, ll, simple, Wiring::kShm);
      checkAllReduce<float>(Algo::kRing, n, 2, threads, 1000, false, simple, simple, Wiring::kSocket);
      checkAllReduce<int32_t>(Algo::kTree, n, 1, threads, 777, true, simple, simple, Wiring::kSocket);
      checkAllReduce<double>(Algo::kDirect, n, 1, threads, 300, false, simple, simple, Wiring::kSocket);
    }
  }
  checkExchange(3, 5, ll, Wiring::kShm);
  checkExchange(3, kP2pChunk + 7, simple, Wiring::kSocket);
}
