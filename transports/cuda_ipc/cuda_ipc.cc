// CUDA IPC transport: FIFOs for kernels between processes of one host whose GPUs reach each other
// (one GPU shared by both, or two with peer access), in the receiver's device memory.
//
// The receiver allocates the FIFO with allocShareable. A cuMem allocation is offered as a POSIX
// file descriptor through the receiver's descriptor server (as shm offers its memfd); the sender
// fetches it with SCM_RIGHTS and maps it read/write for its own device. The memory then lives as
// long as either process maps it, so a receiver that finishes first and frees its end harms no
// sender. Where the driver cannot export cuMem descriptors, allocShareable uses cudaMalloc and a
// legacy IPC handle travels in the connection handle instead; the sender opens it before it
// claims a dummy descriptor, and the receiver's finishRecv waits for that claim.
//
// The receiver's kernels poll the FIFO locally; the sender's write it over NVLink or PCIe peer
// access, or, on one GPU, in its own memory. Host code never touches the FIFO. Host buffers
// between processes never come here (canConnect is false): shm carries them.
#include <sys/eventfd.h>

#include <cstring>
#include <memory>

#include "src/common/os.h"
#include "src/device/cuda.h"
#include "src/transport/transport.h"
#include "transports/registry.h"

namespace chorus {
namespace {

constexpr uint32_t kMagic = 0x43495043;  // "CIPC"

enum class Kind : uint32_t { kFd = 1, kLegacy = 2 };

struct Handle {
  uint32_t magic;
  Kind kind;
  uint64_t token;  // the descriptor server's offer (both kinds: the legacy one offers a dummy)
  uint64_t bytes;  // the allocation's mapped size (kFd), or its size
  uint32_t nslots;
  uint32_t slotBytes;
  char server[64];  // the receiver's descriptor server
  cuda::IpcHandle ipc;
};

// One end. The receiver's owns the allocation; the sender's, its mapping of it.
class CudaIpcConnection : public Connection {
 public:
  CudaIpcConnection(int peer, FifoView fifo, void* mem, int device, bool legacyImport, uint64_t token)
      : Connection(peer), mem_(mem), device_(device), legacyImport_(legacyImport), token_(token) {
    fifo_ = fifo;
  }
  ~CudaIpcConnection() override {
    cuda::DeviceGuard on(device_);
    if (legacyImport_) {
      cuda::ipcClose(mem_);
    } else {
      (void)cuda::freeShareable(mem_);
    }
  }
  uint64_t token() const { return token_; }

 private:
  void* mem_;
  int device_;
  bool legacyImport_;
  uint64_t token_;
};

class CudaIpcTransport : public Transport {
 public:
  const char* name() const override { return "cuda_ipc"; }
  bool canConnect(const PeerInfo&, const PeerInfo&) const override { return false; }
  // Processes of one host whose GPUs reach each other (unless CHORUS_P2P_DISABLE is set).
  bool canConnectDevice(const DevicePeer& self, const DevicePeer& peer) const override {
    return sameHost(self.host, peer.host) && !sameProcess(self.host, peer.host) && gpuPeers(self, peer);
  }

