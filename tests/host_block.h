// A block of host threads standing in for a CUDA thread block (src/device/lane_exec.h's Block),
// and a runner that runs ranks' launches with such blocks: the kernel's whole logic but the CUDA
// memory model, on every machine and under TSan.
#pragma once

#include <atomic>
#include <barrier>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "src/device/launch_desc.h"

namespace chorus::device {

// A block of host threads, as lane_exec.h asks of a Block.
struct BlockShared {
  explicit BlockShared(unsigned n) : bar(n) {}
  std::barrier<> bar;
  uint64_t slot = 0;
  std::atomic<bool> any{false};
};

class HostBlock {
 public:
  HostBlock(BlockShared& s, unsigned tid, unsigned n, unsigned index) : s_(s), tid_(tid), n_(n), index_(index) {}
  unsigned tid() const { return tid_; }
  unsigned nthreads() const { return n_; }
  unsigned index() const { return index_; }
  void sync() { s_.bar.arrive_and_wait(); }
  uint32_t acquire(uint32_t* p) { return std::atomic_ref<uint32_t>(*p).load(std::memory_order_acquire); }
  void release(uint32_t* p, uint32_t v) { std::atomic_ref<uint32_t>(*p).store(v, std::memory_order_release); }
  void store(uint32_t* p, uint32_t v) { std::atomic_ref<uint32_t>(*p).store(v, std::memory_order_relaxed); }
  uint64_t acquire64(uint64_t* p) { return std::atomic_ref<uint64_t>(*p).load(std::memory_order_acquire); }
  void release64(uint64_t* p, uint64_t v) { std::atomic_ref<uint64_t>(*p).store(v, std::memory_order_release); }
  bool claim(uint32_t* p) {
    uint32_t expected = 0;
    return std::atomic_ref<uint32_t>(*p).compare_exchange_strong(expected, 1, std::memory_order_acq_rel);
  }
  uint64_t nowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void relax() { std::this_thread::yield(); }
  bool any(bool v) {
    if (v) s_.any.store(true, std::memory_order_relaxed);
    sync();
    const bool r = s_.any.load(std::memory_order_relaxed);
    sync();
    if (tid_ == 0) s_.any.store(false, std::memory_order_relaxed);
    sync();
    return r;
  }
  // Each word of a line is one atomic access, as each is one store on the device.
  FifoLine loadLine(const FifoLine* l) {
    FifoLine v;
    for (int i = 0; i < 2; ++i) {
      v.word[i] = std::atomic_ref<uint64_t>(const_cast<uint64_t&>(l->word[i])).load(std::memory_order_relaxed);
    }
    return v;
  }
  void storeLine(FifoLine* l, uint64_t w0, uint64_t w1) {
    std::atomic_ref<uint64_t>(l->word[0]).store(w0, std::memory_order_relaxed);
    std::atomic_ref<uint64_t>(l->word[1]).store(w1, std::memory_order_relaxed);
  }
  // LL128 (lane_exec.h): one thread moves a whole line, the flag word last with release order
  // and first with acquire order, so a reader that finds it current has the line.
  static constexpr unsigned kLineGroup = 1;
  static constexpr unsigned kWarp = 1;
  FifoLine loadPart(const FifoLine128* l, unsigned v) {
    auto word = [&](int i, std::memory_order o) {
      return std::atomic_ref<uint64_t>(const_cast<uint64_t&>(l->word[i])).load(o);
    };
    FifoLine x;
    x.word[1] = word(2 * v + 1, v == 7 ? std::memory_order_acquire : std::memory_order_relaxed);
    x.word[0] = word(2 * v, std::memory_order_relaxed);
    return x;
  }
  void storePart(FifoLine128* l, unsigned v, uint64_t w0, uint64_t w1) {
    std::atomic_ref<uint64_t>(l->word[2 * v]).store(w0, std::memory_order_relaxed);
    std::atomic_ref<uint64_t>(l->word[2 * v + 1])
        .store(w1, v == 7 ? std::memory_order_release : std::memory_order_relaxed);
  }
  bool lineAny(bool v) { return v; }
  void lineSync() {}
  uint64_t shareFrom(unsigned from, uint64_t v) {
    if (tid_ == from) s_.slot = v;
    sync();
    v = s_.slot;
    sync();
    return v;
  }
  uint64_t share(uint64_t v) { return shareFrom(0, v); }

 private:
  BlockShared& s_;
  unsigned tid_;
  unsigned n_;
  unsigned index_;
};

// A thread that sets the abort word *word after `delay`, as a host aborting its communicator does
// while the kernels wait; join it after the launch.
inline std::thread abortAfter(uint32_t* word, std::chrono::milliseconds delay) {
  return std::thread([word, delay] {
    std::this_thread::sleep_for(delay);
    std::atomic_ref<uint32_t>(*word).store(1, std::memory_order_release);
  });
}

// Each rank's launches in order on a thread of its own (ranks with runs[r] false never run);
// each launch's blocks as `threads` host threads each, all at once. These two are defined in
// tests/host_lanes.cc, the one file of the tests that instantiates the executor.
void runOnHostThreads(const std::vector<std::vector<LaunchParams>>& launches, unsigned threads,
                      const std::vector<bool>& runs = {});
// Block b of launch p run by the executor's build without LL128 (runBlock<HostBlock, false>).
void runBlockWithoutLL128(HostBlock& b, const LaunchParams& p);

}  // namespace chorus::device
