#include "src/core/memshare.h"

#include <cstring>

#include "src/bootstrap/bootstrap.h"

namespace chorus {
namespace {

// chorusMemAlloc's allocations: allocator bookkeeping (as malloc keeps), not communicator state.
struct Allocation {
  uint64_t id;
  size_t bytes;
  UniqueFd fd;
  Mapping map;
};
struct AllocTable {
  std::mutex mu;
  std::map<const char*, Allocation> byBase;
  uint64_t nextId = 1;
};
AllocTable& allocTable() {
  static AllocTable* t = new AllocTable();
  return *t;
}

// The allocation holding [ptr, ptr + bytes), under the table's lock; null when none does.
Allocation* findLocked(AllocTable& t, const char* ptr, size_t bytes) {
  auto it = t.byBase.upper_bound(ptr);
  if (it == t.byBase.begin()) return nullptr;
  --it;
  const char* base = it->first;
  if (ptr < base || ptr - base > static_cast<ptrdiff_t>(it->second.bytes) ||
      bytes > it->second.bytes - static_cast<size_t>(ptr - base)) {
    return nullptr;
  }
  return &it->second;
}

}  // namespace

Result<void*> sharedAlloc(size_t bytes) {
  CHORUS_ASSIGN_OR_RETURN(UniqueFd fd, makeMemfd("chorus-mem", bytes));
  CHORUS_ASSIGN_OR_RETURN(Mapping m, Mapping::map(fd.get(), bytes));
  auto* base = static_cast<char*>(m.data());
  auto& t = allocTable();
  std::lock_guard<std::mutex> g(t.mu);
  t.byBase.emplace(base, Allocation{t.nextId++, bytes, std::move(fd), std::move(m)});
  return static_cast<void*>(base);
}

Status sharedFree(void* ptr) {
  auto& t = allocTable();
  std::lock_guard<std::mutex> g(t.mu);
  auto it = t.byBase.find(static_cast<const char*>(ptr));
  if (it == t.byBase.end()) return invalidArgument("ptr was not returned by chorusMemAlloc (or was freed already)");
  t.byBase.erase(it);
  return Status::ok();
}

MemShare::MemShare(Bootstrap* bootstrap, std::vector<Reach> reach)
    : bootstrap_(bootstrap), reach_(std::move(reach)), peers_(reach_.size()) {}

MemShare::~MemShare() {
  for (auto& p : peers_) {
    for (auto& [id, e] : p.exported) bootstrap_->withdrawFd(e.token);
  }
}

Result<void*> MemShare::registerRange(const void* ptr, size_t bytes) {
  const auto* p = static_cast<const char*>(ptr);
  uint64_t allocId = 0;
  {
    auto& t = allocTable();
    std::lock_guard<std::mutex> g(t.mu);
    if (Allocation* a = findLocked(t, p, bytes)) allocId = a->id;
  }
  std::lock_guard<std::mutex> g(mu_);
  const uint64_t h = nextHandle_++;
  regs_.emplace(h, Registration{p, bytes, allocId});
  return reinterpret_cast<void*>(static_cast<uintptr_t>(h));
}

Status MemShare::deregister(void* handle) {
  const auto h = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(handle));
  std::lock_guard<std::mutex> g(mu_);
  auto it = regs_.find(h);
  if (it == regs_.end()) {
    return invalidArgument("handle was not returned by chorusCommRegister on this communicator (or was deregistered)");
  }
  const uint64_t allocId = it->second.allocId;
  regs_.erase(it);
  if (allocId == 0) return Status::ok();
  for (const auto& [k, r] : regs_) {
    if (r.allocId == allocId) return Status::ok();  // still registered through another range
  }
  for (auto& p : peers_) {
    auto e = p.exported.find(allocId);
    if (e == p.exported.end()) continue;
    bootstrap_->withdrawFd(e->second.token);
    p.exported.erase(e);
    p.retire.push_back(allocId);
  }
  return Status::ok();
}

uint64_t MemShare::findRegistered(const char* p, size_t bytes) const {
  for (const auto& [k, r] : regs_) {
    if (r.allocId != 0 && r.holds(p, bytes)) return r.allocId;
  }
  return 0;
}

bool MemShare::allocLive(const char* p, size_t bytes, uint64_t allocId) {
  auto& t = allocTable();
  std::lock_guard<std::mutex> g(t.mu);
  Allocation* a = findLocked(t, p, bytes);
  return a && a->id == allocId;
}

bool MemShare::covers(const void* ptr, size_t bytes) {
  const auto* p = static_cast<const char*>(ptr);
  std::lock_guard<std::mutex> g(mu_);
  for (const auto& [k, r] : regs_) {
    if (r.holds(p, bytes)) return true;
  }
  return false;
}

