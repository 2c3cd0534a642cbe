// The device path's planning (device_path.h): its choices for the one planner (planCalls, shared
// with the host path), the plan lowered into kernel launches, the lanes of a one-rank
// communicator, and the context device lanes are planned in.
#include <algorithm>
#include <cstring>

#include "src/core/call_plan.h"
#include "src/core/comm.h"
#include "src/core/device_path.h"
#include "src/device/launch_pack.h"

namespace chorus {

static_assert(kMaxDeviceChannels == device::DeviceCommState::kMaxChannels, "the tuner's channels are the kernels'");

bool DevicePath::oneRankScales(const OpInfo& op) { return reduces(op.coll) && (op.spec.hasPre || op.spec.scalePtr); }

namespace {

// What the device path decides for planCalls: the algorithm (one-copy where the ranks' records
// agreed), protocol and channels the tuner chose, one-rank lanes, a transfer's protocol.
class DeviceChoices final : public PathChoices {
 public:
  DeviceChoices(DevicePath& path, const std::vector<const device::OneCopyArgs*>& oneCopy, const Tuner& tuner,
                const Logger& log, int nranks)
      : path_(path), oneCopy_(oneCopy), tuner_(tuner), log_(log), nranks_(nranks) {}

  OpCounters& counters() override { return path_.counters(); }

  Status planCollective(size_t index, PlannedOp* po) override {
    const OpInfo& op = *po->op;
    const AlgoCall call{op.coll, op.count, typeSize(op.type), op.root, op.sendbuff == op.recvbuff, op.blocks.get()};
    if (nranks_ == 1) {
      po->lanes = path_.planOneRank(op);
      // Lanes that copy as they are run as cudaMemcpyAsync (DeviceComm::enqueue, plainCopies).
      po->label = po->lanes.empty() || DevicePath::oneRankScales(op) ? "one-rank" : kOneRankCopyLabel;
    } else {
      const Tuner::Choice choice = path_.choice(op);
      const bool agreed = index < oneCopy_.size() && oneCopy_[index] && choice.ifAgreed;
      po->algo = agreed ? *choice.ifAgreed : choice.algo;
      po->label = algoName(po->algo);
      if (!agreed) {  // one-copy's blocks have no protocol
        po->lanesProto = choice.proto;
        po->proto = protoName(choice.proto);
      }
      algorithm(po->algo).plan(path_.context(op, choice.proto), call, &po->lanes);
    }
    for (const LanePlan& lp : po->lanes) {
      if (lp.channel >= device::DeviceCommState::kMaxChannels) {
        return internalError("a device lane on channel " + std::to_string(lp.channel) + ": kernels keep " +
                             std::to_string(device::DeviceCommState::kMaxChannels) + " channels");
      }
    }
    return Status::ok();
  }

  void planTransfer(PlannedTransfer* t, PlannedOp* po) override {
    // A send and the receive that matches it move the same bytes, so both ends choose alike
    // (protocol and channels); a receive of another size may choose otherwise, and still fails
    // the header check of its first part (src/device/lane_protocols.h).
    t->proto = tuner_.p2pProto(t->part.bytes);
    t->channels = tuner_.p2pChannels(t->part.bytes);
    const char* l = protoName(t->proto);
    po->proto = !*po->proto || std::strcmp(po->proto, l) == 0 ? l : "Simple and LL";
  }

  void logCollective(const PlannedOp& po) const override {
    const OpInfo& op = *po.op;
    log_.info(kSubsysColl, "{} opCount {} count {} datatype {} algo {}{}{} lanes {} (device, GPU {})",
              collName(op.coll), po.seq, op.count, typeName(op.type), po.label, *po.proto ? " proto " : "", po.proto,
              po.lanes.size(), path_.cudaDevice());
  }

