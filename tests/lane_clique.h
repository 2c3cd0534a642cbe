// n ranks of one process for the device executor's tests (tests/device_lane_*_test.cc): their
// rings, trees, FIFOs and device state wired as the communicator wires its connections, their lanes
// the algorithms' own plans packed into LaunchParams as the host side of a launch packs them, each
// rank's launches run by blocks of host threads (tests/host_block.h). The FIFOs are plain host
// memory, or a host-staged transport's FIFOs for kernels (shm, and sockets with their proxies
// polling the FIFOs), host threads standing in for the kernels.
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "include/chorus/chorus.h"
#include "src/algo/algorithm.h"
#include "src/algo/fifo.h"
#include "src/algo/tuner.h"
#include "src/common/log.h"
#include "src/device/launch_desc.h"
#include "src/device/launch_pack.h"
#include "src/transport/transport.h"
#include "tests/host_block.h"

namespace chorus::device::lanetest {

struct Fifo {
  Fifo(uint32_t nslots, uint32_t slotBytes) : mem(deviceFifoBytes(nslots, slotBytes) + 64, 0) {
    void* base = mem.data() + (64 - reinterpret_cast<uintptr_t>(mem.data()) % 64) % 64;
    view = FifoView::layout(base, nslots, slotBytes);
  }
  std::vector<char> mem;
  FifoView view;
};

// The out-of-band channel of ranks that are threads here: sockets are socket pairs, descriptors
// are passed by hand.
class LoopbackOob {
 public:
  struct Shared {
    std::mutex mu;
    std::map<uint64_t, UniqueFd> offered;  // descriptors by token
  };
  class End : public OutOfBand {
   public:
    End(Shared& s, int rank) : s_(s), rank_(rank) {}
    std::string peerAddress(int peer) const override { return "thread:" + std::to_string(peer); }
    const std::string& fdServerName() const override { return server_; }
    void exportFd(int, uint64_t token, UniqueFd fd) override {
      std::lock_guard<std::mutex> g(s_.mu);
      s_.offered[token] = std::move(fd);
    }
    Result<UniqueFd> importFd(int, const std::string&, uint64_t token) override {
      std::lock_guard<std::mutex> g(s_.mu);
      auto it = s_.offered.find(token);
      if (it == s_.offered.end()) return internalError("no descriptor offered under that token");
      UniqueFd fd = std::move(it->second);
      s_.offered.erase(it);
      return fd;
    }
    Status awaitClaim(int, uint64_t token) override {
      std::lock_guard<std::mutex> g(s_.mu);
      return s_.offered.count(token) ? internalError("the descriptor was not claimed") : Status::ok();
    }

   private:
    Shared& s_;
    int rank_;
    std::string server_ = "loopback";
  };
};

// What carries a clique's FIFOs: plain host memory, or a host-staged transport's FIFOs for
// kernels (no device: host threads stand in for the kernels), each rank with its own instance.
enum class Wiring { kMemory, kShm, kSocket };

// How Clique::exchange runs, beyond what setProto says.
struct P2pOptions {
  // The sizes rank r receives from p (recvs[r][p]); null: what p sends, as a correct program
  // receives.
  const std::vector<std::vector<std::vector<size_t>>>* recvs = nullptr;
  // Each lane's protocol from its own size, as the communicator picks it (Tuner::p2pProto);
  // otherwise setProto's for every lane.
  bool protoBySize = false;
  // Else, where set: every send lane's protocol and every receive lane's (ends that disagree).
  std::optional<ProtoKind> sendProto;
  std::optional<ProtoKind> recvProto;
  uint64_t timeoutNs = 20'000'000'000ull;
  // Each rank has an abort word, and a rank whose kernel fails has the others' set, as its host
  // does when it fails the communicator (Communicator::fail: the failure notice, then each
  // peer's DeviceComm::stop).
  bool noticeFailures = false;
};

// n ranks of one process: their rings, trees, FIFOs and device state, wired like a communicator.
class Clique {
 public:
  // `p2pChannels`: the point-to-point channels per peer and direction (Tuner::p2pChannelMax),
  // each a FIFO of its own; exchange() cuts each transfer over them as the communicator does.
  Clique(int n, int nch, uint32_t slotBytes, uint32_t slots, Wiring wiring = Wiring::kMemory, int p2pChannels = 1);

