#include "transports/net/reg_cache.h"

#include <unistd.h>

#include <algorithm>

namespace chorus {

RegCache::RegCache(Ops ops, size_t keepUnused)
    : ops_(std::move(ops)), keepUnused_(keepUnused), page_(uintptr_t(::sysconf(_SC_PAGESIZE))) {}

RegCache::~RegCache() {
  for (auto& e : entries_) ops_.dereg(e->handle);
}

chorusResult_t RegCache::acquire(const void* p, size_t n, Entry** entry) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t begin = a & ~(page_ - 1);
  const uintptr_t end = (a + (n ? n : 1) + page_ - 1) & ~(page_ - 1);
  std::lock_guard<std::mutex> g(mu_);
  for (auto& e : entries_) {
    if (!e->stale && e->begin <= begin && end <= e->end) {
      ++e->users;
      e->lastUse = ++clock_;
      ++stats_.hits;
      *entry = e.get();
      return chorusSuccess;
    }
  }
  void* handle = nullptr;
  const chorusResult_t rc = ops_.reg(reinterpret_cast<void*>(begin), end - begin, &handle);
  if (rc != chorusSuccess) return rc;
  auto e = std::make_unique<Entry>();
  e->begin = begin;
  e->end = end;
  e->handle = handle;
  e->users = 1;
  e->lastUse = ++clock_;
  ++stats_.misses;
  *entry = e.get();
  entries_.push_back(std::move(e));
  return chorusSuccess;
}

void RegCache::dropLocked(size_t i) {
  ops_.dereg(entries_[i]->handle);
  entries_.erase(entries_.begin() + std::ptrdiff_t(i));
}

void RegCache::trimLocked() {
  for (;;) {
    size_t unused = 0;
    size_t oldest = entries_.size();
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (entries_[i]->users > 0) continue;
      ++unused;
      if (oldest == entries_.size() || entries_[i]->lastUse < entries_[oldest]->lastUse) oldest = i;
    }
    if (unused <= keepUnused_) return;
    dropLocked(oldest);
    ++stats_.evicted;
  }
}

void RegCache::release(Entry* entry) {
  std::lock_guard<std::mutex> g(mu_);
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].get() != entry) continue;
    if (--entry->users > 0) return;
    if (entry->stale) {
      dropLocked(i);
      ++stats_.invalidated;
      return;
    }
    trimLocked();
    return;
  }
}

void RegCache::invalidate(const void* p, size_t n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> g(mu_);
  for (size_t i = entries_.size(); i-- > 0;) {
    Entry& e = *entries_[i];
    if (e.end <= a || a + n <= e.begin) continue;
    if (e.users > 0) {
      e.stale = true;
      continue;
    }
    dropLocked(i);
    ++stats_.invalidated;
  }
}

RegCache::Stats RegCache::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  Stats s = stats_;
  s.entries = entries_.size();
  s.unused = size_t(std::count_if(entries_.begin(), entries_.end(), [](const auto& e) { return e->users == 0; }));
  return s;
}

}  // namespace chorus
