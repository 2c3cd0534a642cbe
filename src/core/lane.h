// A Lane runs one rank's schedule (a list of Steps) over at most one send FIFO and one receive
// FIFO with the primitives of src/algo/prims.h, resumably: progress() does all it can without
// blocking and, when it must wait, says on which counter and for which peer. Progress-thread-only
// (one lane is never progressed by two threads at once; its worker group helps move each piece).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/reduce_host.h"
#include "src/algo/fifo.h"
#include "src/algo/prims.h"
#include "src/algo/schedule.h"
#include "src/common/status.h"
#include "src/core/memshare.h"

namespace chorus {

class WorkerGroup;

// A FIFO end with this rank's position in it; positions persist across operations.
struct SendCursor {
  FifoView fifo;
  uint32_t tail = 0;
  uint32_t headSeen = 0;  // the consumer's head when last read: it only grows
  int peer = -1;
  bool viaProxy = false;  // slots leave through a proxy thread (socket): published is not yet sent

  // Whether slot `tail` is free. Reads the consumer's counter (a cache line the consumer owns)
  // only when what was seen last does not already leave room.
  bool hasSpace() {
    if (tail - headSeen < fifo.nslots) return true;
    headSeen = fifo.ctrl->head.load(std::memory_order_acquire);
    return tail - headSeen < fifo.nslots;
  }
};
struct RecvCursor {
  FifoView fifo;
  uint32_t head = 0;
  int peer = -1;
  // The producer writes each header's `ready` word last, with release order, straight into this
  // FIFO (in-process and shared memory; not a socket proxy's copy): a consumer may take a slot on
  // seeing its header, without reading the tail counter.
  bool headerPublishes = false;

  // Frees the slot at head (and forgets any destination posted for it).
  void consume() {
    if (fifo.dests) fifo.dests[head % fifo.nslots].store(0, std::memory_order_relaxed);
    fifo.release(++head);
  }
};

// What a blocked lane waits for: *word to differ from `seen`.
struct WaitInfo {
  std::atomic<uint32_t>* word = nullptr;
  uint32_t seen = 0;
  std::atomic<uint32_t>* sleeperFlag = nullptr;  // set while sleeping so the other side wakes us
  int peer = -1;
  bool forData = false;  // true: waiting for the peer's data; false: for space in the peer's FIFO
  Prim prim = Prim::kSend;
  size_t step = 0;
  uint64_t seq = 0;
  // The other end is a socket proxy: data or space comes at network speed, so the waiter naps on
  // the futex at once instead of yielding the core the proxies need.
  bool network = false;
  // Set with an error instead: the connection to `peer` was closed (it failed, exited or aborted).
  bool closed = false;
};

// What one channel of a communicator is doing, published for a watchdog and for hang reports.
// Written by the progress thread with relaxed stores (a snapshot may mix two moments, which is
// fine for diagnostics); read by any thread.
struct ChannelStatus {
  std::atomic<uint64_t> seq{0};      // operation sequence number
  std::atomic<uint32_t> step{0};     // step of the schedule
  std::atomic<int32_t> peer{-1};     // the peer waited on
  std::atomic<uint32_t> waiting{0};  // 0: running or idle, 1: waiting for data, 2: waiting for space
  std::atomic<int64_t> sinceNs{0};   // when the current wait began

  // Records a wait; its start time is taken only when it differs from the last one recorded.
  void blocked(const struct WaitInfo& w);
  void running() { waiting.store(0, std::memory_order_relaxed); }
  std::string describe() const;
};

struct LaneArgs {
  const char* input = nullptr;
  char* output = nullptr;
  size_t elemSize = 1;
  int type = 1;  // chorusDataType_t
  ReduceSpec spec;
  const HostKernels* kernels = nullptr;
  uint64_t commId = 0;
  uint64_t seq = 0;
  size_t slotBytes = 0;
  ChannelStatus* status = nullptr;  // this lane's channel record, if any
  WorkerGroup* workers = nullptr;   // the threads that move each piece with the lane's thread; null: that one alone
  // Collectives: a send FIFO whose proxy can read this process's memory (fifo.refs) gets data that
  // already sits in the input or output by reference, not copied into the slot; the lane is then
  // done only when the proxy has put all of it on the wire. Off for point-to-point, whose sends
  // must not wait for the receiver.
  bool sendByRef = false;
  ProtoKind proto = ProtoKind::kSimple;  // ProtoFlag sends nothing by reference
  char* scratch = nullptr;               // one slot, for schedules that stash a piece (kOutIsScratch)

