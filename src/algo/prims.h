// Primitives: the named operations every schedule is made of, written once for every executor.
//
// A schedule (src/algo/schedule.h) is a list of Steps, each a primitive over a run of elements.
// Primitives<Exec, Proto>::run walks the steps piece by piece (a piece is what one slot holds). For
// each piece it
//   1. waits until the receive slot has data and the send slot has room (the executor's wait),
//   2. checks the received slot's header against this operation (the protocol),
//   3. moves the data: every thread of the executor does its share of the primitive's copy or
//      reduction (primMove says which sources and destinations),
//   4. stamps the sent slot's header (the protocol), publishes it and frees the received slot.
// The executor is a group of threads and the way it waits:
//   - the host executor (src/core/host_exec.h): the progress thread and its worker group. It never
//     blocks: a wait that is not over stops run() with kNeedData or kNeedSpace, and a later call
//     resumes at the same piece (the cursor says where).
//   - the device executor (kernels/prims_device.cuh): one CUDA thread block per channel. Thread 0
//     polls the counters, bounded, and the block shares the answer; a wait past the bound stops
//     run() the same way, so a stuck peer fails loudly instead of hanging the device.
// The protocol says how a piece sits in a slot and how the consumer learns it is there.
//   - ProtoSimple: a SlotHeader, then the payload; the tail counter publishes both.
//   - ProtoFlag: the same, and the header's `ready` word, written last with release order, says
//     the slot is full on its own; a piece of up to kSlotInlineBytes travels inside the header. A
//     consumer whose connector lets it trust that word (RecvCursor::headerPublishes) reads one
//     cache line for a small piece instead of the tail counter and then the slot: the latency
//     protocol of the direct all-reduce.
//   - ProtoLL (the device executor's only): the executor lays the header and the piece out as
//     lines of data words and flag words (FifoLine) in the FIFO's line area, and the consumer
//     polls the lines themselves instead of the tail counter: NCCL's LL protocol. LL128 (also
//     ProtoLL to the primitives) does the same with 128-byte lines of 120 data bytes and a flag
//     word in the FIFO's second line area (FifoLine128): NCCL's LL128.
//
// Exec provides, called by every thread of the group in the same order:
//   void select(int sendTo, int recvFrom);          the connectors of the next step (Step::sendTo, recvFrom)
//   bool waitData(bool flag); bool waitSpace();     ready, or not (host: not yet; device: gave up);
//                                                   `flag`: the slot's ready word may say so (ProtoFlag)
//   const SlotHeader* recvHeader(); const char* recvPayload(char* dst);
//   SlotHeader* sendHeader(); char* sendPayload(Prim, const char* in, const char* out);
//   bool move(const PieceMove&, size_t n);          every thread its share, all done on return;
//                                                   false: a received line never came (device LL:
//                                                   the wait for it gave up, as waitData does)
//   bool leader();                                  the one thread that stamps headers
//   void publish(bool flag); void release();        the sent slot goes out (`flag`: its ready word
//                                                   first, slotReadyFlag); the received one is free
//   void moved();                                   a piece is done (progress, for the caller)
// and, for peers that read each other's memory in place (the slice all-reduce's kSendDesc /
// kRecvDesc and the kPeerCondition and kFromPeer steps):
//   uint32_t offer(int k, bool output, char* payload, size_t bytes);
//                                                   the buffer's MemDesc for send connector k's
//                                                   peer into `payload`, its size; 0: that peer
//                                                   gets bytes (the input's offer decides both)
//   bool accept(int k, bool output, const char* payload, uint32_t size, size_t bytes);
//                                                   a MemDesc from receive connector k's peer,
//                                                   for a buffer of `bytes`; false: refused
//   bool exposed(int k); bool reads(int k);          what the offers decided, per connector index
//   const char* peerBuffer(int k, bool output);     the peer's buffer as this rank reads it, or null
// recvPayload may return `dst` (the payload already sits where this piece's output goes) and
// sendPayload may return null (the executor sends the piece from the user's buffer instead).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/hd.h"
#include "src/algo/fifo.h"
#include "src/algo/schedule.h"

