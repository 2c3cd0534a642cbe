#include "src/core/workers.h"

#include "src/common/os.h"

namespace chorus {

namespace {
// Polls of the generation word before a helper sleeps: long enough to catch the next piece of a
// busy channel (a 512 KiB copy takes tens of microseconds), short enough not to hold a core.
constexpr int kHelperSpins = 20000;
constexpr int kLeaderSpinsBeforeYield = 4000;

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

WorkerGroup::WorkerGroup(int size) : size_(size < 1 ? 1 : size) {
  threads_.reserve(static_cast<size_t>(size_ - 1));
  for (int part = 1; part < size_; ++part) threads_.emplace_back([this, part] { helper(part); });
}

WorkerGroup::~WorkerGroup() {
  stop_.store(true, std::memory_order_seq_cst);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  futexWakeAll(&generation_);
  for (std::thread& t : threads_) t.join();
}

void WorkerGroup::run(Fn fn, const void* ctx) {
  if (size_ == 1) {
    fn(ctx, 0, 1);
    return;
  }
  fn_ = fn;
  ctx_ = ctx;
  remaining_.store(size_ - 1, std::memory_order_relaxed);
  // seq_cst, as the FIFO counters: a helper stores sleepers_ and then re-reads generation_; this
  // store and the load below must not be reordered, or a wake-up is lost.
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) != 0) futexWakeAll(&generation_);
  fn(ctx, 0, size_);
  for (int spins = 0; remaining_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < kLeaderSpinsBeforeYield) {
      relax();
    } else {
      std::this_thread::yield();
    }
  }
}

void WorkerGroup::helper(int part) {
  // Not a load: a helper that starts after the first run() began must still take its part.
  uint32_t seen = 0;
  for (;;) {
    uint32_t g = generation_.load(std::memory_order_acquire);
    for (int spins = 0; g == seen && spins < kHelperSpins; ++spins) {
      relax();
      g = generation_.load(std::memory_order_acquire);
    }
    while (g == seen) {
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      if (generation_.load(std::memory_order_seq_cst) == seen) futexWait(&generation_, seen, 100000000);
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    fn_(ctx_, part, size_);
    remaining_.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace chorus
