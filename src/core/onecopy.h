// The one-copy collectives' records and decision (src/core/comm_onecopy.cc), apart so tests can
// make records up.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "transports/transport.h"

namespace chorus {

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
  uint32_t offers = 0;  // 1: every peer may read and write these buffers in place
  uint64_t count = 0;
  uint32_t type = 0;
  uint32_t coll = 0;  // CollType
  uint32_t root = 0;  // broadcast, reduce
  // The reduction as this rank resolved it: the kernel applies one rank's to every input, so
  // every rank's must be the same (a pre-multiplied sum's scalar may differ between ranks).
  uint32_t redKind = 0;
  uint32_t hasPre = 0;
  uint32_t hasPostDiv = 0;
  double scaleF = 1.0;
  uint64_t scaleI = 1;
  uint64_t divisor = 1;
  GpuInfo gpu;
  OneCopyBuffer send;  // addr 0: the collective does not read it (a broadcast's off its root)
  OneCopyBuffer recv;  // addr 0: it does not write it (a reduce's off its root)
  OneCopyBuffer signal;
  char server[64] = {0};
};

// Whether the ranks of `all` (one record each, in rank order; peers[q] is rank q) run one-copy:
// every rank offers, all issued the same collective, root, count, type and reduction (scalar
// included), two ranks
// of one process share one GPU (a cuMem allocation is mapped for its own GPU only), and two ranks
// of different processes have GPUs that reach each other (gpuPeers: the same GPU, or peer access
// both ways, and neither set CHORUS_P2P_DISABLE).
bool oneCopyAgreed(const std::vector<PeerInfo>& peers, const std::vector<OneCopyRecord>& all);

}  // namespace chorus