namespace chorus {

// Which operation a slot belongs to.
struct SlotTag {
  uint64_t commId = 0;
  uint64_t seq = 0;
};

// Which protocol a lane runs (LaneArgs, LanePlan, DeviceLane). kLL and kLL128 are the device
// executor's alone (src/device/lane_protocols.h): they lay pieces out as lines of data and flags (16
// bytes a line with a flag per 8-byte word; 128 bytes a line with one flag word), under the
// ProtoSimple header checks.
enum class ProtoKind : uint8_t { kSimple, kFlag, kLL, kLL128 };
// As logs and the flight recorder name it (kFlag is Simple's).
constexpr const char* protoName(ProtoKind p) {
  return p == ProtoKind::kLL ? "LL" : p == ProtoKind::kLL128 ? "LL128" : "Simple";
}

struct ProtoSimple {
  static constexpr bool kFlag = false;
  // Every thread stamps its own copy of the sent header (the executor's, not the slot's), where
  // more than the leader writes it out (LL128's header line).
  static constexpr bool kStampEveryThread = false;
  CHORUS_HD static bool inlined(uint32_t) { return false; }
  CHORUS_HD static void stamp(SlotHeader* h, const SlotTag& t, uint32_t step, uint32_t bytes) {
    h->commId = t.commId;
    h->seq = t.seq;
    h->step = step;
    h->bytes = bytes;
  }
  // A data piece of this operation (a control slot's step is kStepDesc or above).
  CHORUS_HD static bool accepts(const SlotHeader& h, const SlotTag& t, uint32_t bytes) {
    return h.commId == t.commId && h.seq == t.seq && h.bytes == bytes && h.step < kStepDesc;
  }
};

// The header checks of ProtoSimple; the executor moves the lines (LaneExec<Block, T, kLL or kLL128>).
struct ProtoLL : ProtoSimple {
  static constexpr bool kStampEveryThread = true;
};

struct ProtoFlag : ProtoSimple {
  static constexpr bool kFlag = true;
  CHORUS_HD static bool inlined(uint32_t bytes) { return bytes <= kSlotInlineBytes; }
};

// SlotHeader::ready of the slot at `position` of a FIFO, for operation `seq`: producer and
// consumer agree on both, and no two slots of a lap share it.
CHORUS_HD uint64_t slotReadyFlag(uint64_t seq, uint32_t position) { return (seq << 32) | position; }

// How a piece's result r is made from its sources a and b.
enum class Fold : uint8_t {
  kCopy,        // r = a
  kPre,         // r = pre(a)                 (a rank's own contribution)
  kReduce,      // r = a OP pre(b)            (b is this rank's input)
  kReducePost,  // r = post(a OP pre(b))      (the last contribution)
};
// (b is the operand the pre-op applies to; a rank that folds its own input onto a partial result
// passes the partial result as a.)

// One piece's data movement: r goes to dst and, when not null, to dst2. A null dst (a send that
// left by reference) leaves only dst2; kCopy onto its own source writes nothing. `noPre`: b (or
// a, for kPre) is a partial result or a contribution already pre-multiplied, so the pre-op is not
// applied to it again. `preA`: a is a contribution not yet pre-multiplied (this rank's input
// first, or a peer's read in place): r = pre(a) OP b, b pre-multiplied unless noPre.
struct PieceMove {
  Fold fold;
  const char* a;
  const char* b;
  char* dst;
  char* dst2;
  bool noPre = false;
  bool preA = false;
};

// What primitive p does with one piece: `local` is this rank's operand (its input, or its output
// when the step says so), `out` this piece of the output, `rslot` the received payload, `sslot`
// the payload to send, `rfirst` recvPairReduceCopy's first received payload; `flags` are the
// step's (StepFlag). `rawR` / `rawF`: rslot / rfirst is a peer's contribution read in place, not
// yet pre-multiplied (kFromPeer).
CHORUS_HD PieceMove primMove(Prim p, uint16_t flags, const char* local, char* out, const char* rslot, char* sslot,
                             const char* rfirst = nullptr, bool rawR = false, bool rawF = false) {
  const bool noPre = (flags & kLocalNoPre) != 0;
  const Fold last = (flags & kNoPost) ? Fold::kReduce : Fold::kReducePost;
  switch (p) {
    case Prim::kSend:
      return {noPre ? Fold::kCopy : Fold::kPre, local, nullptr, sslot, nullptr, noPre};
    case Prim::kRecv:
      return {Fold::kCopy, rslot, nullptr, out, nullptr, noPre};
    case Prim::kCopySend:
      return {Fold::kCopy, local, nullptr, out, sslot, noPre};
    case Prim::kRecvReduceSend:
      return {Fold::kReduce, rslot, local, sslot, nullptr, noPre};
    case Prim::kRecvReduceCopySend:
      return {last, rslot, local, out, sslot, noPre};
    case Prim::kRecvCopySend:
      return {Fold::kCopy, rslot, nullptr, out, sslot, noPre};
    case Prim::kRecvReduceCopy:
      if (flags & kFoldIntoOutput) return {last, out, rslot, out, nullptr, !rawR};
      if (flags & kOwnFirst) return {last, local, rslot, out, nullptr, !rawR, true};
      return {last, rslot, local, out, nullptr, noPre, rawR};
    case Prim::kRecvPairReduceCopy:
      return {last, rfirst, rslot, out, nullptr, !rawR, rawF};
    case Prim::kLocalReduce:
      return {last, out, local, out, nullptr, noPre};
    default:
      break;
  }
  // kLocal: a single rank's contribution is the result.
  return {noPre ? Fold::kCopy : Fold::kPre, local, nullptr, out, nullptr, noPre};
}

// Where a run of a schedule stands.
struct PrimCursor {
  size_t step = 0;
  size_t piece = 0;
};

enum class PrimStatus : uint8_t {
  kDone,
  kNeedData,   // the receive slot of the piece at the cursor has no data (yet)
  kNeedSpace,  // the send slot has no room (yet)
  kMismatch,   // the received slot's header is not this operation's piece of `bytes` bytes
  kRefused,    // the executor could not take a peer's offer (it says why)
};
struct PrimStop {
  PrimStatus status = PrimStatus::kDone;
  uint32_t bytes = 0;  // kMismatch: what the piece should have held
};

template <class Exec, class Proto = ProtoSimple>
class Primitives {
 public:
  // `input`/`output` may be null on a rank that has no buffer on that side (a broadcast's
  // non-root input); its schedule then never reads or writes it. `scratch` (one slot) is for
  // steps that stash a piece (kOutIsScratch, kLocalIsScratch); null when none does.
  CHORUS_HD Primitives(Exec& ex, const SlotTag& tag, size_t elemSize, size_t slotElems, const char* input, char* output,
                       char* scratch = nullptr)
      : ex_(ex), tag_(tag), es_(elemSize), slotElems_(slotElems), input_(input), output_(output), scratch_(scratch) {}

