// The device executor of the primitives (src/algo/prims.h), written once for any block of
// threads: LaneExec<Block, T> runs one lane of a LaunchParams (src/device/launch_desc.h) with
// the block's threads, and runBlock runs every lane of one block in order. The kernel
// (prims_device.cu) instantiates it with CudaBlock (a CUDA thread block); the tests instantiate it
// with a block of host threads (tests/device_lane_test.cc), so everything here but the CUDA
// memory model itself is checked on every machine, TSan included.
//
// Block provides, as CHORUS_HD members:
//   unsigned tid(), nthreads(), index();     this thread, the block's size, which block
//   void sync();                             a barrier of the block's threads
//   uint32_t acquire(uint32_t* p);           loads and stores of counters other blocks, devices
//   void release(uint32_t* p, uint32_t v);   or the host read and write (system scope)
//   uint64_t acquire64(uint64_t* p); void release64(uint64_t* p, uint64_t v);
//   bool claim(uint32_t* p);                 0 -> 1 exchange; true for the one that made it
//   uint64_t nowNs();                        a clock for deadlines
//   void relax();                            between two polls (host threads yield)
//   uint64_t share(uint64_t v);              the leader's v, for every thread
//
// Per piece, as on the host: the leader (thread 0) waits for the receive slot's data and the
// send slot's room, reading the counters with acquire loads; every few thousand polls it checks
// the host's abort word, the launch's error record (another block failed) and the deadline. The
// block shares the answer; every thread moves its share of the piece, 16 bytes at a time where
// every operand is 16-byte aligned; after a block barrier the leader stamps the header and
// publishes with a release store. A wait that ends without data records why in the launch's
// DeviceError (channel, lane, step, peer) and ends the block; the host turns it into the
// communicator's error.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/hd.h"
#include "kernels/reduce.h"
#include "src/algo/prims.h"
#include "src/device/launch_desc.h"

namespace chorus::device {

// Polls between two looks at the abort word, the error record and the clock.
constexpr uint32_t kPollsPerCheck = 1024;

// 16 bytes, moved as one load and one store.
struct alignas(16) Vec16 {
  unsigned char b[16];
};

template <class Block, typename T>
class LaneExec {
 public:
  CHORUS_HD LaneExec(Block& blk, const LaunchParams& p, const DeviceLane& lane) : b_(blk), p_(p), lane_(lane) {
    for (int i = 0; i < kMaxLanePeers; ++i) {
      // Each position is the counter this side alone writes, as the last launch left it.
      if (lane.send[i] != kNoConnector) sendPos_[i] = b_.acquire(p.connectors[lane.send[i]].tail);
      if (lane.recv[i] != kNoConnector) recvPos_[i] = b_.acquire(p.connectors[lane.recv[i]].head);
    }
  }

  CHORUS_HD void select(int sendTo, int recvFrom) {
    curSend_ = sendTo;
    curRecv_ = recvFrom;
  }

  // The tail counter decides (ProtoSimple; ready words are not polled on the device).
  CHORUS_HD bool waitData(bool) {
    uint32_t ok = 1;
    if (leader()) {
      const DeviceConnector& c = recvConn();
      ok = spin(1, c.peer, [&] { return static_cast<int32_t>(b_.acquire(c.tail) - recvPos_[curRecv_]) > 0; });
    }
    return b_.share(ok) != 0;
  }
  CHORUS_HD bool waitSpace() {
    uint32_t ok = 1;
    if (leader()) {
      const DeviceConnector& c = sendConn();
      ok = spin(2, c.peer, [&] { return sendPos_[curSend_] - b_.acquire(c.head) < c.nslots; });
    }
    return b_.share(ok) != 0;
  }
  CHORUS_HD const SlotHeader* recvHeader() const { return header(recvConn(), recvPos_[curRecv_]); }
  CHORUS_HD const char* recvPayload(char*) const { return reinterpret_cast<const char*>(recvHeader() + 1); }
  CHORUS_HD SlotHeader* sendHeader() const { return header(sendConn(), sendPos_[curSend_]); }
  CHORUS_HD char* sendPayload(Prim, const char*, const char*) const {
    return reinterpret_cast<char*>(sendHeader() + 1);
  }

