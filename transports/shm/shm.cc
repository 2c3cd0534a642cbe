// Shared-memory transport: processes of one host share a FIFO in a memfd.
//
// The receiver creates the memfd and offers it through its bootstrap's descriptor server (a Unix
// socket in the abstract namespace); the sender fetches it with SCM_RIGHTS and maps it. Nothing
// is ever named in /dev/shm, so nothing is left behind when a process is killed: the segment
// lives exactly as long as some process maps it.
#include <cstring>
#include <memory>

#include "src/common/os.h"
#include "transports/transport.h"

namespace chorus {
namespace {

struct Handle {
  uint64_t token;
  uint32_t nslots;
  uint32_t slotBytes;
  char server[64];  // the receiver's descriptor server
};

class ShmConnection : public Connection {
 public:
  ShmConnection(int peer, Mapping mapping, FifoView fifo, uint64_t token = 0)
      : Connection(peer), map_(std::move(mapping)), token_(token) {
    fifo_ = fifo;
  }
  ~ShmConnection() override { fifo_.close(); }
  uint64_t token() const { return token_; }

 private:
  Mapping map_;
  uint64_t token_;  // receive side: the offer of the memfd to the sender
};

class ShmTransport : public Transport {
 public:
  const char* name() const override { return "shm"; }
  // Processes of one host, unless CHORUS_SHM_DISABLE is set on either.
  bool canConnect(const PeerInfo& self, const PeerInfo& peer) const override {
    return sameHost(self, peer) && !((self.flags | peer.flags) & PeerInfo::kShmDisabled);
  }

  MemoryReach memoryReach() const override { return MemoryReach::kSharedMapping; }

  Result<std::unique_ptr<Connection>> setupRecv(ConnectContext& ctx, int peer, uint64_t tag,
                                                std::vector<char>* handle) override {
    const uint32_t nslots = ctx.nslots;
    const uint32_t slotBytes = ctx.slotBytes;
    const size_t bytes = fifoBytes(nslots, slotBytes);
    CHORUS_ASSIGN_OR_RETURN(UniqueFd fd, makeMemfd("chorus-fifo", bytes));
    CHORUS_ASSIGN_OR_RETURN(Mapping m, Mapping::map(fd.get(), bytes));
    FifoView fifo = FifoView::layout(m.data(), nslots, slotBytes);
    Handle h{randomU64() ^ tag, nslots, slotBytes, {0}};
    std::snprintf(h.server, sizeof(h.server), "%s", ctx.oob->fdServerName().c_str());
    ctx.oob->exportFd(peer, h.token, std::move(fd));
    handle->resize(sizeof(h));
    std::memcpy(handle->data(), &h, sizeof(h));
    return std::unique_ptr<Connection>(new ShmConnection(peer, std::move(m), fifo, h.token));
  }

  Result<std::unique_ptr<Connection>> connectSend(ConnectContext& ctx, int peer, uint64_t,
                                                  const std::vector<char>& handle) override {
    Handle h{};
    if (handle.size() != sizeof(h)) return internalError("shared-memory connection handle has the wrong size");
    std::memcpy(&h, handle.data(), sizeof(h));
    CHORUS_ASSIGN_OR_RETURN(
        UniqueFd fd, ctx.oob->importFd(peer, std::string(h.server, strnlen(h.server, sizeof(h.server))), h.token));
    const size_t bytes = fifoBytes(h.nslots, h.slotBytes);
    CHORUS_ASSIGN_OR_RETURN(Mapping m, Mapping::map(fd.get(), bytes));
    FifoView fifo;
    fifo.ctrl = static_cast<FifoControl*>(m.data());
    fifo.slots = static_cast<char*>(m.data()) + sizeof(FifoControl);
    fifo.nslots = h.nslots;
    fifo.slotBytes = h.slotBytes;
    return std::unique_ptr<Connection>(new ShmConnection(peer, std::move(m), fifo));
  }

  // The sender must have mapped the FIFO before this rank goes on: otherwise a rank whose part is
  // over (a broadcast root that filled its slots) could destroy the communicator, and with it the
  // descriptor server, while its peer still has to fetch the memfd.
  Status finishRecv(ConnectContext& ctx, Connection& conn, int peer, uint64_t) override {
    return ctx.oob->awaitClaim(peer, static_cast<ShmConnection&>(conn).token());
  }
};

}  // namespace

std::unique_ptr<Transport> makeShmTransport(const TransportEnv&) { return std::make_unique<ShmTransport>(); }

}  // namespace chorus
