#include "src/core/task.h"

#include <chrono>
#include <thread>

#include "src/common/os.h"

namespace chorus {

Status Task::progress(WaitInfo* wait, bool* moved) {
  bool blocked = false;
  // Point-to-point lanes first: they never depend on the collectives, so they always advance.
  for (auto& q : queues_) {
    while (q.next < q.lanes.size()) {
      WaitInfo w;
      Status s = q.lanes[q.next].progress(&w, moved);
      if (s.inProgress()) {
        if (!blocked) *wait = w;
        blocked = true;
        break;
      }
      if (!s.isOk()) {
        *wait = w;
        return s;
      }
      ++q.next;
    }
  }
  while (stage_ < stages_.size()) {
    bool stageDone = true;
    for (Lane& lane : stages_[stage_].lanes) {
      if (lane.done()) continue;
      WaitInfo w;
      Status s = lane.progress(&w, moved);
      if (s.inProgress()) {
        if (!blocked) *wait = w;
        blocked = true;
        stageDone = false;
        continue;
      }
      if (!s.isOk()) {
        *wait = w;
        return s;
      }
    }
    if (!stageDone) break;
    if (stages_[stage_].flight)
      owner_->flightMark(stages_[stage_].flight, stages_[stage_].flight, FlightEntry::State::kDone, 0);
    ++stage_;
  }
  if (blocked || stage_ < stages_.size()) return Status(chorusInProgress, "");
  return Status::ok();
}

Status Task::advance(int64_t now, WaitInfo* wait, bool* moved) {
  Status broken = owner_->asyncError();
  if (!broken.isOk()) return Status(broken.code(), "the communicator failed earlier: " + broken.message());
  if (owner_->aborted()) return remoteError("the communicator was aborted");
  if (!flightStarted_) {
    flightStarted_ = true;
    owner_->flightMark(flightFirst_, flightLast_, FlightEntry::State::kRunning, 0);
  }
  Status s = progress(wait, moved);
  if (*moved) lastProgressNs = now;
  if (!s.isOk() && !s.inProgress()) return explainFailure(*owner_, s, *wait);
  if (s.inProgress() && now - lastProgressNs > kPeerCheckAfterNs) {
    Status gone = owner_->checkPeers(now, false, wait->peer, now - lastProgressNs);
    if (!gone.isOk()) return gone;
    owner_->noteStall(*wait, now - lastProgressNs, &nextWarnNs_);
    if (now - lastProgressNs > owner_->timeoutNs() &&
        now - lastProgressNs > owner_->timeoutNs() + owner_->timeoutGraceNs(wait->peer)) {
      return systemError(describeStall(*wait, now - lastProgressNs)).about(wait->peer);
    }
  }
  return s;
}

Status explainFailure(TaskOwner& owner, const Status& s, const WaitInfo& w) {
  if (!w.closed) return s;
  // A closed connection is the echo of a failure somewhere else. Better answers: a peer process
  // of this host that is gone, or the failure notice of the rank that closed (sent right after
  // it closed its connections; waited for briefly).
  const int64_t start = nowNs();
  for (int64_t t = start; t - start < kNoticeWaitNs; t = nowNs()) {
    if (owner.aborted()) return remoteError("the communicator was aborted");
    Status told = owner.asyncError();
    if (!told.isOk()) return told;
    Status gone = owner.checkPeers(t, true);
    if (!gone.isOk()) return gone;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return remoteError(owner.describePeer(w.peer) + " closed its connection to this rank in operation #" +
                     std::to_string(w.seq) + ": it failed, exited or aborted")
      .about(w.peer);
}

void Task::finish(const Status& s) {
  owner_->flightMark(flightFirst_, flightLast_, s.isOk() ? FlightEntry::State::kDone : FlightEntry::State::kFailed,
                     s.code());
  if (!s.isOk()) owner_->setAsyncError(s);
  if (holdsExec) {
    holdsExec = false;
    owner_->releaseExec();
  }
  if (onDone_) onDone_(s);
}

std::string Task::describeStall(const WaitInfo& w, int64_t waitedNs) const {
  return chorus::describeStall(*owner_, w, waitedNs);
}

std::string describeStall(const TaskOwner& owner, const WaitInfo& w, int64_t waitedNs) {
  const std::string stopped = owner.stoppedPeers();
  return (stopped.empty() ? std::string() : stopped + " is stopped (SIGSTOP or a debugger); ") + "rank " +
         std::to_string(owner.rank()) + " waited " + std::to_string(waitedNs / 1000000000) +
         " s, the communicator's timeout (CHORUS_TIMEOUT or config.timeoutSeconds), for " +
         (w.forData ? "data from " : "free space at ") + owner.describePeer(w.peer) + " in operation #" +
         std::to_string(w.seq) + ", step " + std::to_string(w.step) + " (" + primName(w.prim) +
         "); that rank is stuck, slow, or in a different call. Channels: " + owner.describeChannels();
}

}  // namespace chorus
