// Socket transport: TCP between ranks on different hosts (or wherever shm is disabled).
//
// Both sides keep their FIFO in local memory; the communicator's SocketProxy moves slots over the
// connection. The sender opens the TCP connection through the receiver's bootstrap listener, which
// files it under (sender, tag) for the receiver to take in phase 3.
#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "src/bootstrap/bootstrap.h"
#include "src/common/config.h"
#include "src/common/os.h"
#include "transports/socket/socket_proxy.h"
#include "transports/transport.h"

namespace chorus {
namespace {

class SocketConnection : public Connection {
 public:
  SocketConnection(int peer, Mapping mem, FifoView fifo)
      : Connection(TransportKind::kSocket, peer), mem_(std::move(mem)) {
    fifo_ = fifo;
  }
  ~SocketConnection() override { fifo_.close(); }

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
  std::vector<const char*> refs_;
  std::unique_ptr<std::atomic<uintptr_t>[]> dests_;
  std::vector<uint32_t> destBytes_;
};

Result<std::unique_ptr<Connection>> makeLocalFifo(ConnectContext& ctx, int peer) {
  if (!ctx.proxy) return internalError("socket connection without a proxy");
  const auto nslots = static_cast<uint32_t>(ctx.config->slots);
  const auto slotBytes = static_cast<uint32_t>(ctx.config->slotBytes);
  CHORUS_ASSIGN_OR_RETURN(Mapping m, Mapping::map(-1, fifoBytes(nslots, slotBytes)));
  FifoView fifo = FifoView::layout(m.data(), nslots, slotBytes);
  fifo.notifyFd = ctx.proxy->notifyFd();
  return std::unique_ptr<Connection>(new SocketConnection(peer, std::move(m), fifo));
}

class SocketTransport : public Transport {
 public:
  TransportKind kind() const override { return TransportKind::kSocket; }

  Result<std::unique_ptr<Connection>> setupRecv(ConnectContext& ctx, int peer, uint64_t,
                                                std::vector<char>* handle) override {
    handle->clear();
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, makeLocalFifo(ctx, peer));
    static_cast<SocketConnection*>(conn.get())->enableDests();
    return conn;
  }

  Result<std::unique_ptr<Connection>> connectSend(ConnectContext& ctx, int peer, uint64_t tag,
                                                  const std::vector<char>&) override {
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, makeLocalFifo(ctx, peer));
    static_cast<SocketConnection*>(conn.get())->enableRefs();
    CHORUS_ASSIGN_OR_RETURN(UniqueFd fd, ctx.bootstrap->openConnection(peer, tag));
    ctx.proxy->add(std::move(fd), conn->fifo(), true, peer, ctx.bootstrap->address(peer).toString());
    return conn;
  }

  Status finishRecv(ConnectContext& ctx, Connection& conn, int peer, uint64_t tag) override {
    CHORUS_ASSIGN_OR_RETURN(UniqueFd fd, ctx.bootstrap->takeConnection(peer, tag));
    ctx.proxy->add(std::move(fd), conn.fifo(), false, peer, ctx.bootstrap->address(peer).toString());
    return Status::ok();
  }
};

}  // namespace

Transport& socketTransport() {
  static SocketTransport t;
  return t;
}

}  // namespace chorus
