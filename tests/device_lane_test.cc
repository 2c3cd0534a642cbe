// The device executor (src/device/lane_exec.h) run by blocks of host threads: the kernel's whole
// logic but the CUDA memory model, on every machine and under TSan. Ranks are sets of blocks over
// FIFOs in host memory, wired as the communicator wires its connections; their lanes are the
// algorithms' own plans, packed into LaunchParams as the host side of a launch packs them.
// Checked element by element against exact references (integers, and floats whose sums are
// exact in any order), over several launches in a row (positions and sequence numbers carry
// over in the FIFOs and the state, as they do on the device), with 1, 3 and 4 threads per block.
// A wait on a rank that never comes ends at the deadline, or at the abort word, with an error
// record that names the block, step and peer; a send and a receive of different sizes end as a
// mismatch at once, whichever protocol each end's size picked. The host-staged transports (shm,
// and socket with its proxy polling the FIFOs) carry the same lanes through their FIFOs for
// kernels, host threads standing in for the kernels.
#include <sys/socket.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <vector>

#include "include/chorus/chorus.h"
#include "src/algo/algorithm.h"
#include "src/algo/fifo.h"
#include "src/algo/tuner.h"
#include "src/common/log.h"
#include "src/device/lane_exec.h"
#include "src/device/launch_pack.h"
#include "tests/host_block.h"
#include "transports/transport.h"

using namespace chorus;
using namespace chorus::device;

namespace chorus::device {

void runOnHostThreads(const std::vector<std::vector<LaunchParams>>& launches, unsigned threads,
                      const std::vector<bool>& runs) {
  std::vector<std::thread> ranks;
  for (size_t r = 0; r < launches.size(); ++r) {
    if (!runs.empty() && !runs[r]) continue;
    ranks.emplace_back([&launches, r, threads] {
      for (const LaunchParams& whole : launches[r]) {
        // What a kernel gets: the first launchParamsBytes bytes (cuda::launch passes no more);
        // past them garbage, which a lane reading beyond its launch would trip on.
        auto given = std::make_unique<LaunchParams>();
        std::memset(static_cast<void*>(given.get()), 0xa5, sizeof(LaunchParams));
        std::memcpy(static_cast<void*>(given.get()), &whole, launchParamsBytes(whole));
        const LaunchParams& p = *given;
        std::vector<std::unique_ptr<BlockShared>> shared;
        std::vector<std::thread> pool;
        for (unsigned b = 0; b < p.nblocks; ++b) {
          shared.push_back(std::make_unique<BlockShared>(threads));
          BlockShared* s = shared.back().get();
          for (unsigned t = 0; t < threads; ++t) {
            pool.emplace_back([&p, s, b, t, threads] {
              HostBlock blk(*s, t, threads, b);
              runBlock(blk, p);
            });
          }
        }
        for (auto& t : pool) t.join();
      }
    });
  }
  for (auto& t : ranks) t.join();
}

}  // namespace chorus::device

