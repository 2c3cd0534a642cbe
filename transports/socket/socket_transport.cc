// Socket transport: TCP between ranks on different hosts (or wherever shm is disabled).
//
// Both sides keep their FIFO in local memory; the transport's proxy threads move slots over the
// connection. The sender opens the TCP connection through the receiver's bootstrap listener, which
// files it under (sender, tag) for the receiver to take in phase 3.
//
// A FIFO for kernels (device buffers between hosts) is the same FIFO in pinned host memory
// mapped for the rank's GPU: the sender's kernel fills slots there and the proxy, polling the
// tail (a kernel rings no eventfd), sends them; on the other side the proxy fills the receiver's
// slots and the receiver's kernel polls them. Such FIFOs carry the Simple protocol only (the
// tuner keeps LL off where a device connection crosses a socket), and never by reference: the
// slot is the staging buffer.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
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
    kernel_ = fifo;
  }
  ~SocketConnection() override {
    fifo_.close();
    if (mappedFor_ != kNotMapped) unmapForKernels(mem_.data(), mappedFor_);
  }
  FifoView kernelFifo() const override { return kernel_; }
  bool polled() const { return mappedFor_ != kNotMapped; }
  // A FIFO for kernels of `device` (-1: host threads standing in for them).
  Status mapForKernels(int device) {
    CHORUS_ASSIGN_OR_RETURN(kernel_, chorus::mapForKernels(fifo_, mem_.data(), mem_.size(), device));
    mappedFor_ = device;
    return Status::ok();
  }

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
  static constexpr int kNotMapped = -2;
  Mapping mem_;
  SocketProxy* proxy_;  // the transport's thread that moves this FIFO's slots
  FifoView kernel_;
  int mappedFor_ = kNotMapped;
  std::vector<const char*> refs_;
  std::unique_ptr<std::atomic<uintptr_t>[]> dests_;
  std::vector<uint32_t> destBytes_;
};

// The communicator's socket transport: its proxy threads (CHORUS_SOCKET_NTHREADS, started with
// the first connection) and the FIFOs they serve.
class SocketTransport : public Transport {
 public:
  explicit SocketTransport(const TransportEnv& env) : log_(env.log), nthreads_(std::max(1, env.socketThreads)) {}
  // The proxies first: their threads report into this transport (polledFailed) until they end.
  ~SocketTransport() override { proxies_.clear(); }

  const char* name() const override { return "socket"; }
  bool canConnect(const PeerInfo&, const PeerInfo&) const override { return true; }
  bool canConnectDevice(const DevicePeer&, const DevicePeer&) const override { return true; }