bool MemShare::registered(const void* ptr, size_t bytes) {
  const auto* p = static_cast<const char*>(ptr);
  uint64_t allocId = 0;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (regs_.empty()) return false;
    allocId = findRegistered(p, bytes);
  }
  return allocId != 0 && allocLive(p, bytes, allocId);
}

bool MemShare::readable(int peer, const void* ptr, size_t bytes) {
  if (reach_[peer] == Reach::kAddressSpace) return true;
  return reach_[peer] == Reach::kSharedMapping && registered(ptr, bytes);
}

bool MemShare::describe(int peer, const void* ptr, size_t bytes, MemDesc* d) {
  *d = MemDesc{};
  d->bytes = bytes;
  if (reach_[peer] == Reach::kAddressSpace) {
    d->kind = MemDesc::kPointer;
    d->addr = reinterpret_cast<uintptr_t>(ptr);
    return true;
  }
  if (reach_[peer] != Reach::kSharedMapping) return false;
  const auto* p = static_cast<const char*>(ptr);
  std::lock_guard<std::mutex> g(mu_);
  if (regs_.empty()) return false;
  const uint64_t allocId = findRegistered(p, bytes);
  if (allocId == 0) return false;
  PeerState& ps = peers_[peer];
  {
    // The registration may outlive its allocation (chorusMemFree first): only a live allocation
    // with the same id is described.
    auto& t = allocTable();
    std::lock_guard<std::mutex> tg(t.mu);
    Allocation* a = findLocked(t, p, bytes);
    if (!a || a->id != allocId) return false;
    d->allocBytes = a->bytes;
    d->offset = static_cast<uint64_t>(p - static_cast<const char*>(a->map.data()));
    auto e = ps.exported.find(allocId);
    if (e == ps.exported.end()) {
      Result<UniqueFd> fd = dupFd(a->fd.get());
      if (!fd.isOk()) return false;
      const uint64_t token = randomU64() | 1;
      bootstrap_->exportFd(peer, token, fd.take());
      e = ps.exported.emplace(allocId, Export{token}).first;
    }
    // Every descriptor carries the token: the peer may read a later descriptor of the same
    // allocation first (the gather connection's before the scatter one's), and it imports on
    // whichever it reads first, once.
    d->token = e->second.token;
  }
  d->kind = MemDesc::kShared;
  d->allocId = allocId;
  std::snprintf(d->server, sizeof(d->server), "%s", bootstrap_->fdServerName().c_str());
  while (!ps.retire.empty() && d->nretired < MemDesc::kMaxRetired) {
    d->retired[d->nretired++] = ps.retire.back();
    ps.retire.pop_back();
  }
  return true;
}

Result<const char*> MemShare::resolve(int peer, const MemDesc& d) {
  if (d.kind == MemDesc::kPointer) {
    if (reach_[peer] != Reach::kAddressSpace) {
      return internalError("rank " + std::to_string(peer) + " described a pointer but is not in this process");
    }
    return reinterpret_cast<const char*>(static_cast<uintptr_t>(d.addr));
  }
  if (d.kind != MemDesc::kShared || d.nretired > MemDesc::kMaxRetired) {
    return internalError("rank " + std::to_string(peer) + " sent a malformed memory descriptor");
  }
  std::lock_guard<std::mutex> g(mu_);
  PeerState& ps = peers_[peer];
  for (uint32_t i = 0; i < d.nretired; ++i) ps.mapped.erase(d.retired[i]);
  auto it = ps.mapped.find(d.allocId);
  if (it == ps.mapped.end()) {
    CHORUS_ASSIGN_OR_RETURN(
        UniqueFd fd, bootstrap_->importFd(peer, std::string(d.server, strnlen(d.server, sizeof(d.server))), d.token));
    CHORUS_ASSIGN_OR_RETURN(size_t size, fileSize(fd.get()));
    if (size < d.allocBytes) {
      return internalError("rank " + std::to_string(peer) + "'s allocation is " + std::to_string(size) +
                           " bytes, not the " + std::to_string(d.allocBytes) + " it described");
    }
    CHORUS_ASSIGN_OR_RETURN(Mapping m, Mapping::map(fd.get(), d.allocBytes));
    it = ps.mapped.emplace(d.allocId, std::move(m)).first;
  }
  const size_t mapped = it->second.size();
  if (d.offset > mapped || d.bytes > mapped - d.offset) {
    return internalError("rank " + std::to_string(peer) + " described bytes " + std::to_string(d.offset) + " to " +
                         std::to_string(d.offset + d.bytes) + " of an allocation of " + std::to_string(mapped));
  }
  return static_cast<const char*>(it->second.data()) + d.offset;
}

}  // namespace chorus