namespace {

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
  Clique(int n, int nch, uint32_t slotBytes, uint32_t slots, Wiring wiring = Wiring::kMemory, int p2pChannels = 1)
      : n_(n), nch_(nch), slotBytes_(slotBytes), p2pTuner_(p2pFacts(n, p2pChannels)) {
    REQUIRE(p2pTuner_.p2pChannelMax() == p2pChannels);
    rings_.resize(nch);
    for (int c = 0; c < nch; ++c) {
      for (int p = 0; p < n; ++p) rings_[c].push_back(c % 2 ? n - 1 - p : p);  // the second ring backwards
    }
    for (int t = 0; t < 2; ++t) {
      for (int r = 0; r < n; ++r) {
        const int node = t == 0 ? r : n - 1 - r;  // tree 1 mirrors tree 0
        const int parentNode = node == 0 ? -1 : (node - 1) / 2;
        parent_[t].push_back(parentNode < 0 ? -1 : (t == 0 ? parentNode : n - 1 - parentNode));
      }
    }
    ranks_.resize(n);
    for (int r = 0; r < n; ++r) {
      Rank& k = ranks_[r];
      for (int c = 0; c < nch; ++c) {
        for (int p = 0; p < n; ++p) {
          if (rings_[c][p] == r) k.ringPos.push_back(p);
        }
      }
      k.ctx.rank = r;
      k.ctx.nranks = n;
      k.ctx.nChannels = nch;
      k.ctx.rings = &rings_;
      k.ctx.ringPos = &k.ringPos;
      k.ctx.treeParent[0] = &parent_[0];
      k.ctx.treeParent[1] = &parent_[1];
      k.ctx.slotBytes = slotBytes;
      k.ctx.peerSlotBytes = slotBytes;
      k.ctx.slots = static_cast<int>(slots);
      for (int a = 0; a < algorithmCount(); ++a) {
        if (static_cast<Algo>(a) == Algo::kSlice) continue;
        algorithm(static_cast<Algo>(a)).connections(k.ctx, &k.keys);
      }
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        for (int ch = 0; ch < p2pChannels; ++ch) {
          k.keys.push_back(ConnKey{ConnFamily::kP2p, p2pIndex(p, ch), p, true});
          k.keys.push_back(ConnKey{ConnFamily::kP2p, p2pIndex(p, ch), p, false});
        }
      }
      k.p2pSend.assign(static_cast<size_t>(n * kMaxP2pChannels), 0);
      k.p2pRecv.assign(static_cast<size_t>(n * kMaxP2pChannels), 0);
      std::memset(&k.state, 0, sizeof(k.state));
      k.state.p2pSendSeq = k.p2pSend.data();
      k.state.p2pRecvSeq = k.p2pRecv.data();
      k.scratch.resize(slotBytes);
    }
    TransportEnv env;
    env.log = &log_;
    for (int r = 0; r < n && wiring != Wiring::kMemory; ++r) {
      oob_.push_back(std::make_unique<LoopbackOob::End>(oobShared_, r));
      transports_.push_back(wiring == Wiring::kShm ? makeShmTransport(env) : makeNetTransport(env));
    }
    // Every receive end gets a FIFO; the matching send end of the peer shares it (or, through a
    // socket, has its own that the proxies copy from).
    uint64_t tag = 0;
    for (int r = 0; r < n; ++r) {
      for (const ConnKey& key : ranks_[r].keys) {
        if (key.send) continue;
        Rank& s = ranks_[key.peer];
        for (const ConnKey& sk : s.keys) {
          if (!sk.send || sk.family != key.family || sk.peer != r ||
              (key.family == ConnFamily::kRing && sk.index != key.index) ||
              (key.family == ConnFamily::kP2p && sk.index != p2pIndex(r, p2pChannel(key.index)))) {
            continue;
          }
          DeviceConnector recv;
          DeviceConnector send;
          if (wiring == Wiring::kMemory) {
            fifos_.push_back(std::make_unique<Fifo>(slots, slotBytes));
            recv = deviceConnector(fifos_.back()->view, key.peer);
            send = deviceConnector(fifos_.back()->view, r);
          } else {
            connectVia(r, key.peer, ++tag, slots, slotBytes, &recv, &send);
          }
          addConnector(r, key.family, key.index, false, recv);
          addConnector(key.peer, sk.family, sk.index, true, send);
        }
        REQUIRE(ranks_[r].index.count({key.family, key.index, false}) == 1);
      }
    }
  }

  // The lanes of `calls` (type and op the same for all), packed into launches as the
  // communicator packs them (LaunchPacker), every block with `threads` threads, every rank at once,
  // each rank's launches one after another. Returns each rank's error record.
  std::vector<DeviceError> launch(Algo algo, const std::vector<AlgoCall>& calls, int type, const ReduceSpec& spec,
                                  const std::vector<const char*>& in, const std::vector<char*>& out, unsigned threads,
                                  const std::vector<bool>& runs = {}, uint64_t timeoutNs = 20'000'000'000ull,
                                  uint32_t* abortWord = nullptr) {
    std::vector<DeviceError> errors(n_);
    std::vector<std::vector<LaunchParams>> launches(n_);
    for (int r = 0; r < n_; ++r) {
      Rank& k = ranks_[r];
      LaunchPacker packer(base(r, &errors[r], timeoutNs, abortWord));
      for (size_t ci = 0; ci < calls.size(); ++ci) {
        const AlgoCall& call = calls[ci];
        const char* inAt = in[r] + ci * callStride_;
        char* outAt = out[r] + ci * callStride_;
        std::vector<LanePlan> plans;
        const Algo a = call.coll == CollType::kAllReduce ? algo : Algo::kRing;
        // As the communicator plans them: over the call's channels, LL for what a slot's lines hold.
        const AlgoContext ctx = laneContext(k.ctx, channels_ ? channels_ : k.ctx.nChannels, proto_);
        algorithm(a).plan(ctx, call, &plans);
        std::vector<DeviceLane> lanes;
        for (LanePlan& lp : plans) {
          k.steps.push_back(lp.steps);
          DeviceLane lane;
          lane.steps = k.steps.back().data();
          lane.nsteps = static_cast<uint32_t>(lp.steps.size());
          lane.type = static_cast<uint8_t>(type);
          lane.seqKind = SeqKind::kColl;
          lane.proto = proto_;
          lane.seqIndex = lp.channel;
          lane.slotBytes = static_cast<uint32_t>(lp.slotBytes);
          lane.input = inAt;
          lane.output = outAt;
          lane.scratch = k.scratch.data();
          lane.spec = spec;
          for (int i = 0; i < kMaxLanePeers; ++i) {
            if (lp.send[i].index >= 0) lane.send[i] = k.index.at({lp.send[i].family, lp.send[i].index, true});
            if (lp.recv[i].index >= 0) lane.recv[i] = k.index.at({lp.recv[i].family, lp.recv[i].index, false});
          }
          lanes.push_back(lane);
        }
        const size_t bytes = call.count * call.elemSize;
        const size_t inBytes = bytes * (call.coll == CollType::kReduceScatter ? n_ : 1);
        const size_t outBytes = bytes * (call.coll == CollType::kAllGather ? n_ : 1);
        packer.addCollective(lanes, Span{inAt, inAt + inBytes}, Span{outAt, outAt + outBytes});
      }
      launches[r] = packer.finish();
    }
    run(launches, threads, runs);
    lastLaunches_ = launches[0].size();
    return errors;
  }

  // Point-to-point: sends[r][p] are the sizes (bytes) rank r sends to p, in issue order; the
  // receiver takes the same sizes in the same order, or those of o.recvs. Lanes by round, as the
  // communicator builds them.
  std::vector<DeviceError> exchange(const std::vector<std::vector<std::vector<size_t>>>& sends,
                                    const std::vector<std::vector<const char*>>& src,
                                    const std::vector<std::vector<char*>>& dst, unsigned threads,
                                    const P2pOptions& o = {}) {
    std::vector<DeviceError> errors(n_);
    std::vector<uint32_t> abortWords(n_, 0);
    std::vector<std::vector<LaunchParams>> launches(n_);
    for (int r = 0; r < n_; ++r) {
      Rank& k = ranks_[r];
      LaunchPacker packer(base(r, &errors[r], o.timeoutNs, o.noticeFailures ? &abortWords[r] : nullptr));
      // Each transfer cut over the channels the tuner gives its size (p2pSlice), the part on
      // channel ch a lane of queue (peer, direction, ch).
      auto lanesOf = [&](int peer, bool send, int ch) {
        std::vector<DeviceLane> lanes;
        const auto& sizes = send ? sends[r][peer] : o.recvs ? (*o.recvs)[r][peer] : sends[peer][r];
        size_t at = 0;
        for (size_t whole : sizes) {
          const int channels = p2pTuner_.p2pChannels(whole);
          if (ch < channels) {
            const P2pSlice slice = p2pSlice(whole, channels, ch);
            const size_t bytes = slice.bytes;
            DeviceLane l;
            l.nsteps = bytes ? 1 : 0;
            l.step = Step{send ? Prim::kSend : Prim::kRecv, 0, 0, bytes};
            l.type = chorusUint8;
            l.seqKind = send ? SeqKind::kP2pSend : SeqKind::kP2pRecv;
            l.seqIndex = p2pSeqIndex(peer, ch, n_);
            const std::optional<ProtoKind>& end = send ? o.sendProto : o.recvProto;
            l.proto = o.protoBySize ? p2pTuner_.p2pProto(whole) : end ? *end : proto_;
            l.slotBytes = protoSlotDataBytes(l.proto, slotBytes_);
            if (send) {
              l.input = src[r][peer] + at + slice.offset;
              l.send[0] = k.index.at({ConnFamily::kP2p, p2pIndex(peer, ch), true});
            } else {
              l.output = dst[r][peer] + at + slice.offset;
              l.recv[0] = k.index.at({ConnFamily::kP2p, p2pIndex(peer, ch), false});
            }
            lanes.push_back(l);
          }
          at += whole;
        }
        return lanes;
      };
      const int channels = p2pTuner_.p2pChannelMax();
      for (int d = 1; d < n_; ++d) {
        const int to = (r + d) % n_;
        const int from = (r - d + n_) % n_;
        for (int ch = 0; ch < channels; ++ch) {
          packer.addP2pRound(lanesOf(to, true, ch), 2 * n_ * ch + to, lanesOf(from, false, ch),
                             2 * n_ * ch + n_ + from);
        }
      }
      launches[r] = packer.finish();
    }
    std::atomic<bool> over{false};
    std::thread notices;
    if (o.noticeFailures) {
      notices = std::thread([&] {
        while (!over.load(std::memory_order_acquire)) {
          for (int r = 0; r < n_; ++r) {
            if (std::atomic_ref<uint32_t>(errors[r].status).load(std::memory_order_acquire) == 0) continue;
            for (int q = 0; q < n_; ++q) {
              if (q != r) std::atomic_ref<uint32_t>(abortWords[q]).store(1, std::memory_order_release);
            }
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      });
    }
    run(launches, threads, {});
    over.store(true, std::memory_order_release);
    if (notices.joinable()) notices.join();
    lastLaunches_ = launches[0].size();
    lastBlocks_ = 0;
    for (const LaunchParams& p : launches[0]) lastBlocks_ = std::max<size_t>(lastBlocks_, p.nblocks);
    return errors;
  }

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
                  DeviceConnector* send) {
    ConnectContext rctx;
    rctx.oob = oob_[to].get();
    rctx.nslots = slots;
    rctx.slotBytes = slotBytes;
    rctx.forKernels = true;
    ConnectContext sctx = rctx;
    sctx.oob = oob_[from].get();
    std::vector<char> handle;
    auto r = transports_[to]->setupRecv(rctx, from, tag, &handle);
    REQUIRE(r.isOk());
    auto s = transports_[from]->connectSend(sctx, to, tag, handle);
    REQUIRE(s.isOk());
    REQUIRE(transports_[to]->finishRecv(rctx, *r.value(), from, tag).isOk());
    *recv = deviceConnector(r.value()->kernelFifo(), from);
    *send = deviceConnector(s.value()->kernelFifo(), to);
    connections_.push_back(r.take());
    connections_.push_back(s.take());
  }
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
constexpr int kTypeOf = -1;
template <>
constexpr int kTypeOf<int32_t> = chorusInt32;
template <>
constexpr int kTypeOf<float> = chorusFloat32;
template <>
constexpr int kTypeOf<double> = chorusFloat64;
template <>
constexpr int kTypeOf<int8_t> = chorusInt8;

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

}  // namespace

