// Host streams and events.
//
// A Stream is an in-order queue of work items run by its own worker thread (like the host thread
// behind a CUDA stream). A work item runs to completion before the next starts; a launch item
// runs its tasks on the thread that runs the item when their communicators are free (see
// group.cc). Errors are sticky: the first one is kept and returned by synchronize(), while later
// items still run (a broken communicator fails its own work fast).
//
// Hand-offs are what a small operation pays for, so a thread that waits for the stream runs the
// stream's pending items itself rather than sleep while the worker does: an "enqueue, then
// synchronize" pair then runs on one thread. Items still run one at a time and in order (whoever
// claims the next item holds `executing_`). The worker is woken only when it sleeps, and waiters
// only when one of them has reached its mark.
//
// An Event captures "the items enqueued on a stream so far"; it is complete when the stream has
// finished that many items. Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "src/common/status.h"

namespace chorus {

class Stream {
 public:
  Stream();
  // A stream that stands for a CUDA stream (chorus_cuda.h): no worker and no queue; device work
  // is enqueued on the CUDA stream itself, and synchronize() and idle() ask it.
  explicit Stream(void* cudaStream);
  ~Stream();  // waits for queued work
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Enqueues; returns the item's sequence number (1, 2, ...).
  uint64_t enqueue(std::function<Status()> item);
  Status synchronize();
  bool idle();
  bool reached(uint64_t seq);
  void waitFor(uint64_t seq);
  uint64_t lastEnqueued();
  bool isCuda() const { return isCuda_; }
  void* cudaStream() const { return cudaStream_; }

 private:
  void loop();
  // Runs the front item; called with mu_ held and executing_ claimed, returns with mu_ held.
  void runFront(std::unique_lock<std::mutex>& lk);

  std::mutex mu_;
  std::condition_variable workCv_;             // the worker waits here for items
  std::condition_variable doneCv_;             // synchronize/waitFor wait here
  std::deque<std::function<Status()>> queue_;  // guarded by mu_
  std::atomic<uint64_t> enqueued_{0};          // written under mu_
  std::atomic<uint64_t> completed_{0};         // written under mu_; read without it to poll
  uint64_t wakeAt_ = UINT64_MAX;               // guarded by mu_: smallest mark a sleeping waiter needs
  bool executing_ = false;                     // guarded by mu_: an item is running
  bool workerSleeping_ = false;                // guarded by mu_
  Status error_;                               // guarded by mu_
  bool stop_ = false;                          // guarded by mu_
  std::thread thread_;
  const bool isCuda_ = false;
  void* const cudaStream_ = nullptr;
};

// What an event recorded; empty means "nothing to wait for".
struct EventMark {
  std::shared_ptr<Stream> stream;
  uint64_t seq = 0;
};

// Waits for the tasks of one launch; completions come from the waiting thread itself (inline) or
// from engine threads. Lock-free when everything finished inline.
class LaunchLatch {
 public:
  explicit LaunchLatch(int count) : left_(count) {}
  void done(const Status& s);
  Status wait();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> left_;
  Status first_;  // guarded by mu_
};

}  // namespace chorus
