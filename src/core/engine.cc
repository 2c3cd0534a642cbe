#include "src/core/engine.h"

#include <sched.h>

#include <algorithm>
#include <vector>

#include "src/common/os.h"

namespace chorus {
namespace {

const IntSetting kSpinNs{"CHORUS_SPIN_NS",
                         -1,
                         0,
                         int64_t(10) * 1000000000,
                         SettingScope::kRank,
                         "nanoseconds a waiting thread busy-polls before it yields; unset: by the host"};
const IntSetting kYieldIters{
    "CHORUS_YIELD_ITERS", 200, 0, 1000000, SettingScope::kRank, "yields before a waiting thread naps"};
const IntSetting kSleepMaxUs{
    "CHORUS_SLEEP_MAX_US", 2000, 1, 1000000, SettingScope::kRank, "the longest single futex nap, microseconds"};

}  // namespace

IdlePolicy::IdlePolicy(const Config& c, int ranksOnHost, int usableCpus)
    : spinNs(kSpinNs.get(c.env) >= 0 ? kSpinNs.get(c.env) : hostSpinNs(ranksOnHost, usableCpus)),
      yieldIters(static_cast<int>(kYieldIters.get(c.env))),
      sleepMaxNs(kSleepMaxUs.get(c.env) * 1000) {}

Engine::Engine(const Config& config) : policy_(config) {
  thread_ = std::thread([this] {
    setThreadName("chorus-engine");
    loop();
  });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (auto* w = sleepingOn_.load()) futexWakeAll(w);
  thread_.join();
}

void Engine::submit(std::unique_ptr<Task> task) {
  task->lastProgressNs = nowNs();
  {
    std::lock_guard<std::mutex> g(mu_);
    incoming_.push_back(std::move(task));
  }
  // seq_cst pair with loop(): it publishes sleepingOn_ and then re-reads pending_.
  pending_.fetch_add(1, std::memory_order_seq_cst);
  cv_.notify_all();
  if (auto* w = sleepingOn_.load(std::memory_order_seq_cst)) futexWakeAll(w);
}

SpinHistory& SpinHistory::mine() {
  static thread_local SpinHistory history;
  return history;
}

void IdlePolicy::step(const WaitInfo& wait, int64_t idleNs, int* yields, std::atomic<std::atomic<uint32_t>*>* announce,
                      const std::atomic<int>* pending) const {
  if (idleNs < spinNs) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
    return;
  }
  if (*yields < yieldIters && !wait.network) {
    ++*yields;
    sched_yield();
    return;
  }
  if (!wait.word) return;
  // Announce the nap, then re-check the word (and new submissions) before sleeping.
  wait.sleeperFlag->fetch_add(1, std::memory_order_seq_cst);
  if (announce) announce->store(wait.word, std::memory_order_seq_cst);
  if (wait.word->load(std::memory_order_seq_cst) == wait.seen &&
      (!pending || pending->load(std::memory_order_seq_cst) == 0)) {
    futexWait(wait.word, wait.seen, sleepMaxNs);
  }
  if (announce) announce->store(nullptr, std::memory_order_relaxed);
  wait.sleeperFlag->fetch_sub(1, std::memory_order_relaxed);
}

void Engine::loop() {
  // Per communicator, its tasks in submission order; only the first of each runs.
  std::map<TaskOwner*, std::deque<std::unique_ptr<Task>>> queues;
  IdleLoop idle(policy_, /*clockEveryTurn=*/true);
  while (true) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      if (queues.empty()) cv_.wait(lk, [&] { return stop_ || !incoming_.empty(); });
      if (stop_ && incoming_.empty() && queues.empty()) return;
      for (auto& t : incoming_) {
        TaskOwner* o = t->owner();
        queues[o].push_back(std::move(t));
      }
      pending_.fetch_sub(static_cast<int>(incoming_.size()), std::memory_order_relaxed);
      incoming_.clear();
    }
    bool movedAny = false;
    WaitInfo firstWait;
    idle.refreshClock();  // the engine's turns check deadlines every time
    const int64_t now = idle.now();
    bool skipped = false;
    for (auto it = queues.begin(); it != queues.end();) {
      auto& q = it->second;
      Task& t = *q.front();
      TaskOwner* o = it->first;
      if (!t.holdsExec) {
        if (!o->tryAcquireExec()) {  // a thread runs this communicator's launch inline
          skipped = true;
          ++it;
          continue;
        }
        t.holdsExec = true;
      }
      WaitInfo w;
      bool moved = false;
      Status s = t.advance(now, &w, &moved);
      movedAny = movedAny || moved;
      if (s.inProgress()) {
        if (!firstWait.word) firstWait = w;
        ++it;
        continue;
      }
      t.finish(s);
      q.pop_front();
      movedAny = true;
      if (q.empty()) {
        it = queues.erase(it);
        continue;
      }
      ++it;
    }
    if (!movedAny && !queues.empty() && !firstWait.word && skipped) {
      // Only tokens held elsewhere: nothing of ours to wait on, so nap briefly.
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      continue;
    }
    idle.after(movedAny || queues.empty(), firstWait, &sleepingOn_, &pending_);
  }
}

}  // namespace chorus
