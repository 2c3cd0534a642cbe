// The launches of a communicator that have not finished, so destroy, finalize and split can wait
// for them. Thread-safe: launches start on the user's thread and finish on whichever runs them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>

namespace chorus {

class WorkCount {
 public:
  void started() { outstanding_.fetch_add(1, std::memory_order_relaxed); }
  void finished() {
    if (outstanding_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    // The last one: wake waitNone (the lock orders this with its check-then-sleep).
    std::lock_guard<std::mutex> g(mu_);
    cv_.notify_all();
  }
  // Until every launch has finished (they end by themselves: by completing, by the timeout, or
  // at once after an abort).
  void waitNone() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return outstanding_.load(std::memory_order_acquire) == 0; });
  }
  int outstanding() const { return outstanding_.load(std::memory_order_acquire); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> outstanding_{0};
};

}  // namespace chorus
