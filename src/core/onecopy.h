// The one-copy collectives' host side (src/core/comm_onecopy.cc): the records ranks exchange, the
// decision (apart so tests can make records up), and the part of a communicator that exchanges
// them and maps its peers' offered memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "src/algo/algorithm.h"
#include "src/common/status.h"
#include "src/transport/transport.h"

namespace chorus {

class Communicator;
struct OpInfo;
namespace device {
struct OneCopyArgs;
}

constexpr uint32_t kOneCopyMagic = 0x4f4e4543;  // "ONEC"

// One buffer as its owner describes it.
struct OneCopyBuffer {
  uint64_t addr = 0;        // in its owner's process
  uint64_t allocId = 0;     // its shareable allocation (0: none)
  uint64_t allocBytes = 0;  // that allocation's mapped size
  uint64_t offset = 0;      // of addr in it
  uint64_t token = 0;       // nonzero: the allocation's descriptor waits for peer p under token + p
};

struct OneCopyRecord {
  uint32_t magic = kOneCopyMagic;
  uint32_t reserved = 0;
  AgreedCall call;  // what the algorithm decides on (Algorithm::agreed)
  GpuInfo gpu;
  OneCopyBuffer send;  // addr 0: the collective does not read it (a broadcast's off its root)
  OneCopyBuffer recv;  // addr 0: it does not write it (a reduce's off its root)
  OneCopyBuffer signal;
  char server[64] = {0};
};

// Whether the ranks of `all` (one record each, in rank order; peers[q] is rank q) run `algo`:
// its own decision over the calls they describe (Algorithm::agreed: one-copy's wants every rank
// offering and the same call), and GPUs that reach each other: two ranks of one process share
// one GPU (a cuMem allocation is mapped for its own GPU only), two ranks of different processes
// have GPUs that reach each other (gpuPeers: the same GPU, or peer access both ways, and neither
// set CHORUS_P2P_DISABLE).
bool oneCopyAgreed(const Algorithm& algo, const std::vector<PeerInfo>& peers, const std::vector<OneCopyRecord>& all);

// One communicator's side of the one-copy collectives: its record for a call, the buffers it
// offered its peers in other processes, and theirs mapped here (for the communicator's life).
// Thread-compatible: one launching thread at a time, as every launch.
class OneCopyExchange {
 public:
  explicit OneCopyExchange(Communicator& comm) : comm_(comm) {}
  OneCopyExchange(const OneCopyExchange&) = delete;
  OneCopyExchange& operator=(const OneCopyExchange&) = delete;

  // Whether `op` exchanges records: decided alike on every rank.
  bool candidate(const OpInfo& op) const;
  // For each communicator's ops, in order: the kernel's arguments where a one-copy collective's
  // records agreed (null elsewhere; args[i] parallels work[i]'s ops). Exchanges every candidate's
  // record with every peer, every communicator's sends before any receive.
  static Status exchange(std::vector<std::pair<Communicator*, const std::vector<OpInfo>*>>& work,
                         std::vector<std::vector<const device::OneCopyArgs*>>* args);

 private:
  // This rank's record for `op`; a buffer's part of it (offering its allocation to peers in other
  // processes the first time; a user's buffer must be registered, the signal area need not); a
  // peer's offered allocations mapped here; and the kernel's arguments from every rank's record.
  Status record(const OpInfo& op, OneCopyRecord* r);
  Status describe(const void* ptr, size_t bytes, bool crossProcess, bool userBuffer, bool* offers, OneCopyBuffer* out);
  Status map(int peer, const OneCopyRecord& r);
  Result<const device::OneCopyArgs*> argsFor(const OpInfo& op, const std::vector<OneCopyRecord>& all);

  Communicator& comm_;
  uint64_t calls_ = 0;                                // candidates so far: their tags
  std::set<uint64_t> offered_;                        // this rank's allocations offered
  std::map<std::pair<int, uint64_t>, char*> mapped_;  // (peer, allocation): mapped here
};

}  // namespace chorus
