#include "src/core/lane.h"

#include <algorithm>
#include <cstring>

#include "src/common/os.h"
#include "src/core/host_exec.h"
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
  sinceNs.store(coarseNowNs(), std::memory_order_relaxed);
  waiting.store(kind, std::memory_order_relaxed);
}

std::string ChannelStatus::describe() const {
  const uint32_t w = waiting.load(std::memory_order_relaxed);
  if (w == 0) return "running or idle";
  return "operation #" + std::to_string(seq.load(std::memory_order_relaxed)) + " step " +
         std::to_string(step.load(std::memory_order_relaxed)) + " waiting " +
         std::to_string((coarseNowNs() - sinceNs.load(std::memory_order_relaxed)) / 1000000) + " ms for " +
         (w == 1 ? "data from rank " : "space at rank ") + std::to_string(peer.load(std::memory_order_relaxed));
}

Lane::Lane(const LaneArgs& args, std::vector<Step> steps, SendCursor* send, RecvCursor* recv)
    : Lane(args, std::move(steps), LaneConnectors{{send}, {recv}}) {}

Lane::Lane(const LaneArgs& args, std::vector<Step> steps, const LaneConnectors& conns)
    : Lane(args, StepsRef{nullptr, 0}, conns) {
  owned_ = std::move(steps);
  steps_ = owned_.data();
  nsteps_ = owned_.size();
}

Lane::Lane(const LaneArgs& args, StepsRef steps, const LaneConnectors& conns)
    : a_(args), steps_(steps.data), nsteps_(steps.size), conns_(conns) {
  slotElems_ = std::max<size_t>(1, a_.slotBytes / a_.elemSize);
  // References and posted destinations are tracked for one connector each way.
  if (conns_.send[1] || a_.proto != ProtoKind::kSimple) a_.sendByRef = false;
  send_ = conns_.send[0];
  recv_ = conns_.recv[0];
}

Status Lane::recvCheck(const SlotHeader& h, size_t bytes) const {
  const Step& st = steps_[at_.step];
  const bool hello = h.step == kStepHello;
  if (h.commId == a_.commId && hello != (st.prim == Prim::kWaitSignal && st.inOff == kStepHello)) {
    // One rank runs the slice all-reduce because its buffers are registered, its ring neighbour
    // the ring: each meets the other's first slot.
    return invalidUsage("rank " + std::to_string(recv_->peer) + " ran operation #" + std::to_string(h.seq) +
                        (hello ? " as the slice all-reduce" : " as a ring all-reduce (or another collective)") +
                        " while this rank ran operation #" + std::to_string(a_.seq) +
                        (hello ? " on the ring" : " as the slice all-reduce") +
                        ", as each rank chooses the slice all-reduce when its buffers are registered "
                        "(chorusCommRegister): between processes, register an operation's buffers on every rank or "
                        "on none");
  }
  if (primIsControl(st.prim)) bytes = st.prim == Prim::kWaitSignal ? 0 : sizeof(MemDesc);
  return mismatch(recv_->peer, h, bytes, -1, a_);
}

Lane::PeerMemory& Lane::peerMemory() {
  if (!peers_) peers_ = std::make_unique<PeerMemory>();
  return *peers_;
}

uint32_t Lane::offer(int k, bool output, char* payload, size_t bytes) {
  PeerMemory& pm = peerMemory();
  if (output) {
    if (!pm.exposed[k]) return 0;
    std::memcpy(payload, &pm.outDesc[k], sizeof(MemDesc));
    return sizeof(MemDesc);
  }
  const SendCursor* sc = conns_.send[k];
  MemShare* share = a_.share;
  MemDesc in;
  // Both buffers or neither: the peer reads this rank's input for its slice and its output for
  // this rank's. Not with a pre-multiplying operator: this rank's scalar is its own (each rank
  // of a pre-multiplied sum may give another), so its contribution leaves through the FIFO,
  // multiplied on the way out, as the ring sends it.
  if (a_.spec.hasPre || !share || sc->fifo.slotBytes < sizeof(MemDesc) || !share->readable(sc->peer, a_.input, bytes) ||
      !share->readable(sc->peer, a_.output, bytes) || !share->describe(sc->peer, a_.input, bytes, &in) ||
      !share->describe(sc->peer, a_.output, bytes, &pm.outDesc[k])) {
    return 0;
  }
  std::memcpy(payload, &in, sizeof(in));
  pm.exposed[k] = true;
  return sizeof(MemDesc);
}