TEST_CASE("device lanes on host threads: all-reduce, ring, tree and direct", "[device_lane]") {
  for (int n : {2, 3, 4}) {
    for (unsigned threads : {1u, 3u, 4u}) {
      for (size_t count : {size_t(1), size_t(7), size_t(1000)}) {
        checkAllReduce<float>(Algo::kRing, n, 2, threads, count, false);
        checkAllReduce<int32_t>(Algo::kTree, n, 1, threads, count, count == 7);
        checkAllReduce<double>(Algo::kDirect, n, 1, threads, count, count == 1000);
      }
    }
  }
  checkAllReduce<int8_t>(Algo::kRing, 3, 3, 4, 5001, true);
}

// LL: a 256-byte slot has 16 lines, 13 of them data (104 bytes a piece), and a step's last piece
// mostly ends inside a line; a launch of one protocol follows one of the other on the same FIFOs,
// so positions and flags carry over between them.
TEST_CASE("device lanes on host threads: all-reduce with the LL protocol, and after Simple", "[device_lane]") {
  const ProtoKind ll = ProtoKind::kLL;
  const ProtoKind simple = ProtoKind::kSimple;
  for (int n : {2, 3, 4}) {
    for (unsigned threads : {1u, 3u, 4u}) {
      for (size_t count : {size_t(1), size_t(7), size_t(1000)}) {
        checkAllReduce<float>(Algo::kRing, n, 2, threads, count, false, ll, ll);
        checkAllReduce<int32_t>(Algo::kTree, n, 1, threads, count, count == 7, ll, simple);
        checkAllReduce<double>(Algo::kDirect, n, 1, threads, count, count == 1000, simple, ll);
      }
    }
  }
  checkAllReduce<int8_t>(Algo::kRing, 3, 3, 4, 5001, true, ll, ll);
  checkAllReduce<int8_t>(Algo::kTree, 4, 2, 3, 333, false, ll, ll);
}

