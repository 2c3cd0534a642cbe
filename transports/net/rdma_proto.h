// The RDMA protocol of Chorus's networks over RDMA-capable fabrics (libfabric now, ibverbs next),
// NCCL's IB protocol in its shape, written once over a small interface (Wire) that each fabric
// implements for one connected pair of endpoints.
//
// Every transfer is an RDMA write that also completes at the target with 32 bits of immediate data
// (fi_writedata, IBV_WR_RDMA_WRITE_WITH_IMM). The receiver says where a message goes: for each
// grouped receive it writes a clear-to-send entry (CtsEntry: per message the address, key, room
// and tag) into slot `seq % kSlots` of the sender's CTS FIFO. The sender, once that write's
// completion tells it the entry is there, matches each isend by tag to one message of the entry
// and writes the bytes straight into the receiver's buffer; the immediate names the slot and the
// message (and, up to kInlineMaxBytes, the size), so the receiver learns from its completions
// alone which message is in and how big it is. A larger message first writes its size record
// (SizeRecord: size and how many writes follow) into the receiver's record for that slot and
// message, then the bytes in writes of at most Wire::maxWrite() bytes: the receiver counts. Nothing
// relies on the order in which writes land or complete (EFA-style fabrics deliver out of order):
// the receiver reads an entry, a record or a buffer only after the completion of the write that
// filled it. A message longer than its receive is refused by the sender, which writes only its
// size record: both requests fail.
//
// A peer that dies says nothing, and an RDMA fabric tells only the writes that fail: while a comm
// waits (an isend for its entry, a request for its completion) and nothing arrives for kProbeNs, it writes
// a probe to the peer, so that a peer gone shows as a failed write. Closing a comm writes a
// goodbye, so the peer fails at once instead of at its next probe.
//
// At most kSlots receives (and kSlots sends) of one comm are in flight: a receive's slot is reused
// only after the receive is done, which implies the sender has matched every message of its entry.
//
// Each side owns one ProtoMem, registered for remote writes, whose address and key the other side
// learns when they connect: the sender's CTS FIFO and size-record staging, the receiver's CTS
// staging and size records.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "include/chorus/net.h"

namespace chorus {
namespace rdma {

constexpr uint32_t kSlots = CHORUS_NET_MAX_REQUESTS;  // CTS slots; also requests in flight per comm
constexpr int kMaxRecvs = 8;                          // messages of one grouped receive
constexpr int64_t kProbeNs = 100 * 1000 * 1000;

// The immediate: bits 0-1 kind, 2-6 slot, 7-9 message, 10-31 the size of a kInline message.
enum class ImmKind : uint32_t {
  kCts = 0,      // a CtsEntry is in the sender's FIFO slot
  kInline = 1,   // a whole message of at most kInlineMaxBytes, its size in the immediate
  kRecord = 2,   // a SizeRecord is in the receiver's record for (slot, message)
  kSegment = 3,  // one write of a message announced by its record
};
constexpr uint32_t kInlineMaxBytes = (1u << 22) - 1;
// kCts written to a comm that does not take clear-to-send entries (or, at a send comm, with a
// message field other than 0) is a control word: a probe (nothing to do: it exists to find a dead
// peer, whose write then fails) or a goodbye (the peer closed its comm).
constexpr uint32_t kCtlProbe = 6;
constexpr uint32_t kCtlBye = 7;
struct Imm {
  ImmKind kind = ImmKind::kCts;
  uint32_t slot = 0;
  uint32_t msg = 0;
  uint32_t size = 0;
};
uint32_t packImm(const Imm& imm);
Imm unpackImm(uint32_t word);

struct CtsEntry {
  uint64_t addr[kMaxRecvs];  // where message i goes, as the fabric addresses it remotely
  uint64_t key[kMaxRecvs];   // the remote key of its registration
  uint64_t size[kMaxRecvs];  // its room
  int32_t tag[kMaxRecvs];
  uint32_t n;    // messages in the group
  uint32_t seq;  // the receive's number on its comm (the slot is seq % kSlots)
};
struct SizeRecord {
  uint64_t size;
  uint64_t writes;  // segment writes that follow
};
struct ProtoMem {
  CtsEntry cts[kSlots];
  SizeRecord rec[kSlots][kMaxRecvs];
};

// A registration the protocol writes from or into.
struct MemRef {
  void* desc = nullptr;  // the local descriptor the fabric wants with a local buffer (or null)
  uint64_t key = 0;      // its remote key
  uint64_t base = 0;     // the registered range's first byte
  bool virtAddr = true;  // the fabric addresses remote memory by virtual address, else by offset
  uint64_t remoteAddr(const void* p) const {
    const uint64_t a = reinterpret_cast<uintptr_t>(p);
    return virtAddr ? a : a - base;
  }
};

// One connected pair of endpoints, as the protocol sees it.
class Wire {
 public:
  // What poll hands on: a write of this side finished (its `ctx`), or a write of the peer landed
  // here with immediate `imm`.
  class Sink {
   public:
    virtual void localDone(void* ctx) = 0;
    virtual void remoteWrite(uint32_t imm) = 0;

