// One launch's operations as planned, for either memory kind (planCalls): what each collective
// runs (the tuner's algorithm and protocol, and the algorithm's lanes), the transfers each
// point-to-point operation makes with other ranks, the copies to self, and the numbers and labels
// the flight recorder and the log give them. The one planner numbers and expands; what differs
// between the memory kinds (a collective's algorithm and lanes, a transfer's protocol) each path
// supplies (PathChoices). The host path lowers a plan into a task of lanes (HostPath::plan), the
// device path into kernel launches (DevicePath::plan).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/algo/algorithm.h"
#include "src/algo/cost.h"
#include "src/common/status.h"

namespace chorus {

struct OpInfo;
class Logger;
class Tuner;

// A byte transfer between this rank and `peer`, from expanding one point-to-point op.
struct P2pPart {
  bool send = false;
  int peer = 0;
  const char* src = nullptr;
  char* dst = nullptr;
  size_t bytes = 0;
};
// The transfers of a point-to-point op (send, receive, all-to-all, gather, scatter) on `rank`,
// appended to *out in the order they are issued; peers include `rank` itself.
void expandP2p(const OpInfo& op, int rank, int nranks, std::vector<P2pPart>* out);

// A transfer with another rank, numbered per peer and direction.
struct PlannedTransfer {
  P2pPart part;
  uint64_t seq = 0;
  ProtoKind proto = ProtoKind::kSimple;  // device lanes: the tuner's for its bytes
  int channels = 1;                      // device lanes: the parts it is cut into (Tuner::p2pChannels)
};

// A one-rank device collective that copies its input as it is: cudaMemcpyAsync, no kernel.
inline constexpr const char* kOneRankCopyLabel = "one-rank copy";

struct PlannedOp {
  const OpInfo* op = nullptr;
  bool collective = false;  // runs on channels (runsOnChannels); else point-to-point
  // A collective's number; a point-to-point op's first transfer's (0: it has none).
  uint64_t seq = 0;
  Algo algo = kDefaultAlgo;
  // As the flight recorder says it: an algorithm's name, "one-rank", kOneRankCopyLabel or "p2p".
  const char* label = "";
  // Device lanes' protocol as the flight recorder says it ("Simple", "LL", "Simple and LL" for
  // transfers of both); empty on host memory and where none applies (one rank, one-copy).
  const char* proto = "";
  ProtoKind lanesProto = ProtoKind::kSimple;
  // This rank took the slice all-reduce on its own (its buffers are registered).
  bool chosenAlone = false;
  std::vector<LanePlan> lanes;             // a collective's
  std::vector<PlannedTransfer> transfers;  // a point-to-point op's, with other ranks
};

// The counters that number a memory kind's operations alike on every rank: collectives, and
// point-to-point per peer and direction (the host path's number slots; the device path's, the
// flight recorder only, as kernels keep counters of their own, DeviceCommState).
struct OpCounters {
  std::atomic<uint64_t> coll{0};  // atomic: the host path's inline calls number theirs without planMu_
  std::vector<uint64_t> p2pSend;  // per peer
  std::vector<uint64_t> p2pRecv;
};

struct CallPlan {
  std::vector<PlannedOp> ops;
  // Copies to self: a send to this rank and the receive it pairs with, in issue order (checkOps
  // made sure they pair up), from the send's buffer into the receive's.
  std::vector<P2pPart> selfCopies;
};

// What a memory kind's path decides for the planner, and the counters it numbers on.
class PathChoices {
 public:
  virtual ~PathChoices() = default;
  virtual OpCounters& counters() = 0;
  // A collective's algorithm, label, protocol and lanes; po->op and po->seq are set. `index`: the
  // op's place among the launch's ops.
  virtual Status planCollective(size_t index, PlannedOp* po) = 0;
  // A transfer with another rank: its protocol and channels, where the path has them.
  virtual void planTransfer(PlannedTransfer* t, PlannedOp* po) {}
  // The log line of a planned collective (CHORUS_DEBUG_SUBSYS=COLL).
  virtual void logCollective(const PlannedOp& po) const = 0;
};

// The one planner (under the communicator's plan lock): each collective numbered and planned by
// `path`, each point-to-point op expanded into transfers numbered per peer and direction, and the
// sends to self paired with the receives from self (checkOps made sure they pair up).
Result<CallPlan> planCalls(const std::vector<OpInfo>& ops, int rank, int nranks, const Logger& log, PathChoices& path);
// What a plan would refuse, checked on the launching thread so the error reaches the call: sends
// to self that do not pair up with receives from self.
Status checkOps(const std::vector<OpInfo>& ops, int rank, int nranks);
// The tuner's estimate of `op`'s time on `nranks` ranks, from its all-reduce model
// (chorusGroupSimulateEnd).
double estimateUs(const OpInfo& op, const Tuner& tuner, int nranks);

}  // namespace chorus
