// The one planner of both memory kinds (planCalls, src/core/call_plan.h): the transfers of each
// point-to-point op and the numbers of every op, on the path's counters, each collective planned by
// the path's choices; what a launch would refuse (checkOps), CHORUS_CHECK's comparison across
// ranks (Communicator::checkAgreement), the context algorithms plan in, and the tuner's estimate
// of a call. Each path lowers the plan (HostPath::plan, DevicePath::plan); the connections both
// need are made in comm_connect.cc.
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
      // The collectives on channels are planned by their algorithm, never here; a collective
      // that is neither is a bug, not a call with no transfers.
      CHORUS_CHECK(!"expandP2p: a collective with no point-to-point plan");
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

Status checkOps(const std::vector<OpInfo>& ops, int rank, int nranks) {
  std::vector<P2pPart> parts;
  std::vector<size_t> sendBytes;
  std::vector<size_t> recvBytes;
  for (const auto& op : ops) {
    if (runsOnChannels(op.coll)) continue;
    parts.clear();
    expandP2p(op, rank, nranks, &parts);
    for (const auto& p : parts) {
      if (p.peer == rank) (p.send ? sendBytes : recvBytes).push_back(p.bytes);
    }
  }
  // A send to self meets the receive from self issued in the same order.
  if (sendBytes.size() != recvBytes.size()) {
    return invalidUsage("rank " + std::to_string(rank) + " issued " + std::to_string(sendBytes.size()) +
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
  uint64_t count;  // a v-collective's: a hash of every rank's count (BlockLayout::countsHash)
  int32_t coll;
  int32_t type;
  int32_t op;    // -1: no reduction; an index of kOpNames (custom operators: one entry, handles are per rank)
  int32_t root;  // -1: no root
};

// The operators as CHORUS_CHECK names them: the built-in ones by value, then the bitwise ones, then
// every custom operator as one.
const char* const kOpNames[] = {"sum", "prod", "max", "min", "avg", "band", "bor", "bxor", "a custom operator"};

int32_t checkedOp(chorusRedOp_t op) {
  if (op >= 0 && op < chorusNumOps) return static_cast<int32_t>(op);
  if (op >= chorusBand && op <= chorusBxor) return static_cast<int32_t>(chorusNumOps + (op - chorusBand));
  return static_cast<int32_t>(chorusNumOps + 3);
}

CheckRecord checkRecordOf(const OpInfo& op, uint64_t index) {
  CheckRecord r{};
  r.index = index;
  r.count = op.blocks ? op.blocks->countsHash() : op.count;
  r.coll = static_cast<int32_t>(op.coll);
  r.type = op.type;
  r.op = reduces(op.coll) ? checkedOp(op.op) : -1;
  r.root = collective(op.coll).root == Collective::Root::kRoot ? op.root : -1;
  return r;
}

bool sameCall(const CheckRecord& a, const CheckRecord& b) {
  return a.index == b.index && a.count == b.count && a.coll == b.coll && a.type == b.type && a.op == b.op &&
         a.root == b.root;
}

std::string describeCall(const CheckRecord& r) {
  // A peer's record: its collective checked before it names one.
  const bool known = r.coll >= 0 && r.coll < kCollCount;
  const bool varies = known && collective(static_cast<CollType>(r.coll)).perRankCounts;
  std::string s = std::string(known ? collName(static_cast<CollType>(r.coll)) : "an unknown collective") +
                  (varies ? " (counts hashed to " : " (count ") + std::to_string(r.count) + ", " +
                  typeName(static_cast<chorusDataType_t>(r.type));
  if (r.op >= 0 && r.op <= checkedOp(chorusMaxRedOp)) s += std::string(", op ") + kOpNames[r.op];
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

Result<CallPlan> planCalls(const std::vector<OpInfo>& ops, int rank, int nranks, const Logger& log, PathChoices& path) {
  CallPlan cp;
  cp.ops.reserve(ops.size());
  // Numbered per communicator (collectives) and per peer and direction (point-to-point), on the
  // counters of the memory kind's path: kernels number their slots by counters of their own.
  OpCounters& counters = path.counters();
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
      expandP2p(op, rank, nranks, &parts);
      for (const P2pPart& p : parts) {
        if (p.peer == rank) {
          (p.send ? selfSends : selfRecvs).push_back(p);
          continue;
        }
        PlannedTransfer t;
        t.part = p;
        t.seq = ++(p.send ? counters.p2pSend : counters.p2pRecv)[p.peer];
        if (!po.seq) po.seq = t.seq;
        path.planTransfer(&t, &po);
        po.transfers.push_back(t);
      }
      cp.ops.push_back(std::move(po));
      continue;
    }
    po.collective = true;
    po.seq = counters.coll.fetch_add(1, std::memory_order_relaxed) + 1;
    CHORUS_TRY(path.planCollective(oi, &po));
    if (log.enabled(LogLevel::kInfo, kSubsysColl)) path.logCollective(po);
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

double estimateUs(const OpInfo& op, const Tuner& tuner, int nranks) {
  const AllReduceModel& m = tuner.model();
  if (nranks < 2 || m.bwGBs <= 0) return 0;
  const double n = nranks;
  const double bytes = static_cast<double>(op.count * typeSize(op.type));
  const double perByteUs = 1.0 / (m.bwGBs * 1e3);
  const double hopUs = m.ringLatencyUs / (2.0 * (n - 1));  // one hop of the ring
  if (runsOnChannels(op.coll)) {
    // The tuner's own estimate of its choice (a forced algorithm past its means: the ring's).
    const double us =
        tuner.estimateUs(op.coll, op.count * typeSize(op.type), op.device ? MemKind::kDevice : MemKind::kHost);
    if (us != kNever) return us;
    return ringAllReduceUs(m, bytes);
  }
  // Point to point: a message to or from each peer where a buffer holds a block per rank (the
  // root's, a gather's or scatter's), else one.
  const Collective& c = collective(op.coll);
  const double messages = c.send.perRank || c.recv.perRank ? n - 1 : 1;
  return hopUs + messages * bytes * perByteUs;
}

}  // namespace chorus
