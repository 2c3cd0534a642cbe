// The direct all-reduce (DirectLane, src/core/lane.h).
#include "src/core/lane.h"

#include <algorithm>
#include <cstring>

#include "src/common/os.h"
#include "src/core/lane_wait.h"

namespace chorus {

using lanes::mismatch;
using lanes::waitForData;
using lanes::waitForSpace;

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
  Status s = waitForData(rc, wait, Prim::kRecv, piece_, a_.seq);
  if (s.inProgress() && a_.status) a_.status->blocked(*wait);
  return s;
}

Status DirectLane::blockedOn(SendCursor* sc, WaitInfo* wait) const {
  Status s = waitForSpace(sc, wait, piece_, a_.seq);
  if (s.inProgress() && a_.status) a_.status->blocked(*wait);
  return s;
}

Status DirectLane::progress(WaitInfo* wait, bool* moved) {
  const size_t es = a_.elemSize;
  const HostKernels& k = *a_.kernels;
  while (piece_ < npieces_) {
    const size_t off = piece_ * slotElems_;
    const size_t n = std::min(slotElems_, count_ - off);
    const size_t bytes = n * es;
    const char* in = a_.in(off);
    char* out = a_.out(off);
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
          return mismatch(src, *h, bytes, -1, a_);
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
          rc->consume();
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
