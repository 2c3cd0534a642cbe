// What every wait of a block of the launch kernel shares (LaneExec's FIFO waits, OneCopy's
// barriers): when to stop waiting, the counter that numbers a lane's operations, and the launch's
// error record, which the host turns into the communicator's error.
#pragma once

#include <cstdint>

#include "kernels/hd.h"
#include "src/device/launch_desc.h"

namespace chorus::device {

// Polls between two looks at the abort word, the error record and the clock.
constexpr uint32_t kPollsPerCheck = 1024;

// Why a wait must end now (DeviceFault), or 0: the host's abort word, another block's failure,
// or the deadline, counted from the first look (*since, 0 before it).
template <class Block>
CHORUS_HD_EXEC uint32_t stopReason(Block& b, const LaunchParams& p, uint64_t* since) {
  if (b.acquire(const_cast<uint32_t*>(p.abortFlag))) return static_cast<uint32_t>(DeviceFault::kAborted);
  if (b.acquire(&p.error->status)) return static_cast<uint32_t>(DeviceFault::kPeerFault);
  const uint64_t now = b.nowNs();
  if (!*since) *since = now;
  return now - *since > p.timeoutNs ? static_cast<uint32_t>(DeviceFault::kTimeout) : 0;
}

// The counter that numbers a lane's operations (DeviceCommState).
CHORUS_HD_EXEC uint64_t* laneSeqWord(const LaunchParams& p, const DeviceLane& lane) {
  DeviceCommState& st = *p.state;
  return lane.seqKind == SeqKind::kColl      ? &st.collSeq[lane.seqIndex]
         : lane.seqKind == SeqKind::kP2pSend ? &st.p2pSendSeq[lane.seqIndex]
                                             : &st.p2pRecvSeq[lane.seqIndex];
}

// The leader records lane `li`'s failure in the launch's error record, unless another block's
// failure claimed it first (a block stopped by it, kPeerFault, records nothing).
template <class Block>
CHORUS_HD_EXEC void recordFault(Block& b, const LaunchParams& p, uint32_t li, DeviceFault why, uint32_t step,
                                int32_t peer, uint32_t waiting, uint64_t seq, uint32_t bytes) {
  DeviceError* e = p.error;
  if (why == DeviceFault::kPeerFault || !b.claim(&e->claimed)) return;
  e->block = b.index();
  e->lane = li;
  e->step = step;
  e->peer = peer;
  e->waiting = waiting;
  e->seq = seq;
  e->bytes = bytes;
  e->seqIndex = p.lanes[li].seqIndex;
  e->seqKind = static_cast<uint32_t>(p.lanes[li].seqKind);
  b.release(&e->status, static_cast<uint32_t>(why));
}

}  // namespace chorus::device
