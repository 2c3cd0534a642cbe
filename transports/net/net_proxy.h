// The net transport's proxy thread: moves slots between local FIFOs and the comms of a network
// (include/chorus/net.h), as NCCL's proxy serves its net transport.
//
// Each slot travels as two messages on its connection: its header (kTagHeader, sizeof(SlotHeader)
// bytes) and its payload (kTagPayload, header.bytes). For a send FIFO the proxy is the consumer:
// it sends both messages of every published slot, up to kMaxSlotsInFlight slots at once, the
// payload from the slot or from where the lane published it by reference (ProxyLink::refs,
// registered on the comm for the send), and frees slots in order as their sends complete. For a
// receive FIFO it is the producer: it posts one grouped receive of both messages per free slot,
// the header into the slot and the payload into the destination the lane posted for that slot
// (ProxyLink::dests, registered for the receive) or else the slot's own payload, and publishes
// slots in order as they complete, once it has checked that the header's byte count arrived.
// With checksums (CHORUS_NET_CHECKSUM, both ends alike) the header message is a WireHeader: the
// slot's header and the CRC32C of header and payload, computed before the send and checked before
// the slot is published; a mismatch fails the connection with a message naming the peer, the
// operation and the network, which the transport keeps for the communicator (dataErrors()).
// While no destination is posted it keeps at most kBlindDepth receives ahead, so a lane that
// posts gets its payloads in place.
//
// Sleeping: a FIFO's lane rings the proxy's eventfd on every post and free (ProxyLink::wakeFd);
// the network's comms wake it through their waitFd (poll()). A FIFO for kernels rings nothing,
// and a network without waitFd tells nothing: while it serves either, the proxy polls, backing off
// to naps after kSpinPasses passes in which nothing moved (kSpinPassesHost when no FIFO for kernels
// is among them: the threads that run collectives need the cores more than the proxy), from 50 us
// doubling to 1 ms while nothing moves.
//
// A comm whose connect has not completed yet is connected here, by calling connect again on each
// pass until it completes or its deadline passes. A network error, or the peer's end, closes that
// FIFO, so the algorithm waiting on it fails at once with a message naming the peer; a kernel
// cannot see that, so the failure of a polled FIFO also goes to onPolledFailure (on the proxy's
// thread). Thread-safe: add() may be called from any thread.
#pragma once

#include <array>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "include/chorus/net.h"
#include "src/algo/fifo.h"
#include "src/common/log.h"
#include "src/common/os.h"
#include "src/transport/transport.h"

namespace chorus {

class NetProxy {
 public:
  static constexpr int kTagHeader = 1;
  static constexpr int kTagPayload = 2;
  static constexpr uint32_t kMaxSlotsInFlight = CHORUS_NET_MAX_REQUESTS / 2;
  static constexpr uint32_t kBlindDepth = 2;

  // The header message with checksums on.
  struct WireHeader {
    unsigned char header[sizeof(SlotHeader)];
    uint32_t crc;  // CRC32C of `header` and then the payload
    uint32_t reserved;
  };

  // A failure the lane cannot tell from a closed FIFO: a polled FIFO's (kernels see no reason at
  // all), or corrupted data on any (`corrupt`).
  using FailureHook = std::function<void(int peer, const std::string& peerName, const std::string& why, bool corrupt)>;
  // `net` with its context `ctx` (both outlive the proxy); `checksum`: WireHeaders, checked.
  NetProxy(Logger log, const chorusNet_v1_t* net, void* ctx, FailureHook onFailure, bool checksum = false);
  ~NetProxy();
  NetProxy(const NetProxy&) = delete;
  NetProxy& operator=(const NetProxy&) = delete;

  Status start();
  int notifyFd() const { return wake_.get(); }