 private:
  DevicePath& path_;
  const std::vector<const device::OneCopyArgs*>& oneCopy_;
  const Tuner& tuner_;
  const Logger& log_;
  const int nranks_;
};

}  // namespace

AlgoContext DevicePath::context(int channels, ProtoKind proto) const {
  AlgoContext base = comm_.algoContext();
  base.slotBytes = comm_.config_.deviceSlotBytes;
  base.peerSlotBytes = comm_.config_.devicePeerSlots();
  return device::laneContext(base, channels, proto);
}

AlgoContext DevicePath::context(const OpInfo& op, ProtoKind proto) const {
  return context(comm_.tuner_.deviceChannels(agreedCount(op) * typeSize(op.type), proto), proto);
}

std::vector<LanePlan> DevicePath::planOneRank(const OpInfo& op) const {
  // A rank's own contribution is the result, as NCCL's one-rank path has it: nothing moves in
  // place unless the operator pre-multiplies; otherwise a copy (with the multiplication) split
  // into parts of whole 16-byte vectors, one block (channel) each. Without a multiplication it is
  // one part, enqueued as cudaMemcpyAsync (DeviceComm::enqueue): on an H200, 2 MiB planned in 32
  // parts took 28 us a call where 8 B in one took 14 and a memcpy of 2 MiB 5.5.
  const size_t elem = typeSize(op.type);
  const bool scales = oneRankScales(op);
  // A v-collective's one block lies at its displacement in the buffer of blocks.
  const Collective& c = collective(op.coll);
  const size_t inAt = op.blocks && c.send.perRank ? op.blocks->displs[0] : 0;
  const size_t outAt = op.blocks && c.recv.perRank ? op.blocks->displs[0] : 0;
  const bool moves = op.count > 0 && (op.sendbuff != op.recvbuff || inAt != outAt || scales);
  std::vector<LanePlan> plans;
  if (!moves) return plans;
  const size_t parts = scales ? static_cast<size_t>(channels_) : 1;
  for (Step part : splitLocal(op.count, elem, kOneRankPartBytes, parts)) {
    part.inOff += inAt;
    part.outOff += outAt;
    LanePlan lp;
    lp.steps = {part};
    lp.channel = static_cast<int>(plans.size());
    lp.slotBytes = comm_.config_.deviceSlotBytes;  // as context() gives a ring's lanes
    plans.push_back(std::move(lp));
  }
  return plans;
}

Result<std::vector<device::LaunchParams>> DevicePath::plan(const std::vector<OpInfo>& ops,
                                                           const std::vector<const device::OneCopyArgs*>& oneCopy,
                                                           std::vector<FlightEntry>* flight) {
  using device::DeviceLane;
  using device::SeqKind;
  std::lock_guard<std::mutex> planLock(comm_.planMu_);
  DeviceChoices choices(*this, oneCopy, comm_.tuner_, comm_.log_, comm_.nranks_);
  CHORUS_ASSIGN_OR_RETURN(CallPlan cp, planCalls(ops, comm_.rank_, comm_.nranks_, comm_.log_, choices));
  DeviceComm& dev = *deviceComm();
  const Config& config = comm_.config_;
  const int rank = comm_.rank_;
  const int nranks = comm_.nranks_;
  const Tuner& tuner = comm_.tuner_;
  FlightRecorder* recorder = comm_.diag_.recorder();
  device::LaunchPacker packer(dev.base(comm_.commId_, static_cast<uint64_t>(config.timeoutNs)));
  const auto peerSlotBytes = static_cast<uint32_t>(config.devicePeerSlots());
  auto bytesLane = [&](const P2pPart& p, Prim prim, ProtoKind proto) {
    DeviceLane l;
    l.nsteps = p.bytes ? 1 : 0;
    l.step = Step{prim, 0, 0, p.bytes};
    l.type = chorusUint8;
    l.seqKind = p.send ? SeqKind::kP2pSend : SeqKind::kP2pRecv;
    l.seqIndex = p.peer;
    l.proto = proto;
    l.slotBytes = device::protoSlotDataBytes(proto, peerSlotBytes);
    l.input = p.src;
    l.output = p.dst;
    return l;
  };
  // Point-to-point lanes by queue (a peer, a direction and a channel: index peer * channels +
  // channel), in issue order. A transfer is cut into one part per channel planCalls gave it, each
  // a lane of its queue.
  const int p2pMax = tuner.p2pChannelMax();
  std::vector<std::vector<DeviceLane>> sendQ(static_cast<size_t>(nranks * p2pMax));
  std::vector<std::vector<DeviceLane>> recvQ(static_cast<size_t>(nranks * p2pMax));
  std::vector<DeviceLane> lanes;
  for (size_t oi = 0; oi < cp.ops.size(); ++oi) {
    const PlannedOp& po = cp.ops[oi];
    const OpInfo& op = *po.op;
    // Each op's flight entry, recorded when its launch is enqueued (enqueue).
    if (flight && recorder && recorder->enabled()) {
      FlightEntry e = Diagnostics::entry(op, po.seq, po.label);
      e.proto = po.proto;
      e.blocks = po.collective && po.label != kOneRankCopyLabel ? static_cast<int>(po.lanes.size()) : 0;
      for (const PlannedTransfer& t : po.transfers) e.blocks += t.channels;
      flight->push_back(e);
    }
    if (!po.collective) {
      for (const PlannedTransfer& t : po.transfers) {
        for (int ch = 0; ch < t.channels; ++ch) {
          const device::P2pSlice slice = device::p2pSlice(t.part.bytes, t.channels, ch);
          P2pPart part = t.part;
          part.bytes = slice.bytes;
          if (part.src) part.src += slice.offset;
          if (part.dst) part.dst += slice.offset;
          DeviceLane l = bytesLane(part, part.send ? Prim::kSend : Prim::kRecv, t.proto);
          l.seqIndex = device::p2pSeqIndex(part.peer, ch, nranks);
          const uint16_t conn = dev.connector(ConnFamily::kP2p, p2pIndex(part.peer, ch), part.send);
          (part.send ? l.send : l.recv)[0] = conn;
          (part.send ? sendQ : recvQ)[static_cast<size_t>(part.peer * p2pMax + ch)].push_back(l);
        }
      }
      continue;
    }
    lanes.clear();
    for (const LanePlan& lp : po.lanes) {
      DeviceLane l;
      l.nsteps = static_cast<uint32_t>(lp.steps.size());
      if (lp.steps.size() == 1) {
        l.step = lp.steps[0];
      } else if (!lp.steps.empty()) {
        CHORUS_ASSIGN_OR_RETURN(l.steps, dev.steps(lp.steps));
      }
      l.type = static_cast<uint8_t>(op.type);
      l.seqKind = SeqKind::kColl;
      l.proto = po.lanesProto;
      l.seqIndex = lp.channel;
      l.slotBytes = static_cast<uint32_t>(lp.slotBytes);
      l.input = static_cast<const char*>(op.sendbuff);
      l.output = static_cast<char*>(op.recvbuff);
      l.scratch = lp.scratch ? dev.scratch(lp.channel) : nullptr;
      // A one-copy collective's blocks read and write the buffers its arguments name.
      if (lp.oneCopy) l.oneCopy = oneCopy[oi];
      if (reduces(op.coll)) l.spec = op.spec;
      for (int i = 0; i < kMaxLanePeers; ++i) {
        if (lp.send[i].index >= 0) l.send[i] = dev.connector(lp.send[i].family, lp.send[i].index, true);
        if (lp.recv[i].index >= 0) l.recv[i] = dev.connector(lp.recv[i].family, lp.recv[i].index, false);
      }
      lanes.push_back(l);
    }
    // The spans are this rank's buffers; peers' buffers (one-copy) are theirs to order: their
    // launches wait for this kernel's "done" signal before anything after it.
    const size_t elem = typeSize(op.type);
    const Collective& c = collective(op.coll);
    const size_t blocks = op.blocks ? op.blocks->extent() : op.count * nranks;
    const size_t inBytes = elem * (c.send.perRank ? blocks : op.count);
    const size_t outBytes = elem * (c.recv.perRank ? blocks : op.count);
    const auto* in = static_cast<const char*>(op.sendbuff);
    const auto* out = static_cast<const char*>(op.recvbuff);
    packer.addCollective(lanes, device::Span{in, in ? in + inBytes : nullptr},
                         device::Span{out, out ? out + outBytes : nullptr});
  }
  std::vector<DeviceLane> self;
  for (const P2pPart& copy : cp.selfCopies) self.push_back(bytesLane(copy, Prim::kLocal, tuner.p2pProto(copy.bytes)));
  // By round: the send to rank + d and the receive from rank - d (round 0: the copies to self),
  // channel by channel. Queues are numbered 2 * nranks * channel + peer (sends) and + nranks +
  // peer (receives); the copies to self take rank's, which no send uses.
  packer.addP2pRound(self, rank, {}, 0);
  for (int d = 1; d < nranks; ++d) {
    const int to = (rank + d) % nranks;
    const int from = (rank - d + nranks) % nranks;
    for (int ch = 0; ch < p2pMax; ++ch) {
      packer.addP2pRound(sendQ[static_cast<size_t>(to * p2pMax + ch)], 2 * nranks * ch + to,
                         recvQ[static_cast<size_t>(from * p2pMax + ch)], 2 * nranks * ch + nranks + from);
    }
  }
  return packer.finish();
}

}  // namespace chorus
