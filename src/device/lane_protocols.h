// LaneExec<Block, T, kProto>: one lane of a launch over FIFOs, in the protocol the lane names
// (Simple, LL, LL128), with the block's threads (src/device/lane_exec.h says what a Block provides).
//
// Per piece, as on the host: the leader (thread 0) waits for the receive slot's data and the
// send slot's room, reading the counters with acquire loads; every few thousand polls it checks
// the host's abort word, the launch's error record (another block failed) and the deadline. The
// block shares the answer; every thread moves its share of the piece, 16 bytes at a time where
// every operand is 16-byte aligned; after a block barrier the leader stamps the header and
// publishes with a release store. A wait that ends without data records why in the launch's
// DeviceError (channel, lane, step, peer) and ends the block; the host turns it into the
// communicator's error.
//
// LaneExec<Block, T, true> runs the LL protocol instead (NCCL's): the piece goes to the slot's
// lines in the FIFO's line area (FifoLine, src/algo/fifo.h), 8 bytes of data a line, every word
// with the flag of the slot's position (lineFlag: position + 1, never 0), behind kLineHeaderLines lines of header
// that the leader writes once the piece's lines are out. The leader of the receiving block polls
// the header's lines, not the tail counter; each thread then polls the lines it reads until their
// flags are current, so no fence and no counter stands between the sender's stores and the
// receiver's loads. Room is still the head counter, and the sender still advances the tail, so a
// later Simple piece on the same FIFO finds the positions where they are. A flag is current for
// one position only: lines left by an earlier lap, or by a piece that never finished, are never
// taken for new data.
//
// LaneExec<Block, T, ProtoKind::kLL128> runs NCCL's LL128 the same way with 128-byte lines
// (FifoLine128, the FIFO's second line area): 120 bytes of data and a flag word a line, a line
// stored by the eight threads of a group in one warp-wide instruction and loaded the same way, a
// warp re-reading until every line it took carries the current flag (lineAny). It rests on a
// hardware property the memory model does not state: a warp's 128-byte store reaches a reader's
// 128-byte load whole. NCCL relies on it on the GPUs and links it enables LL128 for; the tuner
// offers LL128 only where every rank runs on one GPU, and by estimate only with CHORUS_LL128
// (docs/GPU.md); host threads, which store a line part by part, publish it by the flag word's
// release store instead. The header is the slot's first line (commId, seq, step and bytes in its
// first three words).
//
// The two ends of a FIFO choose their protocol each from its own byte count, so a send and a
// receive of different sizes (the program's error) may run LL at one end and Simple at the other
// (or LL128 at either, where it runs). Either receiver then fails at the piece's header, as with
// one protocol (kMismatch): a Simple receiver finds the tail past its position (an LL sender
// still advances it) over the slot header of an older position, an older operation's or none,
// which the header check refuses; an LL receiver, whose header lines never come, looks at the
// tail and the slot header each time it checks the deadline and finds a Simple piece for its
// position there (simpleAt), or LL128's header line for it (line128At); an LL128 receiver
// likewise finds Simple's or LL's (lineAt). A sender left waiting for room ends as it would with
// one protocol: at the abort word, once its host hears of the failure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/hd.h"
#include "kernels/reduce.h"
#include "src/algo/prims.h"
#include "src/device/block_wait.h"
#include "src/device/launch_desc.h"
#include "src/device/vector_moves.h"

namespace chorus::device {

// The flag of the LL lines of the piece at FIFO position `pos`: pos + 1, except where that wraps
// to 0, the flag of lines never written (the line area starts zeroed), which would make a slot's
// first piece after the wrap look arrived before it is sent. That position is the last slot's
// (slot counts are powers of two), whose flags are otherwise multiples of the count, never 1.
CHORUS_HD_EXEC constexpr uint32_t lineFlag(uint32_t pos) { return pos + 1 == 0 ? 1u : pos + 1; }

template <class Block, typename T, ProtoKind kProto = ProtoKind::kSimple>
class LaneExec {
  static constexpr bool kLL = kProto == ProtoKind::kLL;
  static constexpr bool kLL128 = kProto == ProtoKind::kLL128;
  // LL128: the parts of a line each thread of a group moves.
  static constexpr unsigned kParts = 8 / Block::kLineGroup;
  static_assert(8 % Block::kLineGroup == 0 && Block::kWarp % Block::kLineGroup == 0);