// LL128: a 256-byte slot has two 128-byte lines, the header and one of data (120 bytes a piece);
// at 1024 bytes, 7 lines of data (840 bytes a piece). Every element size, pieces that end inside a
// line and inside a word, and a launch of LL128 after one of another protocol on the same FIFOs,
// and before one, so positions, flags and the line areas carry over between them.
TEST_CASE("device lanes on host threads: all-reduce with the LL128 protocol, beside Simple and LL", "[device_lane]") {
  const ProtoKind ll128 = ProtoKind::kLL128;
  const ProtoKind ll = ProtoKind::kLL;
  const ProtoKind simple = ProtoKind::kSimple;
  for (int n : {2, 3, 4}) {
    for (unsigned threads : {1u, 3u, 4u}) {
      for (size_t count : {size_t(1), size_t(7), size_t(31), size_t(1000)}) {
        checkAllReduce<float>(Algo::kRing, n, 2, threads, count, false, ll128, ll128);
        checkAllReduce<int32_t>(Algo::kTree, n, 1, threads, count, count == 7, ll128, simple);
        checkAllReduce<double>(Algo::kDirect, n, 1, threads, count, count == 1000, ll, ll128);
      }
    }
  }
  checkAllReduce<int8_t>(Algo::kRing, 3, 3, 4, 5001, true, ll128, ll128);
  checkAllReduce<int8_t>(Algo::kTree, 4, 2, 3, 333, false, simple, ll128);
  checkAllReduce<int8_t>(Algo::kRing, 2, 1, 2, 121, false, ll128, ll);
}

