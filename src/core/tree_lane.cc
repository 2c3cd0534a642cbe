// One tree of the double-binary-tree all-reduce (TreeLane, src/core/lane.h).
#include "src/core/lane.h"

#include <algorithm>
#include <cstring>

#include "src/common/os.h"
#include "src/core/lane_wait.h"

namespace chorus {

using lanes::mismatch;
using lanes::waitForData;
using lanes::waitForSpace;

TreeLane::TreeLane(const LaneArgs& args, size_t offset, size_t count, int parent, std::vector<int> children,
                   const std::unique_ptr<SendCursor>* sends, const std::unique_ptr<RecvCursor>* recvs)
    : a_(args),
      offset_(offset),
      count_(count),
      parent_(parent),
      children_(std::move(children)),
      sends_(sends),
      recvs_(recvs) {
  noPre_ = a_.spec;
  noPre_.hasPre = false;
  slotElems_ = std::max<size_t>(1, a_.slotBytes / a_.elemSize);
  npieces_ = (count_ + slotElems_ - 1) / slotElems_;
}

SlotHeader* TreeLane::stamp(SendCursor* sc, size_t bytes) const {
  SlotHeader* h = sc->fifo.header(sc->tail);
  h->commId = a_.commId;
  h->seq = a_.seq;
  h->step = static_cast<uint32_t>((down_ ? npieces_ : 0) + piece_);
  h->bytes = static_cast<uint32_t>(bytes);
  return h;
}

Status TreeLane::take(int peer, size_t bytes, const char** data, WaitInfo* wait) {
  RecvCursor* rc = recvs_[peer].get();
  if (!rc->fifo.hasData(rc->head)) {
    Status s = waitForData(rc, wait, down_ ? Prim::kRecvCopySend : Prim::kRecvReduceSend, piece_, a_.seq);
    if (s.inProgress() && a_.status) a_.status->blocked(*wait);
    return s;
  }
  const SlotHeader* h = rc->fifo.header(rc->head);
  const int64_t step = static_cast<int64_t>((down_ ? npieces_ : 0) + piece_);
  if (h->commId != a_.commId || h->seq != a_.seq || h->bytes != bytes || h->step != static_cast<uint64_t>(step)) {
    return mismatch(peer, *h, bytes, step, a_);
  }
  *data = rc->fifo.payload(rc->head);
  return Status::ok();
}

Status TreeLane::up(WaitInfo* wait, bool* moved) {
  const size_t es = a_.elemSize;
  const HostKernels& k = *a_.kernels;
  while (piece_ < npieces_) {
    const size_t off = offset_ + piece_ * slotElems_;
    const size_t n = std::min(slotElems_, offset_ + count_ - off);
    const size_t bytes = n * es;
    const char* in = a_.in(off);
    char* out = a_.out(off);
    // The partial result goes to the parent's slot, or, at the root, to the output.
    SendCursor* sc = parent_ >= 0 ? sends_[parent_].get() : nullptr;
    if (sc && !sc->hasSpace()) {
      Status s = waitForSpace(sc, wait, piece_, a_.seq, Prim::kRecvReduceSend);
      if (s.inProgress() && a_.status) a_.status->blocked(*wait);
      return s;
    }
    char* acc = sc ? sc->fifo.payload(sc->tail) : out;
    const bool root = !sc;
    if (children_.empty()) {
      if (a_.spec.hasPre) {
        k.pre(a_.spec, a_.type, acc, in, n);
      } else if (acc != in) {
        std::memcpy(acc, in, bytes);
      }
    }
    // Children in order: acc = c0 OP pre(in), then acc = acc OP c1, ... (the root's last applies
    // the post-op). Each child is folded as soon as its piece is there; a later call resumes.
    while (folded_ < children_.size()) {
      const char* c = nullptr;
      Status s = take(children_[folded_], bytes, &c, wait);
      if (!s.isOk()) return s;
      const bool last = root && folded_ + 1 == children_.size();
      if (folded_ == 0) {
        k.reduce(a_.spec, a_.type, acc, c, in, n, last);
      } else {
        k.reduce(noPre_, a_.type, acc, acc, c, n, last);
      }
      recvs_[children_[folded_]]->consume();
      ++folded_;
      *moved = true;
    }
    if (sc) {
      stamp(sc, bytes);
      sc->fifo.publish(++sc->tail);
    }
    folded_ = 0;
    ++piece_;
    *moved = true;
    if (a_.status) a_.status->running();
  }
  return Status::ok();
}

Status TreeLane::down(WaitInfo* wait, bool* moved) {
  const size_t es = a_.elemSize;
  while (piece_ < npieces_) {
    const size_t off = offset_ + piece_ * slotElems_;
    const size_t n = std::min(slotElems_, offset_ + count_ - off);
    const size_t bytes = n * es;
    char* out = a_.out(off);
    if (!taken_ && parent_ >= 0) {
      const char* c = nullptr;
      Status s = take(parent_, bytes, &c, wait);
      if (!s.isOk()) return s;
      std::memcpy(out, c, bytes);
      recvs_[parent_]->consume();
      *moved = true;
    }
    taken_ = true;
    while (folded_ < children_.size()) {
      SendCursor* sc = sends_[children_[folded_]].get();
      if (!sc->hasSpace()) {
        Status s = waitForSpace(sc, wait, npieces_ + piece_, a_.seq, Prim::kRecvCopySend);
        if (s.inProgress() && a_.status) a_.status->blocked(*wait);
        return s;
      }
      std::memcpy(sc->fifo.payload(sc->tail), out, bytes);
      stamp(sc, bytes);
      sc->fifo.publish(++sc->tail);
      ++folded_;
      *moved = true;
    }
    folded_ = 0;
    taken_ = false;
    ++piece_;
    if (a_.status) a_.status->running();
  }
  return Status::ok();
}

Status TreeLane::progress(WaitInfo* wait, bool* moved) {
  if (!down_) {
    CHORUS_TRY(up(wait, moved));
    down_ = true;
    piece_ = 0;
  }
  return down(wait, moved);
}

}  // namespace chorus
