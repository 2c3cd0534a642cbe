#include "src/core/lane.h"

#include <algorithm>
#include <cstring>

#include "src/core/os.h"

namespace chorus {

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
  return invalidUsage("rank " + std::to_string(recv_->peer) + " sent " + std::to_string(h.bytes) +
                      " bytes for operation #" + std::to_string(h.seq) + " but this rank expected " +
                      std::to_string(bytes) + " bytes for operation #" + std::to_string(a_.seq) +
                      (h.commId != a_.commId ? " of another communicator" : "") +
                      ": the ranks called different collectives, counts, types or roots, or in a different order");
}

Status Lane::progress(WaitInfo* wait, bool* moved) {
  const size_t es = a_.elemSize;
  while (stepIdx_ < steps_.size()) {
    const Step& st = steps_[stepIdx_];
    if (st.prim == Prim::kLocal) {
      const char* in = a_.input + st.inOff * es;
      char* out = a_.output + st.outOff * es;
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
          if (recv_->fifo.closed()) {
            return remoteError("rank " + std::to_string(recv_->peer) + " closed its connection to this rank");
          }
          *wait = WaitInfo{&recv_->fifo.ctrl->tail,
                           recv_->head,
                           &recv_->fifo.ctrl->consumerWaiting,
                           recv_->peer,
                           true,
                           st.prim,
                           stepIdx_,
                           a_.seq};
          if (a_.status) a_.status->blocked(*wait);
          return Status(chorusInProgress, "");
        }
        const SlotHeader* h = recv_->fifo.header(recv_->head);
        CHORUS_TRY(recvCheck(*h, bytes));
        rslot = recv_->fifo.payload(recv_->head);
      }
      char* sslot = nullptr;
      if (tx) {
        if (!send_->hasSpace()) {
          if (send_->fifo.closed()) {
            return remoteError("rank " + std::to_string(send_->peer) + " closed its connection to this rank");
          }
          auto* headWord = &send_->fifo.ctrl->head;
          *wait = WaitInfo{headWord,
                           headWord->load(std::memory_order_acquire),
                           &send_->fifo.ctrl->producerWaiting,
                           send_->peer,
                           false,
                           st.prim,
                           stepIdx_,
                           a_.seq};
          if (a_.status) a_.status->blocked(*wait);
          return Status(chorusInProgress, "");
        }
        sslot = send_->fifo.payload(send_->tail);
      }
      const char* in = a_.input + (st.inOff + off) * es;
      char* out = a_.output + (st.outOff + off) * es;
      const HostKernels& k = *a_.kernels;
      switch (st.prim) {
        case Prim::kSend:
          if (a_.spec.hasPre) {
            k.pre(a_.spec, a_.type, sslot, in, n);
          } else {
            std::memcpy(sslot, in, bytes);
          }
          break;
        case Prim::kRecv:
          std::memcpy(out, rslot, bytes);
          break;
        case Prim::kCopySend:
          if (out != in) std::memmove(out, in, bytes);
          std::memcpy(sslot, in, bytes);
          break;
        case Prim::kRecvReduceSend:
          k.reduce(a_.spec, a_.type, sslot, rslot, in, n, false);
          break;
        case Prim::kRecvReduceCopySend:
          k.reduce(a_.spec, a_.type, out, rslot, in, n, true);
          std::memcpy(sslot, out, bytes);
          break;
        case Prim::kRecvCopySend:
          std::memcpy(out, rslot, bytes);
          std::memcpy(sslot, rslot, bytes);
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
        send_->fifo.publish(++send_->tail);
      }
      if (rx) recv_->fifo.release(++recv_->head);
      ++piece_;
      *moved = true;
      if (a_.status) a_.status->running();
    }
    ++stepIdx_;
    piece_ = 0;
  }
  return Status::ok();
}

DirectLane::DirectLane(const LaneArgs& args, int rank, int nranks, size_t count,
                       const std::unique_ptr<SendCursor>* sends, const std::unique_ptr<RecvCursor>* recvs,
                       char* scratch)
    : a_(args), rank_(rank), nranks_(nranks), count_(count), sends_(sends), recvs_(recvs), scratch_(scratch) {
  noPre_ = a_.spec;
  noPre_.hasPre = false;
  slotElems_ = std::max<size_t>(1, a_.slotBytes / a_.elemSize);
  npieces_ = (count_ + slotElems_ - 1) / slotElems_;
}

Status DirectLane::blockedOn(RecvCursor* rc, WaitInfo* wait) const {
  if (rc->fifo.closed()) return remoteError("rank " + std::to_string(rc->peer) + " closed its connection to this rank");
  *wait = WaitInfo{
      &rc->fifo.ctrl->tail, rc->head, &rc->fifo.ctrl->consumerWaiting, rc->peer, true, Prim::kRecv, piece_, a_.seq};
  if (a_.status) a_.status->blocked(*wait);
  return Status(chorusInProgress, "");
}