// FIFO positions are 32-bit and wrap: pieces across the wrap, in both protocols, from positions
// just before it (the LL flag of the position before the wrap, never written lines' 0, included).
TEST_CASE("device lanes on host threads: FIFO positions that wrap past 2^32", "[device_lane]") {
  const ProtoKind ll = ProtoKind::kLL;
  const ProtoKind simple = ProtoKind::kSimple;
  for (uint32_t before : {1u, 2u, 5u}) {
    const uint32_t start = static_cast<uint32_t>(0) - before;
    checkAllReduce<int32_t>(Algo::kRing, 3, 1, 2, 1000, false, ll, ll, Wiring::kMemory, start);
    checkAllReduce<int32_t>(Algo::kTree, 4, 1, 3, 1000, false, ll, simple, Wiring::kMemory, start);
    checkAllReduce<float>(Algo::kDirect, 2, 1, 1, 300, true, simple, ll, Wiring::kMemory, start);
    checkAllReduce<int32_t>(Algo::kRing, 3, 1, 2, 1000, false, ProtoKind::kLL128, ProtoKind::kLL128, Wiring::kMemory,
                            start);
    checkAllReduce<float>(Algo::kTree, 4, 1, 3, 700, false, ll, ProtoKind::kLL128, Wiring::kMemory, start);
  }
}