  CHORUS_HD void move(const PieceMove& m, size_t n) const {
    const bool toDst = m.dst && !(m.fold == Fold::kCopy && m.dst == m.a);
    ReduceSpec spec = lane_.spec;
    if (m.noPre) spec.hasPre = false;
    size_t done = 0;
    constexpr size_t kPer = 16 / sizeof(T);
    if (16 % sizeof(T) == 0 && aligned(m.a) && aligned(m.b) && aligned(toDst ? m.dst : nullptr) && aligned(m.dst2)) {
      const size_t nvec = n / kPer;
      for (size_t v = b_.tid(); v < nvec; v += b_.nthreads()) {
        Vec16 ra;
        Vec16 rb = {};
        __builtin_memcpy(&ra, m.a + v * 16, 16);
        if (m.b) __builtin_memcpy(&rb, m.b + v * 16, 16);
        Vec16 r;
        for (size_t k = 0; k < kPer; ++k) storeElem<T>(&r, k, one(m, spec, loadElem<T>(&ra, k), loadElem<T>(&rb, k)));
        if (toDst) __builtin_memcpy(m.dst + v * 16, &r, 16);
        if (m.dst2) __builtin_memcpy(m.dst2 + v * 16, &r, 16);
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
  CHORUS_HD bool leader() const { return b_.tid() == 0; }
  CHORUS_HD void publish(bool) {
    const uint32_t pos = ++sendPos_[curSend_];
    if (leader()) b_.release(sendConn().tail, pos);
  }
  CHORUS_HD void release() {
    const uint32_t pos = ++recvPos_[curRecv_];
    if (leader()) b_.release(recvConn().head, pos);
  }
  CHORUS_HD void moved() {}
  // Device buffers travel as bytes: a peer reading this GPU's memory in place needs CUDA IPC
  // handles, which device lanes do not exchange. An offer from a peer is refused.
  CHORUS_HD uint32_t offer(int, bool, char*, size_t) const { return 0; }
  CHORUS_HD bool accept(int, bool, const char*, uint32_t, size_t) const { return false; }
  CHORUS_HD bool exposed(int) const { return false; }
  CHORUS_HD bool reads(int) const { return false; }
  CHORUS_HD const char* peerBuffer(int, bool) const { return nullptr; }

  // Why the last wait failed (DeviceFault), the peer and what it waited for.
  uint32_t fault = 0;
  int32_t faultPeer = -1;
  uint32_t faultWaiting = 0;

 private:
  CHORUS_HD const DeviceConnector& sendConn() const { return p_.connectors[lane_.send[curSend_]]; }
  CHORUS_HD const DeviceConnector& recvConn() const { return p_.connectors[lane_.recv[curRecv_]]; }
  CHORUS_HD static SlotHeader* header(const DeviceConnector& c, uint32_t pos) {
    return reinterpret_cast<SlotHeader*>(c.slots + size_t(pos % c.nslots) * (sizeof(SlotHeader) + c.slotBytes));
  }
  CHORUS_HD static bool aligned(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
  // One element of the piece (primMove's fold); `spec` without the pre-op when m.noPre.
  CHORUS_HD T one(const PieceMove& m, const ReduceSpec& spec, T a, T b) const {
    switch (m.fold) {
      case Fold::kCopy:
        return a;
      case Fold::kPre:
        return ElemOps<T>::pre(spec, a);
      default: {
        const T pa = m.preA ? ElemOps<T>::pre(lane_.spec, a) : a;
        return reduceOne<T>(spec, pa, b, m.fold == Fold::kReducePost);
      }
    }
  }
  // The leader's poll until ready() or a reason to stop; 1: ready.
  template <typename F>
  CHORUS_HD uint32_t spin(uint32_t waiting, int32_t peer, F ready) {
    uint64_t since = 0;
    for (uint32_t polls = 1;; ++polls) {
      if (ready()) return 1;
      b_.relax();
      if (polls % kPollsPerCheck) continue;
      uint32_t why = 0;
      if (b_.acquire(const_cast<uint32_t*>(p_.abortFlag))) {
        why = static_cast<uint32_t>(DeviceFault::kAborted);
      } else if (b_.acquire(&p_.error->status)) {
        why = static_cast<uint32_t>(DeviceFault::kPeerFault);
      } else {
        const uint64_t now = b_.nowNs();
        if (!since) since = now;
        if (now - since > p_.timeoutNs) why = static_cast<uint32_t>(DeviceFault::kTimeout);
      }
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
  uint32_t sendPos_[kMaxLanePeers] = {};
  uint32_t recvPos_[kMaxLanePeers] = {};
  int curSend_ = 0;
  int curRecv_ = 0;
};

// Runs lane `li` of `p` with the block's threads. Returns false when it failed (the launch's
// error record then says why, unless another block's failure claimed it first).
template <class Block, typename T>
CHORUS_HD bool runLaneAs(Block& b, const LaunchParams& p, uint32_t li) {
  const DeviceLane& lane = p.lanes[li];
  DeviceCommState& st = *p.state;
  uint64_t* seqWord = lane.seqKind == SeqKind::kColl      ? &st.collSeq[lane.seqIndex]
                      : lane.seqKind == SeqKind::kP2pSend ? &st.p2pSendSeq[lane.seqIndex]
                                                          : &st.p2pRecvSeq[lane.seqIndex];
  // Only this block advances this counter in this launch; the leader reads it and every thread
  // learns it (the last launch's store is ordered before this one by the stream).
  const uint64_t seq = b.share(b.tid() == 0 ? *seqWord + 1 : 0);
  LaneExec<Block, T> ex(b, p, lane);
  const size_t slotElems = lane.slotBytes >= sizeof(T) ? lane.slotBytes / sizeof(T) : 1;
  Primitives<LaneExec<Block, T>> prims(ex, SlotTag{p.commId, seq}, sizeof(T), slotElems, lane.input, lane.output,
                                       lane.scratch);
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
    DeviceError* e = p.error;
    // The first failure of the launch is the one recorded; a block stopped by it (kPeerFault)
    // records nothing.
    if (why != DeviceFault::kPeerFault && b.claim(&e->claimed)) {
      e->block = b.index();
      e->lane = li;
      e->step = static_cast<uint32_t>(at.step);
      e->peer = ex.faultPeer >= 0 ? ex.faultPeer : (k != kNoConnector ? p.connectors[k].peer : -1);
      e->waiting = ex.faultWaiting;
      e->seq = seq;
      e->bytes = stop.bytes;
      e->seqIndex = lane.seqIndex;
      e->seqKind = static_cast<uint32_t>(lane.seqKind);
      b.release(&e->status, static_cast<uint32_t>(why));
    }
  }
  b.sync();
  return false;
}

// The lane's element type, from its chorusDataType_t.
template <class Block>
CHORUS_HD bool runLane(Block& b, const LaunchParams& p, uint32_t li) {
  switch (p.lanes[li].type) {
    case 0:
      return runLaneAs<Block, int8_t>(b, p, li);
    case 1:
      return runLaneAs<Block, uint8_t>(b, p, li);
    case 2:
      return runLaneAs<Block, int32_t>(b, p, li);
    case 3:
      return runLaneAs<Block, uint32_t>(b, p, li);
    case 4:
      return runLaneAs<Block, int64_t>(b, p, li);
    case 5:
      return runLaneAs<Block, uint64_t>(b, p, li);
    case 6:
      return runLaneAs<Block, Half>(b, p, li);
    case 7:
      return runLaneAs<Block, float>(b, p, li);
    case 8:
      return runLaneAs<Block, double>(b, p, li);
    case 9:
      return runLaneAs<Block, BFloat16>(b, p, li);
    case 10:
      return runLaneAs<Block, Fp8E4M3>(b, p, li);
    default:
      return runLaneAs<Block, Fp8E5M2>(b, p, li);
  }
}

// Every lane of block b.index(), in order; stops at the first that fails.
template <class Block>
CHORUS_HD void runBlock(Block& b, const LaunchParams& p) {
  const uint32_t i = b.index();
  if (i >= p.nblocks) return;
  for (uint32_t li = p.laneBegin[i]; li < p.laneBegin[i + 1]; ++li) {
    // A communicator whose kernels failed (this launch or an earlier one) or that was aborted
    // runs nothing more: its FIFOs may hold a failed operation's pieces.
    const uint32_t stop =
        b.tid() == 0 ? b.acquire(&p.error->status) | b.acquire(const_cast<uint32_t*>(p.abortFlag)) : 0;
    if (b.share(stop) != 0) return;
    if (!runLane(b, p, li)) return;
  }
}

}  // namespace chorus::device
