// Connections a communicator's calls need, and making them: which connections a set of ops still
// lacks (each algorithm's, and point-to-point per peer and channel), and the three phases
// (receivers set up and send their handles, senders attach, receivers finish) run over the needs
// of several communicators together, every receiver's setup before any sender waits. A device
// connection's transport is chosen before them (DevicePath::exchangeInfo).
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

#include "src/common/os.h"
#include "src/core/call_plan.h"
#include "src/core/comm.h"
#include "src/core/onecopy.h"

namespace chorus {

std::vector<Communicator::ConnNeed> Communicator::connectionsNeeded(const std::vector<OpInfo>& ops) const {
  // Connections follow what every rank knows alike (the tuner's choice), never one rank's
  // registrations: where a rank may run the slice all-reduce on its own, every rank connects for
  // both it and the ring.
  const bool device = !ops.empty() && ops.front().device;
  uint32_t algos = 0;  // a bit per registered algorithm
  bool p2p = false;
  int deviceChannels = 1;  // the most a device collective of these ops runs (a launch connects those)
  for (const auto& op : ops) {
    if (!runsOnChannels(op.coll)) {
      p2p = true;
      continue;
    }
    if (nranks_ < 2) continue;
    if (device) {
      const Tuner::Choice c = device_.choice(op);
      algos |= c.connections();
      deviceChannels = std::max(deviceChannels, device_.context(op, c.proto).nChannels);
      continue;
    }
    algos |= host_.choice(op).connections();
  }
  // Point-to-point peers; only looked at (and allocated) when there are such ops. On device
  // memory every channel a transfer may take (Tuner::p2pChannelMax), whatever this one's size:
  // both ends ask for the same connections even where their sizes differ (the program's error,
  // which the kernels then report).
  std::vector<char> withPeer(p2p ? nranks_ : 0, 0);
  const int p2pChannels = device ? tuner_.p2pChannelMax() : 1;
  for (const auto& op : ops) {
    if (runsOnChannels(op.coll)) continue;
    std::vector<P2pPart> parts;
    expandP2p(op, rank_, nranks_, &parts);
    // Both directions with a peer, always: a send and a receive between two ranks issued as
    // separate calls (one stream, each rank sending first) then connect in one exchange, where
    // one direction each would have both ranks wait in phase 2 for the other's phase 1.
    for (const auto& p : parts) {
      if (p.peer != rank_) withPeer[p.peer] = 1;
    }
  }
  std::vector<ConnNeed> needs;
  std::set<std::tuple<ConnFamily, int, bool>> seen;  // two algorithms may want one connection
  const DeviceComm* dev = device ? device_.deviceComm() : nullptr;
  auto has = [&](const ConnKey& k) { return dev ? dev->has(k.family, k.index, k.send) : host_.has(k); };
  auto want = [&](ConnKey k) {
    k.device = device;
    if (!has(k) && seen.emplace(k.family, k.index, k.send).second) needs.push_back(k);
  };
  // An algorithm whose connections all exist needs no look again: connections are only added
  // while the communicator lives, so a launch after the first asks nothing of the registry.
  std::atomic<uint32_t>& connected = device ? device_.connectedAlgos() : host_.connectedAlgos();
  const uint32_t todo = algos & ~connected.load(std::memory_order_relaxed);
  if (todo) {
    // Device collectives connect the channels they run, up to the most the tuner gives any size
    // (DevicePath::channels); an algorithm counts as connected once it has those.
    const AlgoContext all = device ? device_.context(device_.channels(), ProtoKind::kSimple) : algoContext();
    const AlgoContext now = device ? device_.context(deviceChannels, ProtoKind::kSimple) : all;
    std::vector<ConnKey> keys;
    for (int a = 0; a < algorithmCount(); ++a) {
      if (!(todo & algoBit(static_cast<Algo>(a)))) continue;
      const Algorithm& algo = algorithm(static_cast<Algo>(a));
      keys.clear();
      algo.connections(now, &keys);
      for (const ConnKey& k : keys) want(k);
      if (now.nChannels != all.nChannels) {
        keys.clear();
        algo.connections(all, &keys);
      }
      if (std::all_of(keys.begin(), keys.end(), has)) {
        connected.fetch_or(algoBit(static_cast<Algo>(a)), std::memory_order_relaxed);
      }
    }
  }
  // A peer whose point-to-point connections all exist needs no look again (as for algorithms):
  // on device memory that is 2 x p2pChannelMax lookups per peer and call saved.
  const uint8_t p2pBit = device ? 2 : 1;
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_ || !p2p || !withPeer[p]) continue;
    if (p2pConnected_[static_cast<size_t>(p)].load(std::memory_order_relaxed) & p2pBit) continue;
    bool all = true;
    for (int ch = 0; ch < p2pChannels; ++ch) {
      for (bool send : {true, false}) {
        const ConnKey k{ConnFamily::kP2p, p2pIndex(p, ch), p, send};
        all = all && has(k);
        want(k);
      }
    }
    if (all) p2pConnected_[static_cast<size_t>(p)].fetch_or(p2pBit, std::memory_order_relaxed);
  }
  return needs;
}