   protected:
    ~Sink() = default;
  };
  virtual ~Wire() = default;
  // Writes [buf, buf + len) (in the registration `desc`) to (raddr, rkey) at the peer, with `imm`.
  // Never refuses for lack of room: a fabric whose queue is full keeps the write until it fits.
  virtual chorusResult_t write(const void* buf, size_t len, void* desc, uint64_t raddr, uint64_t rkey, uint32_t imm,
                               void* ctx) = 0;
  // Moves what can move and reports completions to `sink`; an error is the wire's end (why()).
  virtual chorusResult_t poll(Sink& sink) = 0;
  // The largest single write.
  virtual size_t maxWrite() const = 0;
  // The bytes of each write of a message of `size` bytes (at most maxWrite()): a fabric with
  // several queue pairs per connection may split a message into one write per queue pair.
  virtual size_t segmentBytes(size_t size) const {
    (void)size;
    return maxWrite();
  }
  virtual std::string why() const = 0;
};

// The protocol state of one comm: a send comm uses the Send half, a receive comm the Recv half.
// Requests are the comm's own (kSlots of them); not thread-safe (the network's rule: one comm,
// one caller at a time).
class Proto final : private Wire::Sink {
 public:
  // `mem`: this side's ProtoMem, registered as `memRef`; the peer's at (peerMem, peerKey).
  Proto(Wire* wire, ProtoMem* mem, MemRef memRef, bool send);
  void setPeer(uint64_t peerMemAddr, uint64_t peerKey);
  bool peerKnown() const { return peerKnown_; }

  // The network ABI's calls. A request is an opaque pointer into the comm.
  chorusResult_t isend(void* data, size_t size, int tag, const MemRef* mr, void** request);
  chorusResult_t irecv(int n, void** data, const size_t* sizes, const int* tags, MemRef* const* mrs, void** request);
  // test for any request of any Proto (the request knows its comm).
  static chorusResult_t testRequest(void* request, int* done, size_t* sizes);
  // Drains the wire (also what setup calls while it waits).
  chorusResult_t progress();
  // Tells the peer this comm closes; true once the goodbye has left (poll until then, briefly).
  bool sayGoodbye();
  bool failed() const { return failed_; }
  const std::string& failure() const { return failure_; }
  // The Proto of a request's comm.
  static Proto* owner(void* request);
  // The network's own pointer for this comm (its comm object).
  void* user = nullptr;
  // True once, after the comm failed: the caller says why in its log.
  // The failure is the peer's goodbye (a close, not an error: said at INFO).
  bool closedByPeer() const { return byePeer_; }
  bool firstReport() {
    if (!failed_ || reported_) return false;
    reported_ = true;
    return true;
  }

 private:
  struct Request {
    Proto* proto = nullptr;
    bool inUse = false;
    bool send = false;
    int n = 0;
    uint32_t pending = 0;              // this side's writes not yet completed
    uint32_t slot = 0;                 // a receive's CTS slot
    size_t size[kMaxRecvs] = {};       // send: its size; receive: the room of each message
    size_t got[kMaxRecvs] = {};        // receive: the bytes of each message
    bool known[kMaxRecvs] = {};        // receive: its size is known (inline, or its record)
    uint64_t writes[kMaxRecvs] = {};   // receive: segment writes announced
    uint64_t arrived[kMaxRecvs] = {};  // receive: segment writes landed
  };
  void localDone(void* ctx) override;
  void remoteWrite(uint32_t imm) override;
  Request* freeRequest(bool send);
  bool complete(const Request& r) const;
  chorusResult_t fail(const std::string& why);
  bool waiting() const;
  chorusResult_t control(uint32_t ctl, void* ctx);

  Wire* wire_;
  ProtoMem* mem_;
  MemRef memRef_;
  bool send_;
  bool peerKnown_ = false;
  uint64_t peerMem_ = 0;
  uint64_t peerKey_ = 0;
  bool failed_ = false;
  bool reported_ = false;
  std::string failure_;
  int64_t lastNewsNs_ = 0;  // the last completion of either kind, or the last probe
  bool byeLeft_ = false;
  bool byePeer_ = false;  // the failure is the peer's goodbye
  int byeCtx_ = 0;        // the goodbye's ctx
  Request reqs_[kSlots];
  // Send: CTS entries whose write completed here, the entry being matched and its matched messages.
  bool ctsIn_[kSlots] = {};
  bool starved_ = false;  // an isend found no entry since the last one arrived
  uint32_t sendSeq_ = 0;
  uint32_t matched_ = 0;
  // Receive: the next receive's number and the receive that owns each slot.
  uint32_t recvSeq_ = 0;
  Request* slotOwner_[kSlots] = {};
};

}  // namespace rdma
}  // namespace chorus
