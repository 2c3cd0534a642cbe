// A communicator's failure handling: the error that broke it, its abort flag, the execution token
// its tasks share, the failure notices it sends and receives, and the watch on its peers (the
// processes of this host by pidfd, the others through their bootstrap listeners). It is what a
// Task of the communicator answers to (TaskOwner).
//
// A part of its Communicator (made with it, never without it): a failure reads the
// communicator's identity and bootstrap, and stops its parts (the device path's kernels, the host
// path's connections, the transports' traffic). Thread-safe: the error under its own lock, the
// flags atomic; engine threads, the device watchdog and the bootstrap's notice thread call in.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "src/common/os.h"
#include "src/common/status.h"
#include "src/core/task.h"

namespace chorus {

class Communicator;

class Health final : public TaskOwner {
 public:
  explicit Health(Communicator& comm) : comm_(comm) {}
  Health(const Health&) = delete;
  Health& operator=(const Health&) = delete;

  // TaskOwner.
  int rank() const override;
  bool aborted() const override { return abort_.load(std::memory_order_acquire); }
  // The error that broke the communicator; a kernel's fault becomes it here, when first asked.
  Status asyncError() const override;
  void setAsyncError(const Status& s) override { fail(s, true); }
  int64_t timeoutNs() const override;
  std::string describePeer(int peer) const override;
  std::string describeChannels() const override;
  std::string stoppedPeers() const override;
  int64_t timeoutGraceNs(int peer) const override;
  bool tryAcquireExec() override {
    bool expected = false;
    return exec_.compare_exchange_strong(expected, true, std::memory_order_acquire);
  }
  void releaseExec() override { exec_.store(false, std::memory_order_release); }
  Status checkPeers(int64_t now, bool force = false, int waited = -1, int64_t stalledNs = 0) override;
  void flightMark(uint64_t first, uint64_t last, FlightEntry::State state, int result) override;
  void noteStall(const WaitInfo& w, int64_t waitedNs, int64_t* nextWarnNs) override;

  // The abort flag, which the bootstrap's waits and a clique's InitCancel watch too.
  std::atomic<bool>* abortFlag() { return &abort_; }
  // Sets the abort flag; true for the call that set it first.
  bool setAborted() { return !abort_.exchange(true, std::memory_order_acq_rel); }
  // Whether an error is recorded, without looking at the device (a load).
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // The error recorded (ok when none), without making a kernel's fault the communicator's.
  Status recordedError() const;

  // Marks the communicator failed (once; later errors are dropped), closes every connection so
  // peers on this host see it, stops socket traffic, and, when `tellPeers`, sends a failure
  // notice to every other rank (Bootstrap::noticeAll). A failure the program asked for
  // (`requested`: chorusCommRevoke) is said at INFO, without the last operations or a dump.
  void fail(const Status& s, bool tellPeers, bool requested = false);
  // Has every transport stop moving data and let go of the callers' buffers (a failure, an
  // abort).
  void stopTraffic();
  // Sends every other rank a failure notice for `s` (best effort, at most two seconds).
  void tellFailure(const Status& s);
  // At the end of init: opens pidfds of the peers that are processes of this host, and takes the
  // peers' failure notices from the bootstrap (one that came during init fails it at once).
  void watchPeers();
  // The peers whose processes this rank watches and that have exited.
  std::vector<int> exitedPeers() const;

 private:
  Communicator& comm_;
  std::atomic<bool> abort_{false};
  std::atomic<bool> exec_{false};  // the execution token (see TaskOwner)
  mutable std::mutex errMu_;
  Status asyncError_;                // guarded by errMu_
  std::atomic<bool> failed_{false};  // set (under errMu_) with asyncError_
  // Pidfds of the peers that are other processes of this host (invalid elsewhere), and when
  // they, and a peer of another host, were last polled.
  std::vector<UniqueFd> peerPidfd_;
  std::atomic<int64_t> lastPeerCheckNs_{0};
};

}  // namespace chorus