 public:
  CHORUS_HD_EXEC LaneExec(Block& blk, const LaunchParams& p, const DeviceLane& lane)
      : b_(blk), p_(p), lane_(lane), spec_(lane.spec) {
    // A scalar in device memory, read now: the stream's earlier work (which may write it) is done.
    if (spec_.scalePtr) setScale(spec_, lane.type, spec_.scalePtr);
    for (int i = 0; i < kMaxLanePeers; ++i) {
      // Each position is the counter this side alone writes, as the last launch left it.
      if (lane.send[i] != kNoConnector) sendPos_[i] = b_.acquire(p.connectors[lane.send[i]].tail);
      if (lane.recv[i] != kNoConnector) recvPos_[i] = b_.acquire(p.connectors[lane.recv[i]].head);
    }
  }

  CHORUS_HD_EXEC void select(int sendTo, int recvFrom) {
    curSend_ = sendTo;
    curRecv_ = recvFrom;
  }

  // Simple: the tail counter decides (ready words are not polled on the device). LL: the
  // header's lines do, and every thread gets the header the leader read.
  CHORUS_HD_EXEC bool waitData(bool) {
    uint32_t ok = 1;
    const DeviceConnector& c = recvConn();
    if constexpr (kLL128) {
      return waitHeader128(c);
    } else if constexpr (kLL) {
      const uint32_t pos = recvPos_[curRecv_];
      uint64_t w[kLineHeaderLines] = {};
      if (leader()) {
        ok = spin(
            1, c.peer, [&] { return lineAt(c, pos, w); }, [&] { return simpleAt(c, pos) || line128At(c, pos); });
      }
      if (b_.share(ok) == 0) return false;
      rxHdr_.commId = b_.share(w[0]);
      rxHdr_.seq = b_.share(w[1]);
      const uint64_t stepBytes = b_.share(w[2]);
      rxHdr_.step = static_cast<uint32_t>(stepBytes);
      rxHdr_.bytes = static_cast<uint32_t>(stepBytes >> 32);
      return true;
    } else {
      if (leader()) {
        ok = spin(1, c.peer, [&] { return static_cast<int32_t>(b_.acquire(c.tail) - recvPos_[curRecv_]) > 0; });
      }
      return b_.share(ok) != 0;
    }
  }
  CHORUS_HD_EXEC bool waitSpace() {
    uint32_t ok = 1;
    if (leader()) {
      const DeviceConnector& c = sendConn();
      ok = spin(2, c.peer, [&] { return sendPos_[curSend_] - b_.acquire(c.head) < c.nslots; });
    }
    return b_.share(ok) != 0;
  }
  CHORUS_HD_EXEC const SlotHeader* recvHeader() const {
    if constexpr (kLL || kLL128) return &rxHdr_;
    return header(recvConn(), recvPos_[curRecv_]);
  }
  CHORUS_HD_EXEC const char* recvPayload(char*) {
    if constexpr (kLL128) {
      const FifoLine128* data = slotLines128(recvConn(), recvPos_[curRecv_]) + 1;
      const int i = rx128_[0].at ? 1 : 0;
      rx128_[i] = {data, lineFlag(recvPos_[curRecv_])};
      return reinterpret_cast<const char*>(data);
    } else if constexpr (kLL) {
      // The piece's lines, and the flag they must carry (a pair's two slots are both in use).
      const FifoLine* data = slotLines(recvConn(), recvPos_[curRecv_]) + kLineHeaderLines;
      const int i = rxLines_[0].at ? 1 : 0;
      rxLines_[i] = {data, lineFlag(recvPos_[curRecv_])};
      return reinterpret_cast<const char*>(data);
    }
    return reinterpret_cast<const char*>(header(recvConn(), recvPos_[curRecv_]) + 1);
  }
  CHORUS_HD_EXEC SlotHeader* sendHeader() {
    if constexpr (kLL || kLL128) return &txHdr_;
    return header(sendConn(), sendPos_[curSend_]);
  }
  CHORUS_HD_EXEC char* sendPayload(Prim, const char*, const char*) {
    if constexpr (kLL128) {
      tx128_ = slotLines128(sendConn(), sendPos_[curSend_]) + 1;
      return reinterpret_cast<char*>(tx128_);
    } else if constexpr (kLL) {
      txLines_ = slotLines(sendConn(), sendPos_[curSend_]) + kLineHeaderLines;
      return reinterpret_cast<char*>(txLines_);
    }
    return reinterpret_cast<char*>(header(sendConn(), sendPos_[curSend_]) + 1);
  }