  // The lanes of `calls` (type and op the same for all), packed into launches as the
  // communicator packs them (LaunchPacker), every block with `threads` threads, every rank at once,
  // each rank's launches one after another. Returns each rank's error record.
  std::vector<DeviceError> launch(Algo algo, const std::vector<AlgoCall>& calls, int type, const ReduceSpec& spec,
                                  const std::vector<const char*>& in, const std::vector<char*>& out, unsigned threads,
                                  const std::vector<bool>& runs = {}, uint64_t timeoutNs = 20'000'000'000ull,
                                  uint32_t* abortWord = nullptr);

  // Point-to-point: sends[r][p] are the sizes (bytes) rank r sends to p, in issue order; the
  // receiver takes the same sizes in the same order, or those of o.recvs. Lanes by round, as the
  // communicator builds them.
  std::vector<DeviceError> exchange(const std::vector<std::vector<std::vector<size_t>>>& sends,
                                    const std::vector<std::vector<const char*>>& src,
                                    const std::vector<std::vector<char*>>& dst, unsigned threads,
                                    const P2pOptions& o = {});

  // Call i of a launch() list gets the buffers `bytes * i` further on (0: every call the same).
  void setCallStride(size_t bytes) { callStride_ = bytes; }
  // The protocol of the lanes of the next launch() or exchange().
  void setProto(ProtoKind proto) { proto_ = proto; }
  // The channels the next launches' collectives run, up to the clique's (0: all of them).
  void setChannels(int nch) { channels_ = nch; }
  // How many launches rank 0's last call took, and the most blocks one of them ran (exchange()).
  size_t lastLaunches() const { return lastLaunches_; }
  size_t lastBlocks() const { return lastBlocks_; }
  // Every FIFO in host memory starts (empty) at position `pos`, as one would after `pos` pieces;
  // before any launch.
  void startPositionsAt(uint32_t pos) {
    for (auto& f : fifos_) {
      f->view.ctrl->tail.store(pos, std::memory_order_relaxed);
      f->view.ctrl->head.store(pos, std::memory_order_relaxed);
    }
  }

 private:
  LaunchParams base(int r, DeviceError* error, uint64_t timeoutNs, uint32_t* abortWord) {
    Rank& k = ranks_[r];
    std::memset(error, 0, sizeof(DeviceError));
    LaunchParams p;
    p.connectors = k.connectors.data();
    p.state = &k.state;
    p.error = error;
    p.abortFlag = abortWord ? abortWord : &noAbort_;
    p.commId = 77;
    p.timeoutNs = timeoutNs;
    return p;
  }
  static void run(const std::vector<std::vector<LaunchParams>>& launches, unsigned threads,
                  const std::vector<bool>& runs) {
    runOnHostThreads(launches, threads, runs);
  }

  struct Rank {
    std::vector<int> ringPos;
    AlgoContext ctx;
    std::vector<ConnKey> keys;
    std::vector<DeviceConnector> connectors;
    std::map<std::tuple<ConnFamily, int, bool>, uint16_t> index;
    std::vector<uint64_t> p2pSend;
    std::vector<uint64_t> p2pRecv;
    DeviceCommState state;
    std::vector<char> scratch;
    std::list<std::vector<Step>> steps;  // every launch's schedules, kept (stable addresses)
  };
  // A FIFO for kernels from rank `from` to rank `to`, set up in the transports' three phases.
  void connectVia(int to, int from, uint64_t tag, uint32_t slots, uint32_t slotBytes, DeviceConnector* recv,
                  DeviceConnector* send);
  static TunerFacts p2pFacts(int n, int p2pChannels) {
    TunerFacts f;
    f.nranks = n;
    f.deviceChannels = 2 * (n - 1) * p2pChannels;
    return f;
  }
  void addConnector(int r, ConnFamily f, int index, bool send, const DeviceConnector& c) {
    Rank& k = ranks_[r];
    k.index[{f, index, send}] = static_cast<uint16_t>(k.connectors.size());
    k.connectors.push_back(c);
  }