TEST_CASE("device lanes on host threads: all-gather, reduce-scatter, broadcast and reduce, Simple, LL and LL128",
          "[device_lane]") {
  for (int n : {2, 3, 4}) {
    for (unsigned threads : {1u, 4u}) {
      const size_t count = 301;
      INFO("ranks " << n << " threads " << threads);
      Clique clique(n, 2, 128, 2);
      // Simple, then LL, then LL128, on the same FIFOs.
      for (int launchNo = 0; launchNo < 3; ++launchNo) {
        clique.setProto(launchNo == 0 ? ProtoKind::kSimple : launchNo == 1 ? ProtoKind::kLL : ProtoKind::kLL128);
        // Each collective its own launch (one buffer pair each), two launches per collective.
        for (CollType coll :
             {CollType::kAllGather, CollType::kReduceScatter, CollType::kBroadcast, CollType::kReduce}) {
          const int root = (launchNo + 1) % n;
          const bool gathers = coll == CollType::kAllGather;
          const bool scatters = coll == CollType::kReduceScatter;
          const size_t inCount = scatters ? count * n : count;
          const size_t outCount = gathers ? count * n : count;
          std::vector<std::vector<int32_t>> in(n, std::vector<int32_t>(inCount));
          std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(outCount, -99));
          std::vector<const char*> ip(n);
          std::vector<char*> op(n);
          for (int r = 0; r < n; ++r) {
            for (size_t i = 0; i < inCount; ++i) in[r][i] = valueOf<int32_t>(r + launchNo, i);
            ip[r] = reinterpret_cast<const char*>(in[r].data());
            op[r] = reinterpret_cast<char*>(out[r].data());
          }
          AlgoCall call{coll, count, sizeof(int32_t), root, false};
          const auto errors = clique.launch(Algo::kRing, {call}, chorusInt32, ReduceSpec(), ip, op, threads);
          for (int r = 0; r < n; ++r) {
            INFO("collective " << static_cast<int>(coll) << " rank " << r << " root " << root);
            REQUIRE(errors[r].status == 0);
            for (size_t i = 0; i < outCount; ++i) {
              int32_t want = 0;
              if (gathers) {
                want = valueOf<int32_t>(static_cast<int>(i / count) + launchNo, i % count);
              } else if (coll == CollType::kBroadcast) {
                want = valueOf<int32_t>(root + launchNo, i);
              } else if (coll == CollType::kReduce && r != root) {
                want = -99;
              } else {
                const size_t at = scatters ? r * count + i : i;
                for (int q = 0; q < n; ++q) want += valueOf<int32_t>(q + launchNo, at);
              }
              REQUIRE(out[r][i] == want);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("device lanes on host threads: several all-reduces in a row, and an average", "[device_lane]") {
  const int n = 3;
  Clique clique(n, 2, 256, 2);
  const size_t count = 2000;
  // The launch's two calls share a buffer pair: the second all-reduces the first's result in place.
  std::vector<std::vector<int32_t>> buf(n, std::vector<int32_t>(count));
  std::vector<const char*> ip(n);
  std::vector<char*> op(n);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) buf[r][i] = valueOf<int32_t>(r, i) * 6;
    ip[r] = reinterpret_cast<const char*>(buf[r].data());
    op[r] = reinterpret_cast<char*>(buf[r].data());
  }
  ReduceSpec avg;
  avg.hasPostDiv = true;
  avg.divisor = n;
  AlgoCall call{CollType::kAllReduce, count, sizeof(int32_t), 0, true};
  const auto errors = clique.launch(Algo::kRing, {call, call}, chorusInt32, avg, ip, op, 3);
  // The second reads what the first writes, from other channels too: two launches.
  CHECK(clique.lastLaunches() == 2);
  for (int r = 0; r < n; ++r) {
    REQUIRE(errors[r].status == 0);
    for (size_t i = 0; i < count; ++i) {
      int32_t first = 0;
      for (int q = 0; q < n; ++q) first += valueOf<int32_t>(q, i) * 6;
      first /= n;
      REQUIRE(buf[r][i] == first);  // the average of n equal values is the value
    }
  }
}

// The tuner gives each call its own channel count (fewer for small messages): calls over 1, 4, 2
// and 3 of a clique's 4 channels, one after another on the same FIFOs and device state, each
// channel's positions and sequence numbers carrying over only where a call ran on it.
TEST_CASE("device lanes on host threads: calls of different channel counts in a row share the channels",
          "[device_lane]") {
  const int n = 3;
  Clique clique(n, 4, 256, 2);
  const size_t count = 3001;
  std::vector<std::vector<int32_t>> in(n, std::vector<int32_t>(count));
  std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(count));
  std::vector<const char*> ip(n);
  std::vector<char*> op(n);
  int round = 0;
  for (ProtoKind proto : {ProtoKind::kSimple, ProtoKind::kLL, ProtoKind::kLL128}) {
    clique.setProto(proto);
    for (int nch : {1, 4, 2, 3, 1}) {
      INFO("channels " << nch << " protocol " << protoName(proto));
      clique.setChannels(nch);
      ++round;
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < count; ++i) in[r][i] = valueOf<int32_t>(r + round, i);
        out[r].assign(count, -99);
        ip[r] = reinterpret_cast<const char*>(in[r].data());
        op[r] = reinterpret_cast<char*>(out[r].data());
      }
      AlgoCall call{CollType::kAllReduce, count, sizeof(int32_t), 0, false};
      const auto errors = clique.launch(Algo::kRing, {call}, chorusInt32, ReduceSpec(), ip, op, 3);
      for (int r = 0; r < n; ++r) {
        REQUIRE(errors[r].status == 0);
        for (size_t i = 0; i < count; ++i) {
          int32_t want = 0;
          for (int q = 0; q < n; ++q) want += valueOf<int32_t>(q + round, i);
          REQUIRE(out[r][i] == want);
        }
      }
    }
  }
}

// ncclScalarDevice: the scalar lives in device memory and the kernel reads it when it runs
// (ReduceSpec::scalePtr), so the stream's earlier work may write it; the spec's own scale is unused.
TEST_CASE("device lanes on host threads: a pre-multiplied sum reads its scalar when it runs", "[device_lane]") {
  const int n = 3;
  Clique clique(n, 2, 256, 2);
  const size_t count = 1500;
  std::vector<std::vector<float>> f(n, std::vector<float>(count));
  std::vector<std::vector<int64_t>> w(n, std::vector<int64_t>(count));
  std::vector<const char*> fin(n), win(n);
  std::vector<char*> fout(n), wout(n);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) {
      f[r][i] = float(valueOf<int32_t>(r, i));
      w[r][i] = valueOf<int32_t>(r, i);
    }
    fin[r] = reinterpret_cast<const char*>(f[r].data());
    fout[r] = reinterpret_cast<char*>(f[r].data());
    win[r] = reinterpret_cast<const char*>(w[r].data());
    wout[r] = reinterpret_cast<char*>(w[r].data());
  }
  const float fScale = 3.0f;
  const int64_t wScale = -2;
  ReduceSpec spec;
  spec.hasPre = true;
  spec.scaleF = 100.0;  // not what runs: the scalar at scalePtr does
  spec.scaleI = 100;
  spec.scalePtr = &fScale;
  AlgoCall fcall{CollType::kAllReduce, count, sizeof(float), 0, true};
  auto errors = clique.launch(Algo::kRing, {fcall}, chorusFloat32, spec, fin, fout, 2);
  spec.scalePtr = &wScale;
  AlgoCall wcall{CollType::kAllReduce, count, sizeof(int64_t), 0, true};
  auto werrors = clique.launch(Algo::kRing, {wcall}, chorusInt64, spec, win, wout, 2);
  for (int r = 0; r < n; ++r) {
    REQUIRE(errors[r].status == 0);
    REQUIRE(werrors[r].status == 0);
    size_t bad = 0;
    for (size_t i = 0; i < count; ++i) {
      int64_t sum = 0;
      for (int q = 0; q < n; ++q) sum += valueOf<int32_t>(q, i);
      bad += f[r][i] != float(3 * sum);
      bad += w[r][i] != -2 * sum;
    }
    CHECK(bad == 0);
  }
}

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
    if (byAbort) {
      aborter = std::thread([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        std::atomic_ref<uint32_t>(abortWord).store(1, std::memory_order_release);
      });
    }
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