  CHORUS_HD_EXEC bool move(const PieceMove& m, size_t n) {
    if constexpr (kLL128) return moveLines128(m, n);
    if constexpr (kLL) return moveLines(m, n);
    moveSlots(m, n);
    return true;
  }
  CHORUS_HD_EXEC bool leader() const { return b_.tid() == 0; }
  CHORUS_HD_EXEC void publish(bool) {
    const uint32_t pos = ++sendPos_[curSend_];
    if constexpr (kLL128) {
      // The header line, written by the first group as one line (every thread stamped txHdr_),
      // after the piece's lines (move ended with a barrier), though LL128 needs no order between
      // them; the tail as for LL.
      if (b_.tid() < Block::kWarp) b_.lineSync();  // the first group's stores as one (moveLines128)
      if (b_.tid() < Block::kLineGroup) {
        const uint64_t w[3] = {txHdr_.commId, txHdr_.seq, txHdr_.step | uint64_t(txHdr_.bytes) << 32};
        FifoLine128* h = slotLines128(sendConn(), pos - 1);
        for (unsigned q = 0; q < kParts; ++q) {
          const unsigned v = b_.tid() + q * Block::kLineGroup;
          const uint64_t w0 = 2 * v < 3 ? w[2 * v] : 0;
          const uint64_t w1 = v == 7 ? uint64_t(lineFlag(pos - 1)) : 2 * v + 1 < 3 ? w[2 * v + 1] : 0;
          b_.storePart(h, v, w0, w1);
        }
      }
      if (leader()) b_.store(sendConn().tail, pos);
      return;
    }
    if (!leader()) return;
    if constexpr (kLL) {
      // The header's lines, flagged with the new tail: the piece's lines are already out (move
      // ended with a barrier), though LL needs no order between them.
      FifoLine* h = slotLines(sendConn(), pos - 1);
      const uint64_t w[kLineHeaderLines] = {txHdr_.commId, txHdr_.seq, txHdr_.step | uint64_t(txHdr_.bytes) << 32};
      for (uint32_t i = 0; i < kLineHeaderLines; ++i) storeWord(h + i, w[i], lineFlag(pos - 1));
      // No one reads the tail for this piece's data: it only keeps the position for a later
      // Simple piece, whose own release store orders that piece. No fence here.
      b_.store(sendConn().tail, pos);
      return;
    }
    // The ready word of the piece's position, for an LL receiver to tell it from an older piece
    // (simpleAt); the release store publishes it with the rest of the header.
    SlotHeader* h = header(sendConn(), pos - 1);
    h->ready = slotReadyFlag(h->seq, pos - 1);
    b_.release(sendConn().tail, pos);
  }
  CHORUS_HD_EXEC void release() {
    const uint32_t pos = ++recvPos_[curRecv_];
    if (leader()) b_.release(recvConn().head, pos);
  }
  CHORUS_HD_EXEC void moved() {
    rxLines_[0] = rxLines_[1] = {};
    txLines_ = nullptr;
    rx128_[0] = rx128_[1] = {};
    tx128_ = nullptr;
  }
  // Device buffers travel as bytes: a peer reading this GPU's memory in place needs CUDA IPC
  // handles, which device lanes do not exchange. An offer from a peer is refused.
  CHORUS_HD_EXEC uint32_t offer(int, bool, char*, size_t) const { return 0; }
  CHORUS_HD_EXEC bool accept(int, bool, const char*, uint32_t, size_t) const { return false; }
  CHORUS_HD_EXEC bool exposed(int) const { return false; }
  CHORUS_HD_EXEC bool reads(int) const { return false; }
  CHORUS_HD_EXEC const char* peerBuffer(int, bool) const { return nullptr; }

  // Why the last wait failed (DeviceFault), the peer and what it waited for.
  uint32_t fault = 0;
  int32_t faultPeer = -1;
  uint32_t faultWaiting = 0;

 private:
  // Simple: the piece through the slot's payload, 16 bytes at a time where every operand allows.
  CHORUS_HD_EXEC void moveSlots(const PieceMove& m, size_t n) const {
    ReduceSpec spec = spec_;
    if (m.noPre) spec.hasPre = false;
    // A copy, or a pre-op without its scalar (one() then gives each element as it is): the bytes
    // move as they are, and not at all onto themselves.
    const bool asIs = m.fold == Fold::kCopy || (m.fold == Fold::kPre && !spec.hasPre);
    const bool toDst = m.dst && !(asIs && m.dst == m.a);
    size_t done = 0;
    constexpr size_t kPer = 16 / sizeof(T);
    if (16 % sizeof(T) == 0 && aligned16(m.a) && aligned16(m.b) && aligned16(toDst ? m.dst : nullptr) &&
        aligned16(m.dst2)) {
      const size_t nvec = n / kPer;
      const VecMove o{m.a, m.b, toDst ? m.dst : nullptr, m.dst2, nvec, b_.tid(), b_.nthreads()};
      if (asIs) {
        copyVectors(o);
      } else {
        foldVectors<T>(o, elemFold(m, spec));
      }
      done = nvec * kPer;
    }
    for (size_t i = done + b_.tid(); i < n; i += b_.nthreads()) {
      const T v = one(m, spec, loadElem<T>(m.a, i), m.b ? loadElem<T>(m.b, i) : T());
      if (toDst) storeElem<T>(m.dst, i, v);
      if (m.dst2) storeElem<T>(m.dst2, i, v);
    }
    b_.sync();  // every thread's writes to the slot and the output precede the publish
  }

