// A communicator's host path: everything about its operations on host memory once planned. It
// owns the host connections (their FIFOs and this rank's cursors into them), the lanes' shared
// state (reduction kernels, worker threads, channel status records, scratch), the lowering of a
// plan into a Task of lanes, the inline path of a lone collective, and chorusRecvAny's scan.
//
// A part of its Communicator (made with it, never without it): it reads the communicator's
// identity, configuration, tuner and flight recorder, plans through planCalls, and reports its
// failures through the communicator (TaskOwner). Thread-safety: plan() under the communicator's
// planMu_, the inline path under its execution token; connections are added by one launching
// thread at a time and closed by any (connMu_).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kernels/reduce_host.h"
#include "src/algo/algorithm.h"
#include "src/algo/tuner.h"
#include "src/common/status.h"
#include "src/core/call_plan.h"
#include "src/core/conn_table.h"
#include "src/core/engine.h"
#include "src/core/lane.h"
#include "src/core/workers.h"
#include "src/transport/transport.h"

namespace chorus {

class Communicator;
class Task;
struct OpInfo;

class HostPath {
 public:
  explicit HostPath(Communicator& comm) : comm_(comm) {}
  HostPath(const HostPath&) = delete;
  HostPath& operator=(const HostPath&) = delete;

  // At init, once the configuration is known: the reductions' kernels (of the CPU's instruction
  // set), the connection table, the channels' status records, scratch, the worker threads, and how
  // threads running this communicator's work wait (`ranksOnHost` of them on this host).
  void init(const HostKernels& kernels, int ranksOnHost);
  const HostKernels& kernels() const { return kernels_; }
  const IdlePolicy& idlePolicy() const { return idlePolicy_; }

  // Connections. Algorithms (a bit each) whose host connections all exist: connectionsNeeded
  // skips them.
  bool has(const ConnKey& k) const { return conns_.has(k); }
  std::atomic<uint32_t>& connectedAlgos() const { return connectedAlgos_; }
  // A host connection made by the connection phases: kept (closed by closeAll, freed by
  // dropConnections after the transports), and this rank's cursor into its FIFO (`send`: the
  // sender's, logged with `transport`).
  void keep(std::unique_ptr<Connection> conn);
  void addSend(const ConnKey& n, const Connection& conn, const char* transport);
  void addRecv(const ConnKey& n, const Connection& conn);
  // Closes every FIFO, so that anything waiting on one (here or a peer on this host) sees it.
  void closeAll();
  // The end of the communicator: a finished send over a socket may still sit in its FIFO; the
  // proxy is let put it on the wire (until the timeout, unless aborted or the connection failed).
  void flushSends();
  void dropConnections() { connections_.clear(); }
  // Every channel's status record, then point-to-point's, as one line ("" before init).
  std::string describeChannels() const;

  // A host collective's algorithm as every rank picks it (the tuner's choice).
  Tuner::Choice choice(const OpInfo& op) const;
  // The algorithm this rank runs: the tuner's choice, or the slice all-reduce where the tuner
  // leaves it to this rank's registered buffers (then its neighbours check that they agree).
  Algo algoFor(const OpInfo& op, const Tuner::Choice& c) const;
  // The lowering of planCalls on host memory: a task of lanes. Runs on the thread that will run
  // the task (a stream's worker, or the caller); plans of one communicator are serialised by its
  // planMu_.
  Result<std::unique_ptr<Task>> plan(const std::vector<OpInfo>& ops);
  OpCounters& counters() { return counters_; }

  // The fast path of a lone host collective whose algorithm runs inline (Algorithm::runsInline:
  // the direct all-reduce): its one lane runs on the calling thread, with no task, queue or
  // latch. *ran is false (and nothing happened) when the op does not qualify, its plan is not one
  // lane over connections made, or another thread holds the execution token; the caller then
  // takes the general path.
  Status runInlineNow(const OpInfo& op, bool* ran);
  // The same for an algorithm that runs inline, already chosen (by loneInlineAlgo, on the
  // thread that issued the op).
  Status runInlineNow(const OpInfo& op, Algo algo, bool* ran);
  // The algorithm that runs `op` inline under the tuner's choice `c`, if one does (a host
  // collective of an algorithm that runsInline(), two ranks or more).
  std::optional<Algo> inlineAlgo(const OpInfo& op, const Tuner::Choice& c) const;
  // The algorithm a lone collective would run inline, when nothing else of the general launch
  // would change anything: host memory, CHORUS_CHECK off, an inline algorithm chosen and every
  // connection the tuner's choice asks for made (connectionsNeeded() would ask for none).
  std::optional<Algo> loneInlineAlgo(const OpInfo& op) const;

  // chorusRecvAny: the rank whose point-to-point message to this rank is first to wait, without
  // taking it (src/core/comm_anysource.cc). A peer not yet connected asks to connect when it first
  // sends here; that request is answered here as a receive from it would. Ends at the timeout, on
  // abort or when the communicator fails.
  Result<int> firstSender();

 private:
  // A collective's lane arguments but its sequence number and slot size.
  LaneArgs collArgs(const OpInfo& op) const;
  // The connectors plan `lp` names, from the connection table.
  LaneConnectors connectorsOf(const LanePlan& lp) const;
  // The lane of plan `lp` over `conns` (planMu_ or the execution token held). `keepPlan`: the
  // lane borrows the plan's steps (the plan outlives it); else it takes them.
  Lane makeLane(LaneArgs a, LanePlan& lp, const LaneConnectors& conns, bool keepPlan);

  Communicator& comm_;
  HostKernels kernels_{};
  IdlePolicy idlePolicy_;  // how threads running this communicator's work wait
  // The threads that move each piece with the progress thread (CHORUS_WORKERS_PER_CHANNEL > 1).
  std::unique_ptr<WorkerGroup> workers_;
  // Per channel, then one record for point-to-point (the last); read by hang reports.
  std::unique_ptr<ChannelStatus[]> channelStatus_;
  int nChannels_ = 0;
  ConnTable conns_;
  std::vector<std::unique_ptr<Connection>> connections_;  // appended under connMu_
  std::mutex connMu_;  // connections_ against a failure or abort closing them from another thread
  mutable std::atomic<uint32_t> connectedAlgos_{0};
  std::vector<char> scratch_;  // one slot of either size, for lanes that stash pieces (LanePlan::scratch)
  OpCounters counters_;
  // runInlineNow's last plan, the algorithm and call it was made for, its connectors and its label
  // ("direct (inline)", static) (the execution token guards them).
  std::unique_ptr<LanePlan> inlinePlan_;
  Algo inlineAlgo_ = kDefaultAlgo;
  AlgoCall inlineCall_;
  LaneConnectors inlineConns_;
  const char* inlineLabel_ = "";
  std::atomic<int> anyNext_{0};  // where firstSender's next scan starts
};

}  // namespace chorus