  // Runs steps [at->step, nsteps) from piece at->piece on, until they are done or a piece cannot go.
  CHORUS_HD PrimStop run(const Step* steps, size_t nsteps, PrimCursor* at) {
    while (at->step < nsteps) {
      const Step st = steps[at->step];
      const bool rx = primReceives(st.prim);
      const bool tx = primSends(st.prim);
      if ((st.flags & kPeerCondition) && !applies(st, tx)) {
        ++at->step;
        continue;
      }
      if (primIsControl(st.prim)) {
        const PrimStop c = control(st);
        if (c.status != PrimStatus::kDone) return c;
        ++at->step;
        ex_.moved();
        continue;
      }
      // A receive from a peer whose memory this rank reads takes no slot (kFromPeer).
      const char* peer = (st.flags & kFromPeer) ? ex_.peerBuffer(st.recvFrom, (st.flags & kPeerOutput) != 0) : nullptr;
      const char* peerFirst = st.prim == Prim::kRecvPairReduceCopy && (st.flags & kFromPeer)
                                  ? ex_.peerBuffer(st.recvFirst, false)
                                  : nullptr;
      const bool rxSlot = rx && !peer;
      // A step with no peer is one piece of any size: it touches no slot.
      const size_t chunk = !rx && !tx && st.count > 0 ? st.count : slotElems_;
      const size_t npieces = (st.count + chunk - 1) / chunk;
      ex_.select(st.sendTo, st.recvFrom);
      while (at->piece < npieces) {
        const size_t off = at->piece * chunk;
        const size_t n = st.count - off < chunk ? st.count - off : chunk;
        const uint32_t bytes = static_cast<uint32_t>(n * es_);
        char* out = (st.flags & kOutIsScratch) ? scratch_ + (st.outOff + off) * es_
                    : output_                  ? output_ + (st.outOff + off) * es_
                                               : nullptr;
        const char* in = (st.flags & kLocalIsOutput)    ? out
                         : (st.flags & kLocalIsScratch) ? scratch_ + (st.inOff + off) * es_
                         : input_                       ? input_ + (st.inOff + off) * es_
                                                        : nullptr;
        const bool inl = Proto::inlined(bytes);
        const bool pairSlot = st.prim == Prim::kRecvPairReduceCopy && !peerFirst;
        const char* rfirst = peerFirst ? peerFirst + (st.outOff + off) * es_ : nullptr;
        if (pairSlot) {
          // The first operand's slot is held (not freed) until the piece is done; a wait for the
          // second resumes here and finds the first still there.
          ex_.select(st.sendTo, st.recvFirst);
          if (!ex_.waitData(Proto::kFlag)) return PrimStop{PrimStatus::kNeedData, bytes};
          const SlotHeader* h = ex_.recvHeader();
          if (!Proto::accepts(*h, tag_, bytes)) return PrimStop{PrimStatus::kMismatch, bytes};
          rfirst = inl ? reinterpret_cast<const char*>(h->inlineData) : ex_.recvPayload(nullptr);
          ex_.select(st.sendTo, st.recvFrom);
        }
        if (rxSlot && !ex_.waitData(Proto::kFlag)) return PrimStop{PrimStatus::kNeedData, bytes};
        if (tx && !ex_.waitSpace()) return PrimStop{PrimStatus::kNeedSpace, bytes};
        const char* rslot = peer ? peer + (st.outOff + off) * es_ : nullptr;
        if (rxSlot) {
          const SlotHeader* h = ex_.recvHeader();
          if (!Proto::accepts(*h, tag_, bytes)) return PrimStop{PrimStatus::kMismatch, bytes};
          rslot = inl ? reinterpret_cast<const char*>(h->inlineData) : ex_.recvPayload(out);
        }
        char* sslot = !tx   ? nullptr
                      : inl ? reinterpret_cast<char*>(ex_.sendHeader()->inlineData)
                            : ex_.sendPayload(st.prim, in, out);
        if (!ex_.move(primMove(st.prim, st.flags, in, out, rslot, sslot, rfirst, peer != nullptr, peerFirst != nullptr),
                      n)) {
          return PrimStop{PrimStatus::kNeedData, bytes};
        }
        if (tx) {
          if (Proto::kStampEveryThread || ex_.leader()) {
            Proto::stamp(ex_.sendHeader(), tag_, static_cast<uint32_t>(at->step), bytes);
          }
          ex_.publish(Proto::kFlag);
        }
        if (rxSlot) ex_.release();
        if (pairSlot) {
          ex_.select(st.sendTo, st.recvFirst);
          ex_.release();
          ex_.select(st.sendTo, st.recvFrom);
        }
        ++at->piece;
        ex_.moved();
      }
      ++at->step;
      at->piece = 0;
    }
    return PrimStop{};
  }

