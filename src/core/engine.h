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

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "src/common/config.h"
#include "src/common/os.h"
#include "src/core/task.h"

namespace chorus {

// How a thread that runs tasks waits when none of them can move: spin for spinNs, yield yieldIters
// times, then nap on a futex on the awaited word for at most sleepMaxNs. Used by the engine and by
// threads that run a launch inline.
struct IdlePolicy {
  // The spin stage when CHORUS_SPIN_NS is not set: kHostSpinNs while the ranks on this host have a
  // usable CPU each (the peer a rank waits for is running, and answers within a microsecond or
  // two), none when they outnumber the CPUs (a spinning rank holds the CPU its peer needs), as
  // Open MPI yields only when oversubscribed.
  static constexpr int64_t kHostSpinNs = 2000;
  static int64_t hostSpinNs(int ranksOnHost, int usableCpus) { return ranksOnHost <= usableCpus ? kHostSpinNs : 0; }

  IdlePolicy() = default;
  // `ranksOnHost` and `usableCpus` decide the spin stage when the config leaves it (spinNs < 0).
  // CHORUS_SPIN_NS, CHORUS_YIELD_ITERS and CHORUS_SLEEP_MAX_US of `c` (declared in engine.cc).
  explicit IdlePolicy(const Config& c, int ranksOnHost = 1, int usableCpus = 0);
  int64_t spinNs = 0;
  int yieldIters = 0;
  int64_t sleepMaxNs = 0;

  // One step of waiting, `idleNs` into the idle spell. When napping, `announce` (if given) is set
  // to the word slept on so submitters can wake it, and the nap is skipped while *pending > 0.
  void step(const WaitInfo& wait, int64_t idleNs, int* yields, std::atomic<std::atomic<uint32_t>*>* announce = nullptr,
            const std::atomic<int>* pending = nullptr) const;
};

// Whether spinning pays on the calling thread, learnt from its last waits (SpinHistory, per
// thread: where a thread runs decides it). A spin stage that ran out before the wait ended is a
// miss; a wait that ended inside it, a hit. After kSpinMisses misses in a row the thread's waits
// skip the spin stage, but every kSpinProbeEvery-th tries it again; a hit resumes spinning. When
// the peer shares the waiter's CPU (the scheduler put both ranks on one core, or the machine has
// fewer cores than it told), a spin only delays the peer it waits for: the waits then yield at
// once, as without a spin stage.
struct SpinHistory {
  static constexpr int kSpinMisses = 4;
  static constexpr int kSpinProbeEvery = 64;
  int misses = 0;   // spin stages in a row that ran out
  int skipped = 0;  // waits since spinning was last tried
  // Whether the next wait spins.
  bool allowed() {
    if (misses < kSpinMisses) return true;
    return ++skipped % kSpinProbeEvery == 0;
  }
  void taught(bool hit) {
    misses = hit ? 0 : misses + 1;
    if (hit) skipped = 0;
  }
  // The calling thread's.
  static SpinHistory& mine();
};

// The waiting half of every run loop (the engine thread, a launch run inline, the inline direct
// all-reduce): after a turn that moved nothing, wait as the policy says on the word the first
// blocked lane waits for; after a turn that moved, start over. The clock is read only while
// nothing moves, on the 16th idle turn of a spell and every 16th after (a busy loop would
// otherwise spend a tenth of a small operation's time in clock_gettime, and a small message's
// wait is mostly over sooner), or when the loop asks (refreshClock).
class IdleLoop {
 public:
  // `clockEveryTurn`: the loop reads the clock itself at the start of every turn (refreshClock),
  // so idle turns need not.
  explicit IdleLoop(const IdlePolicy& policy, bool clockEveryTurn = false)
      : policy_(policy), clockEveryTurn_(clockEveryTurn) {}
  // A wait still open when the loop ends (the lane finished) ended then.
  ~IdleLoop() { endSpell(); }
  IdleLoop(const IdleLoop&) = delete;
  IdleLoop& operator=(const IdleLoop&) = delete;
  // The time of the last read (0 before any).
  int64_t now() const { return now_; }
  void refreshClock() { now_ = nowNs(); }
  // Ends a turn. `announce` and `pending` as IdlePolicy::step.
  void after(bool moved, const WaitInfo& wait, std::atomic<std::atomic<uint32_t>*>* announce = nullptr,
             const std::atomic<int>* pending = nullptr) {
    if (moved) {
      endSpell();
      idleSince_ = 0;
      yields_ = 0;
      return;
    }
    if (idleTurns_++ == 0) spins_ = policy_.spinNs > 0 && SpinHistory::mine().allowed();
    // Without clockEveryTurn the clock is read on the 16th idle turn of a spell and every 16th
    // after it: a wait that ends within 16 turns (most small messages) reads none. The spell is
    // timed from that first read.
    if (!clockEveryTurn_ && idleTurns_ % 16 == 0) now_ = nowNs();
    if (idleSince_ == 0 && (clockEveryTurn_ || idleTurns_ >= 16)) idleSince_ = now_;
    const int64_t idleNs = idleSince_ == 0 ? 0 : now_ - idleSince_;
    // A spell that does not spin starts past the spin stage.
    policy_.step(wait, spins_ ? idleNs : std::max(idleNs, policy_.spinNs), &yields_, announce, pending);
  }
  // The time the current idle spell began (0: the last turn moved).
  int64_t idleSince() const { return idleSince_; }

 private:
  // The end of an idle spell: whether its spin stage (if it had one) was enough.
  void endSpell() {
    if (idleTurns_ > 0 && spins_) SpinHistory::mine().taught(yields_ == 0);
    idleTurns_ = 0;
    spins_ = false;
  }

  const IdlePolicy policy_;
  const bool clockEveryTurn_;
  int64_t now_ = 0;
  int64_t idleSince_ = 0;
  uint32_t idleTurns_ = 0;  // idle turns in the current spell (wraps harmlessly: only % 16 and >= 16 after the first)
  int yields_ = 0;
  bool spins_ = false;  // the current spell has a spin stage
};

class Engine {
 public:
  explicit Engine(const Config& config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void submit(std::unique_ptr<Task> task);

 private:
  void loop();
  const IdlePolicy policy_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Task>> incoming_;  // guarded by mu_
  std::atomic<int> pending_{0};
  std::atomic<std::atomic<uint32_t>*> sleepingOn_{nullptr};
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace chorus
