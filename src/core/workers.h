// A worker group: the threads that move one piece of a channel together (the host executor of
// src/algo/prims.h). The thread that runs the lanes is worker 0; size() - 1 helper threads wait
// for work and, between pieces, spin briefly and then sleep on a futex, so an idle group costs
// no core. CHORUS_WORKERS_PER_CHANNEL sets the size (default 1: no helpers, no cost).
//
// The progress thread runs a communicator's channels one after another, so the channels share
// one group: at any moment the piece being moved has all of its workers.
//
// run() is called by one thread at a time (the holder of the communicator's execution token).
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace chorus {

class WorkerGroup {
 public:
  using Fn = void (*)(const void* ctx, int part, int parts);

  explicit WorkerGroup(int size);
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  int size() const { return size_; }
  // Calls fn(ctx, part, size()) once for every part, part 0 on the calling thread, and returns
  // when every call has returned.
  void run(Fn fn, const void* ctx);

 private:
  void helper(int part);

  const int size_;
  // Written by run() before it moves `generation_`, read by helpers after they see it move.
  Fn fn_ = nullptr;
  const void* ctx_ = nullptr;
  alignas(64) std::atomic<uint32_t> generation_{0};
  std::atomic<uint32_t> sleepers_{0};
  std::atomic<bool> stop_{false};
  alignas(64) std::atomic<int> remaining_{0};
  std::vector<std::thread> threads_;
};

}  // namespace chorus