  Result<std::unique_ptr<Connection>> setupRecv(ConnectContext& ctx, int peer, uint64_t tag,
                                                std::vector<char>* handle) override {
    if (!ctx.forKernels || ctx.cudaDevice < 0) return internalError("cuda_ipc carries FIFOs for kernels only");
    const size_t bytes = deviceFifoBytes(ctx.nslots, ctx.slotBytes);
    cuda::DeviceGuard on(ctx.cudaDevice);
    CHORUS_TRY(on.status());
    CHORUS_ASSIGN_OR_RETURN(void* mem, cuda::allocShareable(bytes, ctx.cudaDevice));
    auto conn = std::make_unique<CudaIpcConnection>(peer, FifoView::at(mem, ctx.nslots, ctx.slotBytes), mem,
                                                    ctx.cudaDevice, false, randomU64() ^ tag);
    CHORUS_TRY(cuda::zeroDevice(mem, bytes));  // counters at 0, headers and lines empty
    Handle h{};
    h.magic = kMagic;
    h.token = conn->token();
    h.nslots = ctx.nslots;
    h.slotBytes = ctx.slotBytes;
    std::snprintf(h.server, sizeof(h.server), "%s", ctx.oob->fdServerName().c_str());
    UniqueFd offered;
    if (const size_t mapped = cuda::shareableBytes(mem); mapped != 0) {
      CHORUS_ASSIGN_OR_RETURN(int fd, cuda::exportShareable(mem));
      offered = UniqueFd(fd);
      h.kind = Kind::kFd;
      h.bytes = mapped;
    } else {
      CHORUS_ASSIGN_OR_RETURN(h.ipc, cuda::ipcExport(mem));
      offered = UniqueFd(::eventfd(0, EFD_CLOEXEC));  // only its claim matters
      if (!offered.valid()) return errnoStatus("eventfd for a CUDA IPC connection", errno);
      h.kind = Kind::kLegacy;
      h.bytes = bytes;
    }
    ctx.oob->exportFd(peer, h.token, std::move(offered));
    handle->resize(sizeof(h));
    std::memcpy(handle->data(), &h, sizeof(h));
    return std::unique_ptr<Connection>(std::move(conn));
  }

  Result<std::unique_ptr<Connection>> connectSend(ConnectContext& ctx, int peer, uint64_t,
                                                  const std::vector<char>& handle) override {
    Handle h{};
    if (handle.size() != sizeof(h)) return internalError("CUDA IPC connection handle has the wrong size");
    std::memcpy(&h, handle.data(), sizeof(h));
    if (h.magic != kMagic || (h.kind != Kind::kFd && h.kind != Kind::kLegacy) ||
        h.bytes < deviceFifoBytes(h.nslots, h.slotBytes)) {
      return internalError("CUDA IPC connection handle from rank " + std::to_string(peer) +
                           " is malformed (its rank runs another build of Chorus?)");
    }
    if (!ctx.forKernels || ctx.cudaDevice < 0) return internalError("cuda_ipc carries FIFOs for kernels only");
    const std::string server(h.server, strnlen(h.server, sizeof(h.server)));
    cuda::DeviceGuard on(ctx.cudaDevice);
    CHORUS_TRY(on.status());
    std::unique_ptr<CudaIpcConnection> conn;
    if (h.kind == Kind::kFd) {
      CHORUS_ASSIGN_OR_RETURN(UniqueFd fd, ctx.oob->importFd(peer, server, h.token));
      CHORUS_ASSIGN_OR_RETURN(void* mem, cuda::importShareable(fd.get(), h.bytes, ctx.cudaDevice));
      conn = std::make_unique<CudaIpcConnection>(peer, FifoView::at(mem, h.nslots, h.slotBytes), mem, ctx.cudaDevice,
                                                 false, 0);
    } else {
      // Opened before the claim: the receiver keeps its memory until then.
      CHORUS_ASSIGN_OR_RETURN(void* mem, cuda::ipcOpen(h.ipc, ctx.cudaDevice));
      conn = std::make_unique<CudaIpcConnection>(peer, FifoView::at(mem, h.nslots, h.slotBytes), mem, ctx.cudaDevice,
                                                 true, 0);
      CHORUS_TRY(ctx.oob->importFd(peer, server, h.token).status());
    }
    return std::unique_ptr<Connection>(std::move(conn));
  }

  // As shm: the sender has its descriptor (and with a legacy handle, has opened it) before this
  // rank goes on and may free its end.
  Status finishRecv(ConnectContext& ctx, Connection& conn, int peer, uint64_t) override {
    return ctx.oob->awaitClaim(peer, static_cast<CudaIpcConnection&>(conn).token());
  }
};

}  // namespace

std::unique_ptr<Transport> makeCudaIpcTransport(const TransportEnv&) { return std::make_unique<CudaIpcTransport>(); }

}  // namespace chorus