  // LL: the piece 8 bytes a line; an operand that is a received slot's lines is read when its
  // flags are current, one that is the sent slot's lines is written with the new flag.
  CHORUS_HD_EXEC bool moveLines(const PieceMove& m, size_t n) {
    const bool toDst = m.dst && !(m.fold == Fold::kCopy && m.dst == m.a);
    ReduceSpec spec = spec_;
    if (m.noPre) spec.hasPre = false;
    const size_t bytes = n * sizeof(T);
    const size_t nlines = (bytes + 7) / 8;
    const LineRef la = linesOf(m.a);
    const LineRef lb = linesOf(m.b);
    const bool dstLines = toDst && m.dst == reinterpret_cast<char*>(txLines_);
    const bool dst2Lines = m.dst2 && m.dst2 == reinterpret_cast<char*>(txLines_);
    const uint32_t txFlag = lineFlag(sendPos_[curSend_]);
    bool failed = false;
    uint64_t since = 0;
    for (size_t j = b_.tid(); j < nlines && !failed; j += b_.nthreads()) {
      const size_t len = bytes - j * 8 < 8 ? bytes - j * 8 : 8;
      uint64_t wa = 0;
      uint64_t wb = 0;
      if (!loadWord(m.a, la, j, len, &wa, &since) || (m.b && !loadWord(m.b, lb, j, len, &wb, &since))) {
        failed = true;
        break;
      }
      uint64_t wr = 0;
      for (size_t k = 0; k < len / sizeof(T); ++k) {
        storeElem<T>(&wr, k, one(m, spec, loadElem<T>(&wa, k), loadElem<T>(&wb, k)));
      }
      if (toDst) putWord(m.dst, dstLines, j, len, wr, txFlag);
      if (m.dst2) putWord(m.dst2, dst2Lines, j, len, wr, txFlag);
    }
    // Every thread's lines are in (or one gave up) before the header goes or the slot is freed.
    if (!b_.any(failed)) return true;
    noteLineFault();
    return false;
  }
  struct LineRef {
    const FifoLine* at = nullptr;  // null: not a received slot's lines
    uint32_t flag = 0;
  };