TEST_CASE("device lanes on host threads: a group past one launch's lanes runs as several launches", "[device_lane]") {
  const int n = 3;
  Clique clique(n, 1, 256, 2);
  // 170 all-reduces of 8 elements each, on disjoint parts of one buffer: one lane each on the one
  // channel, more than a launch holds.
  const size_t calls = 170;
  const size_t count = 8;
  std::vector<std::vector<int32_t>> in(n, std::vector<int32_t>(calls * count));
  std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(calls * count, -99));
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < calls * count; ++i) in[r][i] = valueOf<int32_t>(r, i);
  }
  // Call c reads and writes elements [c * count, (c + 1) * count): no call waits for another.
  clique.setCallStride(count * sizeof(int32_t));
  std::vector<DeviceError> errors;
  {
    std::vector<const char*> ip(n);
    std::vector<char*> op(n);
    for (int r = 0; r < n; ++r) {
      ip[r] = reinterpret_cast<const char*>(in[r].data());
      op[r] = reinterpret_cast<char*>(out[r].data());
    }
    std::vector<AlgoCall> list(calls, AlgoCall{CollType::kAllReduce, count, sizeof(int32_t), 0, false});
    errors = clique.launch(Algo::kRing, list, chorusInt32, ReduceSpec(), ip, op, 2);
  }
  CHECK(clique.lastLaunches() == (calls + kMaxLaunchLanes - 1) / kMaxLaunchLanes);
  for (int r = 0; r < n; ++r) {
    REQUIRE(errors[r].status == 0);
    for (size_t i = 0; i < calls * count; ++i) {
      int32_t want = 0;
      for (int q = 0; q < n; ++q) want += valueOf<int32_t>(q, i);
      REQUIRE(out[r][i] == want);
    }
  }
}

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
  runBlock<HostBlock, false>(b, p);
  CHECK(error.status == static_cast<uint32_t>(DeviceFault::kRefused));
  CHECK(error.lane == 0);
  CHECK(state.collSeq[0] == 0);
}

