// The device executor (src/device/lane_exec.h) on blocks of host threads when something is wrong:
// a wait on a rank that never comes ends at the deadline, or at the abort word, with an error record
// that names the block, step and peer; a send and a receive of different sizes end as a mismatch at
// once, whichever protocol each end's size picked; a launch with an LL128 lane refused by the build
// without LL128; and a launch passing a kernel no more bytes than its lanes.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "src/device/lane_exec.h"
#include "tests/host_block.h"
#include "tests/lane_clique.h"

using namespace chorus;
using namespace chorus::device;
using namespace chorus::device::lanetest;

namespace {

// Rank 0 of a 2-rank clique sends messages of the sizes `sent` to rank 1, which receives the sizes
// `received` (the program's error where they differ), with `o` (its receive sizes and failure
// notices set here): each rank's error record; *quick: all was over within 5 s.
std::vector<DeviceError> sendMismatched(Clique& clique, const std::vector<size_t>& sent,
                                        const std::vector<size_t>& received, unsigned threads, P2pOptions o,
                                        bool* quick) {
  std::vector<std::vector<std::vector<size_t>>> sends(2, std::vector<std::vector<size_t>>(2));
  std::vector<std::vector<std::vector<size_t>>> recvs = sends;
  sends[0][1] = sent;
  recvs[1][0] = received;
  size_t sentBytes = 0;
  size_t receivedBytes = 0;
  for (size_t b : sent) sentBytes += b;
  for (size_t b : received) receivedBytes += b;
  std::vector<char> in(sentBytes, 'x');
  std::vector<char> out(receivedBytes, 0);
  std::vector<std::vector<const char*>> src(2, std::vector<const char*>(2));
  std::vector<std::vector<char*>> dst(2, std::vector<char*>(2));
  src[0][1] = in.data();
  dst[1][0] = out.data();
  o.recvs = &recvs;
  o.noticeFailures = true;
  const auto start = std::chrono::steady_clock::now();
  auto errors = clique.exchange(sends, src, dst, threads, o);
  *quick = std::chrono::steady_clock::now() - start < std::chrono::seconds(5);
  return errors;
}

}  // namespace