  int n_;
  int nch_;
  std::vector<std::vector<int>> rings_;
  std::vector<int> parent_[2];
  std::vector<Rank> ranks_;
  std::vector<std::unique_ptr<Fifo>> fifos_;
  // Host-staged wiring; the transports (their proxy threads) go before the connections they serve.
  Logger log_{LogLevel::kWarn, kSubsysAll, 0};
  LoopbackOob::Shared oobShared_;
  std::vector<std::unique_ptr<LoopbackOob::End>> oob_;
  std::vector<std::unique_ptr<Connection>> connections_;
  std::vector<std::unique_ptr<Transport>> transports_;
  uint32_t slotBytes_ = 0;
  // The communicator's tuner as far as point-to-point goes: its device channel limit gives
  // `p2pChannels` per peer and direction.
  Tuner p2pTuner_;
  uint32_t noAbort_ = 0;
  size_t lastLaunches_ = 0;
  size_t lastBlocks_ = 0;
  size_t callStride_ = 0;
  ProtoKind proto_ = ProtoKind::kSimple;
  int channels_ = 0;
};

template <typename T>
inline constexpr int kTypeOf = -1;
template <>
inline constexpr int kTypeOf<int32_t> = chorusInt32;
template <>
inline constexpr int kTypeOf<float> = chorusFloat32;
template <>
inline constexpr int kTypeOf<double> = chorusFloat64;
template <>
inline constexpr int kTypeOf<int8_t> = chorusInt8;

// Rank r's element i: small integers, so every sum is exact whatever the order.
template <typename T>
T valueOf(int r, size_t i) {
  return T(static_cast<int>((i * 7 + static_cast<size_t>(r) * 13) % 23) - 11);
}

// Two launches in a row on the same FIFOs, the first with protocol `first`, the second `second`.
template <typename T>
void checkAllReduce(Algo algo, int n, int nch, unsigned threads, size_t count, bool inPlace,
                    ProtoKind first = ProtoKind::kSimple, ProtoKind second = ProtoKind::kSimple,
                    Wiring wiring = Wiring::kMemory, uint32_t startAt = 0) {
  INFO("algo " << static_cast<int>(algo) << " ranks " << n << " channels " << nch << " threads " << threads << " count "
               << count << (inPlace ? " in place" : "") << " protocols " << protoName(first) << ", "
               << protoName(second) << " wiring " << static_cast<int>(wiring) << " positions from " << startAt);
  Clique clique(n, nch, 256, 2, wiring);  // 256-byte slots, two per FIFO: many pieces, FIFOs often full
  if (startAt) clique.startPositionsAt(startAt);
  std::vector<std::vector<T>> in(n);
  std::vector<std::vector<T>> out(n);
  for (int launchNo = 0; launchNo < 2; ++launchNo) {
    clique.setProto(launchNo == 0 ? first : second);
    std::vector<const char*> ip(n);
    std::vector<char*> op(n);
    for (int r = 0; r < n; ++r) {
      in[r].resize(count);
      for (size_t i = 0; i < count; ++i) in[r][i] = valueOf<T>(r + launchNo, i);
      out[r].assign(count, T(-99));
      if (inPlace) out[r] = in[r];
      ip[r] = reinterpret_cast<const char*>(inPlace ? out[r].data() : in[r].data());
      op[r] = reinterpret_cast<char*>(out[r].data());
    }
    AlgoCall call{CollType::kAllReduce, count, sizeof(T), 0, inPlace};
    const auto errors = clique.launch(algo, {call}, kTypeOf<T>, ReduceSpec(), ip, op, threads);
    for (int r = 0; r < n; ++r) {
      REQUIRE(errors[r].status == 0);
      for (size_t i = 0; i < count; ++i) {
        T want = T(0);
        for (int q = 0; q < n; ++q) want = T(want + valueOf<T>(q + launchNo, i));
        REQUIRE(out[r][i] == want);
      }
    }
  }
}

}  // namespace chorus::device::lanetest
