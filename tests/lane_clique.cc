// The clique's wiring and launches (tests/lane_clique.h).
#include "tests/lane_clique.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "transports/registry.h"

namespace chorus::device::lanetest {

Clique::Clique(int n, int nch, uint32_t slotBytes, uint32_t slots, Wiring wiring, int p2pChannels)
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

std::vector<DeviceError> Clique::launch(Algo algo, const std::vector<AlgoCall>& calls, int type, const ReduceSpec& spec,
                                        const std::vector<const char*>& in, const std::vector<char*>& out,
                                        unsigned threads, const std::vector<bool>& runs, uint64_t timeoutNs,
                                        uint32_t* abortWord) {
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

std::vector<DeviceError> Clique::exchange(const std::vector<std::vector<std::vector<size_t>>>& sends,
                                          const std::vector<std::vector<const char*>>& src,
                                          const std::vector<std::vector<char*>>& dst, unsigned threads,
                                          const P2pOptions& o) {
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
        packer.addP2pRound(lanesOf(to, true, ch), 2 * n_ * ch + to, lanesOf(from, false, ch), 2 * n_ * ch + n_ + from);
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

void Clique::connectVia(int to, int from, uint64_t tag, uint32_t slots, uint32_t slotBytes, DeviceConnector* recv,
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

}  // namespace chorus::device::lanetest