TEST_CASE("a device lane waiting on a rank that never comes ends at the deadline or the abort word, saying where",
          "[device_lane]") {
  const int n = 3;
  const size_t count = 4096;
  for (int variant = 0; variant < 6; ++variant) {
    const bool byAbort = variant % 2 == 1;
    const ProtoKind proto = variant < 2 ? ProtoKind::kSimple : variant < 4 ? ProtoKind::kLL : ProtoKind::kLL128;
    INFO(protoName(proto));
    Clique clique(n, 1, 256, 2);
    clique.setProto(proto);
    std::vector<std::vector<float>> in(n, std::vector<float>(count, 1.0f));
    std::vector<std::vector<float>> out(n, std::vector<float>(count));
    std::vector<const char*> ip(n);
    std::vector<char*> op(n);
    for (int r = 0; r < n; ++r) {
      ip[r] = reinterpret_cast<const char*>(in[r].data());
      op[r] = reinterpret_cast<char*>(out[r].data());
    }
    uint32_t abortWord = 0;
    std::thread aborter;
    if (byAbort) aborter = abortAfter(&abortWord, std::chrono::milliseconds(100));
    AlgoCall call{CollType::kAllReduce, count, sizeof(float), 0, false};
    const auto start = std::chrono::steady_clock::now();
    // Rank 2 never runs; ranks 0 and 1 wait for it.
    const auto errors = clique.launch(Algo::kRing, {call}, chorusFloat32, ReduceSpec(), ip, op, 2, {true, true, false},
                                      byAbort ? 60'000'000'000ull : 200'000'000ull, &abortWord);
    if (aborter.joinable()) aborter.join();
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
    for (int r = 0; r < 2; ++r) {
      INFO("rank " << r << (byAbort ? " (abort)" : " (deadline)"));
      const DeviceError& e = errors[r];
      CHECK(e.status == static_cast<uint32_t>(byAbort ? DeviceFault::kAborted : DeviceFault::kTimeout));
      CHECK(e.block == 0);
      CHECK(e.lane == 0);
      CHECK((e.waiting == 1 || e.waiting == 2));
      CHECK(e.seq == 1);
      CHECK((e.peer >= 0 && e.peer < n));
    }
  }
}

// A send and a receive of different sizes are the program's error; each end plans its lane from
// its own size, so where the two sizes fall on either side of Tuner::kP2pLLMaxBytes one end runs
// LL and the other Simple on the same FIFO. The receiver must still fail fast, with the mismatch
// that equal protocols give, not wait for its deadline. A sender left waiting for room ends when
// its host hears of the failure (the abort word), as with equal protocols. After the mismatched
// pair each side has a matching 100-byte one: a 0-byte send sends nothing, so a receive of more
// finds the next piece, and a 0-byte receive lets the next receive find the mismatched piece.
TEST_CASE("device lanes on host threads: a send and a receive of different sizes fail as a mismatch, LL or Simple",
          "[device_lane]") {
  const size_t ll = Tuner::kP2pLLMaxBytes;
  const std::pair<size_t, size_t> cases[] = {
      // (sent, received): LL then Simple, Simple then LL.
      {ll, ll + 4},
      {ll + 4, ll},
      {100, 20000},
      {20000, 100},
      {0, 20000},
      {20000, 0},
      {0, ll + 1},
      {ll + 1, 0},
      // One protocol on both ends: how a mismatch always failed.
      {100, 200},
      {20000, 40000},
      {0, 100},
  };
  const uint64_t timeoutNs = 30'000'000'000ull;
  for (const auto& [sent, received] : cases) {
    for (unsigned threads : {1u, 3u}) {
      INFO("sent " << sent << " (" << protoName(Tuner().p2pProto(sent)) << "), received " << received << " ("
                   << protoName(Tuner().p2pProto(received)) << "), threads " << threads);
      Clique clique(2, 1, 4096, 2);
      P2pOptions o;
      o.protoBySize = true;
      o.timeoutNs = timeoutNs;
      bool quick = false;
      const auto errors = sendMismatched(clique, {sent, 100}, {received, 100}, threads, o, &quick);
      CHECK(quick);
      const DeviceError& rx = errors[1];
      CHECK(rx.status == static_cast<uint32_t>(DeviceFault::kMismatch));
      CHECK(rx.peer == 0);
      CHECK(rx.seqKind == static_cast<uint32_t>(SeqKind::kP2pRecv));
      CHECK(rx.seq == (received ? 1u : 2u));  // a 0-byte receive takes nothing: the next one fails
      // The sender ended too: done (its pieces fit the FIFO) or stopped by the failure notice.
      const DeviceError& tx = errors[0];
      CHECK((tx.status == 0 || tx.status == static_cast<uint32_t>(DeviceFault::kAborted)));
    }
  }
}

// A collective whose ranks passed different counts (the program's error) may have the tuner pick
// different protocols on each end of a FIFO; with LL128 on either end, the receiver fails at the
// piece's header as with one protocol, without waiting for its deadline: an LL128 receiver finds
// a Simple piece's ready word or LL's header lines at its position, an LL receiver LL128's header
// line, a Simple receiver an old slot header.
TEST_CASE("device lanes on host threads: LL128 at one end and another protocol at the other fail as a mismatch",
          "[device_lane]") {
  const ProtoKind ll128 = ProtoKind::kLL128;
  const std::pair<ProtoKind, ProtoKind> ends[] = {
      {ll128, ProtoKind::kSimple},
      {ProtoKind::kSimple, ll128},
      {ll128, ProtoKind::kLL},
      {ProtoKind::kLL, ll128},
      {ll128, ll128},  // one protocol: sizes 100 and 200 differ
  };
  for (const auto& [sendProto, recvProto] : ends) {
    for (unsigned threads : {1u, 3u}) {
      INFO("sent " << protoName(sendProto) << ", received " << protoName(recvProto) << ", threads " << threads);
      Clique clique(2, 1, 4096, 2);
      P2pOptions o;
      o.sendProto = sendProto;
      o.recvProto = recvProto;
      o.timeoutNs = 30'000'000'000ull;
      bool quick = false;
      const auto errors = sendMismatched(clique, {100}, {200}, threads, o, &quick);
      CHECK(quick);
      CHECK(errors[1].status == static_cast<uint32_t>(DeviceFault::kMismatch));
      CHECK(errors[1].peer == 0);
      CHECK(errors[1].seq == 1u);
      CHECK((errors[0].status == 0 || errors[0].status == static_cast<uint32_t>(DeviceFault::kAborted)));
    }
  }
}

// The launch kernel comes in two builds (src/device/prims_device.cuh): launches with an LL128 lane
// take the one with LL128; the other refuses such a lane with an error record instead of running
// it as something else.
TEST_CASE("device lanes: a launch with an LL128 lane needs the executor built with LL128", "[device_lane]") {
  DeviceCommState state{};
  DeviceError error{};
  uint32_t abortWord = 0;
  LaunchParams p;
  p.state = &state;
  p.error = &error;
  p.abortFlag = &abortWord;
  p.nblocks = 1;
  p.laneBegin[0] = 0;
  p.laneBegin[1] = 2;
  p.lanes[0].proto = ProtoKind::kSimple;
  p.lanes[1].proto = ProtoKind::kLL;
  CHECK_FALSE(launchHasLL128(p));
  p.lanes[1].proto = ProtoKind::kLL128;
  CHECK(launchHasLL128(p));
  p.laneBegin[1] = 1;  // the LL128 lane past the launch's lanes
  CHECK_FALSE(launchHasLL128(p));
  // Run by a one-thread block of the build without LL128: the lane (no steps) is refused.
  p.laneBegin[1] = 2;
  p.lanes[0].proto = ProtoKind::kLL128;
  BlockShared shared(1);
  HostBlock b(shared, 0, 1, 0);
  runBlockWithoutLL128(b, p);
  CHECK(error.status == static_cast<uint32_t>(DeviceFault::kRefused));
  CHECK(error.lane == 0);
  CHECK(state.collSeq[0] == 0);
}

TEST_CASE("a launch passes the bytes before the lanes and the lanes its blocks run, no more", "[device_lane]") {
  auto p = std::make_unique<LaunchParams>();
  const size_t head = offsetof(LaunchParams, lanes);
  CHECK(launchParamsBytes(*p) == (head + 15) / 16 * 16);  // no block: the header alone
  p->nblocks = 1;
  p->laneBegin[1] = 1;
  CHECK(launchParamsBytes(*p) == (head + sizeof(DeviceLane) + 15) / 16 * 16);
  CHECK(launchParamsBytes(*p) < 1024);  // a one-lane call, not the 27 KB struct
  p->nblocks = 3;
  p->laneBegin[1] = 2;
  p->laneBegin[2] = 5;
  p->laneBegin[3] = 7;
  CHECK(launchParamsBytes(*p) == (head + 7 * sizeof(DeviceLane) + 15) / 16 * 16);
  p->nblocks = kMaxBlocks;
  p->laneBegin[kMaxBlocks] = kMaxLaunchLanes;
  CHECK(launchParamsBytes(*p) == sizeof(LaunchParams));  // every lane: the whole struct, never more
}
