// The socket transport's proxy thread: moves slots between local FIFOs and TCP sockets.
//
// Algorithms post into and read from plain FIFOs in local memory; for a send connection the proxy
// is the FIFO's consumer (it writes each published slot, header then payload, to the socket and
// then frees it); for a receive connection it is the producer (it reads a header, checks the byte
// count against the slot size, reads the payload and publishes the slot). FIFO posts and frees
// ring the proxy's eventfd, so it sleeps in poll() when there is nothing to move.
//
// A FIFO for kernels (polled) rings nothing: a kernel cannot write an eventfd. While the proxy
// serves one, it polls the FIFO's counters instead of sleeping, and backs off to a 1 ms sleep
// after kSpinPasses passes in which nothing moved.
//
// Thread-safe: add() may be called from any thread. A socket error or EOF closes that FIFO, so the
// algorithm waiting on it fails at once with a message naming the peer; a kernel cannot see that,
// so the failure of a polled FIFO also goes to onPolledFailure (on the proxy's thread).
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "src/algo/fifo.h"
#include "src/common/log.h"
#include "src/common/os.h"

namespace chorus {

class SocketProxy {
 public:
  using FailureHook = std::function<void(int peer, const std::string& peerName, const std::string& why)>;
  explicit SocketProxy(Logger log, FailureHook onPolledFailure = nullptr);
  ~SocketProxy();
  SocketProxy(const SocketProxy&) = delete;
  SocketProxy& operator=(const SocketProxy&) = delete;

  Status start();
  int notifyFd() const { return wake_.get(); }
  // Takes over a connected socket that carries `fifo` to (isSend) or from `peer`; `polled`: a
  // FIFO for kernels.
  void add(UniqueFd fd, FifoView fifo, bool isSend, int peer, std::string peerName, bool polled = false);
  // Returns once the thread has begun a new pass after this call (or `timeoutNs` passed): a
  // system call it had in flight on a FIFO closed before the call is over, and it will not touch
  // that FIFO's slots, nor the user memory they referred to, again.
  void quiesce(int64_t timeoutNs);

 private:
  struct Entry {
    UniqueFd fd;
    FifoView fifo;
    bool isSend = false;
    int peer = -1;
    std::string peerName;
    uint32_t next = 0;        // send: next slot to transmit; recv: next slot to fill
    size_t offset = 0;        // bytes of that slot moved so far
    char* payload = nullptr;  // recv: where the current slot's payload goes (the slot or a posted buffer)
    bool wantWrite = false;
    bool failed = false;
    bool shut = false;    // the socket was shut down after its FIFO closed
    bool polled = false;  // a FIFO for kernels: nothing rings the proxy
  };

  void loop();
  static constexpr uint32_t kMaxSlotsPerCall = 8;
  static constexpr int kSpinPasses = 20000;

  // Moves what can move without blocking; returns true if anything moved.
  bool progress(Entry& e);
  bool progressSend(Entry& e);
  bool progressRecv(Entry& e);
  // Checks a header just read; fails the connection if it claims more than a slot holds.
  // and picks where its payload goes (e.payload).
  bool headerArrived(Entry& e, SlotHeader& h);
  void fail(Entry& e, const std::string& why);

  Logger log_;
  FailureHook onPolledFailure_;
  UniqueFd wake_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> passes_{0};  // loop iterations begun
  int idlePasses_ = 0;               // passes since something last moved (the thread's own)
  std::thread thread_;
  std::mutex mu_;
  std::vector<Entry> incoming_;  // guarded by mu_
};

}  // namespace chorus