 private:
  // Whether a step with a peer condition (kPeerCondition) runs, given what the peers offered.
  CHORUS_HD bool applies(const Step& st, bool tx) {
    const int k = tx ? st.sendTo : st.recvFrom;
    const bool exposed = ex_.exposed(k);
    const bool reads = ex_.reads(k);
    return !((st.flags & kUnlessExposed) && exposed) && !((st.flags & kUnlessReads) && reads) &&
           !((st.flags & kIfExposed) && !exposed) && !((st.flags & kIfReads) && !reads);
  }

  // One control slot (primIsControl): an offer of this rank's memory, a peer's offer, a signal.
  CHORUS_HD PrimStop control(const Step& st) {
    ex_.select(st.sendTo, st.recvFrom);
    const bool output = (st.flags & kLocalIsOutput) != 0;
    if (primSends(st.prim)) {
      if (!ex_.waitSpace()) return PrimStop{PrimStatus::kNeedSpace, 0};
      uint32_t bytes = 0;
      uint32_t code = static_cast<uint32_t>(st.inOff);
      if (st.prim == Prim::kSendDesc) {
        // The executor decides whether the peer may read this buffer in place (the input's offer
        // decides for the output too) and writes its MemDesc; 0 bytes: the data comes as bytes.
        bytes = ex_.offer(st.sendTo, output, ex_.sendPayload(st.prim, nullptr, nullptr), st.count * es_);
        code = bytes ? kStepDesc : kStepBytes;
      }
      if (ex_.leader()) Proto::stamp(ex_.sendHeader(), tag_, code, bytes);
      ex_.publish(false);
      return PrimStop{};
    }
    if (!ex_.waitData(false)) return PrimStop{PrimStatus::kNeedData, 0};
    const SlotHeader* h = ex_.recvHeader();
    if (h->commId != tag_.commId || h->seq != tag_.seq) return PrimStop{PrimStatus::kMismatch, 0};
    if (st.prim == Prim::kWaitSignal) {
      if (h->step != static_cast<uint32_t>(st.inOff) || h->bytes != 0) return PrimStop{PrimStatus::kMismatch, 0};
    } else if (h->step == kStepDesc) {
      if (!ex_.accept(st.recvFrom, output, ex_.recvPayload(nullptr), h->bytes, st.count * es_)) {
        return PrimStop{PrimStatus::kRefused, 0};
      }
    } else if (h->step != kStepBytes || h->bytes != 0 || output) {
      return PrimStop{PrimStatus::kMismatch, 0};
    }
    ex_.release();
    return PrimStop{};
  }

  Exec& ex_;
  const SlotTag tag_;
  const size_t es_;
  const size_t slotElems_;
  const char* const input_;
  char* const output_;
  char* const scratch_;
};

}  // namespace chorus
