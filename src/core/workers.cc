#include "src/core/workers.h"

#include "src/common/os.h"

namespace chorus {

namespace {
// Polls of the generation word before a helper sleeps: enough to catch the next piece of a busy
// channel, short enough not to hold a core another thread needs for long.
constexpr int kHelperSpins = 2000;
constexpr int kSpinsBeforeYield = 2000;

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

WorkerGroup::WorkerGroup(int size) : size_(size < 1 ? 1 : size) {
  threads_.reserve(static_cast<size_t>(size_ - 1));
  for (int i = 1; i < size_; ++i) threads_.emplace_back([this] { helper(); });
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
  done_.store(0, std::memory_order_relaxed);
  const uint32_t gen = static_cast<uint32_t>(ticket_.load(std::memory_order_relaxed) >> 32) + 1;
  ticket_.store(uint64_t(gen) << 32, std::memory_order_release);
  // seq_cst, as the FIFO counters: a helper stores sleepers_ and then re-reads generation_; this
  // store and the load below must not be reordered, or a wake-up is lost.
  generation_.store(gen, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) != 0) futexWakeAll(&generation_);
  claimParts(gen);
  // Only parts a helper is moving right now remain.
  for (int spins = 0; done_.load(std::memory_order_acquire) != size_; ++spins) {
    if (spins < kSpinsBeforeYield) {
      relax();
    } else {
      std::this_thread::yield();
    }
  }
}

void WorkerGroup::claimParts(uint32_t gen) {
  uint64_t t = ticket_.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<uint32_t>(t >> 32) != gen || static_cast<int>(static_cast<uint32_t>(t)) >= size_) return;
    if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    fn_(ctx_, static_cast<int>(static_cast<uint32_t>(t)), size_);
    done_.fetch_add(1, std::memory_order_release);
    t = ticket_.load(std::memory_order_acquire);
  }
}

void WorkerGroup::helper() {
  // Not a load: a helper that starts after the first run() began must still see it as new.
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
    claimParts(g);
  }
}

}  // namespace chorus
