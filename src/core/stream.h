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
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <type_traits>
#include <utility>

#include "src/common/status.h"

namespace chorus {

// A queued work item: any callable returning Status, kept inside the item when it fits (a lone
// operation's closure does: no allocation per call), else on the heap. Move-only.
class StreamItem {
 public:
  StreamItem() = default;
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, StreamItem>>>
  StreamItem(F&& f) {  // NOLINT: implicit, as std::function's
    using Fn = std::decay_t<F>;
    if constexpr (sizeof(Fn) <= kInlineBytes && alignof(Fn) <= alignof(std::max_align_t) &&
                  std::is_nothrow_move_constructible_v<Fn>) {
      new (buf_) Fn(std::forward<F>(f));
      ops_ = &kInlineOps<Fn>;
    } else {
      new (buf_) Fn*(new Fn(std::forward<F>(f)));
      ops_ = &kHeapOps<Fn>;
    }
  }
  StreamItem(StreamItem&& o) noexcept { take(o); }
  StreamItem& operator=(StreamItem&& o) noexcept {
    if (this != &o) {
      reset();
      take(o);
    }
    return *this;
  }
  StreamItem(const StreamItem&) = delete;
  StreamItem& operator=(const StreamItem&) = delete;
  ~StreamItem() { reset(); }

  Status operator()() { return ops_->call(buf_); }
  explicit operator bool() const { return ops_ != nullptr; }
  // Destroys the callable (and what it captured) now.
  void reset() {
    if (ops_) ops_->destroy(buf_);
    ops_ = nullptr;
  }

 private:
  static constexpr size_t kInlineBytes = 192;
  struct Ops {
    Status (*call)(void* at);
    void (*move)(void* to, void* from);  // leaves `from` destroyed
    void (*destroy)(void* at);
  };
  // The object placed at `at` (a callable, or a pointer to one on the heap).
  template <typename T>
  static T* at(void* p) {
    return std::launder(static_cast<T*>(p));
  }
  template <typename Fn>
  static constexpr Ops kInlineOps = {[](void* p) { return (*at<Fn>(p))(); },
                                     [](void* to, void* from) {
                                       new (to) Fn(std::move(*at<Fn>(from)));
                                       at<Fn>(from)->~Fn();
                                     },
                                     [](void* p) { at<Fn>(p)->~Fn(); }};
  template <typename Fn>
  static constexpr Ops kHeapOps = {[](void* p) { return (**at<Fn*>(p))(); },
                                   [](void* to, void* from) { new (to) Fn*(*at<Fn*>(from)); },
                                   [](void* p) { delete *at<Fn*>(p); }};
  void take(StreamItem& o) {
    if (!o.ops_) return;
    o.ops_->move(buf_, o.buf_);
    ops_ = o.ops_;
    o.ops_ = nullptr;
  }

  alignas(std::max_align_t) unsigned char buf_[kInlineBytes];
  const Ops* ops_ = nullptr;
};

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
  uint64_t enqueue(StreamItem item);
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
  std::condition_variable workCv_;      // the worker waits here for items
  std::condition_variable doneCv_;      // synchronize/waitFor wait here
  std::deque<StreamItem> queue_;        // guarded by mu_
  std::atomic<uint64_t> enqueued_{0};   // written under mu_
  std::atomic<uint64_t> completed_{0};  // written under mu_; read without it to poll
  uint64_t wakeAt_ = UINT64_MAX;        // guarded by mu_: smallest mark a sleeping waiter needs
  bool executing_ = false;              // guarded by mu_: an item is running
  bool workerSleeping_ = false;         // guarded by mu_
  bool workerRunning_ = false;          // guarded by mu_: the worker took an item and has not slept since
  Status error_;                        // guarded by mu_
  bool stop_ = false;                   // guarded by mu_
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
