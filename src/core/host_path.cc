// The communicator's host path (host_path.h): its connections, the lowering of a plan into a Task
// of lanes, and the inline path of a lone collective (chorusRecvAny's scan: comm_anysource.cc).
//
// Ring collectives use one ring per channel: the count is cut into nChannels contiguous parts
// and each channel runs the schedule of src/algo/schedule.h on its part, over its own pair of
// connections. All-to-all, gather and scatter are sends and receives; point-to-point lanes to one
// peer run in issue order (one connection each way), lanes to different peers concurrently.
#include "src/core/host_path.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>
#include <utility>

#include "src/core/call_plan.h"
#include "src/core/comm.h"
#include "src/core/task.h"

namespace chorus {
namespace {

const IntSetting kWorkersPerChannel{"CHORUS_WORKERS_PER_CHANNEL",
                                    1,
                                    1,
                                    64,
                                    SettingScope::kRank,
                                    "threads that move each piece of a ring or chain schedule"};

}  // namespace

void HostPath::init(const HostKernels& kernels, int ranksOnHost) {
  const Config& config = comm_.config();
  kernels_ = kernels;
  nChannels_ = config.nChannels;
  conns_.init(comm_.nranks(), nChannels_);
  channelStatus_ = std::make_unique<ChannelStatus[]>(nChannels_ + 1);
  scratch_.resize(std::max<size_t>(config.slotBytes, config.peerSlots()));
  counters_.p2pSend.assign(comm_.nranks(), 0);
  counters_.p2pRecv.assign(comm_.nranks(), 0);
  idlePolicy_ = IdlePolicy(config, ranksOnHost, usableCpus());
  if (const int64_t w = kWorkersPerChannel.get(config.env); w > 1) workers_ = std::make_unique<WorkerGroup>(int(w));
}

void HostPath::keep(std::unique_ptr<Connection> conn) {
  std::lock_guard<std::mutex> g(connMu_);
  connections_.push_back(std::move(conn));
}

void HostPath::addSend(const ConnKey& n, const Connection& conn, const char* transport) {
  auto cursor = std::make_unique<SendCursor>();
  cursor->fifo = conn.fifo();
  cursor->tail = conn.fifo().ctrl->tail.load(std::memory_order_acquire);
  cursor->headSeen = conn.fifo().ctrl->head.load(std::memory_order_acquire);
  cursor->peer = n.peer;
  cursor->viaProxy = conn.viaProxy();
  cursor->link = conn.proxyLink();
  const Logger& log = comm_.log();
  if (n.family == ConnFamily::kRing) {
    log.info(kSubsysInit, "Channel {:02d} : {} -> {} via {}", n.index, comm_.rank(), n.peer, transport);
  } else {
    log.info(n.family == ConnFamily::kP2p ? kSubsysP2p : kSubsysInit, "{} : {} -> {} via {}", connFamilyName(n.family),
             comm_.rank(), n.peer, transport);
  }
  conns_.put(n.family, n.index, std::move(cursor));
}

void HostPath::addRecv(const ConnKey& n, const Connection& conn) {
  auto cursor = std::make_unique<RecvCursor>();
  cursor->fifo = conn.fifo();
  cursor->head = conn.fifo().ctrl->head.load(std::memory_order_acquire);
  cursor->peer = n.peer;
  cursor->headerPublishes = conn.headerPublishes();
  cursor->link = conn.proxyLink();
  conns_.put(n.family, n.index, std::move(cursor));
}

void HostPath::closeAll() {
  std::lock_guard<std::mutex> g(connMu_);
  for (auto& c : connections_) c->fifo().close();
}

void HostPath::flushSends() {
  if (comm_.health_.aborted()) return;
  const int64_t deadline = nowNs() + comm_.config().timeoutNs;
  auto unsent = [](const SendCursor& c) {
    return c.viaProxy && !c.fifo.closed() && c.fifo.ctrl->head.load(std::memory_order_acquire) != c.tail;
  };
  while (nowNs() < deadline && conns_.anySend(unsent)) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

std::string HostPath::describeChannels() const {
  std::string s;
  if (!channelStatus_) return s;
  for (int c = 0; c <= nChannels_; ++c) {
    if (!s.empty()) s += "; ";
    s += (c < nChannels_ ? "channel " + std::to_string(c) : std::string("p2p")) + ": " + channelStatus_[c].describe();
  }
  return s;
}

Algo HostPath::algoFor(const OpInfo& op, const Tuner::Choice& c) const {
  if (!c.alone) return c.algo;
  const size_t bytes = op.count * typeSize(op.type);
  MemShare& share = comm_.memShare();
  const bool registered = share.registered(op.sendbuff, bytes) && share.registered(op.recvbuff, bytes);
  return registered ? *c.alone : c.algo;
}

LaneArgs HostPath::collArgs(const OpInfo& op) const {
  LaneArgs a;
  a.input = static_cast<const char*>(op.sendbuff);
  a.output = static_cast<char*>(op.recvbuff);
  a.elemSize = typeSize(op.type);
  a.type = op.type;
  a.kernels = &kernels_;
  a.workers = workers_.get();
  a.commId = comm_.commId();
  if (reduces(op.coll)) a.spec = op.spec;
  a.sendByRef = true;
  a.share = &comm_.memShare();
  return a;
}

LaneConnectors HostPath::connectorsOf(const LanePlan& lp) const {
  LaneConnectors conns;
  for (int i = 0; i < kMaxLanePeers; ++i) {
    if (lp.send[i].index >= 0) conns.send[i] = conns_.send(lp.send[i].family, lp.send[i].index);
    if (lp.recv[i].index >= 0) conns.recv[i] = conns_.recv(lp.recv[i].family, lp.recv[i].index);
  }
  return conns;
}

Lane HostPath::makeLane(LaneArgs a, LanePlan& lp, const LaneConnectors& conns, bool keepPlan) {
  a.slotBytes = lp.slotBytes;
  a.status = &channelStatus_[lp.channel];
  a.proto = lp.proto;
  if (!lp.byReference) a.sendByRef = false;
  if (lp.scratch) {
    // One slot, shared by the lanes of every task: the execution token runs them one at a time.
    CHORUS_CHECK(lp.slotBytes <= scratch_.size());
    a.scratch = scratch_.data();
  }
  if (keepPlan) return Lane(a, StepsRef{lp.steps.data(), lp.steps.size()}, conns);
  return Lane(a, std::move(lp.steps), conns);
}

namespace {

// Whether any registered algorithm that runs inline runs `coll` (on channels), looked up once.
bool inlineRuns(CollType coll) {
  static const std::vector<char> table = [] {
    std::vector<char> t(kChannelColls, 0);
    for (size_t c = 0; c < t.size(); ++c) {
      for (int i = 0; i < algorithmCount(); ++i) {
        const Algorithm& a = algorithm(static_cast<Algo>(i));
        t[c] = t[c] || (a.runsInline() && a.runs(static_cast<CollType>(c)) && a.runsOn(MemKind::kHost));
      }
    }
    return t;
  }();
  const auto c = static_cast<size_t>(coll);
  return c < table.size() && table[c];
}

// "direct (inline)": the log's and the flight recorder's label (which keeps the pointer).
const char* inlineLabel(Algo a) {
  static const std::vector<std::string> labels = [] {
    std::vector<std::string> all;
    for (int i = 0; i < algorithmCount(); ++i) all.push_back(std::string(algoName(static_cast<Algo>(i))) + " (inline)");
    return all;
  }();
  return labels[static_cast<size_t>(a)].c_str();
}

// What the host path decides for planCalls: the tuner's algorithm, or the slice all-reduce this
// rank takes on its own (its buffers are registered); a transfer has nothing to choose.
class HostChoices final : public PathChoices {
 public:
  HostChoices(HostPath& path, const AlgoContext& context, const Logger& log)
      : path_(path), context_(context), log_(log) {}

  OpCounters& counters() override { return path_.counters(); }

  Status planCollective(size_t, PlannedOp* po) override {
    const OpInfo& op = *po->op;
    const Tuner::Choice choice = path_.choice(op);
    po->algo = path_.algoFor(op, choice);
    po->label = algoName(po->algo);
    po->chosenAlone = choice.alone && po->algo == *choice.alone;
    AlgoCall call{op.coll, op.count, typeSize(op.type), op.root, op.sendbuff == op.recvbuff, op.blocks.get()};
    call.chosenAlone = po->chosenAlone;
    algorithm(po->algo).plan(context_, call, &po->lanes);
    return Status::ok();
  }

  void logCollective(const PlannedOp& po) const override {
    const OpInfo& op = *po.op;
    log_.info(kSubsysColl, "{} opCount {} count {} datatype {} algo {}", collName(op.coll), po.seq, op.count,
              typeName(op.type), po.chosenAlone ? "slice (buffers registered)" : po.label);
  }

 private:
  HostPath& path_;
  const AlgoContext context_;
  const Logger& log_;
};

}  // namespace

Tuner::Choice HostPath::choice(const OpInfo& op) const {
  return comm_.tuner_.choose(op.coll, agreedCount(op) * typeSize(op.type));
}

std::optional<Algo> HostPath::inlineAlgo(const OpInfo& op, const Tuner::Choice& c) const {
  // A v-collective's plan depends on its blocks: the general path plans each.
  if (op.device || op.blocks || !inlineRuns(op.coll) || comm_.nranks() < 2) return std::nullopt;
  const Algo algo = algoFor(op, c);
  if (!algorithm(algo).runsInline()) return std::nullopt;
  return algo;
}

std::optional<Algo> HostPath::loneInlineAlgo(const OpInfo& op) const {
  if (comm_.config().check) return std::nullopt;
  // The connections connectionsNeeded() would ask for this op, all made already.
  const Tuner::Choice c = choice(op);
  const uint32_t algos = c.connections();
  if ((connectedAlgos_.load(std::memory_order_relaxed) & algos) != algos) return std::nullopt;
  return inlineAlgo(op, c);
}

Status HostPath::runInlineNow(const OpInfo& op, bool* ran) {
  *ran = false;
  const std::optional<Algo> algo = inlineAlgo(op, choice(op));
  return algo ? runInlineNow(op, *algo, ran) : Status::ok();
}

Status HostPath::runInlineNow(const OpInfo& op, Algo algo, bool* ran) {
  *ran = false;
  if (!comm_.health_.tryAcquireExec()) return Status::ok();
  // The plan of the last inline call, kept: a loop of one size plans once (the token is held).
  const AlgoCall call{op.coll, op.count, typeSize(op.type), op.root, op.sendbuff == op.recvbuff};
  if (!inlinePlan_ || algo != inlineAlgo_ || call.coll != inlineCall_.coll || call.count != inlineCall_.count ||
      call.elemSize != inlineCall_.elemSize || call.root != inlineCall_.root || call.inPlace != inlineCall_.inPlace) {
    inlinePlan_.reset();
    std::vector<LanePlan> plans;
    algorithm(algo).plan(comm_.algoContext(), call, &plans);
    LaneConnectors conns;
    bool connected = plans.size() == 1;
    if (connected) {
      conns = connectorsOf(plans[0]);
      for (int i = 0; i < kMaxLanePeers; ++i) {
        connected =
            connected && (plans[0].send[i].index < 0 || conns.send[i]) && (plans[0].recv[i].index < 0 || conns.recv[i]);
      }
    }
    if (!connected) {  // more than one lane, or a connection not made yet: the general path runs it
      comm_.health_.releaseExec();
      return Status::ok();
    }
    inlinePlan_ = std::make_unique<LanePlan>(std::move(plans[0]));
    inlineAlgo_ = algo;
    inlineCall_ = call;
    inlineConns_ = conns;  // connections, once made, stay until the end
    inlineLabel_ = inlineLabel(algo);
  }
  *ran = true;
  LaneArgs a = collArgs(op);
  a.seq = counters_.coll.fetch_add(1, std::memory_order_relaxed) + 1;
  const Logger& log = comm_.log();
  if (log.enabled(LogLevel::kInfo, kSubsysColl)) {
    log.info(kSubsysColl, "{} opCount {} count {} datatype {} algo {}", collName(op.coll), a.seq, op.count,
             typeName(op.type), inlineLabel_);
  }
  Lane lane = makeLane(a, *inlinePlan_, inlineConns_, true);
  const uint64_t flight = comm_.diag_.record(op, a.seq, inlineLabel_, nowNs(), true);
  int64_t nextWarn = 0;
  // The same turn as Task::advance: fail fast when broken or aborted, give up after the timeout.
  IdleLoop idle(idlePolicy_);
  Status s;
  while (true) {
    if (comm_.health_.failed()) {
      Status broken = comm_.health_.asyncError();
      s = Status(broken.code(), "the communicator failed earlier: " + broken.message());
      break;
    }
    if (comm_.health_.aborted()) {
      s = remoteError("the communicator was aborted");
      break;
    }
    WaitInfo w;
    bool moved = false;
    s = lane.progress(&w, &moved);
    if (!s.inProgress()) {
      if (!s.isOk()) s = explainFailure(comm_.health_, s, w);
      break;
    }
    // Nothing has moved since the idle spell began: past a while, check the peers and warn;
    // past the timeout, give up.
    const int64_t stalled = idle.idleSince() == 0 ? 0 : idle.now() - idle.idleSince();
    if (!moved && stalled > kPeerCheckAfterNs) {
      s = comm_.health_.checkPeers(idle.now(), false, w.peer, stalled);
      if (!s.isOk()) break;
      comm_.diag_.noteStall(w, stalled, &nextWarn);
      if (stalled > comm_.config().timeoutNs + comm_.health_.timeoutGraceNs(w.peer)) {
        s = systemError(describeStall(comm_.health_, w, stalled)).about(w.peer);
        break;
      }
    }
    idle.after(moved, w);
  }
  comm_.health_.releaseExec();
  comm_.diag_.mark(flight, flight, s.isOk() ? FlightEntry::State::kDone : FlightEntry::State::kFailed, s.code());
  if (!s.isOk()) comm_.health_.setAsyncError(s);
  return s;
}

Result<std::unique_ptr<Task>> HostPath::plan(const std::vector<OpInfo>& ops) {
  std::lock_guard<std::mutex> planLock(comm_.planMu_);
  HostChoices choices(*this, comm_.algoContext(), comm_.log_);
  CHORUS_ASSIGN_OR_RETURN(CallPlan cp, planCalls(ops, comm_.rank_, comm_.nranks_, comm_.log_, choices));
  auto task = std::make_unique<Task>(&comm_.health_);
  task->reserveStages(ops.size());

  // Point-to-point queues: one per (peer, direction), plus one for copies to self.
  std::map<std::pair<int, bool>, size_t> queueOf;
  auto queueFor = [&](int peer, bool send) {
    auto key = std::make_pair(peer, send);
    auto it = queueOf.find(key);
    if (it != queueOf.end()) return it->second;
    size_t q = queueOf.size();
    queueOf[key] = q;
    return q;
  };
  LaneArgs bytesArgs;
  bytesArgs.elemSize = 1;
  bytesArgs.type = chorusUint8;
  bytesArgs.kernels = &kernels_;
  bytesArgs.workers = workers_.get();
  bytesArgs.commId = comm_.commId();
  bytesArgs.slotBytes = comm_.config().peerSlots();
  bytesArgs.status = &channelStatus_[nChannels_];

  uint64_t flightFirst = 0;
  uint64_t flightLast = 0;
  const int64_t issued = nowNs();
  for (PlannedOp& po : cp.ops) {
    const uint64_t flight = comm_.diag_.record(*po.op, po.seq, po.label, issued);
    if (!flightFirst) flightFirst = flight;
    flightLast = flight;
    if (!po.collective) {
      for (const PlannedTransfer& t : po.transfers) {
        const P2pPart& p = t.part;
        LaneArgs a = bytesArgs;
        a.input = p.src;
        a.output = p.dst;
        a.seq = t.seq;
        std::vector<Step> steps;
        if (p.bytes) steps.push_back(Step{p.send ? Prim::kSend : Prim::kRecv, 0, 0, p.bytes});
        task->addToQueue(queueFor(p.peer, p.send),
                         Lane(a, std::move(steps), p.send ? conns_.send(ConnFamily::kP2p, p.peer) : nullptr,
                              p.send ? nullptr : conns_.recv(ConnFamily::kP2p, p.peer)));
      }
      continue;
    }
    // The lanes the algorithm named, over the connections it asked for (connectionsNeeded made
    // them).
    LaneArgs a = collArgs(*po.op);
    a.seq = po.seq;
    std::vector<Lane> lanes;
    for (LanePlan& lp : po.lanes) lanes.push_back(makeLane(a, lp, connectorsOf(lp), false));
    if (!lanes.empty() || po.lanes.empty()) task->addStage(std::move(lanes), flight);
  }
  for (const P2pPart& copy : cp.selfCopies) {
    LaneArgs a = bytesArgs;
    a.input = copy.src;
    a.output = copy.dst;
    std::vector<Step> steps;
    if (copy.bytes) steps.push_back(Step{Prim::kLocal, 0, 0, copy.bytes});
    task->addToQueue(queueFor(comm_.rank(), true), Lane(a, std::move(steps), nullptr, nullptr));
  }
  task->setFlight(flightFirst, flightLast);
  return task;
}

}  // namespace chorus