Status Communicator::connect(std::vector<std::pair<Communicator*, std::vector<ConnNeed>>>& work) {
  struct PendingRecv {
    Communicator* comm;
    ConnNeed need;
    Connection* conn;
  };
  std::vector<PendingRecv> pending;
  // Per-peer connections (point-to-point, direct) get smaller slots than rings: a communicator
  // that talks to every peer holds n-1 of them each way.
  auto ctxFor = [](Communicator* c, const ConnNeed& need) {
    ConnectContext ctx;
    ctx.oob = c->bootstrap_.get();
    ctx.nslots = static_cast<uint32_t>(c->config_.slots);
    // Device FIFOs have their own ring slot (CHORUS_DEVICE_SLOT_BYTES: a kernel's step).
    const Config& cf = c->config_;
    const bool ring = need.family == ConnFamily::kRing;
    ctx.slotBytes = static_cast<uint32_t>(need.device ? (ring ? cf.deviceSlotBytes : cf.devicePeerSlots())
                                                      : (ring ? cf.slotBytes : cf.peerSlots()));
    ctx.forKernels = need.device;
    ctx.cudaDevice = need.device ? c->device_.cudaDevice() : -1;
    return ctx;
  };
  auto transportOf = [](Communicator* c, const ConnNeed& n) -> Transport& {
    return n.device ? *c->device_.transport(n.peer) : *c->peerTransport_[n.peer];
  };
  CHORUS_TRY(DevicePath::exchangeInfo(work));
  auto tagOf = [](const ConnNeed& n) { return makeTag(TagSpace::kConnect, connTag(n.family, n.index, n.device)); };
  // Device connections are kept apart: host code never closes or reads their FIFOs.
  auto keep = [](Communicator* c, const ConnNeed& n, std::unique_ptr<Connection> conn) {
    if (n.device) return c->device_.keep(std::move(conn));
    c->host_.keep(std::move(conn));
  };
  // Phase 1: every receiver prepares its FIFO and tells the sender how to reach it.
  for (auto& [c, needs] : work) {
    for (const auto& n : needs) {
      if (n.send) continue;
      ConnectContext ctx = ctxFor(c, n);
      Transport& t = transportOf(c, n);
      std::vector<char> handle;
      CHORUS_ASSIGN_OR_RETURN(auto conn, t.setupRecv(ctx, n.peer, tagOf(n), &handle));
      CHORUS_TRY(c->bootstrap_->send(n.peer, tagOf(n), handle.data(), handle.size()));
      pending.push_back({c, n, conn.get()});
      keep(c, n, std::move(conn));
    }
  }
  // Phase 2: every sender attaches to the FIFO it was told about.
  for (auto& [c, needs] : work) {
    for (const auto& n : needs) {
      if (!n.send) continue;
      ConnectContext ctx = ctxFor(c, n);
      Transport& t = transportOf(c, n);
      CHORUS_ASSIGN_OR_RETURN(std::vector<char> handle, c->bootstrap_->recv(n.peer, tagOf(n)));
      CHORUS_ASSIGN_OR_RETURN(auto conn, t.connectSend(ctx, n.peer, tagOf(n), handle));
      if (n.device) {
        // Kept first: a proxy may serve its FIFO already, and must not outlive it if this fails.
        const Connection& kept = *conn;
        keep(c, n, std::move(conn));
        CHORUS_TRY(c->device_.addEnd(n, kept, t.name()));
        continue;
      }
      c->host_.addSend(n, *conn, t.name());
      keep(c, n, std::move(conn));
    }
  }
  // Phase 3: receivers finish (the net transport accepts the sender's connection).
  for (auto& p : pending) {
    Communicator* c = p.comm;
    ConnectContext ctx = ctxFor(c, p.need);
    Transport& t = transportOf(c, p.need);
    CHORUS_TRY(t.finishRecv(ctx, *p.conn, p.need.peer, tagOf(p.need)));
    if (p.need.device) {
      CHORUS_TRY(c->device_.addEnd(p.need, *p.conn, t.name()));
      continue;
    }
    c->host_.addRecv(p.need, *p.conn);
  }
  return Status::ok();
}

}  // namespace chorus
