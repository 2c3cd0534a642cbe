// Socket transport: TCP between ranks on different hosts (or wherever shm is disabled).
//
// Both sides keep their FIFO in local memory; the transport's proxy threads move slots over the
// connection. The sender opens the TCP connection through the receiver's bootstrap listener, which
// files it under (sender, tag) for the receiver to take in phase 3.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "src/common/os.h"
#include "transports/socket/socket_proxy.h"
#include "transports/transport.h"

namespace chorus {
namespace {

class SocketConnection : public Connection {
 public:
  SocketConnection(int peer, Mapping mem, FifoView fifo, SocketProxy* proxy)
      : Connection(peer), mem_(std::move(mem)), proxy_(proxy) {
    fifo_ = fifo;
  }
  ~SocketConnection() override { fifo_.close(); }

  // The proxy's copy of each slot arrives whole, after its header: the tail decides.
  bool headerPublishes() const override { return false; }
  bool viaProxy() const override { return true; }
  SocketProxy* proxy() const { return proxy_; }

  // A send FIFO: the proxy, in this process, can send a slot's payload from where the lane says.
  void enableRefs() {
    refs_.assign(fifo_.nslots, nullptr);
    fifo_.refs = refs_.data();
  }
  // A receive FIFO: the proxy can receive a slot's payload where the lane says.
  void enableDests() {
    dests_ = std::make_unique<std::atomic<uintptr_t>[]>(fifo_.nslots);
    destBytes_.assign(fifo_.nslots, 0);
    for (uint32_t i = 0; i < fifo_.nslots; ++i) dests_[i].store(0);
    fifo_.dests = dests_.get();
    fifo_.destBytes = destBytes_.data();
  }

 private:
  Mapping mem_;
  SocketProxy* proxy_;  // the transport's thread that moves this FIFO's slots
  std::vector<const char*> refs_;
  std::unique_ptr<std::atomic<uintptr_t>[]> dests_;
  std::vector<uint32_t> destBytes_;
};

// The communicator's socket transport: its proxy threads (CHORUS_SOCKET_NTHREADS, started with
// the first connection) and the FIFOs they serve.
class SocketTransport : public Transport {
 public:
  explicit SocketTransport(const TransportEnv& env) : log_(env.log), nthreads_(std::max(1, env.socketThreads)) {}

  const char* name() const override { return "socket"; }
  bool canConnect(const PeerInfo&, const PeerInfo&) const override { return true; }

  Result<std::unique_ptr<Connection>> setupRecv(ConnectContext& ctx, int peer, uint64_t,
                                                std::vector<char>* handle) override {
    handle->clear();
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<SocketConnection> conn, makeLocalFifo(ctx, peer));
    conn->enableDests();
    return std::unique_ptr<Connection>(std::move(conn));
  }

  Result<std::unique_ptr<Connection>> connectSend(ConnectContext& ctx, int peer, uint64_t tag,
                                                  const std::vector<char>&) override {
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<SocketConnection> conn, makeLocalFifo(ctx, peer));
    conn->enableRefs();
    CHORUS_ASSIGN_OR_RETURN(UniqueFd fd, ctx.oob->openConnection(peer, tag));
    conn->proxy()->add(std::move(fd), conn->fifo(), true, peer, ctx.oob->peerAddress(peer));
    return std::unique_ptr<Connection>(std::move(conn));
  }

  Status finishRecv(ConnectContext& ctx, Connection& conn, int peer, uint64_t tag) override {
    CHORUS_ASSIGN_OR_RETURN(UniqueFd fd, ctx.oob->takeConnection(peer, tag));
    auto& sc = static_cast<SocketConnection&>(conn);
    sc.proxy()->add(std::move(fd), sc.fifo(), false, peer, ctx.oob->peerAddress(peer));
    return Status::ok();
  }

  // Proxies may send from and receive into the caller's buffers (by reference): close their
  // FIFOs and wait until the proxies are past any call in flight.
  void stopTraffic() override {
    std::lock_guard<std::mutex> g(mu_);
    for (const FifoView& f : fifos_) f.close();
    for (auto& p : proxies_) p->quiesce(int64_t(1000) * 1000000);
  }

 private:
  // A FIFO in this process's memory, served by one of the proxies: connections spread over them
  // in turn, each direction of a pair on its own.
  Result<std::unique_ptr<SocketConnection>> makeLocalFifo(ConnectContext& ctx, int peer) {
    std::lock_guard<std::mutex> g(mu_);
    if (proxies_.empty()) {
      for (int t = 0; t < nthreads_; ++t) {
        auto p = std::make_unique<SocketProxy>(*log_);
        CHORUS_TRY(p->start());
        proxies_.push_back(std::move(p));
      }
    }
    SocketProxy* proxy = proxies_[next_++ % proxies_.size()].get();
    CHORUS_ASSIGN_OR_RETURN(Mapping m, Mapping::map(-1, fifoBytes(ctx.nslots, ctx.slotBytes)));
    FifoView fifo = FifoView::layout(m.data(), ctx.nslots, ctx.slotBytes);
    fifo.notifyFd = proxy->notifyFd();
    fifos_.push_back(fifo);
    return std::make_unique<SocketConnection>(peer, std::move(m), fifo, proxy);
  }

  const Logger* log_;
  int nthreads_;
  std::mutex mu_;  // proxies_ and fifos_, against stopTraffic from a failing thread
  std::vector<std::unique_ptr<SocketProxy>> proxies_;
  std::vector<FifoView> fifos_;  // every FIFO made, for stopTraffic (the connections outlive this)
  size_t next_ = 0;
};

}  // namespace

std::unique_ptr<Transport> makeSocketTransport(const TransportEnv& env) {
  return std::make_unique<SocketTransport>(env);
}

}  // namespace chorus
