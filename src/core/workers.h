// A worker group: the threads that move one piece of a channel together (the host executor of
// src/algo/prims.h). The thread that runs the lanes is worker 0; size() - 1 helper threads wait
// for work and, between pieces, spin briefly and then sleep on a futex, so an idle group costs
// no core. CHORUS_WORKERS_PER_CHANNEL sets the size (default 1: no helpers, no cost).
//
// A piece is cut into size() parts that whoever is awake claims, the calling thread included: a
// helper that is not scheduled (more threads than cores) leaves its part to the others instead of
// holding the piece up, and the caller waits only for parts already being moved.
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
  // Calls fn(ctx, part, size()) once for every part, on this thread or a helper, and returns when
  // every call has returned.
  void run(Fn fn, const void* ctx);

 private:
  void helper();
  // Claims and runs parts of run `gen` until none is left (or a newer run began).
  void claimParts(uint32_t gen);

  const int size_;
  // Written by run() before it publishes the run's ticket, read by whoever claims a part of it.
  Fn fn_ = nullptr;
  const void* ctx_ = nullptr;
  // (run number << 32) | next unclaimed part. A claim is a compare-and-swap on the whole word, so a
  // late helper can never take a part of a newer run for an older one.
  alignas(64) std::atomic<uint64_t> ticket_{0};
  alignas(64) std::atomic<int> done_{0};  // parts of the current run finished
  // The run number again, as a 32-bit word helpers can sleep on.
  alignas(64) std::atomic<uint32_t> generation_{0};
  std::atomic<uint32_t> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

}  // namespace chorus