Status DirectLane::blockedOn(SendCursor* sc, WaitInfo* wait) const {
  if (sc->fifo.closed()) return remoteError("rank " + std::to_string(sc->peer) + " closed its connection to this rank");
  auto* headWord = &sc->fifo.ctrl->head;
  *wait = WaitInfo{headWord,
                   headWord->load(std::memory_order_acquire),
                   &sc->fifo.ctrl->producerWaiting,
                   sc->peer,
                   false,
                   Prim::kSend,
                   piece_,
                   a_.seq};
  if (a_.status) a_.status->blocked(*wait);
  return Status(chorusInProgress, "");
}

Status DirectLane::progress(WaitInfo* wait, bool* moved) {
  const size_t es = a_.elemSize;
  const HostKernels& k = *a_.kernels;
  while (piece_ < npieces_) {
    const size_t off = piece_ * slotElems_;
    const size_t n = std::min(slotElems_, count_ - off);
    const size_t bytes = n * es;
    const char* in = a_.input + off * es;
    char* out = a_.output + off * es;
    // Send this piece to every peer, starting with the next rank so peers are not all hit at once.
    while (sent_ < nranks_ - 1) {
      SendCursor* sc = sends_[(rank_ + 1 + sent_) % nranks_].get();
      if (!sc->hasSpace()) return blockedOn(sc, wait);
      SlotHeader* h = sc->fifo.header(sc->tail);
      char* slot = bytes <= kSlotInlineBytes ? reinterpret_cast<char*>(h->inlineData) : sc->fifo.payload(sc->tail);
      if (a_.spec.hasPre) {
        k.pre(a_.spec, a_.type, slot, in, n);
      } else {
        std::memcpy(slot, in, bytes);
      }
      h->commId = a_.commId;
      h->seq = a_.seq;
      h->step = static_cast<uint32_t>(piece_);
      h->bytes = static_cast<uint32_t>(bytes);
      __atomic_store_n(&h->ready, readyTag(), __ATOMIC_RELEASE);  // last: a consumer may act on it
      sc->fifo.publish(++sc->tail);
      ++sent_;
      *moved = true;
    }
    // Fold in rank order: out = c0 OP c1, then out = out OP c2, ... (the last applies the post-op).
    const char* own = in;
    if (out == in && rank_ >= 2) {
      if (!stashed_) {
        std::memcpy(scratch_, in, bytes);
        stashed_ = true;
      }
      own = scratch_;
    }
    while (folded_ < nranks_) {
      const int r = folded_ == 0 ? 1 : folded_;  // ranks 0 and 1 fold together
      const bool last = r == nranks_ - 1;
      const char* c[2] = {nullptr, nullptr};
      const int pair[2] = {folded_ == 0 ? 0 : -1, r};
      for (int i = 0; i < 2; ++i) {
        const int src = pair[i];
        if (src < 0 || src == rank_) continue;
        RecvCursor* rc = recvs_[src].get();
        const SlotHeader* h = rc->fifo.header(rc->head);
        // The header itself says the slot is ready (one cache line, and the data too when it is
        // inline); otherwise the tail counter decides, which also surfaces a peer's mismatch.
        const bool ready = rc->headerPublishes && __atomic_load_n(&h->ready, __ATOMIC_ACQUIRE) == readyTag();
        if (!ready && !rc->fifo.hasData(rc->head)) return blockedOn(rc, wait);
        if (h->commId != a_.commId || h->seq != a_.seq || h->bytes != bytes) {
          return invalidUsage("rank " + std::to_string(src) + " sent " + std::to_string(h->bytes) +
                              " bytes for operation #" + std::to_string(h->seq) + " but this rank expected " +
                              std::to_string(bytes) + " bytes for operation #" + std::to_string(a_.seq) +
                              (h->commId != a_.commId ? " of another communicator" : "") +
                              ": the ranks called different collectives, counts, types or roots, or in a "
                              "different order");
        }
        c[i] = bytes <= kSlotInlineBytes ? reinterpret_cast<const char*>(h->inlineData) : rc->fifo.payload(rc->head);
      }
      if (folded_ == 0) {
        // Both of ranks 0 and 1: one may be this rank (then it is the pre-applied operand).
        if (rank_ <= 1) {
          k.reduce(a_.spec, a_.type, out, c[rank_ == 0 ? 1 : 0], own, n, last);
        } else {
          k.reduce(noPre_, a_.type, out, c[0], c[1], n, last);
        }
      } else if (r == rank_) {
        k.reduce(a_.spec, a_.type, out, out, own, n, last);
      } else {
        k.reduce(noPre_, a_.type, out, out, c[1], n, last);
      }
      for (int i = 0; i < 2; ++i) {
        if (c[i]) {
          RecvCursor* rc = recvs_[pair[i]].get();
          rc->fifo.release(++rc->head);
        }
      }
      folded_ = r + 1;
      *moved = true;
    }
    ++piece_;
    sent_ = 0;
    folded_ = 0;
    stashed_ = false;
    if (a_.status) a_.status->running();
  }
  return Status::ok();
}

}  // namespace chorus
