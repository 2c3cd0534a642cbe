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
    if (outstanding_.fetch_sub(1, std::memory_order_seq_cst) != 1) return;
    // The last one: wake waitNone, when one waits (every small launch ends here; most have
    // nobody to wake). Either this load sees the waiter, or the waiter's check after it counted
    // itself sees the count at 0: both are sequentially consistent.
    if (waiters_.load(std::memory_order_seq_cst) == 0) return;
    std::lock_guard<std::mutex> g(mu_);  // orders the wake with the waiter's check-then-sleep
    cv_.notify_all();
  }
  // Until every launch has finished (they end by themselves: by completing, by the timeout, or
  // at once after an abort).
  void waitNone() {
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return outstanding_.load(std::memory_order_seq_cst) == 0; });
    }
    waiters_.fetch_sub(1, std::memory_order_relaxed);
  }
  int outstanding() const { return outstanding_.load(std::memory_order_acquire); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> outstanding_{0};
  std::atomic<int> waiters_{0};  // threads in waitNone
};

}  // namespace chorus