  // LL128: line j of the piece is bytes [120j, 120j + 120), word w of it bytes [120j + 8w, +8);
  // groups of kLineGroup threads take lines j = g, g + groups, ..., thread k of a group parts k,
  // k + kLineGroup, ... of each. Every thread runs the same number of rounds (a round's lines past
  // the piece are idle), so the warp-wide votes meet. An operand that is a received slot's lines
  // is read when every line of the warp's round carries the flag; the sent slot's lines are
  // written whole with the new flag; memory operands word by word.
  struct Line128Ref {
    const FifoLine128* at = nullptr;  // null: not a received slot's lines
    uint32_t flag = 0;
  };
  CHORUS_HD_EXEC Line128Ref lines128Of(const char* p) const {
    for (const Line128Ref& r : rx128_) {
      if (r.at && p == reinterpret_cast<const char*>(r.at)) return r;
    }
    return Line128Ref{};
  }
  // 32-bit indices throughout (a piece is at most a slot): the launch kernel's registers are the
  // most any of its paths needs, and 64-bit ones here made all of it spill.
  CHORUS_HD_EXEC bool moveLines128(const PieceMove& m, size_t n) {
    constexpr unsigned G = Block::kLineGroup;
    const bool toDst = m.dst && !(m.fold == Fold::kCopy && m.dst == m.a);
    ReduceSpec spec = spec_;
    if (m.noPre) spec.hasPre = false;
    const uint32_t bytes = static_cast<uint32_t>(n * sizeof(T));
    const uint32_t nlines = (bytes + kLine128DataBytes - 1) / kLine128DataBytes;
    const Line128Ref la = lines128Of(m.a);
    const Line128Ref lb = lines128Of(m.b);
    FifoLine128* const dstLines = toDst && m.dst == reinterpret_cast<char*>(tx128_) ? tx128_ : nullptr;
    FifoLine128* const dst2Lines = m.dst2 && m.dst2 == reinterpret_cast<char*>(tx128_) ? tx128_ : nullptr;
    const uint32_t txFlag = lineFlag(sendPos_[curSend_]);
    const uint32_t groups = b_.nthreads() / G;
    const uint32_t g = b_.tid() / G;
    const unsigned k = b_.tid() % G;
    const uint32_t rounds = (nlines + groups - 1) / groups;
    bool failed = false;
    uint64_t since = 0;
    for (uint32_t round = 0; round < rounds; ++round) {
      const uint32_t j = round * groups + g;
      const bool active = g < groups && j < nlines;
      // The bytes of line j in the piece: 120, fewer in its last line.
      const uint32_t lineBytes = !active                                             ? 0
                                 : bytes - j * kLine128DataBytes < kLine128DataBytes ? bytes - j * kLine128DataBytes
                                                                                     : kLine128DataBytes;
      uint64_t wa[2 * kParts] = {};
      uint64_t wb[2 * kParts] = {};
      if (!loadLine128(m.a, la, j, active, lineBytes, wa, &since) ||
          (m.b && !loadLine128(m.b, lb, j, active, lineBytes, wb, &since))) {
        failed = true;
        break;
      }
      uint64_t wr[2 * kParts] = {};
      for (unsigned q = 0; active && q < kParts; ++q) {
        const unsigned v = k + q * G;
        for (unsigned h = 0; h < (v == 7 ? 1u : 2u); ++h) {
          const uint32_t len = word128Len(lineBytes, 2 * v + h);
          for (uint32_t e = 0; e < len / sizeof(T); ++e) {
            storeElem<T>(&wr[2 * q + h], e,
                         one(m, spec, loadElem<T>(&wa[2 * q + h], e), loadElem<T>(&wb[2 * q + h], e)));
          }
        }
      }
      // The loops above run a different number of times per thread (the flag thread's part has
      // one data word, a line's last parts fewer bytes), and nothing makes a warp whose threads
      // diverged run the stores below together: its eight threads' parts of one line could then
      // go out as separate stores, the flag's before the data's, and a reader find the flag
      // current over an old line. The warp meets first, so each line leaves in one warp-wide
      // store (NCCL's LL128 code has no such loops before its stores).
      b_.lineSync();
      if (active && toDst) storeLine128(m.dst, dstLines, j, lineBytes, wr, txFlag);
      if (active && m.dst2) storeLine128(m.dst2, dst2Lines, j, lineBytes, wr, txFlag);
    }
    // Every thread's lines are in (or one gave up) before the header goes or the slot is freed.
    if (!b_.any(failed)) return true;
    noteLineFault();
    return false;
  }
  // Bytes of word w (0..14) of a line holding `lineBytes`: 8, fewer at the end, 0 past it.
  CHORUS_HD_EXEC static uint32_t word128Len(uint32_t lineBytes, unsigned w) {
    const uint32_t off = w * 8;
    return off >= lineBytes ? 0 : lineBytes - off < 8 ? lineBytes - off : 8;
  }
  // This thread's words of line j of operand p (a received slot's lines when l.at, else memory):
  // w[2q + h] is word h of part k + q * kLineGroup. false: a wait gave up (the abort word,
  // another block's failure, the deadline), for the whole warp alike.
  CHORUS_HD_EXEC bool loadLine128(const char* p, const Line128Ref& l, uint32_t j, bool active, uint32_t lineBytes,
                                  uint64_t* w, uint64_t* since) {
    constexpr unsigned G = Block::kLineGroup;
    const unsigned k = b_.tid() % G;
    if (!l.at) {
      for (unsigned q = 0; active && q < kParts; ++q) {
        const unsigned v = k + q * G;
        for (unsigned h = 0; h < (v == 7 ? 1u : 2u); ++h) {
          const uint32_t len = word128Len(lineBytes, 2 * v + h);
          if (len) loadWord(p, LineRef{}, size_t(j) * 15 + 2 * v + h, len, &w[2 * q + h], since);
        }
      }
      return true;
    }
    return pollLine128(l.at + (active ? j : 0), l.flag, active, w, since);
  }
  // The parts of `line` this thread holds, read into w again until every active thread of the
  // warp found its line's flag current, then once more. The parts read beside the flag are not
  // the ones used: each thread's part is a load of its own, and where a warp's loads of one line
  // do not go out as one instruction (threads diverged by earlier code) a part can be older than
  // the flag its line's flag thread saw. After the warp's vote every flag is known current, so a
  // fresh load of every part gets the line whole (NCCL reloads the same way, prims_ll128.h). Runs
  // 6 and 7 found lines whose first 16 to 32 bytes were the last lap's, under MPS only.
  CHORUS_HD_EXEC bool pollLine128(const FifoLine128* line, uint32_t flag, bool active, uint64_t* w, uint64_t* since) {
    constexpr unsigned G = Block::kLineGroup;
    const unsigned k = b_.tid() % G;
    for (uint32_t polls = 1;; ++polls) {
      bool stale = false;
      for (unsigned q = kParts; active && q-- > 0;) {  // part 7 (the flag) first
        const unsigned v = k + q * G;
        if (v == 7) stale = b_.loadPart(line, v).word[1] != flag;
      }
      if (!b_.lineAny(stale)) {
        for (unsigned q = 0; active && q < kParts; ++q) {
          const FifoLine x = b_.loadPart(line, k + q * G);
          w[2 * q] = x.word[0];
          w[2 * q + 1] = x.word[1];
        }
        return true;
      }
      b_.relax();
      if (polls % kPollsPerCheck == 0 && b_.lineAny(stopReason(since) != 0)) return false;
    }
  }
  // This thread's words of line j to p: the sent slot's lines (`lines`), whole and flagged, or
  // memory, word by word.
  CHORUS_HD_EXEC void storeLine128(char* p, FifoLine128* lines, uint32_t j, uint32_t lineBytes, const uint64_t* w,
                                   uint32_t flag) {
    constexpr unsigned G = Block::kLineGroup;
    const unsigned k = b_.tid() % G;
    for (unsigned q = 0; q < kParts; ++q) {
      const unsigned v = k + q * G;
      if (lines) {
        b_.storePart(lines + j, v, w[2 * q], v == 7 ? uint64_t(flag) : w[2 * q + 1]);
        continue;
      }
      for (unsigned h = 0; h < (v == 7 ? 1u : 2u); ++h) {
        const uint32_t len = word128Len(lineBytes, 2 * v + h);
        if (len) putWord(p, false, size_t(j) * 15 + 2 * v + h, len, w[2 * q + h], 0);
      }
    }
  }
  // LL128's waitData: the leader polls the header line's flag part; then the first warp reads the
  // line as a line (its first group holds it) and the block learns its three words.
  CHORUS_HD_EXEC bool waitHeader128(const DeviceConnector& c) {
    const uint32_t pos = recvPos_[curRecv_];
    const FifoLine128* h = slotLines128(c, pos);
    const uint32_t flag = lineFlag(pos);
    uint32_t ok = 1;
    if (leader()) {
      ok = spin(
          1, c.peer, [&] { return b_.loadPart(h, 7).word[1] == flag; },
          [&] {
            uint64_t w[kLineHeaderLines];
            return simpleAt(c, pos) || lineAt(c, pos, w);
          });
    }
    if (b_.share(ok) == 0) return false;
    uint64_t w[2 * kParts] = {};
    uint64_t since = 0;
    if (b_.tid() < Block::kWarp && !pollLine128(h, flag, b_.tid() < Block::kLineGroup, w, &since)) ok = 0;
    if (b_.share(ok) == 0) {
      noteLineFault();
      return false;
    }
    // Words 0 and 1 are part 0's (thread 0's); word 2 is part 1's first, held by thread
    // 1 % kLineGroup at index 2 * (1 / kLineGroup).
    rxHdr_.commId = b_.shareFrom(0, w[0]);
    rxHdr_.seq = b_.shareFrom(0, w[1]);
    const uint64_t stepBytes = b_.shareFrom(1 % Block::kLineGroup, w[2 * (1 / Block::kLineGroup)]);
    rxHdr_.step = static_cast<uint32_t>(stepBytes);
    rxHdr_.bytes = static_cast<uint32_t>(stepBytes >> 32);
    return true;
  }
  // Whether an LL piece is at `pos` of c's FIFO: its header lines carry that position's flags
  // (their words into w). LL's receiver waits for it; LL128's takes it for the other protocol.
  CHORUS_HD_EXEC bool lineAt(const DeviceConnector& c, uint32_t pos, uint64_t* w) {
    for (uint32_t i = 0; i < kLineHeaderLines; ++i) {
      if (!lineData(b_.loadLine(slotLines(c, pos) + i), lineFlag(pos), &w[i])) return false;
    }
    return true;
  }
  // Whether an LL128 piece is at `pos`: its header line's flag is that position's (an LL
  // receiver's sign that the other end chose LL128).
  CHORUS_HD_EXEC bool line128At(const DeviceConnector& c, uint32_t pos) {
    return b_.loadPart(slotLines128(c, pos), 7).word[1] == lineFlag(pos);
  }
  // After a line wait gave up: why. The leader, which may not be the thread that gave up, looks
  // at the abort word and the error record itself; otherwise it was the deadline.
  CHORUS_HD_EXEC void noteLineFault() {
    fault = static_cast<uint32_t>(DeviceFault::kTimeout);
    if (b_.acquire(const_cast<uint32_t*>(p_.abortFlag))) {
      fault = static_cast<uint32_t>(DeviceFault::kAborted);
    } else if (b_.acquire(&p_.error->status)) {
      fault = static_cast<uint32_t>(DeviceFault::kPeerFault);
    }
    faultPeer = recvConn().peer;
    faultWaiting = 1;
  }
  CHORUS_HD_EXEC LineRef linesOf(const char* p) const {
    for (const LineRef& r : rxLines_) {
      if (r.at && p == reinterpret_cast<const char*>(r.at)) return r;
    }
    return LineRef{};
  }
  // Bytes [8j, 8j + len) of an operand: from line j once its flags are current (a wait that
  // gives up at the abort word, a failure or the deadline returns false), or from memory.
  CHORUS_HD_EXEC bool loadWord(const char* p, const LineRef& l, size_t j, size_t len, uint64_t* w, uint64_t* since) {
    if (!l.at) {
      if (len == 8 && (reinterpret_cast<uintptr_t>(p) & 7) == 0) {
        *w = *reinterpret_cast<const uint64_t*>(p + j * 8);
      } else {
        __builtin_memcpy(w, p + j * 8, len);
      }
      return true;
    }
    for (uint32_t polls = 1;; ++polls) {
      if (lineData(b_.loadLine(l.at + j), l.flag, w)) return true;
      b_.relax();
      if (polls % kPollsPerCheck == 0 && stopReason(since)) return false;
    }
  }
  CHORUS_HD_EXEC void putWord(char* p, bool lines, size_t j, size_t len, uint64_t w, uint32_t flag) {
    if (lines) {
      storeWord(reinterpret_cast<FifoLine*>(p) + j, w, flag);
    } else if (len == 8 && (reinterpret_cast<uintptr_t>(p) & 7) == 0) {
      *reinterpret_cast<uint64_t*>(p + j * 8) = w;
    } else {
      __builtin_memcpy(p + j * 8, &w, len);
    }
  }
  // A line's 8 data bytes when both its flags are `flag`.
  CHORUS_HD_EXEC static bool lineData(const FifoLine& v, uint32_t flag, uint64_t* w) {
    if (static_cast<uint32_t>(v.word[0] >> 32) != flag || static_cast<uint32_t>(v.word[1] >> 32) != flag) return false;
    *w = (v.word[0] & 0xffffffffull) | (v.word[1] << 32);
    return true;
  }
  CHORUS_HD_EXEC void storeWord(FifoLine* l, uint64_t w, uint32_t flag) {
    b_.storeLine(l, (w & 0xffffffffull) | uint64_t(flag) << 32, (w >> 32) | uint64_t(flag) << 32);
  }
  CHORUS_HD_EXEC static FifoLine* slotLines(const DeviceConnector& c, uint32_t pos) {
    return c.lines + size_t(pos % c.nslots) * c.slotLines;
  }
  CHORUS_HD_EXEC static FifoLine128* slotLines128(const DeviceConnector& c, uint32_t pos) {
    return c.lines128 + size_t(pos % c.nslots) * c.slotLines128;
  }
  CHORUS_HD_EXEC const DeviceConnector& sendConn() const { return p_.connectors[lane_.send[curSend_]]; }
  CHORUS_HD_EXEC const DeviceConnector& recvConn() const { return p_.connectors[lane_.recv[curRecv_]]; }
  CHORUS_HD_EXEC static SlotHeader* header(const DeviceConnector& c, uint32_t pos) {
    return reinterpret_cast<SlotHeader*>(c.slots + size_t(pos % c.nslots) * (sizeof(SlotHeader) + c.slotBytes));
  }
  // One element of the piece (primMove's fold); `spec` without the pre-op when m.noPre.
  CHORUS_HD_EXEC T one(const PieceMove& m, const ReduceSpec& spec, T a, T b) const {
    return foldElem<T>(elemFold(m, spec), a, b);
  }
  CHORUS_HD_EXEC ElemFold elemFold(const PieceMove& m, const ReduceSpec& spec) const {
    return ElemFold{m.fold, m.preA && spec_.hasPre, spec};
  }
  // Whether the piece at `pos` of c's FIFO is a Simple one: the tail is past it and the slot's
  // header carries that position's ready word (publish). An LL receiver finds one when its peer
  // chose the other protocol, and its header lines will never come. The tail alone says nothing:
  // an LL sender's tail store is relaxed and may be seen before its lines, and its slot header is
  // then an older position's, or never written (seq 0). No writer races these reads: the slot's
  // next piece waits for this position to be freed.
  CHORUS_HD_EXEC bool simpleAt(const DeviceConnector& c, uint32_t pos) {
    if (static_cast<int32_t>(b_.acquire(c.tail) - pos) <= 0) return false;
    const SlotHeader* h = header(c, pos);
    return h->seq != 0 && h->ready == slotReadyFlag(h->seq, pos);
  }
  CHORUS_HD_EXEC uint32_t stopReason(uint64_t* since) { return device::stopReason(b_, p_, since); }
  // The leader's poll until ready() or a reason to stop; 1: ready. With each look at the stop
  // reasons, foreign() may say that what arrived is not this protocol's piece (kMismatch).
  template <typename F>
  CHORUS_HD_EXEC uint32_t spin(uint32_t waiting, int32_t peer, F ready) {
    return spin(waiting, peer, ready, [] { return false; });
  }
  template <typename F, typename G>
  CHORUS_HD_EXEC uint32_t spin(uint32_t waiting, int32_t peer, F ready, G foreign) {
    uint64_t since = 0;
    for (uint32_t polls = 1;; ++polls) {
      if (ready()) return 1;
      b_.relax();
      if (polls % kPollsPerCheck) continue;
      const uint32_t why = foreign() ? static_cast<uint32_t>(DeviceFault::kMismatch) : stopReason(&since);
      if (why) {
        fault = why;
        faultPeer = peer;
        faultWaiting = waiting;
        return 0;
      }
    }
  }