// A DDP iteration's all-reduces as the flight recorder of a run on one H200 listed them (2 ranks,
// threads of one process sharing the GPU; device channel limit 32, 512 KiB device slots, chorusAvg
// on float32 and float64): a direct one (Simple, one block), six LL rings over 14 to 31 channels
// (the tuner's one channel per 4 KiB), and the direct one again; there the fifth call stalled in
// the third iteration. Replayed here over 32 channels of 512 KiB slots (8 per FIFO, the default),
// each call its own launch with fresh inputs, in place as DDP's buckets, the average as
// RedOpTable::spec gives it for floats (each input times 1/n, then the sum), every element checked
// against the same sum in the same type (multiples of 1/8 halved: exact); then the list shuffled
// each iteration, and then with channel counts drawn anew for every call; 4 iterations each.
TEST_CASE("device lanes on host threads: a DDP iteration's all-reduces (direct and LL rings of many channel counts)",
          "[device_lane]") {
  const int n = 2;
  struct Call {
    Algo algo;
    ProtoKind proto;
    int channels;
    size_t count;
    bool f64;
  };
  const std::vector<Call> iteration = {
      {Algo::kDirect, ProtoKind::kSimple, 1, 5940, false}, {Algo::kRing, ProtoKind::kLL, 14, 15287, false},
      {Algo::kRing, ProtoKind::kLL, 31, 32572, false},     {Algo::kRing, ProtoKind::kLL, 26, 26882, false},
      {Algo::kRing, ProtoKind::kLL, 29, 15348, true},      {Algo::kRing, ProtoKind::kLL, 25, 25833, false},
      {Algo::kRing, ProtoKind::kLL, 17, 17625, false},     {Algo::kDirect, ProtoKind::kSimple, 1, 5940, false},
  };
  ReduceSpec avg;
  avg.hasPre = true;
  avg.scaleF = 1.0 / n;
  auto value = [](int r, int it, size_t ci, size_t i) {
    return double(static_cast<int>((i * 7 + static_cast<size_t>(r) * 13 + static_cast<size_t>(it) * 5 + ci * 3) % 23) -
                  11) /
           8;
  };
  uint64_t rng = 12345;
  auto draw = [&rng](uint64_t below) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (rng >> 33) % below;
  };
  for (int mode : {0, 1, 2}) {  // as listed; shuffled; shuffled with channel counts drawn anew
    for (unsigned threads : {1u, 4u}) {
      Clique clique(n, 32, 512 * 1024, 8);
      std::vector<size_t> order(iteration.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      for (int it = 0; it < 4; ++it) {
        if (mode > 0) {
          for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[draw(i)]);
        }
        for (size_t k = 0; k < order.size(); ++k) {
          const size_t ci = order[k];
          Call c = iteration[ci];
          if (mode == 2 && c.algo == Algo::kRing) c.channels = 1 + static_cast<int>(draw(32));
          INFO("mode " << mode << " threads " << threads << " iteration " << it << " call " << k << " (listed " << ci
                       << ") " << algoName(c.algo) << " " << protoName(c.proto) << " channels " << c.channels
                       << " count " << c.count << (c.f64 ? " f64" : " f32"));
          clique.setProto(c.proto);
          clique.setChannels(c.channels);
          auto check = [&](auto zero) {
            using T = decltype(zero);
            std::vector<std::vector<T>> buf(n, std::vector<T>(c.count));
            std::vector<const char*> ip(n);
            std::vector<char*> op(n);
            for (int r = 0; r < n; ++r) {
              for (size_t i = 0; i < c.count; ++i) buf[r][i] = T(value(r, it, ci, i));
              ip[r] = reinterpret_cast<const char*>(buf[r].data());
              op[r] = reinterpret_cast<char*>(buf[r].data());
            }
            const AlgoCall call{CollType::kAllReduce, c.count, sizeof(T), 0, true};
            const auto errors = clique.launch(c.algo, {call}, kTypeOf<T>, avg, ip, op, threads, {}, 5'000'000'000ull);
            for (int r = 0; r < n; ++r) {
              const DeviceError& e = errors[r];
              INFO("rank " << r << " error " << e.status << " block " << e.block << " lane " << e.lane << " step "
                           << e.step << " peer " << e.peer << " waiting " << e.waiting << " channel " << e.seqIndex
                           << " seq " << e.seq);
              REQUIRE(e.status == 0);
            }
            for (int r = 0; r < n; ++r) {
              for (size_t i = 0; i < c.count; ++i) {
                T want = T(0);
                for (int q = 0; q < n; ++q) want = T(want + T(T(value(q, it, ci, i)) * T(avg.scaleF)));
                if (buf[r][i] != want) {
                  INFO("rank " << r << " element " << i);
                  REQUIRE(buf[r][i] == want);
                }
              }
            }
          };
          if (c.f64) {
            check(double(0));
          } else {
            check(float(0));
          }
        }
      }
    }
  }
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