  // Element `i` of the input or output. A rank with no buffer on one side (a broadcast's
  // non-root input, a gather's non-root output) gets nullptr back, never an offset null pointer.
  const char* in(size_t i) const { return input ? input + i * elemSize : nullptr; }
  char* out(size_t i) const { return output ? output + i * elemSize : nullptr; }
};

// The connectors of a lane, by the index its steps name (Step::sendTo, Step::recvFrom).
struct LaneConnectors {
  SendCursor* send[kMaxLanePeers] = {};
  RecvCursor* recv[kMaxLanePeers] = {};
};

// Steps a lane runs without owning them: the caller keeps them alive and unchanged until the
// lane is gone (a plan cached across calls).
struct StepsRef {
  const Step* data;
  size_t size;
};

class Lane {
 public:
  // One send and one receive connector (rings, chains, point-to-point); either may be null when
  // no step uses it.
  Lane(const LaneArgs& args, std::vector<Step> steps, SendCursor* send, RecvCursor* recv);
  // Several (trees). Sending by reference and posting receive destinations (sockets) are for lanes
  // with one connector each way only.
  Lane(const LaneArgs& args, std::vector<Step> steps, const LaneConnectors& conns);
  Lane(const LaneArgs& args, StepsRef steps, const LaneConnectors& conns);
  Lane(Lane&&) noexcept = default;
  Lane& operator=(Lane&&) noexcept = default;
  Lane(const Lane&) = delete;  // steps_ may point into owned_
  Lane& operator=(const Lane&) = delete;

  // ok: finished. inProgress: blocked (see *wait). Anything else: failed.
  Status progress(WaitInfo* wait, bool* moved);
  bool done() const { return at_.step >= nsteps_ && !refsOut_; }

 private:
  class Exec;  // the host executor of the primitives over this lane's cursors

  Status recvCheck(const SlotHeader& h, size_t bytes) const;
  // Where the piece a send primitive would copy into the slot already is, or null.
  const char* sendSource(Prim p, const char* in, const char* out) const;
  // Receive side of sendByRef (socket FIFOs with dests): tells the proxy, for every slot below
  // `limit` not yet told, the output a receive-and-copy piece of this schedule goes to, so the
  // payload lands there instead of in the slot. Posting for a slot happens before the slot is
  // freed for the proxy (see the release in progress()); a slot the proxy took first is copied.
  void postAhead(uint32_t limit);

  LaneArgs a_;
  std::vector<Step> owned_;      // the steps, when the lane owns them
  const Step* steps_ = nullptr;  // owned_'s, or the caller's (StepsRef)
  size_t nsteps_ = 0;
  LaneConnectors conns_;
  SendCursor* send_ = nullptr;  // the connectors of the step at the cursor
  RecvCursor* recv_ = nullptr;
  size_t slotElems_;
  PrimCursor at_;
  bool refsOut_ = false;  // slots published by reference may not all be on the wire yet
  bool posting_ = false;  // postAhead's cursor below is set
  size_t postStep_ = 0;   // the next receive piece to post for: step, piece, and its slot
  size_t postPiece_ = 0;
  uint32_t postSlot_ = 0;
};

// The slice all-reduce of one rank (intra-host, large messages): each rank reduces one slice
// (block) of the message from every rank's contribution and hands the result to every peer.
// Per peer and direction there are two connections: "scatter" (this rank's input for the
// peer's slice) and "gather" (this rank's reduced slice). On either, a rank sends the bytes in
// slot-sized pieces, or, when the peer can read the buffer in place (threads of one process, or
// memory registered from chorusMemAlloc; MemShare decides), one slot holding a MemDesc; the
// receiver tells which from the first slot. A peer that read anything in place sends a final
// "done" on its scatter connection, and the rank that exposed memory returns only after every
// such peer's done. Each slice has one reducer, so every rank gets the same bits.
class SliceLane {
 public:
  SliceLane(const LaneArgs& args, int rank, int nranks, size_t count, const std::unique_ptr<SendCursor>* scatterSends,
            const std::unique_ptr<RecvCursor>* scatterRecvs, const std::unique_ptr<SendCursor>* gatherSends,
            const std::unique_ptr<RecvCursor>* gatherRecvs, MemShare* share);
  // When ranks chose this schedule each for itself (their buffers are registered), a hello goes
  // to the next rank of the ring and one is expected from the previous: a rank that ran the ring
  // instead meets it at once, and so does this rank, and both fail with a clear error.
  void checkNeighbours(SendCursor* next, RecvCursor* prev) {
    helloSend_ = next;
    helloRecv_ = prev;
  }

