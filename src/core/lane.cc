#include "src/core/lane.h"

#include <algorithm>
#include <cstring>

#include "src/common/os.h"
#include "src/core/lane_wait.h"

namespace chorus {

using lanes::mismatch;
using lanes::waitForData;
using lanes::waitForSpace;

void ChannelStatus::blocked(const WaitInfo& w) {
  const uint32_t kind = w.forData ? 1 : 2;
  if (waiting.load(std::memory_order_relaxed) == kind && peer.load(std::memory_order_relaxed) == w.peer &&
      seq.load(std::memory_order_relaxed) == w.seq && step.load(std::memory_order_relaxed) == w.step) {
    return;  // the same wait as before: keep its start time
  }
  seq.store(w.seq, std::memory_order_relaxed);
  step.store(static_cast<uint32_t>(w.step), std::memory_order_relaxed);
  peer.store(w.peer, std::memory_order_relaxed);
  sinceNs.store(nowNs(), std::memory_order_relaxed);
  waiting.store(kind, std::memory_order_relaxed);
}

std::string ChannelStatus::describe() const {
  const uint32_t w = waiting.load(std::memory_order_relaxed);
  if (w == 0) return "running or idle";
  return "operation #" + std::to_string(seq.load(std::memory_order_relaxed)) + " step " +
         std::to_string(step.load(std::memory_order_relaxed)) + " waiting " +
         std::to_string((nowNs() - sinceNs.load(std::memory_order_relaxed)) / 1000000) + " ms for " +
         (w == 1 ? "data from rank " : "space at rank ") + std::to_string(peer.load(std::memory_order_relaxed));
}

Lane::Lane(const LaneArgs& args, std::vector<Step> steps, SendCursor* send, RecvCursor* recv)
    : a_(args), steps_(std::move(steps)), send_(send), recv_(recv) {
  slotElems_ = std::max<size_t>(1, a_.slotBytes / a_.elemSize);
}

Status Lane::recvCheck(const SlotHeader& h, size_t bytes) const {
  if (h.commId == a_.commId && h.seq == a_.seq && h.bytes == bytes) return Status::ok();
  if (h.commId == a_.commId && h.step == SliceLane::kHelloStep) {
    return invalidUsage("rank " + std::to_string(recv_->peer) + " ran operation #" + std::to_string(h.seq) +
                        " as the slice all-reduce because its buffers are registered (chorusCommRegister) while "
                        "this rank ran operation #" +
                        std::to_string(a_.seq) +
                        " on the ring: between processes, register an operation's buffers on every rank or on none");
  }
  return mismatch(recv_->peer, h, bytes, -1, a_);
}

void Lane::postAhead(uint32_t limit) {
  const size_t es = a_.elemSize;
  while (static_cast<int32_t>(limit - postSlot_) > 0 && postStep_ < steps_.size()) {
    const Step& st = steps_[postStep_];
    const size_t npieces = primReceives(st.prim) ? (st.count + slotElems_ - 1) / slotElems_ : 0;
    if (postPiece_ >= npieces) {
      ++postStep_;
      postPiece_ = 0;
      continue;
    }
    if (st.prim == Prim::kRecv || st.prim == Prim::kRecvCopySend) {
      const size_t off = postPiece_ * slotElems_;
      const uint32_t idx = postSlot_ % recv_->fifo.nslots;
      recv_->fifo.destBytes[idx] = static_cast<uint32_t>(std::min(slotElems_, st.count - off) * es);
      uintptr_t expected = 0;
      recv_->fifo.dests[idx].compare_exchange_strong(expected, reinterpret_cast<uintptr_t>(a_.out(st.outOff + off)),
                                                     std::memory_order_release, std::memory_order_relaxed);
    }
    ++postPiece_;
    ++postSlot_;
  }
}

Status Lane::progress(WaitInfo* wait, bool* moved) {
  const size_t es = a_.elemSize;
  const bool posts = a_.sendByRef && recv_ && recv_->fifo.dests;
  if (posts) {
    if (!posting_) {
      posting_ = true;
      postSlot_ = recv_->head;
    }
    postAhead(recv_->head + recv_->fifo.nslots);
  }
  while (stepIdx_ < steps_.size()) {
    const Step& st = steps_[stepIdx_];
    if (st.prim == Prim::kLocal) {
      const char* in = a_.in(st.inOff);
      char* out = a_.out(st.outOff);
      // A single rank: its own contribution is the result (an integer avg divides by 1).
      if (a_.spec.hasPre) {
        a_.kernels->pre(a_.spec, a_.type, out, in, st.count);
      } else if (in != out) {
        std::memmove(out, in, st.count * es);
      }
      ++stepIdx_;
      *moved = true;
      continue;
    }
    const bool rx = primReceives(st.prim);
    const bool tx = primSends(st.prim);
    const size_t npieces = (st.count + slotElems_ - 1) / slotElems_;
    while (piece_ < npieces) {
      const size_t off = piece_ * slotElems_;
      const size_t n = std::min(slotElems_, st.count - off);
      const size_t bytes = n * es;
      const char* rslot = nullptr;
      if (rx) {
        if (!recv_->fifo.hasData(recv_->head)) {
          Status w = waitForData(recv_, wait, st.prim, stepIdx_, a_.seq);
          if (w.inProgress() && a_.status) a_.status->blocked(*wait);
          return w;
        }
        const SlotHeader* h = recv_->fifo.header(recv_->head);
        CHORUS_TRY(recvCheck(*h, bytes));
        rslot = recv_->fifo.payload(recv_->head);
        // Already in the output when the proxy took the destination this lane posted.
        char* dst = a_.out(st.outOff + off);
        if (posts && recv_->fifo.dests[recv_->head % recv_->fifo.nslots].load(std::memory_order_acquire) ==
                         reinterpret_cast<uintptr_t>(dst)) {
          rslot = dst;
        }
      }
      char* sslot = nullptr;
      if (tx) {
        if (!send_->hasSpace()) {
          Status w = waitForSpace(send_, wait, stepIdx_, a_.seq, st.prim);
          if (w.inProgress() && a_.status) a_.status->blocked(*wait);
          return w;
        }
        sslot = send_->fifo.payload(send_->tail);
      }
      const char* in = a_.in(st.inOff + off);
      char* out = a_.out(st.outOff + off);
      const HostKernels& k = *a_.kernels;
      const char* ref = tx && send_->fifo.refs ? sendSource(st.prim, in, out) : nullptr;
      if (ref) sslot = nullptr;  // the proxy sends from `ref`; every copy into the slot is skipped
      switch (st.prim) {
        case Prim::kSend:
          if (ref) break;
          if (a_.spec.hasPre) {
            k.pre(a_.spec, a_.type, sslot, in, n);
          } else {
            std::memcpy(sslot, in, bytes);
          }
          break;
        case Prim::kRecv:
          if (rslot != out) std::memcpy(out, rslot, bytes);
          break;
        case Prim::kCopySend:
          if (out != in) std::memmove(out, in, bytes);
          if (!ref) std::memcpy(sslot, in, bytes);
          break;
        case Prim::kRecvReduceSend:
          k.reduce(a_.spec, a_.type, sslot, rslot, in, n, false);
          break;
        case Prim::kRecvReduceCopySend:
          k.reduce(a_.spec, a_.type, out, rslot, in, n, true);
          if (!ref) std::memcpy(sslot, out, bytes);
          break;
        case Prim::kRecvCopySend:
          if (rslot != out) std::memcpy(out, rslot, bytes);
          if (!ref) std::memcpy(sslot, rslot, bytes);
          break;
        case Prim::kRecvReduceCopy:
          k.reduce(a_.spec, a_.type, out, rslot, in, n, true);
          break;
        case Prim::kLocal:
          break;
      }
      if (tx) {
        SlotHeader* h = send_->fifo.header(send_->tail);
        h->commId = a_.commId;
        h->seq = a_.seq;
        h->step = static_cast<uint32_t>(stepIdx_);
        h->bytes = static_cast<uint32_t>(bytes);
        if (send_->fifo.refs) {
          send_->fifo.refs[send_->tail % send_->fifo.nslots] = ref;
          refsOut_ = refsOut_ || ref;
        }
        send_->fifo.publish(++send_->tail);
      }
      if (rx && posts) {
        // Forget this slot's destination and post the one for the same slot a lap ahead before
        // the proxy may start on it.
        recv_->fifo.dests[recv_->head % recv_->fifo.nslots].store(0, std::memory_order_relaxed);
        postAhead(recv_->head + recv_->fifo.nslots + 1);
        recv_->fifo.release(++recv_->head);
      } else if (rx) {
        recv_->consume();
      }
      ++piece_;
      *moved = true;
      if (a_.status) a_.status->running();
    }
    ++stepIdx_;
    piece_ = 0;
  }
  if (refsOut_) {
    // The input and output are the caller's again once this operation completes: wait until the
    // proxy has handed every slot to the kernel.
    if (send_->fifo.ctrl->head.load(std::memory_order_acquire) != send_->tail) {
      Status w = waitForSpace(send_, wait, steps_.size() - 1, a_.seq, steps_.back().prim);
      if (w.inProgress() && a_.status) a_.status->blocked(*wait);
      return w;
    }
    refsOut_ = false;
    *moved = true;
  }
  return Status::ok();
}

const char* Lane::sendSource(Prim p, const char* in, const char* out) const {
  if (!a_.sendByRef) return nullptr;
  switch (p) {
    case Prim::kSend:
      return a_.spec.hasPre ? nullptr : in;
    case Prim::kCopySend:
      return in;
    case Prim::kRecvReduceCopySend:
    case Prim::kRecvCopySend:
      return out;  // written just before, and not again in this operation
    default:
      return nullptr;
  }
}
}  // namespace chorus
