// Host streams and events.
//
// A Stream is an in-order queue of work items run by its own worker thread (like the host thread
// behind a CUDA stream). A work item runs to completion before the next starts; a launch item
// submits its tasks to their communicators' engines and waits for them, so the worker sleeps
// while the engines work. Errors are sticky: the first one is kept and returned by
// synchronize(), while later items still run (a broken communicator fails its own work fast).
//
// An Event captures "the items enqueued on a stream so far"; it is complete when the stream has
// finished that many items. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "src/core/status.h"

namespace chorus {

class Stream {
 public:
  Stream();
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

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<Status()>> queue_;  // guarded by mu_
  uint64_t enqueued_ = 0;                      // guarded by mu_
  uint64_t completed_ = 0;                     // guarded by mu_
  Status error_;                               // guarded by mu_
  bool stop_ = false;
  std::thread thread_;
};

// What an event recorded; empty means "nothing to wait for".
struct EventMark {
  std::shared_ptr<Stream> stream;
  uint64_t seq = 0;
};

// Waits for the tasks of one launch; completions come from engine threads.
class LaunchLatch {
 public:
  explicit LaunchLatch(int count) : left_(count) {}
  void done(const Status& s);
  Status wait();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int left_;
  Status first_;
};

}  // namespace chorus

// The C handles.
struct chorusStream {
  std::shared_ptr<chorus::Stream> impl;
};
struct chorusEvent {
  std::mutex mu;
  chorus::EventMark mark;  // guarded by mu
};
