// What every lane does when it must wait or meets a slot it did not expect (src/core/lane*.cc).
#pragma once

#include <string>

#include "src/core/lane.h"

namespace chorus::lanes {

// The result of a lane that must wait: for data from `rc`'s peer, or for space at `sc`'s (an
// error instead when the connection is closed). *wait says on what, for the waiting policy and
// for hang reports.
inline Status waitForData(RecvCursor* rc, WaitInfo* wait, Prim prim, size_t step, uint64_t seq) {
  *wait = WaitInfo{&rc->fifo.ctrl->tail, rc->head, &rc->fifo.ctrl->consumerWaiting, rc->peer, true, prim, step, seq};
  // A peer that published its last piece and then closed (its operation done, its communicator
  // destroyed) between this lane's look and this one: the piece is there to take, not an error.
  if (rc->fifo.closed() && !rc->fifo.hasData(rc->head)) {
    wait->closed = true;
    return remoteError("rank " + std::to_string(rc->peer) + " closed its connection to this rank");
  }
  wait->network = rc->link.wakeFd >= 0;
  return Status(chorusInProgress, "");
}

inline Status waitForSpace(SendCursor* sc, WaitInfo* wait, size_t step, uint64_t seq, Prim prim = Prim::kSend) {
  auto* headWord = &sc->fifo.ctrl->head;
  *wait = WaitInfo{
      headWord, headWord->load(std::memory_order_acquire), &sc->fifo.ctrl->producerWaiting, sc->peer, false, prim, step,
      seq};
  if (sc->fifo.closed()) {
    wait->closed = true;
    return remoteError("rank " + std::to_string(sc->peer) + " closed its connection to this rank");
  }
  wait->network = sc->link.wakeFd >= 0;
  return Status(chorusInProgress, "");
}

// A slot that is not what this rank expected: the ranks' calls disagree. `step` < 0: not checked.
inline Status mismatch(int peer, const SlotHeader& h, size_t bytes, int64_t step, const LaneArgs& a) {
  const bool stepDiffers = step >= 0 && h.step != static_cast<uint64_t>(step);
  return invalidUsage("rank " + std::to_string(peer) + " sent " + std::to_string(h.bytes) + " bytes" +
                      (stepDiffers ? " (step " + std::to_string(h.step) + ")" : "") + " for operation #" +
                      std::to_string(h.seq) + " but this rank expected " + std::to_string(bytes) + " bytes" +
                      (stepDiffers ? " (step " + std::to_string(step) + ")" : "") + " for operation #" +
                      std::to_string(a.seq) + (h.commId != a.commId ? " of another communicator" : "") +
                      ": the ranks called different collectives, counts, types or roots, or in a different order");
}

}  // namespace chorus::lanes
