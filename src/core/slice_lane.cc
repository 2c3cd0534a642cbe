// The slice all-reduce (SliceLane, src/core/lane.h).
#include "src/core/lane.h"

#include <algorithm>
#include <cstring>

#include "src/common/os.h"
#include "src/core/lane_wait.h"

namespace chorus {

using lanes::mismatch;
using lanes::waitForData;
using lanes::waitForSpace;

SliceLane::SliceLane(const LaneArgs& args, int rank, int nranks, size_t count,
                     const std::unique_ptr<SendCursor>* scatterSends, const std::unique_ptr<RecvCursor>* scatterRecvs,
                     const std::unique_ptr<SendCursor>* gatherSends, const std::unique_ptr<RecvCursor>* gatherRecvs,
                     MemShare* share)
    : a_(args),
      rank_(rank),
      nranks_(nranks),
      count_(count),
      scatterSends_(scatterSends),
      scatterRecvs_(scatterRecvs),
      gatherSends_(gatherSends),
      gatherRecvs_(gatherRecvs),
      share_(share),
      peers_(nranks) {
  noPre_ = a_.spec;
  noPre_.hasPre = false;
  slotElems_ = std::max<size_t>(1, a_.slotBytes / a_.elemSize);
}

Block SliceLane::block(int r) const { return partition(count_, nranks_, r); }

// Decided once, before anything is sent: whether each peer gets this rank's input slice and its
// reduced slice as bytes or as a descriptor. Empty slices send nothing either way.
void SliceLane::chooseModes() {
  const size_t es = a_.elemSize;
  const Block mine = block(rank_);
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    Peer& P = peers_[p];
    const Block b = block(p);
    P.scatterOut = kData;
    P.gatherOut = kData;
    if (!share_ || a_.slotBytes < sizeof(MemDesc)) continue;
    if (b.count > 0 && share_->describe(p, a_.in(b.offset), b.count * es, &P.scatterDesc)) {
      P.scatterOut = kDesc;
    }
    if (mine.count > 0 && share_->describe(p, a_.out(mine.offset), mine.count * es, &P.gatherDesc)) {
      P.gatherOut = kDesc;
    }
  }
}

Status SliceLane::checkHeader(const SlotHeader& h, int peer, uint32_t step, size_t bytes) const {
  if (h.commId == a_.commId && h.seq == a_.seq && h.step == step && h.bytes == bytes) return Status::ok();
  return mismatch(peer, h, bytes, step, a_);
}

Status SliceLane::blockedOn(RecvCursor* rc, WaitInfo* wait, Prim prim) const {
  return waitForData(rc, wait, prim, reduced_, a_.seq);
}

Status SliceLane::blockedOn(SendCursor* sc, WaitInfo* wait) const { return waitForSpace(sc, wait, reduced_, a_.seq); }

Status SliceLane::sendDesc(SendCursor* sc, const MemDesc& d) {
  SlotHeader* h = sc->fifo.header(sc->tail);
  std::memcpy(sc->fifo.payload(sc->tail), &d, sizeof(d));
  h->commId = a_.commId;
  h->seq = a_.seq;
  h->step = kDescStep;
  h->bytes = static_cast<uint32_t>(sizeof(d));
  sc->fifo.publish(++sc->tail);
  return Status::ok();
}

Status SliceLane::learnMode(RecvCursor* rc, int peer, size_t expectBytes, const char* what, Mode* mode,
                            const char** base) {
  if (!rc->fifo.hasData(rc->head)) return Status(chorusInProgress, "");
  const SlotHeader* h = rc->fifo.header(rc->head);
  if (h->step != kDescStep) {
    *mode = kData;
    return Status::ok();
  }
  CHORUS_TRY(checkHeader(*h, peer, kDescStep, sizeof(MemDesc)));
  MemDesc d;
  std::memcpy(&d, rc->fifo.payload(rc->head), sizeof(d));
  // Every read of the peer's memory below is bounded by this rank's own count; the peer's
  // declared size must be exactly that, or the ranks were called with different counts and the
  // reads would run past the peer's buffer.
  if (d.bytes != expectBytes) {
    return invalidUsage("rank " + std::to_string(peer) + " offered " + std::to_string(d.bytes) + " bytes of its " +
                        what + " for operation #" + std::to_string(a_.seq) + " but this rank expected " +
                        std::to_string(expectBytes) +
                        " bytes: the ranks called the all-reduce with different counts or types");
  }
  CHORUS_ASSIGN_OR_RETURN(
      const char* p, share_ ? share_->resolve(peer, d) : Result<const char*>(internalError("no memory sharing here")));
  *base = p;
  *mode = kDesc;
  peers_[peer].readFrom = true;
  rc->consume();
  return Status::ok();
}