bool Lane::accept(int k, bool output, const char* payload, uint32_t size, size_t bytes) {
  PeerMemory& pm = peerMemory();
  const int peer = conns_.recv[k]->peer;
  const char* what = output ? "result" : "input";
  if (size != sizeof(MemDesc)) {
    pm.refused = internalError("rank " + std::to_string(peer) + " offered its " + what + " in a slot of " +
                               std::to_string(size) + " bytes, not a memory descriptor");
    return false;
  }
  MemDesc d;
  std::memcpy(&d, payload, sizeof(d));
  // Every read of the peer's memory is bounded by this rank's own count; the peer's buffer must
  // be exactly that size, or the ranks were called with different counts and the reads would run
  // past it.
  if (d.bytes != bytes) {
    pm.refused =
        invalidUsage("rank " + std::to_string(peer) + " offered " + std::to_string(d.bytes) + " bytes of its " + what +
                     " for operation #" + std::to_string(a_.seq) + " but this rank expected " + std::to_string(bytes) +
                     " bytes: the ranks called the all-reduce with different counts or types");
    return false;
  }
  if (!a_.share) {
    pm.refused = internalError("rank " + std::to_string(peer) + " offered its " + what +
                               " in place, but this lane cannot read a peer's memory");
    return false;
  }
  Result<const char*> base = a_.share->resolve(peer, d);
  if (!base.isOk()) {
    pm.refused = base.status();
    return false;
  }
  (output ? pm.out : pm.in)[k] = base.value();
  pm.reads[k] = true;
  return true;
}

void Lane::postAhead(uint32_t limit) {
  const size_t es = a_.elemSize;
  while (static_cast<int32_t>(limit - postSlot_) > 0 && postStep_ < nsteps_) {
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
      recv_->link.destBytes[idx] = static_cast<uint32_t>(std::min(slotElems_, st.count - off) * es);
      uintptr_t expected = 0;
      recv_->link.dests[idx].compare_exchange_strong(expected, reinterpret_cast<uintptr_t>(a_.out(st.outOff + off)),
                                                     std::memory_order_release, std::memory_order_relaxed);
    }
    ++postPiece_;
    ++postSlot_;
  }
}

class Lane::Exec {
 public:
  Exec(Lane& lane, bool* moved) : l_(lane), moved_(moved) {}