  Block& b_;
  const LaunchParams& p_;
  const DeviceLane& lane_;
  ReduceSpec spec_;  // lane_.spec with a device scalar read
  uint32_t sendPos_[kMaxLanePeers] = {};
  uint32_t recvPos_[kMaxLanePeers] = {};
  int curSend_ = 0;
  int curRecv_ = 0;
  // LL: the received header, the header to send, and the lines of this piece's slots.
  SlotHeader rxHdr_ = {};
  SlotHeader txHdr_ = {};
  LineRef rxLines_[2] = {};
  FifoLine* txLines_ = nullptr;
  // LL128: the same for its lines.
  Line128Ref rx128_[2] = {};
  FifoLine128* tx128_ = nullptr;
};

// Runs lane `li` of `p` with the block's threads. Returns false when it failed (the launch's
// error record then says why, unless another block's failure claimed it first).
template <class Block, typename T, ProtoKind kProto>
CHORUS_HD_EXEC bool runLaneAs(Block& b, const LaunchParams& p, uint32_t li) {
  const DeviceLane& lane = p.lanes[li];
  uint64_t* seqWord = laneSeqWord(p, lane);
  // Only this block advances this counter in this launch; the leader reads it and every thread
  // learns it (the last launch's store is ordered before this one by the stream).
  const uint64_t seq = b.share(b.tid() == 0 ? *seqWord + 1 : 0);
  LaneExec<Block, T, kProto> ex(b, p, lane);
  const size_t slotElems = lane.slotBytes >= sizeof(T) ? lane.slotBytes / sizeof(T) : 1;
  Primitives<LaneExec<Block, T, kProto>, std::conditional_t<kProto == ProtoKind::kSimple, ProtoSimple, ProtoLL>> prims(
      ex, SlotTag{p.commId, seq}, sizeof(T), slotElems, lane.input, lane.output, lane.scratch);
  PrimCursor at;
  const Step* steps = lane.steps ? lane.steps : &lane.step;
  const PrimStop stop = prims.run(steps, lane.nsteps, &at);
  if (stop.status == PrimStatus::kDone) {
    if (b.tid() == 0) *seqWord = seq;
    b.sync();
    return true;
  }
  if (b.tid() == 0) {
    DeviceFault why = DeviceFault::kMismatch;
    if (stop.status == PrimStatus::kRefused) why = DeviceFault::kRefused;
    if (stop.status == PrimStatus::kNeedData || stop.status == PrimStatus::kNeedSpace) {
      why = static_cast<DeviceFault>(ex.fault);
    }
    const Step& s = steps[at.step < lane.nsteps ? at.step : lane.nsteps - 1];
    const bool rx = stop.status == PrimStatus::kNeedData || stop.status == PrimStatus::kMismatch;
    const uint16_t k = rx ? lane.recv[s.recvFrom] : lane.send[s.sendTo];
    const int32_t peer = ex.faultPeer >= 0 ? ex.faultPeer : (k != kNoConnector ? p.connectors[k].peer : -1);
    recordFault(b, p, li, why, static_cast<uint32_t>(at.step), peer, ex.faultWaiting, seq, stop.bytes);
  }
  b.sync();
  return false;
}

}  // namespace chorus::device