  Status progress(WaitInfo* wait, bool* moved);
  bool done() const { return finished_; }

  // SlotHeader::step of a slot that is not a data piece.
  static constexpr uint32_t kDescStep = 0x80000000u;
  static constexpr uint32_t kDoneStep = 0x80000001u;
  static constexpr uint32_t kHelloStep = 0x80000002u;

 private:
  enum Mode : uint8_t { kUnknown = 0, kDesc = 1, kData = 2 };
  struct Peer {
    Mode scatterOut = kUnknown;  // how this rank's input for the peer's slice goes to it
    Mode gatherOut = kUnknown;
    Mode scatterIn = kUnknown;  // how the peer's input for this rank's slice comes
    Mode gatherIn = kUnknown;
    size_t scatterSent = 0;  // pieces (a descriptor counts as all of them)
    size_t gatherSent = 0;
    size_t gatherCopied = 0;
    const char* scatterBase = nullptr;  // the peer's input, readable here (kDesc)
    const char* gatherBase = nullptr;   // the peer's output
    bool exposedTo = false;             // a descriptor went to the peer: wait for its done
    bool readFrom = false;              // a descriptor came from the peer: send it a done
    bool doneSent = false;
    bool doneSeen = false;
    MemDesc scatterDesc;
    MemDesc gatherDesc;
  };

  Block block(int r) const;
  size_t pieces(int r) const { return (block(r).count + slotElems_ - 1) / slotElems_; }
  Status checkHeader(const SlotHeader& h, int peer, uint32_t step, size_t bytes) const;
  // Reads the first slot of a connection when its mode is unknown: a descriptor (consumed) or
  // a data piece (left for the caller). inProgress when nothing has arrived.
  // A descriptor must describe exactly `expectBytes` (the peer's `what`, as this rank counts it).
  Status learnMode(RecvCursor* rc, int peer, size_t expectBytes, const char* what, Mode* mode, const char** base);
  Status sendDesc(SendCursor* sc, const MemDesc& d);
  Status blockedOn(RecvCursor* rc, WaitInfo* wait, Prim prim) const;
  Status blockedOn(SendCursor* sc, WaitInfo* wait) const;

  Status sendScatter(int p, WaitInfo* wait, bool* moved);
  Status reduceSlice(WaitInfo* wait, bool* moved);
  Status sendGather(int p, WaitInfo* wait, bool* moved);
  Status copyGather(int p, WaitInfo* wait, bool* moved);
  Status finishPeer(int p, WaitInfo* wait, bool* moved);
  Status hello(WaitInfo* wait, bool* moved);
  void chooseModes();

  LaneArgs a_;
  ReduceSpec noPre_;
  int rank_;
  int nranks_;
  size_t count_;
  const std::unique_ptr<SendCursor>* scatterSends_;  // indexed by rank; this rank's entry is null
  const std::unique_ptr<RecvCursor>* scatterRecvs_;
  const std::unique_ptr<SendCursor>* gatherSends_;
  const std::unique_ptr<RecvCursor>* gatherRecvs_;
  MemShare* share_;
  SendCursor* helloSend_ = nullptr;
  RecvCursor* helloRecv_ = nullptr;
  bool helloSent_ = false;
  bool helloSeen_ = false;
  size_t slotElems_;
  std::vector<Peer> peers_;
  size_t reduced_ = 0;  // pieces of this rank's slice in the output
  int folded_ = 0;      // contributions to the current piece folded (fold order below)
  bool started_ = false;
  bool finished_ = false;
};

}  // namespace chorus
