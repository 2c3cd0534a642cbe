// Turning a communicator's recorded ops into a plan, for both memory kinds (planCalls): what
// each collective runs and the transfers of each point-to-point op, numbered on the path's
// counters; what a launch would refuse (checkOps), CHORUS_CHECK's comparison across ranks, and the
// tuner's estimate of a call. Each path lowers the plan (HostPath::plan, DevicePath::plan); the
// connections both need are made in comm_connect.cc.
#include <algorithm>
#include <cstring>

#include "src/common/os.h"
#include "src/core/call_plan.h"
#include "src/core/comm.h"

namespace chorus {

void expandP2p(const OpInfo& op, int rank, int nranks, std::vector<P2pPart>* out) {
  const size_t bytes = op.count * typeSize(op.type);
  const auto* sb = static_cast<const char*>(op.sendbuff);
  auto* rb = static_cast<char*>(op.recvbuff);
  switch (op.coll) {
    case CollType::kSend:
      out->push_back({true, op.root, sb, nullptr, bytes});
      break;
    case CollType::kRecv:
      out->push_back({false, op.root, nullptr, rb, bytes});
      break;
    case CollType::kAlltoAll:
      for (int p = 0; p < nranks; ++p) {
        out->push_back({true, p, sb + bytes * p, nullptr, bytes});
        out->push_back({false, p, nullptr, rb + bytes * p, bytes});
      }
      break;
    case CollType::kGather:
      out->push_back({true, op.root, sb, nullptr, bytes});
      if (rank == op.root) {
        for (int p = 0; p < nranks; ++p) out->push_back({false, p, nullptr, rb + bytes * p, bytes});
      }
      break;
    case CollType::kScatter:
      if (rank == op.root) {
        for (int p = 0; p < nranks; ++p) out->push_back({true, p, sb + bytes * p, nullptr, bytes});
      }
      out->push_back({false, op.root, nullptr, rb, bytes});
      break;
    default:
      break;
  }
}

AlgoContext Communicator::algoContext() const {
  AlgoContext ctx;
  ctx.rank = rank_;
  ctx.nranks = nranks_;
  ctx.nChannels = config_.nChannels;
  ctx.rings = &rings_;
  ctx.ringPos = &ringPos_;
  ctx.treeParent[0] = &trees_.parent[0];
  ctx.treeParent[1] = &trees_.parent[1];
  ctx.slotBytes = config_.slotBytes;
  ctx.peerSlotBytes = config_.peerSlots();
  ctx.slots = config_.slots;
  return ctx;
}

Status Communicator::checkOps(const std::vector<OpInfo>& ops) const {
  std::vector<P2pPart> parts;
  std::vector<size_t> sendBytes;
  std::vector<size_t> recvBytes;
  for (const auto& op : ops) {
    if (runsOnChannels(op.coll)) continue;
    parts.clear();
    expandP2p(op, rank_, nranks_, &parts);
    for (const auto& p : parts) {
      if (p.peer == rank_) (p.send ? sendBytes : recvBytes).push_back(p.bytes);
    }
  }
  // A send to self meets the receive from self issued in the same order.
  if (sendBytes.size() != recvBytes.size()) {
    return invalidUsage("rank " + std::to_string(rank_) + " issued " + std::to_string(sendBytes.size()) +
                        " sends to itself but " + std::to_string(recvBytes.size()) +
                        " receives from itself in one group; they must pair up");
  }
  for (size_t i = 0; i < sendBytes.size(); ++i) {
    if (sendBytes[i] != recvBytes[i]) {
      return invalidUsage("a send to self of " + std::to_string(sendBytes[i]) + " bytes meets a receive from self of " +
                          std::to_string(recvBytes[i]) + " bytes");
    }
  }
  return Status::ok();
}

namespace {

// One collective as CHORUS_CHECK compares it across ranks.
struct CheckRecord {
  uint64_t index;  // which collective of the communicator (counted by the check)
  uint64_t count;
  int32_t coll;
  int32_t type;
  int32_t op;    // -1: no reduction; chorusNumOps: any custom operator (handles are per rank)
  int32_t root;  // -1: no root
};

CheckRecord checkRecordOf(const OpInfo& op, uint64_t index) {
  CheckRecord r{};
  r.index = index;
  r.count = op.count;
  r.coll = static_cast<int32_t>(op.coll);
  r.type = op.type;
  r.op = !reduces(op.coll)      ? -1
         : op.op < chorusNumOps ? static_cast<int32_t>(op.op)
                                : static_cast<int32_t>(chorusNumOps);
  const bool rooted = op.coll == CollType::kBroadcast || op.coll == CollType::kReduce || op.coll == CollType::kGather ||
                      op.coll == CollType::kScatter;
  r.root = rooted ? op.root : -1;
  return r;
}

bool sameCall(const CheckRecord& a, const CheckRecord& b) {
  return a.index == b.index && a.count == b.count && a.coll == b.coll && a.type == b.type && a.op == b.op &&
         a.root == b.root;
}

std::string describeCall(const CheckRecord& r) {
  static const char* const kOps[] = {"sum", "prod", "max", "min", "avg", "a custom operator"};
  std::string s = std::string(collName(static_cast<CollType>(r.coll))) + " (count " + std::to_string(r.count) + ", " +
                  typeName(static_cast<chorusDataType_t>(r.type));
  if (r.op >= 0) s += std::string(", op ") + kOps[r.op];
  if (r.root >= 0) s += ", root " + std::to_string(r.root);
  return s + ")";
}

}  // namespace

Status Communicator::checkAgreement(const std::vector<OpInfo>& ops) {
  for (const OpInfo& op : ops) {
    if (op.coll == CollType::kSend || op.coll == CollType::kRecv) continue;
    std::vector<CheckRecord> all(nranks_);
    all[rank_] = checkRecordOf(op, ++seq_.check);
    CHORUS_TRY(bootstrap_->allGather(all.data(), sizeof(CheckRecord)));
    // Every rank sees the same table and reaches the same verdict: who differs from rank 0.
    std::vector<int> differ;
    for (int r = 1; r < nranks_; ++r) {
      if (!sameCall(all[r], all[0])) differ.push_back(r);
    }
    if (differ.empty()) continue;
    std::string others;
    for (size_t i = 0; i < differ.size() && i < 8; ++i) {
      const int r = differ[i];
      others +=
          (i ? "; rank " : "rank ") + std::to_string(r) + " called " +
          (all[r].index != all[0].index ? "its collective #" + std::to_string(all[r].index) + ", " : std::string()) +
          describeCall(all[r]);
    }
    if (differ.size() > 8) others += "; and " + std::to_string(differ.size() - 8) + " more ranks";
    return invalidUsage("CHORUS_CHECK: collective #" + std::to_string(all[0].index) +
                        " of this communicator differs between ranks: rank 0 called " + describeCall(all[0]) + " but " +
                        others + ". Every rank must issue the same collectives, in the same order, " +
                        "with the same count, type, operator and root");
  }
  return Status::ok();
}

Result<CallPlan> Communicator::planCalls(const std::vector<OpInfo>& ops, MemKind mem,
                                         const std::vector<const device::OneCopyArgs*>& oneCopy) {
  const bool device = mem == MemKind::kDevice;
  CallPlan cp;
  cp.mem = mem;
  cp.ops.reserve(ops.size());
  // Numbered per communicator (collectives) and per peer and direction (point-to-point), on the
  // counters of the memory kind's path: kernels number their slots by counters of their own.
  OpCounters& counters = device ? device_.counters() : host_.counters();
  std::atomic<uint64_t>& collSeq = counters.coll;
  std::vector<uint64_t>& sendSeq = counters.p2pSend;
  std::vector<uint64_t>& recvSeq = counters.p2pRecv;
  std::vector<P2pPart> selfSends;
  std::vector<P2pPart> selfRecvs;
  std::vector<P2pPart> parts;
  for (size_t oi = 0; oi < ops.size(); ++oi) {
    const OpInfo& op = ops[oi];
    PlannedOp po;
    po.op = &op;
    if (!runsOnChannels(op.coll)) {
      po.label = "p2p";
      parts.clear();
      expandP2p(op, rank_, nranks_, &parts);
      for (const P2pPart& p : parts) {
        if (p.peer == rank_) {
          (p.send ? selfSends : selfRecvs).push_back(p);
          continue;
        }
        PlannedTransfer t;
        t.part = p;
        t.seq = ++(p.send ? sendSeq : recvSeq)[p.peer];
        if (!po.seq) po.seq = t.seq;
        if (device) {
          // A send and the receive that matches it move the same bytes, so both ends choose
          // alike (protocol and channels); a receive of another size may choose otherwise, and
          // still fails the header check of its first part (src/device/lane_protocols.h).
          t.proto = tuner_.p2pProto(p.bytes);
          t.channels = tuner_.p2pChannels(p.bytes);
          const char* l = protoName(t.proto);
          po.proto = !*po.proto || std::strcmp(po.proto, l) == 0 ? l : "Simple and LL";
        }
        po.transfers.push_back(t);
      }
      cp.ops.push_back(std::move(po));
      continue;
    }
    po.collective = true;
    po.seq = collSeq.fetch_add(1, std::memory_order_relaxed) + 1;
    const AlgoCall call{op.coll, op.count, typeSize(op.type), op.root, op.sendbuff == op.recvbuff};
    if (device && nranks_ == 1) {
      po.lanes = device_.planOneRank(op);
      // Lanes that copy as they are run as cudaMemcpyAsync (DeviceComm::enqueue, plainCopies).
      po.label = po.lanes.empty() || DevicePath::oneRankScales(op) ? "one-rank" : kOneRankCopyLabel;
    } else if (device) {
      const bool agreed = oi < oneCopy.size() && oneCopy[oi];
      const Tuner::Choice choice = device_.choice(op);
      po.algo = agreed ? Algo::kOneCopy : choice.algo;
      po.label = algoName(po.algo);
      if (!agreed) {  // one-copy's blocks have no protocol
        po.lanesProto = choice.proto;
        po.proto = protoName(choice.proto);
      }
      algorithm(po.algo).plan(device_.context(op, choice.proto), call, &po.lanes);
    } else {
      const Tuner::Choice choice = choose(op);
      po.algo = host_.algoFor(op, choice);
      po.label = algoName(po.algo);
      po.chosenAlone = po.algo == Algo::kSlice && choice.sliceIfRegistered;
      AlgoCall alone = call;
      alone.chosenAlone = po.chosenAlone;
      algorithm(po.algo).plan(algoContext(), alone, &po.lanes);
    }
    for (const LanePlan& lp : po.lanes) {
      if (device && lp.channel >= device::DeviceCommState::kMaxChannels) {
        return internalError("a device lane on channel " + std::to_string(lp.channel) + ": kernels keep " +
                             std::to_string(device::DeviceCommState::kMaxChannels) + " channels");
      }
    }
    if (log_.enabled(LogLevel::kInfo, kSubsysColl)) {
      if (!device) {
        log_.info(kSubsysColl, "{} opCount {} count {} datatype {} algo {}", collName(op.coll), po.seq, op.count,
                  typeName(op.type), po.chosenAlone ? "slice (buffers registered)" : po.label);
      } else {
        log_.info(kSubsysColl, "{} opCount {} count {} datatype {} algo {}{}{} lanes {} (device, GPU {})",
                  collName(op.coll), po.seq, op.count, typeName(op.type), po.label, *po.proto ? " proto " : "",
                  po.proto, po.lanes.size(), device_.cudaDevice());
      }
    }
    cp.ops.push_back(std::move(po));
  }
  // checkOps() made sure sends and receives to self pair up: each pair is one copy.
  CHORUS_CHECK(selfSends.size() == selfRecvs.size());
  for (size_t i = 0; i < selfSends.size(); ++i) {
    CHORUS_CHECK(selfSends[i].bytes == selfRecvs[i].bytes);
    P2pPart copy = selfSends[i];
    copy.dst = selfRecvs[i].dst;
    cp.selfCopies.push_back(copy);
  }
  return cp;
}

double Communicator::estimateUs(const OpInfo& op) const {
  const AllReduceModel& m = tuner_.model();
  if (nranks_ < 2 || m.bwGBs <= 0) return 0;
  const double n = nranks_;
  const double bytes = static_cast<double>(op.count * typeSize(op.type));
  const double perByteUs = 1.0 / (m.bwGBs * 1e3);
  const double hopUs = m.ringLatencyUs / (2.0 * (n - 1));  // one hop of the ring
  if (runsOnChannels(op.coll)) {
    // The tuner's own estimate of its choice (a forced algorithm past its means: the ring's).
    const double us =
        tuner_.estimateUs(op.coll, op.count * typeSize(op.type), op.device ? MemKind::kDevice : MemKind::kHost);
    if (us != kNever) return us;
    return ringAllReduceUs(m, bytes);
  }
  switch (op.coll) {
    case CollType::kAlltoAll:
    case CollType::kGather:
    case CollType::kScatter:
      return hopUs + (n - 1) * bytes * perByteUs;
    default:  // a send or a receive
      return hopUs + bytes * perByteUs;
  }
}

}  // namespace chorus
