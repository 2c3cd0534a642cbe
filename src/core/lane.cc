#include "src/core/lane.h"

#include <algorithm>
#include <cstring>

#include "src/common/os.h"

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

namespace {

// The result of a lane that must wait: for data from `rc`'s peer, or for space at `sc`'s (an
// error instead when the connection is closed). *wait says on what, for the waiting policy and
// for hang reports.
Status waitForData(RecvCursor* rc, WaitInfo* wait, Prim prim, size_t step, uint64_t seq) {
  *wait = WaitInfo{&rc->fifo.ctrl->tail, rc->head, &rc->fifo.ctrl->consumerWaiting, rc->peer, true, prim, step, seq};
  if (rc->fifo.closed()) {
    wait->closed = true;
    return remoteError("rank " + std::to_string(rc->peer) + " closed its connection to this rank");
  }
  wait->network = rc->fifo.notifyFd >= 0;
  return Status(chorusInProgress, "");
}

Status waitForSpace(SendCursor* sc, WaitInfo* wait, size_t step, uint64_t seq, Prim prim = Prim::kSend) {
  auto* headWord = &sc->fifo.ctrl->head;
  *wait = WaitInfo{
      headWord, headWord->load(std::memory_order_acquire), &sc->fifo.ctrl->producerWaiting, sc->peer, false, prim, step,
      seq};
  if (sc->fifo.closed()) {
    wait->closed = true;
    return remoteError("rank " + std::to_string(sc->peer) + " closed its connection to this rank");
  }
  wait->network = sc->fifo.notifyFd >= 0;
  return Status(chorusInProgress, "");
}

// A slot that is not what this rank expected: the ranks' calls disagree. `step` < 0: not checked.
Status mismatch(int peer, const SlotHeader& h, size_t bytes, int64_t step, const LaneArgs& a) {
  const bool stepDiffers = step >= 0 && h.step != static_cast<uint64_t>(step);
  return invalidUsage("rank " + std::to_string(peer) + " sent " + std::to_string(h.bytes) + " bytes" +
                      (stepDiffers ? " (step " + std::to_string(h.step) + ")" : "") + " for operation #" +
                      std::to_string(h.seq) + " but this rank expected " + std::to_string(bytes) + " bytes" +
                      (stepDiffers ? " (step " + std::to_string(step) + ")" : "") + " for operation #" +
                      std::to_string(a.seq) + (h.commId != a.commId ? " of another communicator" : "") +
                      ": the ranks called different collectives, counts, types or roots, or in a different order");
}

}  // namespace

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

namespace chorus {

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