  void select(int sendTo, int recvFrom) const {
    l_.send_ = l_.conns_.send[sendTo];
    l_.recv_ = l_.conns_.recv[recvFrom];
  }
  // Each wait that succeeds finds the slot's header once for the calls that follow it.
  bool waitData(bool flag) {
    const RecvCursor* rc = l_.recv_;
    rh_ = rc->fifo.header(rc->head);
    // The header says the slot is full (one cache line, the data too when it is inline); otherwise
    // the tail counter decides, which also surfaces a slot of another operation. The tail is a
    // line the producer writes at every publish: a consumer that read it at every poll would make
    // each publish wait to take the line back. It is read on every 16th poll.
    if (flag && rc->headerPublishes) {
      if (__atomic_load_n(&rh_->ready, __ATOMIC_ACQUIRE) == slotReadyFlag(l_.a_.seq, rc->head)) return true;
      if (++l_.flagPolls_ % 16 != 0) return false;
    }
    return rc->fifo.hasData(rc->head);
  }
  bool waitSpace() {
    if (!l_.send_->hasSpace()) return false;
    sh_ = l_.send_->fifo.header(l_.send_->tail);
    return true;
  }
  const SlotHeader* recvHeader() const { return rh_; }
  const char* recvPayload(char* dst) const {
    const RecvCursor* rc = l_.recv_;
    // Already in the output when the proxy took the destination this lane posted.
    if (l_.posting_ && dst &&
        rc->link.dests[rc->head % rc->fifo.nslots].load(std::memory_order_acquire) ==
            reinterpret_cast<uintptr_t>(dst)) {
      return dst;
    }
    return reinterpret_cast<const char*>(rh_ + 1);
  }
  SlotHeader* sendHeader() const { return sh_; }
  char* sendPayload(Prim p, const char* in, const char* out) {
    // The proxy sends from `ref_`; every copy into the slot is skipped.
    ref_ = l_.send_->link.refs ? l_.sendSource(p, in, out) : nullptr;
    return ref_ ? nullptr : reinterpret_cast<char*>(sh_ + 1);
  }
  bool move(const PieceMove& m, size_t n) const {
    hostMove(l_.a_, m, n);
    return true;
  }
  static bool leader() { return true; }
  void publish(bool flag) const {
    SendCursor* sc = l_.send_;
    // Last: a consumer may act on it (ProtoFlag).
    if (flag) __atomic_store_n(&sh_->ready, slotReadyFlag(l_.a_.seq, sc->tail), __ATOMIC_RELEASE);
    if (sc->link.refs) {
      sc->link.refs[sc->tail % sc->fifo.nslots] = ref_;
      l_.refsOut_ = l_.refsOut_ || ref_;
    }
    sc->publish();
  }
  void release() const {
    RecvCursor* rc = l_.recv_;
    if (!l_.posting_) {
      rc->consume();
      return;
    }
    // Forget this slot's destination and post the one for the same slot a lap ahead before the
    // proxy may start on it.
    rc->link.dests[rc->head % rc->fifo.nslots].store(0, std::memory_order_relaxed);
    l_.postAhead(rc->head + rc->fifo.nslots + 1);
    rc->release();
  }
  void moved() const {
    *moved_ = true;
    if (l_.a_.status) l_.a_.status->running();
  }
  uint32_t offer(int k, bool output, char* payload, size_t bytes) const { return l_.offer(k, output, payload, bytes); }
  bool accept(int k, bool output, const char* payload, uint32_t size, size_t bytes) const {
    return l_.accept(k, output, payload, size, bytes);
  }
  bool exposed(int k) const { return l_.peers_ && l_.peers_->exposed[k]; }
  bool reads(int k) const { return l_.peers_ && l_.peers_->reads[k]; }
  const char* peerBuffer(int k, bool output) const {
    if (!l_.peers_ || !l_.peers_->reads[k]) return nullptr;
    return output ? l_.peers_->out[k] : l_.peers_->in[k];
  }

 private:
  Lane& l_;
  bool* moved_;
  const char* ref_ = nullptr;
  const SlotHeader* rh_ = nullptr;  // the receive slot's header, found by waitData
  SlotHeader* sh_ = nullptr;        // the send slot's, found by waitSpace
};

Status Lane::progress(WaitInfo* wait, bool* moved) {
  if (a_.sendByRef && conns_.recv[0] && conns_.recv[0]->link.dests && !conns_.recv[1]) {
    if (!posting_) {
      posting_ = true;
      postSlot_ = recv_->head;
    }
    postAhead(recv_->head + recv_->fifo.nslots);
  }
  Exec ex(*this, moved);
  const SlotTag tag{a_.commId, a_.seq};
  PrimStop stop;
  if (a_.proto == ProtoKind::kFlag) {
    Primitives<Exec, ProtoFlag> prims(ex, tag, a_.elemSize, slotElems_, a_.input, a_.output, a_.scratch);
    stop = prims.run(steps_, nsteps_, &at_);
  } else {
    Primitives<Exec> prims(ex, tag, a_.elemSize, slotElems_, a_.input, a_.output, a_.scratch);
    stop = prims.run(steps_, nsteps_, &at_);
  }
  Status w;
  switch (stop.status) {
    case PrimStatus::kDone:
      break;
    case PrimStatus::kNeedData:
      w = waitForData(recv_, wait, steps_[at_.step].prim, at_.step, a_.seq);
      if (w.inProgress() && a_.status) a_.status->blocked(*wait);
      return w;
    case PrimStatus::kNeedSpace:
      w = waitForSpace(send_, wait, at_.step, a_.seq, steps_[at_.step].prim);
      if (w.inProgress() && a_.status) a_.status->blocked(*wait);
      return w;
    case PrimStatus::kMismatch:
      return recvCheck(*recv_->fifo.header(recv_->head), stop.bytes);
    case PrimStatus::kRefused:
      return peers_->refused;
  }
  if (refsOut_) {
    // The input and output are the caller's again once this operation completes: wait until the
    // proxy has handed every slot to the kernel.
    if (send_->fifo.ctrl->head.load(std::memory_order_acquire) != send_->tail) {
      w = waitForSpace(send_, wait, nsteps_ - 1, a_.seq, steps_[nsteps_ - 1].prim);
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
