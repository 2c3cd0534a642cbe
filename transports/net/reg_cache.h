// A registration cache for a network's memory registrations (one per protection domain), as
// NCCL's IB network keeps one per device: a range asked for again, or inside one registered
// already, shares that registration instead of registering anew.
//
// Ranges are registered whole pages at a time; each entry counts its users. An entry no one uses
// is kept for the next request (up to `keepUnused` of them, the least recently used going first)
// only where that is safe after the memory is freed: the network says so (a fabric that reaches
// memory through the kernel by virtual address, such as libfabric's tcp provider, registers
// nothing a free can invalidate), or invalidate() is told of every free. invalidate(range) drops
// every entry that overlaps the range: unused ones at once, used ones when their last user
// releases them (no new request finds them). With keepUnused 0 an entry goes with its last user,
// which is always safe. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "include/chorus/net.h"

namespace chorus {

class RegCache {
 public:
  struct Ops {
    // Registers [base, base + len) and returns the network's handle for it.
    std::function<chorusResult_t(void* base, size_t len, void** handle)> reg;
    std::function<void(void* handle)> dereg;
  };
  struct Entry {
    uintptr_t begin = 0;  // page-aligned
    uintptr_t end = 0;
    void* handle = nullptr;
    int users = 0;
    bool stale = false;  // invalidated while in use
    uint64_t lastUse = 0;
  };
  struct Stats {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t evicted = 0;      // unused entries dropped for room
    uint64_t invalidated = 0;  // entries dropped by invalidate()
    size_t entries = 0;        // registered now
    size_t unused = 0;         // of which no one uses
  };

  RegCache(Ops ops, size_t keepUnused);
  ~RegCache();  // deregisters every entry
  RegCache(const RegCache&) = delete;
  RegCache& operator=(const RegCache&) = delete;

  // A registration covering [p, p + n), shared or new; release it when done.
  chorusResult_t acquire(const void* p, size_t n, Entry** entry);
  void release(Entry* entry);
  void invalidate(const void* p, size_t n);
  Stats stats() const;

 private:
  void dropLocked(size_t i);
  void trimLocked();

  Ops ops_;
  size_t keepUnused_;
  uintptr_t page_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_;
  uint64_t clock_ = 0;
  Stats stats_;
};

}  // namespace chorus