Status SliceLane::sendScatter(int p, WaitInfo* wait, bool* moved) {
  Peer& P = peers_[p];
  const size_t np = pieces(p);
  if (P.scatterSent >= np) return Status::ok();
  SendCursor* sc = scatterSends_[p].get();
  if (P.scatterOut == kDesc) {
    if (!sc->hasSpace()) return blockedOn(sc, wait);
    CHORUS_TRY(sendDesc(sc, P.scatterDesc));
    P.scatterSent = np;
    P.exposedTo = true;
    *moved = true;
    return Status::ok();
  }
  const size_t es = a_.elemSize;
  const Block b = block(p);
  // One piece per call: the caller's loop interleaves sending, reducing and copying, so a piece
  // is still in cache when it is forwarded.
  const size_t stop = std::min(np, P.scatterSent + 1);
  while (P.scatterSent < stop) {
    if (!sc->hasSpace()) return blockedOn(sc, wait);
    const size_t off = P.scatterSent * slotElems_;
    const size_t n = std::min(slotElems_, b.count - off);
    const char* in = a_.in(b.offset + off);
    char* slot = sc->fifo.payload(sc->tail);
    if (a_.spec.hasPre) {
      a_.kernels->pre(a_.spec, a_.type, slot, in, n);
    } else {
      std::memcpy(slot, in, n * es);
    }
    SlotHeader* h = sc->fifo.header(sc->tail);
    h->commId = a_.commId;
    h->seq = a_.seq;
    h->step = static_cast<uint32_t>(P.scatterSent);
    h->bytes = static_cast<uint32_t>(n * es);
    sc->fifo.publish(++sc->tail);
    ++P.scatterSent;
    *moved = true;
  }
  return P.scatterSent >= np ? Status::ok() : Status(chorusInProgress, "");
}

// Folds this rank's slice piece by piece: its own input first, then the peers' in rank order.
// An operand read in place is raw (the pre-multiplier still to apply); one that came as bytes
// was pre-multiplied by its sender.
Status SliceLane::reduceSlice(WaitInfo* wait, bool* moved) {
  const size_t es = a_.elemSize;
  const HostKernels& k = *a_.kernels;
  const Block b = block(rank_);
  const size_t np = pieces(rank_);
  const size_t stop = std::min(np, reduced_ + 1);
  while (reduced_ < stop) {
    const size_t off = reduced_ * slotElems_;
    const size_t n = std::min(slotElems_, b.count - off);
    const size_t bytes = n * es;
    const char* own = a_.in(b.offset + off);
    char* out = a_.out(b.offset + off);
    while (folded_ < nranks_) {
      const int idx = folded_ == 0 ? 1 : folded_;  // own input folds with the first peer's
      const int q = idx - 1 < rank_ ? idx - 1 : idx;
      Peer& Q = peers_[q];
      RecvCursor* rc = scatterRecvs_[q].get();
      if (Q.scatterIn == kUnknown) {
        Status s = learnMode(rc, q, b.count * es, "input", &Q.scatterIn, &Q.scatterBase);
        if (s.inProgress()) return blockedOn(rc, wait, Prim::kRecvReduceCopy);
        CHORUS_TRY(s);
        *moved = true;
      }
      const bool raw = Q.scatterIn == kDesc;
      const char* c = nullptr;
      if (raw) {
        c = Q.scatterBase + off * es;
      } else {
        if (!rc->fifo.hasData(rc->head)) return blockedOn(rc, wait, Prim::kRecvReduceCopy);
        CHORUS_TRY(checkHeader(*rc->fifo.header(rc->head), q, static_cast<uint32_t>(reduced_), bytes));
        c = rc->fifo.payload(rc->head);
      }
      const bool last = idx == nranks_ - 1;
      if (folded_ == 0) {
        if (raw && a_.spec.hasPre) {
          k.pre(a_.spec, a_.type, out, own, n);
          k.reduce(a_.spec, a_.type, out, out, c, n, last);
        } else {
          k.reduce(a_.spec, a_.type, out, c, own, n, last);
        }
      } else {
        k.reduce(raw ? a_.spec : noPre_, a_.type, out, out, c, n, last);
      }
      if (!raw) rc->consume();
      folded_ = idx + 1;
      *moved = true;
    }
    ++reduced_;
    folded_ = 0;
    if (a_.status) a_.status->running();
  }
  return reduced_ >= np ? Status::ok() : Status(chorusInProgress, "");
}