  Result<std::unique_ptr<Connection>> setupRecv(ConnectContext& ctx, int peer, uint64_t tag,
                                                std::vector<char>* handle) override {
    handle->clear();
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<SocketConnection> conn, makeLocalFifo(ctx, peer, false, tag));
    if (!conn->polled()) conn->enableDests();
    return std::unique_ptr<Connection>(std::move(conn));
  }

  Result<std::unique_ptr<Connection>> connectSend(ConnectContext& ctx, int peer, uint64_t tag,
                                                  const std::vector<char>&) override {
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<SocketConnection> conn, makeLocalFifo(ctx, peer, true, tag));
    if (!conn->polled()) conn->enableRefs();
    CHORUS_ASSIGN_OR_RETURN(UniqueFd fd, ctx.oob->openConnection(peer, tag));
    serve(*conn, std::move(fd), true, peer, ctx.oob->peerAddress(peer));
    return std::unique_ptr<Connection>(std::move(conn));
  }

  Status finishRecv(ConnectContext& ctx, Connection& conn, int peer, uint64_t tag) override {
    CHORUS_ASSIGN_OR_RETURN(UniqueFd fd, ctx.oob->takeConnection(peer, tag));
    serve(static_cast<SocketConnection&>(conn), std::move(fd), false, peer, ctx.oob->peerAddress(peer));
    return Status::ok();
  }

  // Proxies may send from and receive into the caller's buffers (by reference): close their
  // FIFOs and wait until the proxies are past any call in flight.
  void stopTraffic() override {
    std::lock_guard<std::mutex> g(mu_);
    for (const FifoView& f : served_) f.close();
    for (auto& p : proxies_) p->quiesce(int64_t(1000) * 1000000);
  }

  std::vector<Status> kernelFifoErrors() const override {
    std::lock_guard<std::mutex> g(failMu_);
    return kernelFailures_;
  }

 private:
  // A FIFO in this process's memory, served by one of the proxies: connections spread over them
  // by peer, direction and family/channel (the tag), so the two directions of a pair and the
  // channels to one peer land on different threads where there are enough.
  Result<std::unique_ptr<SocketConnection>> makeLocalFifo(ConnectContext& ctx, int peer, bool isSend, uint64_t tag) {
    std::lock_guard<std::mutex> g(mu_);
    if (proxies_.empty()) {
      std::vector<std::unique_ptr<SocketProxy>> started;
      for (int t = 0; t < nthreads_; ++t) {
        started.push_back(std::make_unique<SocketProxy>(
            *log_, [this](int p, const std::string& name, const std::string& why) { polledFailed(p, name, why); }));
        CHORUS_TRY(started.back()->start());
      }
      proxies_ = std::move(started);  // all of them, or none (the next connection tries again)
    }
    const uint64_t slot = static_cast<uint64_t>(peer) * 2 + (isSend ? 1 : 0) + (tag ^ (tag >> 40));
    SocketProxy* proxy = proxies_[slot % proxies_.size()].get();
    const size_t bytes =
        ctx.forKernels ? deviceFifoBytes(ctx.nslots, ctx.slotBytes) : fifoBytes(ctx.nslots, ctx.slotBytes);
    CHORUS_ASSIGN_OR_RETURN(Mapping m, Mapping::map(-1, bytes));
    FifoView fifo = FifoView::layout(m.data(), ctx.nslots, ctx.slotBytes);
    if (!ctx.forKernels) fifo.notifyFd = proxy->notifyFd();
    auto conn = std::make_unique<SocketConnection>(peer, std::move(m), fifo, proxy);
    if (ctx.forKernels) CHORUS_TRY(conn->mapForKernels(ctx.cudaDevice));
    return conn;
  }

  // A proxy's FIFO for kernels broke (on the proxy's thread): the first such failure about each
  // peer, for the communicator's watchdog, which counts it only while kernels wait on that peer.
  // A peer's other connections (channels, directions) ending after it add nothing.
  void polledFailed(int peer, const std::string& name, const std::string& why) {
    std::lock_guard<std::mutex> g(failMu_);
    for (const Status& s : kernelFailures_) {
      if (s.subject() == peer) return;
    }
    kernelFailures_.push_back(remoteError("the socket connection to rank " + std::to_string(peer) + " (" + name +
                                          "), which this communicator's kernels use, ended: " + why)
                                  .about(peer));
  }

  // Hands the connection's FIFO and socket to its proxy. Only from here on may stopTraffic
  // touch the FIFO: the connection is the communicator's by then and outlives this transport
  // (a connection whose setup failed earlier was freed with nothing of it kept here).
  void serve(SocketConnection& conn, UniqueFd fd, bool isSend, int peer, const std::string& peerName) {
    conn.proxy()->add(std::move(fd), conn.fifo(), isSend, peer, peerName, conn.polled());
    std::lock_guard<std::mutex> g(mu_);
    served_.push_back(conn.fifo());
  }

  const Logger* log_;
  int nthreads_;
  std::mutex mu_;  // proxies_ and served_, against stopTraffic from a failing thread
  std::vector<std::unique_ptr<SocketProxy>> proxies_;
  std::vector<FifoView> served_;  // the FIFOs handed to a proxy, for stopTraffic
  mutable std::mutex failMu_;
  std::vector<Status> kernelFailures_;  // guarded by failMu_: one per peer at most, in the order they came
};

}  // namespace

std::unique_ptr<Transport> makeSocketTransport(const TransportEnv& env) {
  return std::make_unique<SocketTransport>(env);
}

}  // namespace chorus
