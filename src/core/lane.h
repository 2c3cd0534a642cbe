// A Lane runs one rank's schedule (a list of Steps) over up to kMaxLanePeers send and receive
// FIFOs with the primitives of src/algo/prims.h, resumably: progress() does all it can without
// blocking and, when it must wait, says on which counter and for which peer. Progress-thread-only
// (one lane is never progressed by two threads at once; its worker group helps move each piece).
// Every algorithm is a lane: ring and chain channels, each tree, the direct and slice all-reduces
// (the slice one with the peers' memory offers and dones as control slots), point-to-point.
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
  ProxyLink link;  // the net transport's proxy, which consumes this FIFO
  uint32_t tail = 0;
  uint32_t headSeen = 0;  // the consumer's head when last read: it only grows
  int peer = -1;
  bool viaProxy = false;  // slots leave through a proxy thread (net): published is not yet sent

  // Whether slot `tail` is free. Reads the consumer's counter (a cache line the consumer owns)
  // only when what was seen last does not already leave room.
  bool hasSpace() {
    if (tail - headSeen < fifo.nslots) return true;
    headSeen = fifo.ctrl->head.load(std::memory_order_acquire);
    return tail - headSeen < fifo.nslots;
  }
  void publish() {
    fifo.publish(++tail);
    link.ring();
  }
};
struct RecvCursor {
  FifoView fifo;
  ProxyLink link;  // the net transport's proxy, which produces into this FIFO
  uint32_t head = 0;
  int peer = -1;
  // The producer writes each header's `ready` word last, with release order, straight into this
  // FIFO (in-process and shared memory; not a net proxy's copy): a consumer may take a slot on
  // seeing its header, without reading the tail counter.
  bool headerPublishes = false;

  // Frees the slot at head (and forgets any destination posted for it).
  void consume() {
    if (link.dests) link.dests[head % fifo.nslots].store(0, std::memory_order_relaxed);
    release();
  }
  void release() {
    fifo.release(++head);
    link.ring();
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
  std::atomic<int64_t> sinceNs{0};   // when the current wait began (coarseNowNs: reports say it in ms)

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
  // Collectives: a send FIFO whose proxy can read this process's memory (link.refs) gets data that
  // already sits in the input or output by reference, not copied into the slot; the lane is then
  // done only when the proxy has put all of it on the wire. Off for point-to-point, whose sends
  // must not wait for the receiver.
  bool sendByRef = false;
  ProtoKind proto = ProtoKind::kSimple;  // ProtoFlag sends nothing by reference
  char* scratch = nullptr;               // one slot, for schedules that stash a piece (kOutIsScratch)
  // How this rank's buffers are offered to peers to read in place, and peers' offers taken
  // (kSendDesc / kRecvDesc); null: every peer gets bytes, and an offer is refused.
  MemShare* share = nullptr;

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

  // What the offers of a lane whose peers read memory in place decided, per connector index
  // (made on the first offer; most lanes never have one).
  struct PeerMemory {
    bool exposed[kMaxLanePeers] = {};  // this rank offered its buffers to that peer
    bool reads[kMaxLanePeers] = {};    // that peer offered its buffers to this rank
    const char* in[kMaxLanePeers] = {};
    const char* out[kMaxLanePeers] = {};
    MemDesc outDesc[kMaxLanePeers];  // this rank's output, offered when its slice is reduced
    Status refused;                  // why an offer was not taken
  };
  PeerMemory& peerMemory();
  // The offer of this rank's input (it decides the output's too) or output to send connector k's
  // peer, written to `payload`; its size, or 0 when that peer gets bytes.
  uint32_t offer(int k, bool output, char* payload, size_t bytes);
  // A peer's offer on receive connector k, for a buffer of `bytes`.
  bool accept(int k, bool output, const char* payload, uint32_t size, size_t bytes);

  Status recvCheck(const SlotHeader& h, size_t bytes) const;
  // Where the piece a send primitive would copy into the slot already is, or null.
  const char* sendSource(Prim p, const char* in, const char* out) const;
  // Receive side of sendByRef (net FIFOs with dests): tells the proxy, for every slot below
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
  uint32_t flagPolls_ = 0;  // waits for a ProtoFlag header that found it not ready
  std::unique_ptr<PeerMemory> peers_;
};

}  // namespace chorus
