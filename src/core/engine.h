// The progress engine: a host thread that multiplexes tasks of the communicators that share it.
//
// Engines are shared explicitly (std::shared_ptr held by each communicator that uses one; split
// children and the communicators of one chorusCommInitAll share their parent's), never global.
// Tasks of one communicator run one at a time in submission order, because they share its
// connections; tasks of different communicators run interleaved. When no task can move, the
// thread spins for CHORUS_SPIN_NS, then yields CHORUS_YIELD_ITERS times, then naps on a futex on
// the counter it waits for (at most CHORUS_SLEEP_MAX_US at a time), so a rank waiting on a busy
// peer gives its core back. A task that makes no progress for its communicator's timeout fails
// with a message naming the peer; an aborted communicator's tasks fail at once.
//
// Thread-safe: submit() from any thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "src/core/config.h"
#include "src/core/task.h"

namespace chorus {

class Engine {
 public:
  explicit Engine(const Config& config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void submit(std::unique_ptr<Task> task);

 private:
  void loop();
  void idle(const WaitInfo& wait, int64_t idleNs, int* yields);

  const int64_t spinNs_;
  const int yieldIters_;
  const int64_t sleepMaxNs_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Task>> incoming_;  // guarded by mu_
  std::atomic<int> pending_{0};
  std::atomic<std::atomic<uint32_t>*> sleepingOn_{nullptr};
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace chorus
