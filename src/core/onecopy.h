// The one-copy all-reduce's records and decision (src/core/comm_onecopy.cc), apart so tests can
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
  uint32_t pad = 0;
  GpuInfo gpu;
  OneCopyBuffer send;
  OneCopyBuffer recv;
  OneCopyBuffer signal;
  char server[64] = {0};
};

// Whether the ranks of `all` (one record each, in rank order; peers[q] is rank q) run one-copy:
// every rank offers, all issued the same count and type, and every two ranks' GPUs are one GPU
// in one process or reach each other (gpuPeers: neither set CHORUS_P2P_DISABLE).
bool oneCopyAgreed(const std::vector<PeerInfo>& peers, const std::vector<OneCopyRecord>& all);
// Blocks per rank of a one-copy all-reduce of `bytes`: one per 256 KiB of each rank's share, 1 to 16.
uint32_t oneCopyParts(size_t bytes, int nranks);

}  // namespace chorus