  // What one connection hands over.
  struct Link {
    bool isSend = false;
    int peer = -1;
    std::string peerName;
    FifoView fifo;
    ProxyLink lane;  // what the FIFO's lane shares with the proxy (refs, dests); empty when polled
    bool polled = false;
    char* mem = nullptr;  // the FIFO's memory, registered on the comm
    size_t memBytes = 0;
    void* comm = nullptr;  // made already, or null: connect with `handle` (a send) until `deadlineNs`
    std::array<char, CHORUS_NET_HANDLE_MAXSIZE> handle{};
    int dev = 0;
    int64_t deadlineNs = 0;
  };
  void add(Link link);
  // Returns once the thread has begun a new pass after this call (or `timeoutNs` passed): a call
  // it had in flight on a FIFO closed before the call is over, and it will not touch that FIFO's
  // slots, nor the user memory they referred to, again.
  void quiesce(int64_t timeoutNs);

 private:
  struct Slot {
    void* req[2] = {nullptr, nullptr};  // send: header, payload; receive: the grouped receive
    void* mr = nullptr;                 // a registration made for this slot (a ref or a destination)
    char* dst = nullptr;                // receive: where its payload goes
    bool headerPosted = false;          // send: the header's isend is in, the payload's not yet
  };
  struct Entry {
    Link l;
    void* mr = nullptr;            // the FIFO's memory on the comm
    uint32_t posted = 0;           // send: slots whose messages are posted; receive: slots with a receive
    uint32_t next = 0;             // the next slot to complete
    std::vector<Slot> slots;       // by slot index
    std::vector<WireHeader> wire;  // with checksums: the header messages, by slot index
    void* wireMr = nullptr;        // `wire` on the comm
    bool failed = false;
    bool closed = false;  // its comm closed and registrations gone
  };

  void loop();
  static constexpr int kSpinPasses = 20000;    // serving a FIFO for kernels
  static constexpr int kSpinPassesHost = 200;  // host FIFOs only, over a network without waitFd
  static constexpr long kNapNs = 50000;
  static constexpr long kNapMaxNs = 1000000;

  // Moves what can move without blocking; returns true if anything moved.
  bool connect(Entry& e);
  bool ready(Entry& e);  // registers the FIFO once the comm is there
  bool progressSend(Entry& e);
  bool progressRecv(Entry& e);
  // false: the entry failed.
  bool postRecvs(Entry& e, bool* moved);
  bool completeRecvs(Entry& e, bool* moved);
  // `peerClosed`: the peer closed its comm between messages, which a clean destroy does too: said
  // at TRACE, not as a connection that ended at INFO.
  void fail(Entry& e, const std::string& why, bool peerClosed = false, bool corrupt = false);
  void close(Entry& e);  // abandons its requests and closes its comm (the peer sees the end)
  // Why `call` failed, with what the network said; *peerClosed (when asked): the network said it at
  // INFO, as a peer that closed between messages, not at WARN.
  std::string callFailed(const char* call, chorusResult_t rc, bool* peerClosed = nullptr) const;

  Logger log_;
  const chorusNet_v1_t* net_;
  void* ctx_;
  FailureHook onFailure_;
  bool checksum_;
  UniqueFd wake_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> passes_{0};  // loop iterations begun
  int idlePasses_ = 0;               // passes since something last moved (the thread's own)
  long napNs_ = kNapNs;              // the next nap while polling
  std::thread thread_;
  std::mutex mu_;
  std::vector<Link> incoming_;  // guarded by mu_
  std::vector<Entry> entries_;  // the thread's own (and the destructor's, after it ended)
};

// The last warning or INFO line a network's logger gave on this thread (netLogger), for error
// messages; cleared by taking it. A network says at INFO that the peer closed its comm between
// messages, at WARN that something broke.
std::string takeNetMessage();
// The logger Chorus gives networks: their lines go to the process's log (CHORUS_DEBUG, subsystem
// NET), and warnings and INFO lines are also kept for takeNetMessage.
void netLogger(chorusNetLogLevel_t level, unsigned long flags, const char* file, int line, const char* fmt, ...);

}  // namespace chorus
