// Memory a rank lets its peers read in place: chorusMemAlloc's allocations, chorusCommRegister's
// registrations, and the descriptors and mappings through which a peer reads them.
//
// chorusMemAlloc backs each allocation by its own memfd, kept open for the allocation's life.
// chorusCommRegister records a range on one communicator. When a collective's buffer lies in a
// registered range of a live allocation, the rank may describe it to a peer (a MemDesc, sent in a
// FIFO slot): the first time a peer needs an allocation, the rank offers a duplicate of its
// descriptor through the bootstrap's descriptor server, and the peer imports and maps it once and
// keeps the mapping. Deregistering the last range of an allocation retires it: the next
// descriptor sent to each peer that mapped it tells the peer to unmap it. Ranks that are threads
// of one process describe plain pointers, registered or not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "src/common/os.h"
#include "src/common/status.h"
#include "src/transport/transport.h"

namespace chorus {

class Bootstrap;

// Process-wide: chorusMemAlloc / chorusMemFree.
Result<void*> sharedAlloc(size_t bytes);
Status sharedFree(void* ptr);

// How a peer reaches a buffer of this rank; trivially copyable, travels in a FIFO slot.
struct MemDesc {
  static constexpr uint32_t kPointer = 1;  // the same address space: `addr` is the buffer
  static constexpr uint32_t kShared = 2;   // a chorusMemAlloc allocation, `offset` bytes in
  static constexpr int kMaxRetired = 8;
  uint32_t kind = 0;
  uint32_t nretired = 0;
  uint64_t addr = 0;
  uint64_t allocId = 0;
  uint64_t allocBytes = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;  // of the buffer described
  uint64_t token = 0;  // the allocation's descriptor waits at `server` under this token until claimed
  char server[64] = {0};
  uint64_t retired[kMaxRetired] = {0};  // allocations the peer should unmap first
};

// One communicator's registrations and the peers' allocations it has mapped. Registration calls
// come from the user's thread; describe() and resolve() from whichever thread runs the
// communicator's work; a mutex orders them.
class MemShare {
 public:
  // How this rank can let each peer read its memory, as the transport to the peer says: by
  // pointer (threads of this process), by mapping memory from chorusMemAlloc (a process of this
  // host), or not at all.
  using Reach = Transport::MemoryReach;
  MemShare(Bootstrap* bootstrap, std::vector<Reach> reach);
  ~MemShare();

  // chorusCommRegister / chorusCommDeregister. The handle is opaque to the user.
  Result<void*> registerRange(const void* ptr, size_t bytes);
  Status deregister(void* handle);

  // Whether [ptr, ptr + bytes) lies in a range registered here inside a live chorusMemAlloc
  // allocation (what a peer in another process could read in place).
  bool registered(const void* ptr, size_t bytes);
  // Whether a registration here holds [ptr, ptr + bytes), whatever memory it is (device buffers
  // for the one-copy collectives).
  bool covers(const void* ptr, size_t bytes);
  // Whether `peer` could read [ptr, ptr + bytes) in place (describe() would succeed), with no
  // side effect.
  bool readable(int peer, const void* ptr, size_t bytes);
  // Describes [ptr, ptr + bytes) for `peer`; false when that peer cannot read it in place (a
  // socket peer, or memory not registered on this communicator inside a live allocation).
  bool describe(int peer, const void* ptr, size_t bytes, MemDesc* desc);
  // The address, in this process, of the buffer `peer` described; maps the allocation on first
  // use. Checks that the described range lies inside what was mapped.
  Result<const char*> resolve(int peer, const MemDesc& desc);

 private:
  struct Registration {
    const char* base;
    size_t bytes;
    uint64_t allocId;
    bool holds(const char* p, size_t n) const {
      return p >= base && p - base <= static_cast<ptrdiff_t>(bytes) && n <= bytes - static_cast<size_t>(p - base);
    }
  };
  struct Export {
    uint64_t token;
  };
  struct PeerState {
    std::map<uint64_t, Export> exported;  // allocations offered to this peer
    std::vector<uint64_t> retire;         // to tell it to unmap
    std::map<uint64_t, Mapping> mapped;   // its allocations mapped here
  };

  // The allocation id of a registration holding the range, or 0; under mu_.
  uint64_t findRegistered(const char* p, size_t bytes) const;
  // Whether the live allocation holding the range has id `allocId`.
  static bool allocLive(const char* p, size_t bytes, uint64_t allocId);

  Bootstrap* bootstrap_;
  std::vector<Reach> reach_;
  std::mutex mu_;
  std::map<uint64_t, Registration> regs_;  // by handle id
  uint64_t nextHandle_ = 1;
  std::vector<PeerState> peers_;
};

}  // namespace chorus
