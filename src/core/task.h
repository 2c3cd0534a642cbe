// A Task is one communicator's share of one launch: its collectives, run one after another (each a
// set of lanes, one per channel), and its point-to-point lanes, run alongside them. The engine
// progresses it; the communicator that made it outlives it. Progress-thread-only once submitted.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/common/status.h"
#include "src/core/flight.h"
#include "src/core/lane.h"

namespace chorus {

// What a task needs from its communicator; the communicator outlives its tasks.
class TaskOwner {
 public:
  virtual ~TaskOwner() = default;
  virtual bool aborted() const = 0;
  // The error that broke the communicator, if any (ok otherwise).
  virtual Status asyncError() const = 0;
  virtual void setAsyncError(const Status& s) = 0;
  virtual int64_t timeoutNs() const = 0;
  virtual int rank() const = 0;
  // "rank 3 (host:pid)" for messages.
  virtual std::string describePeer(int peer) const = 0;
  // What every channel is doing, one line each, for a hang report.
  virtual std::string describeChannels() const = 0;
  // Peers this rank can see are stopped (SIGSTOP, a debugger): the likely cause of a hang even
  // when the peer waited on is another one. Empty when none is (or none can be seen).
  virtual std::string stoppedPeers() const { return ""; }
  // Extra time before a wait on `peer` times out. A peer of this host whose process runs (not
  // dead, not stopped) is most likely stuck waiting on someone else itself: the rank waiting on
  // that someone times out first and its notice names the real culprit here too.
  virtual int64_t timeoutGraceNs(int peer) const { return 0; }
  // Tasks of one communicator share its connections: whoever runs one (the engine, or a thread
  // running a launch inline) holds this token from the task's first step to its end.
  virtual bool tryAcquireExec() = 0;
  virtual void releaseExec() = 0;
  // An error if a peer this rank can watch (a process on this host) is gone; cheap, rate-limited.
  // `force`: poll now, whenever the last poll was, and any watched peer that exited counts (a
  // closed connection wants an explanation). `waited`: the rank the stalled wait is for, the only
  // one whose exit counts without `force`: a rank that finished its last operation and exited
  // harms no one who no longer needs it, and one that died is found by whoever waits on it, whose
  // notice tells the rest. When `waited` is one this rank cannot watch (another host), its
  // bootstrap listener is probed, once a second, whether its process is still there and its host
  // reachable (a network need not say that a peer died). A refused probe ends the wait only once
  // it has made no progress for `stalledNs` >= kRefusedQuietNs: a peer that sent its last data and
  // exited cleanly is gone while that data may still be on its way (retransmitted on a lossy link).
  virtual Status checkPeers(int64_t now, bool force = false, int waited = -1, int64_t stalledNs = 0) = 0;
  static constexpr int64_t kRefusedQuietNs = int64_t(2) * 1000000000;
  // The flight recorder: entries [first, last] changed state.
  virtual void flightMark(uint64_t first, uint64_t last, FlightEntry::State state, int result) {}
  // A wait of `waitedNs` without progress: past the warning threshold, the owner logs what it
  // waits for. *nextWarnNs is the caller's (0 at first): when to warn again.
  virtual void noteStall(const WaitInfo& w, int64_t waitedNs, int64_t* nextWarnNs) {}
};

// A wait that makes no progress this long starts checking whether the peers are still alive.
constexpr int64_t kPeerCheckAfterNs = 20 * 1000000;
// How long a rank that saw a connection close waits for the notice that says why.
constexpr int64_t kNoticeWaitNs = 500 * 1000000;

// The error a failed lane returns, made specific: a closed connection names the peer's host and
// process, or gives way to the failure notice that explains it.
Status explainFailure(TaskOwner& owner, const Status& s, const WaitInfo& w);

// The sentence for a wait that lasted past the communicator's timeout.
std::string describeStall(const TaskOwner& owner, const WaitInfo& w, int64_t waitedNs);

class Task {
 public:
  explicit Task(TaskOwner* owner) : owner_(owner) {}

  TaskOwner* owner() const { return owner_; }
  // `flight`: the stage's flight-recorder entry (0: none).
  void addStage(std::vector<Lane> lanes, uint64_t flight) { stages_.push_back(Stage{std::move(lanes), flight}); }
  // The flight-recorder entries of all the task's operations.
  void setFlight(uint64_t first, uint64_t last) {
    flightFirst_ = first;
    flightLast_ = last;
  }
  void reserveStages(size_t n) { stages_.reserve(n); }
  // Lanes of one queue run one after another (they share a connection); queues run concurrently
  // with each other and with the stages.
  void addToQueue(size_t queue, Lane lane) {
    if (queues_.size() <= queue) queues_.resize(queue + 1);
    queues_[queue].lanes.push_back(std::move(lane));
  }
  void setOnDone(std::function<void(const Status&)> f) { onDone_ = std::move(f); }

  // ok: finished. inProgress: blocked (*wait says on what). Anything else: failed.
  Status progress(WaitInfo* wait, bool* moved);
  // The sentence for a task that waited past its deadline.
  std::string describeStall(const WaitInfo& w, int64_t waitedNs) const;

  // One turn of whoever runs the task: fail fast on a broken or aborted communicator, progress,
  // and enforce the timeout. inProgress: still running (*wait says on what).
  Status advance(int64_t now, WaitInfo* wait, bool* moved);
  // Ends the task: records a failure on the communicator, gives the execution token back, and
  // runs the completion callback.
  void finish(const Status& s);

  int64_t lastProgressNs = 0;
  bool holdsExec = false;
  bool finished = false;  // for whoever runs several tasks together

 private:
  TaskOwner* owner_;
  // One collective: the lanes of its plan (a lane per channel, per tree, or one over every peer).
  struct Stage {
    std::vector<Lane> lanes;
    uint64_t flight = 0;
  };
  uint64_t flightFirst_ = 0;
  uint64_t flightLast_ = 0;
  bool flightStarted_ = false;
  int64_t nextWarnNs_ = 0;
  std::vector<Stage> stages_;
  size_t stage_ = 0;
  struct Queue {
    std::vector<Lane> lanes;
    size_t next = 0;
  };
  std::vector<Queue> queues_;
  std::function<void(const Status&)> onDone_;
};

}  // namespace chorus
