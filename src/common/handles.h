// The C API's handles: chorusComm_t, chorusStream_t and chorusEvent_t.
//
// A handle is not the address of its object. It is a value drawn once from a process-wide 64-bit
// serial and never reused, looked up in a table that owns the object through a shared_ptr. So:
// - a destroyed handle stays refused, even after a new object is created (no address reuse can
//   revive it: the value carries the object's generation);
// - a garbage value is refused without reading the memory it points to (handle values are
//   non-canonical addresses: a stray dereference faults at once instead of reading something);
// - a call in flight holds a reference: destroying or aborting the handle from another thread
//   removes it from the table at once, and the object is freed when the last call leaves.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace chorus {

// A new handle value; every kind of handle draws from one serial, so a stream's handle is never
// mistaken for a communicator's.
uintptr_t nextHandleValue();

template <typename T>
class HandleTable {
 public:
  // Publishes `obj` under a new handle value.
  uintptr_t add(std::shared_ptr<T> obj) {
    const uintptr_t h = nextHandleValue();
    std::unique_lock<std::shared_mutex> g(mu_);
    live_.emplace(h, std::move(obj));
    return h;
  }
  // The object behind `h`, or null when `h` is not live. A thread's last answer is kept and given
  // again, without the lock, while no handle of the table has been taken since: a loop of calls
  // on one handle reads one counter.
  std::shared_ptr<T> find(uintptr_t h) const {
    thread_local LastFound last;
    const uint64_t taken = taken_.load(std::memory_order_seq_cst);
    if (last.table == this && last.handle == h && last.taken == taken) {
      if (std::shared_ptr<T> obj = last.obj.lock()) return obj;
    }
    std::shared_lock<std::shared_mutex> g(mu_);
    auto it = live_.find(h);
    if (it == live_.end()) return nullptr;
    last = LastFound{this, h, taken, it->second};
    return it->second;
  }
  // Unpublishes `h` and returns its object (null when `h` was not live): later lookups fail.
  std::shared_ptr<T> take(uintptr_t h) {
    std::unique_lock<std::shared_mutex> g(mu_);
    auto it = live_.find(h);
    if (it == live_.end()) return nullptr;
    // Counted before the object leaves the table: a lookup that still matched a thread's last
    // answer read the count before this, so it came before the take, as one under the lock would.
    taken_.fetch_add(1, std::memory_order_seq_cst);
    std::shared_ptr<T> obj = std::move(it->second);
    live_.erase(it);
    return obj;
  }

 private:
  struct LastFound {
    const HandleTable* table = nullptr;
    uintptr_t handle = 0;
    uint64_t taken = 0;
    std::weak_ptr<T> obj;  // never keeps a taken object alive
  };

  mutable std::shared_mutex mu_;
  std::unordered_map<uintptr_t, std::shared_ptr<T>> live_;  // guarded by mu_
  std::atomic<uint64_t> taken_{0};                          // handles taken so far
};

template <typename H>
uintptr_t handleValue(H h) {
  return reinterpret_cast<uintptr_t>(h);
}
template <typename H>
H handleOf(uintptr_t v) {
  return reinterpret_cast<H>(v);
}

}  // namespace chorus