Status SliceLane::sendGather(int p, WaitInfo* wait, bool* moved) {
  Peer& P = peers_[p];
  const size_t np = pieces(rank_);
  if (P.gatherSent >= np) return Status::ok();
  SendCursor* sc = gatherSends_[p].get();
  if (P.gatherOut == kDesc) {
    if (reduced_ < np) return Status(chorusInProgress, "");  // the reduction is what it waits for
    if (!sc->hasSpace()) return blockedOn(sc, wait);
    CHORUS_TRY(sendDesc(sc, P.gatherDesc));
    P.gatherSent = np;
    P.exposedTo = true;
    *moved = true;
    return Status::ok();
  }
  const size_t es = a_.elemSize;
  const Block b = block(rank_);
  while (P.gatherSent < reduced_) {
    if (!sc->hasSpace()) return blockedOn(sc, wait);
    const size_t off = P.gatherSent * slotElems_;
    const size_t n = std::min(slotElems_, b.count - off);
    std::memcpy(sc->fifo.payload(sc->tail), a_.out(b.offset + off), n * es);
    SlotHeader* h = sc->fifo.header(sc->tail);
    h->commId = a_.commId;
    h->seq = a_.seq;
    h->step = static_cast<uint32_t>(P.gatherSent);
    h->bytes = static_cast<uint32_t>(n * es);
    sc->fifo.publish(++sc->tail);
    ++P.gatherSent;
    *moved = true;
  }
  return P.gatherSent >= np ? Status::ok() : Status(chorusInProgress, "");
}

Status SliceLane::copyGather(int p, WaitInfo* wait, bool* moved) {
  Peer& P = peers_[p];
  const size_t np = pieces(p);
  if (P.gatherCopied >= np) return Status::ok();
  RecvCursor* rc = gatherRecvs_[p].get();
  if (P.gatherIn == kUnknown) {
    Status s = learnMode(rc, p, block(p).count * a_.elemSize, "result", &P.gatherIn, &P.gatherBase);
    if (s.inProgress()) return blockedOn(rc, wait, Prim::kRecv);
    CHORUS_TRY(s);
    *moved = true;
  }
  const size_t es = a_.elemSize;
  const Block b = block(p);
  // One piece per call when reading in place, so this rank's sends are not held up by a long copy.
  const size_t stop = P.gatherCopied + 1;
  while (P.gatherCopied < stop) {
    const size_t off = P.gatherCopied * slotElems_;
    const size_t n = std::min(slotElems_, b.count - off);
    char* out = a_.out(b.offset + off);
    if (P.gatherIn == kDesc) {
      std::memcpy(out, P.gatherBase + off * es, n * es);
    } else {
      if (!rc->fifo.hasData(rc->head)) return blockedOn(rc, wait, Prim::kRecv);
      CHORUS_TRY(checkHeader(*rc->fifo.header(rc->head), p, static_cast<uint32_t>(P.gatherCopied), n * es));
      std::memcpy(out, rc->fifo.payload(rc->head), n * es);
      rc->consume();
    }
    ++P.gatherCopied;
    *moved = true;
  }
  return P.gatherCopied >= np ? Status::ok() : Status(chorusInProgress, "");
}

