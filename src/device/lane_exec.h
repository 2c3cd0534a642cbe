// The device executor of the primitives (src/algo/prims.h), written once for any block of
// threads: LaneExec<Block, T> runs one lane of a LaunchParams (src/device/launch_desc.h) with
// the block's threads, and runBlock runs every lane of one block in order. The kernel
// (prims_device.cu) instantiates it with CudaBlock (a CUDA thread block); the tests instantiate it
// with a block of host threads (tests/host_lanes.cc, run by tests/device_lane_*_test.cc), so everything here but the
// CUDA memory model itself is checked on every machine, TSan included.
//
// Block provides, as CHORUS_HD members:
//   unsigned tid(), nthreads(), index();     this thread, the block's size, which block
//   void sync();                             a barrier of the block's threads
//   uint32_t acquire(uint32_t* p);           loads and stores of counters other blocks, devices
//   void release(uint32_t* p, uint32_t v);   or the host read and write (system scope)
//   void store(uint32_t* p, uint32_t v);     a relaxed store of such a counter
//   uint64_t acquire64(uint64_t* p); void release64(uint64_t* p, uint64_t v);
//   bool claim(uint32_t* p);                 0 -> 1 exchange; true for the one that made it
//   uint64_t nowNs();                        a clock for deadlines
//   void relax();                            between two polls (host threads yield)
//   uint64_t share(uint64_t v);              the leader's v, for every thread
//   bool any(bool v);                        a barrier; true if any thread's v was
//   FifoLine loadLine(const FifoLine* l);    a line's two words, each read in one load (LL)
//   void storeLine(FifoLine* l, uint64_t w0, uint64_t w1);   and written in one store
//   static constexpr unsigned kLineGroup;    threads that read or write a 128-byte line together
//                                            (LL128): 8 in a CUDA block, each 16 bytes of it
//   static constexpr unsigned kWarp;         threads that run in lockstep (32; host threads: 1)
//   FifoLine loadPart(const FifoLine128* l, unsigned v);   16-byte part v of a line (LL128)
//   void storePart(FifoLine128* l, unsigned v, uint64_t w0, uint64_t w1);
//                                            part 7's second word is the line's flag: a thread
//                                            that moves several parts of a line loads part 7
//                                            first and stores it last (host threads: acquire and
//                                            release on the flag)
//   bool lineAny(bool v);                    true if v for any thread of this thread's warp,
//                                            called by the whole warp
//   void lineSync();                         the warp's threads meet here (reconverge), called
//                                            by the whole warp (host threads: nothing)
//   uint64_t shareFrom(unsigned t, uint64_t v);   thread t's v, for every thread
//
// The parts: the FIFO protocols (LaneExec, src/device/lane_protocols.h), the one-copy collectives
// (OneCopy, src/device/one_copy_exec.h), the bulk moves both use (src/device/vector_moves.h) and
// what every wait shares (src/device/block_wait.h). This file picks a lane's executor.
#pragma once

#include <cstdint>

#include "kernels/hd.h"
#include "src/device/block_wait.h"
#include "src/device/lane_protocols.h"
#include "src/device/launch_desc.h"
#include "src/device/one_copy_exec.h"

namespace chorus::device {

// The lane's protocol. kWithLL128 false: a build of the executor without LL128 (the launch kernel
// for launches that have no LL128 lane, launchHasLL128), where such a lane is refused.
template <class Block, typename T, bool kWithLL128>
CHORUS_HD_EXEC bool runLaneOf(Block& b, const LaunchParams& p, uint32_t li) {
  if (p.lanes[li].oneCopy) return OneCopy<Block, T>(b, p, li).run();
  switch (p.lanes[li].proto) {
    case ProtoKind::kLL:
      return runLaneAs<Block, T, ProtoKind::kLL>(b, p, li);
    case ProtoKind::kLL128:
      if constexpr (kWithLL128) {
        return runLaneAs<Block, T, ProtoKind::kLL128>(b, p, li);
      } else {
        if (b.tid() == 0) recordFault(b, p, li, DeviceFault::kRefused, 0, -1, 0, 0, 0);
        b.sync();
        return false;
      }
    default:
      return runLaneAs<Block, T, ProtoKind::kSimple>(b, p, li);
  }
}

// The lane's element type, from its chorusDataType_t.
template <class Block, bool kWithLL128 = true>
CHORUS_HD_EXEC bool runLane(Block& b, const LaunchParams& p, uint32_t li) {
  switch (p.lanes[li].type) {
    case 0:
      return runLaneOf<Block, int8_t, kWithLL128>(b, p, li);
    case 1:
      return runLaneOf<Block, uint8_t, kWithLL128>(b, p, li);
    case 2:
      return runLaneOf<Block, int32_t, kWithLL128>(b, p, li);
    case 3:
      return runLaneOf<Block, uint32_t, kWithLL128>(b, p, li);
    case 4:
      return runLaneOf<Block, int64_t, kWithLL128>(b, p, li);
    case 5:
      return runLaneOf<Block, uint64_t, kWithLL128>(b, p, li);
    case 6:
      return runLaneOf<Block, Half, kWithLL128>(b, p, li);
    case 7:
      return runLaneOf<Block, float, kWithLL128>(b, p, li);
    case 8:
      return runLaneOf<Block, double, kWithLL128>(b, p, li);
    case 9:
      return runLaneOf<Block, BFloat16, kWithLL128>(b, p, li);
    case 10:
      return runLaneOf<Block, Fp8E4M3, kWithLL128>(b, p, li);
    default:
      return runLaneOf<Block, Fp8E5M2, kWithLL128>(b, p, li);
  }
}

// Whether any lane of the launch runs LL128: it then needs the executor built with it.
CHORUS_HD_EXEC bool launchHasLL128(const LaunchParams& p) {
  const uint32_t n = p.laneBegin[p.nblocks];
  for (uint32_t li = 0; li < n; ++li) {
    if (p.lanes[li].proto == ProtoKind::kLL128 && !p.lanes[li].oneCopy) return true;
  }
  return false;
}

// Every lane of block b.index(), in order; stops at the first that fails.
template <class Block, bool kWithLL128 = true>
CHORUS_HD_EXEC void runBlock(Block& b, const LaunchParams& p) {
  const uint32_t i = b.index();
  if (i >= p.nblocks) return;
  for (uint32_t li = p.laneBegin[i]; li < p.laneBegin[i + 1]; ++li) {
    // A communicator whose kernels failed (this launch or an earlier one) or that was aborted
    // runs nothing more: its FIFOs may hold a failed operation's pieces.
    const uint32_t stop =
        b.tid() == 0 ? b.acquire(&p.error->status) | b.acquire(const_cast<uint32_t*>(p.abortFlag)) : 0;
    if (b.share(stop) != 0) return;
    if (!runLane<Block, kWithLL128>(b, p, li)) return;
  }
}

}  // namespace chorus::device
