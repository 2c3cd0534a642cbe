// Shared-memory transport: processes of one host share a FIFO in a memfd.
//
// The receiver creates the memfd and offers it through its bootstrap's descriptor server (a Unix
// socket in the abstract namespace); the sender fetches it with SCM_RIGHTS and maps it. Nothing
// is ever named in /dev/shm, so nothing is left behind when a process is killed: the segment
// lives exactly as long as some process maps it.
//
// A FIFO for kernels (device buffers between GPUs without peer access, or with CHORUS_P2P_DISABLE)
// is the same segment with its line area, pinned and mapped for each side's GPU
// (cudaHostRegister): the sender's kernel writes its slots and the receiver's reads them over
// PCIe, with no thread in between.
#include <cstring>
#include <memory>

#include "src/common/os.h"
#include "src/transport/transport.h"
#include "transports/registry.h"

namespace chorus {
namespace {

struct Handle {
  uint64_t token;
  uint32_t nslots;
  uint32_t slotBytes;
  uint32_t forKernels;  // the segment has a line area and is mapped for kernels
  uint32_t pad;
  char server[64];  // the receiver's descriptor server
};

size_t segmentBytes(uint32_t nslots, uint32_t slotBytes, bool forKernels) {
  return forKernels ? deviceFifoBytes(nslots, slotBytes) : fifoBytes(nslots, slotBytes);
}

class ShmConnection : public Connection {
 public:
  ShmConnection(int peer, Mapping mapping, FifoView fifo, uint64_t token = 0)
      : Connection(peer), map_(std::move(mapping)), token_(token) {
    fifo_ = fifo;
    kernel_ = fifo;
  }
  ~ShmConnection() override {
    fifo_.close();
    if (mappedFor_ != kNotMapped) unmapForKernels(map_.data(), mappedFor_);
  }
  uint64_t token() const { return token_; }
  FifoView kernelFifo() const override { return kernel_; }

  // For kernels of `device` (-1: host threads standing in for them).
  Status mapForKernels(int device) {
    CHORUS_ASSIGN_OR_RETURN(kernel_, chorus::mapForKernels(fifo_, map_.data(), map_.size(), device));
    mappedFor_ = device;
    return Status::ok();
  }

 private:
  static constexpr int kNotMapped = -2;
  Mapping map_;
  uint64_t token_;  // receive side: the offer of the memfd to the sender
  FifoView kernel_;
  int mappedFor_ = kNotMapped;
};

class ShmTransport : public Transport {
 public:
  const char* name() const override { return "shm"; }
  // Processes of one host, unless CHORUS_SHM_DISABLE is set on either.
  bool canConnect(const PeerInfo& self, const PeerInfo& peer) const override {
    return sameHost(self, peer) && !((self.flags | peer.flags) & PeerInfo::kShmDisabled);
  }

  MemoryReach memoryReach() const override { return MemoryReach::kSharedMapping; }
  // Kernels of processes (or threads) of one host whose GPUs cannot reach each other.
  bool canConnectDevice(const DevicePeer& self, const DevicePeer& peer) const override {
    return canConnect(self.host, peer.host);
  }

  Result<std::unique_ptr<Connection>> setupRecv(ConnectContext& ctx, int peer, uint64_t tag,
                                                std::vector<char>* handle) override {
    const uint32_t nslots = ctx.nslots;
    const uint32_t slotBytes = ctx.slotBytes;
    const size_t bytes = segmentBytes(nslots, slotBytes, ctx.forKernels);
    CHORUS_ASSIGN_OR_RETURN(UniqueFd fd, makeMemfd("chorus-fifo", bytes));
    CHORUS_ASSIGN_OR_RETURN(Mapping m, Mapping::map(fd.get(), bytes));
    FifoView fifo = FifoView::layout(m.data(), nslots, slotBytes);
    Handle h{randomU64() ^ tag, nslots, slotBytes, ctx.forKernels ? 1u : 0u, 0, {0}};
    std::snprintf(h.server, sizeof(h.server), "%s", ctx.oob->fdServerName().c_str());
    auto conn = std::make_unique<ShmConnection>(peer, std::move(m), fifo, h.token);
    if (ctx.forKernels) CHORUS_TRY(conn->mapForKernels(ctx.cudaDevice));
    ctx.oob->exportFd(peer, h.token, std::move(fd));
    handle->resize(sizeof(h));
    std::memcpy(handle->data(), &h, sizeof(h));
    return std::unique_ptr<Connection>(std::move(conn));
  }

  Result<std::unique_ptr<Connection>> connectSend(ConnectContext& ctx, int peer, uint64_t,
                                                  const std::vector<char>& handle) override {
    Handle h{};
    if (handle.size() != sizeof(h)) return internalError("shared-memory connection handle has the wrong size");
    std::memcpy(&h, handle.data(), sizeof(h));
    CHORUS_ASSIGN_OR_RETURN(
        UniqueFd fd, ctx.oob->importFd(peer, std::string(h.server, strnlen(h.server, sizeof(h.server))), h.token));
    if ((h.forKernels != 0) != ctx.forKernels) {
      return internalError("rank " + std::to_string(peer) +
                           " built a shared-memory FIFO of the other kind (for kernels on one side only)");
    }
    const size_t bytes = segmentBytes(h.nslots, h.slotBytes, ctx.forKernels);
    CHORUS_ASSIGN_OR_RETURN(Mapping m, Mapping::map(fd.get(), bytes));
    const FifoView fifo = FifoView::at(m.data(), h.nslots, h.slotBytes);
    auto conn = std::make_unique<ShmConnection>(peer, std::move(m), fifo);
    if (ctx.forKernels) CHORUS_TRY(conn->mapForKernels(ctx.cudaDevice));
    return std::unique_ptr<Connection>(std::move(conn));
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
