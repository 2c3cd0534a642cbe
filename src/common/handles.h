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
  // The object behind `h`, or null when `h` is not live.
  std::shared_ptr<T> find(uintptr_t h) const {
    std::shared_lock<std::shared_mutex> g(mu_);
    auto it = live_.find(h);
    return it == live_.end() ? nullptr : it->second;
  }
  // Unpublishes `h` and returns its object (null when `h` was not live): later lookups fail.
  std::shared_ptr<T> take(uintptr_t h) {
    std::unique_lock<std::shared_mutex> g(mu_);
    auto it = live_.find(h);
    if (it == live_.end()) return nullptr;
    std::shared_ptr<T> obj = std::move(it->second);
    live_.erase(it);
    return obj;
  }

 private:
  mutable std::shared_mutex mu_;
  std::unordered_map<uintptr_t, std::shared_ptr<T>> live_;  // guarded by mu_
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