// The last exchange with a peer: a done for memory read in place, each way as needed.
Status SliceLane::finishPeer(int p, WaitInfo* wait, bool* moved) {
  Peer& P = peers_[p];
  if (P.scatterSent < pieces(p) || P.gatherSent < pieces(rank_) || P.gatherCopied < pieces(p) ||
      reduced_ < pieces(rank_)) {
    return Status(chorusInProgress, "");
  }
  if (P.readFrom && !P.doneSent) {
    SendCursor* sc = scatterSends_[p].get();
    if (!sc->hasSpace()) return blockedOn(sc, wait);
    SlotHeader* h = sc->fifo.header(sc->tail);
    h->commId = a_.commId;
    h->seq = a_.seq;
    h->step = kDoneStep;
    h->bytes = 0;
    sc->fifo.publish(++sc->tail);
    P.doneSent = true;
    *moved = true;
  }
  if (P.exposedTo && !P.doneSeen) {
    RecvCursor* rc = scatterRecvs_[p].get();
    if (!rc->fifo.hasData(rc->head)) return blockedOn(rc, wait, Prim::kRecv);
    CHORUS_TRY(checkHeader(*rc->fifo.header(rc->head), p, kDoneStep, 0));
    rc->consume();
    P.doneSeen = true;
    *moved = true;
  }
  return Status::ok();
}

Status SliceLane::hello(WaitInfo* wait, bool* moved) {
  if (!helloSend_) return Status::ok();
  if (!helloSent_) {
    if (!helloSend_->hasSpace()) return blockedOn(helloSend_, wait);
    SlotHeader* h = helloSend_->fifo.header(helloSend_->tail);
    h->commId = a_.commId;
    h->seq = a_.seq;
    h->step = kHelloStep;
    h->bytes = 0;
    helloSend_->fifo.publish(++helloSend_->tail);
    helloSent_ = true;
    *moved = true;
  }
  if (!helloSeen_) {
    RecvCursor* rc = helloRecv_;
    if (!rc->fifo.hasData(rc->head)) return blockedOn(rc, wait, Prim::kRecv);
    const SlotHeader* h = rc->fifo.header(rc->head);
    if (h->step != kHelloStep || h->commId != a_.commId || h->seq != a_.seq) {
      return invalidUsage("rank " + std::to_string(rc->peer) + " ran operation #" + std::to_string(h->seq) +
                          " as a ring all-reduce (or another collective) while this rank ran operation #" +
                          std::to_string(a_.seq) +
                          " as the slice all-reduce because its buffers are registered (chorusCommRegister): "
                          "between processes, register an operation's buffers on every rank or on none");
    }
    rc->consume();
    helloSeen_ = true;
    *moved = true;
  }
  return Status::ok();
}

Status SliceLane::progress(WaitInfo* wait, bool* moved) {
  if (finished_) return Status::ok();
  if (!started_) {
    chooseModes();
    started_ = true;
  }
  // What a blocked lane reports, most telling first: data for the reduction, a peer's result,
  // space to send, a peer's done. Waits on this rank's own progress carry no word.
  WaitInfo waits[4];
  while (true) {
    bool pending = false;
    bool m = false;
    auto note = [&](Status s) -> Status {
      if (s.inProgress()) {
        pending = true;
        return Status::ok();
      }
      // A closed connection is reported as the wait it ended, so the task can ask why (a
      // failure notice, a dead process) instead of blaming the peer that merely closed.
      for (const auto& w : waits) {
        if (!s.isOk() && w.closed) {
          *wait = w;
          break;
        }
      }
      return s;
    };
    CHORUS_TRY(note(hello(&waits[1], &m)));
    for (int i = 1; i < nranks_; ++i) {
      const int p = (rank_ + i) % nranks_;
      CHORUS_TRY(note(sendScatter(p, &waits[2], &m)));
    }
    CHORUS_TRY(note(reduceSlice(&waits[0], &m)));
    for (int i = 1; i < nranks_; ++i) {
      const int p = (rank_ + i) % nranks_;
      CHORUS_TRY(note(sendGather(p, &waits[2], &m)));
      CHORUS_TRY(note(copyGather(p, &waits[1], &m)));
    }
    for (int i = 1; i < nranks_; ++i) {
      CHORUS_TRY(note(finishPeer((rank_ + i) % nranks_, &waits[3], &m)));
    }
    if (!pending) {
      finished_ = true;
      if (a_.status) a_.status->running();
      return Status::ok();
    }
    if (m) {
      *moved = true;
      for (auto& w : waits) w = WaitInfo{};
      continue;
    }
    for (auto& w : waits) {
      if (w.word) {
        *wait = w;
        if (a_.status) a_.status->blocked(w);
        return Status(chorusInProgress, "");
      }
    }
    *wait = WaitInfo{};
    return Status(chorusInProgress, "");
  }
}

}  // namespace chorus
