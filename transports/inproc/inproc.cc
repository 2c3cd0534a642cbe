// In-process transport: ranks that are threads of one process share a heap FIFO by pointer.
//
// The receiver allocates the block and sends its address (and this process's nonce, so a handle
// can never be taken for a pointer of another process). Both connections hold a reference; the
// last one to go frees the block.
//
// A FIFO for kernels (ConnectContext::forKernels) is the same with its line area
// (deviceFifoBytes), in the receiver's device memory: the receiver's kernels poll it locally, the
// sender's write it over peer access (enabled here; two ranks on one device need none). Host code
// never touches such a FIFO. Threads whose GPUs lack peer access use the host-staged shm FIFO.
#include <atomic>
#include <cstring>
#include <memory>
#include <new>

#include "src/device/cuda.h"
#include "src/transport/transport.h"
#include "transports/registry.h"

namespace chorus {
namespace {

struct InProcBlock {
  std::atomic<int> refs{1};
  size_t bytes = 0;
  void* mem = nullptr;
  int device = -1;  // >= 0: device memory there

  static InProcBlock* make(size_t bytes) {
    auto* b = new InProcBlock();
    b->bytes = bytes;
    b->mem = ::operator new(bytes, std::align_val_t(4096));
    std::memset(b->mem, 0, bytes);
    return b;
  }
  static Result<InProcBlock*> makeOnDevice(size_t bytes, int device) {
    cuda::DeviceGuard on(device);
    CHORUS_TRY(on.status());
    CHORUS_ASSIGN_OR_RETURN(void* stream, cuda::streamCreate());
    auto mem = cuda::deviceAlloc(bytes, stream);  // zeroed: counters at 0, headers empty
    cuda::streamDestroy(stream);
    CHORUS_TRY(mem.status());
    auto* b = new InProcBlock();
    b->bytes = bytes;
    b->mem = mem.take();
    b->device = device;
    return b;
  }
  void unref() {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      if (device >= 0) {
        cuda::DeviceGuard on(device);
        cuda::deviceFree(mem);
      } else {
        ::operator delete(mem, std::align_val_t(4096));
      }
      delete this;
    }
  }
};

struct Handle {
  uint64_t nonce;
  uint64_t block;
  uint32_t nslots;
  uint32_t slotBytes;
  int32_t device;  // the receiver's device (-1: host memory)
  int32_t pad;
};

class InProcConnection : public Connection {
 public:
  InProcConnection(int peer, InProcBlock* block, FifoView fifo) : Connection(peer), block_(block) { fifo_ = fifo; }
  ~InProcConnection() override {
    if (block_->device < 0) fifo_.close();
    block_->unref();
  }

 private:
  InProcBlock* block_;
};

class InProcTransport : public Transport {
 public:
  const char* name() const override { return "inproc"; }
  // Threads of one process, unless CHORUS_P2P_DISABLE is set on either.
  bool canConnect(const PeerInfo& self, const PeerInfo& peer) const override {
    return sameProcess(self, peer) && !((self.flags | peer.flags) & PeerInfo::kP2pDisabled);
  }

  MemoryReach memoryReach() const override { return MemoryReach::kAddressSpace; }
  // Kernels of two threads of one process whose GPUs reach each other.
  bool canConnectDevice(const DevicePeer& self, const DevicePeer& peer) const override {
    return sameProcess(self.host, peer.host) && gpuPeers(self, peer);
  }

  Result<std::unique_ptr<Connection>> setupRecv(ConnectContext& ctx, int peer, uint64_t,
                                                std::vector<char>* handle) override {
    const uint32_t nslots = ctx.nslots;
    const uint32_t slotBytes = ctx.slotBytes;
    InProcBlock* block = nullptr;
    FifoView fifo;
    if (ctx.forKernels) {
      CHORUS_ASSIGN_OR_RETURN(block, InProcBlock::makeOnDevice(deviceFifoBytes(nslots, slotBytes), ctx.cudaDevice));
      fifo = FifoView::at(block->mem, nslots, slotBytes);
    } else {
      block = InProcBlock::make(fifoBytes(nslots, slotBytes));
      fifo = FifoView::layout(block->mem, nslots, slotBytes);
    }
    Handle h{currentProcessNonce(),
             reinterpret_cast<uint64_t>(block),
             nslots,
             slotBytes,
             ctx.forKernels ? ctx.cudaDevice : -1,
             0};
    handle->resize(sizeof(h));
    std::memcpy(handle->data(), &h, sizeof(h));
    return std::unique_ptr<Connection>(new InProcConnection(peer, block, fifo));
  }

  Result<std::unique_ptr<Connection>> connectSend(ConnectContext& ctx, int peer, uint64_t,
                                                  const std::vector<char>& handle) override {
    Handle h{};
    if (handle.size() != sizeof(h)) return internalError("in-process connection handle has the wrong size");
    std::memcpy(&h, handle.data(), sizeof(h));
    if (h.nonce != currentProcessNonce()) {
      return internalError("in-process connection handle from rank " + std::to_string(peer) +
                           " belongs to another process");
    }
    if ((h.device >= 0) != ctx.forKernels) {
      return internalError("rank " + std::to_string(peer) +
                           " built a FIFO of the other memory kind (device memory on one side only)");
    }
    if (h.device >= 0 && h.device != ctx.cudaDevice) {
      // This rank's kernels write the peer's device memory: they need peer access to it.
      if (!cuda::canAccessPeer(ctx.cudaDevice, h.device)) {
        return invalidUsage("GPU " + std::to_string(ctx.cudaDevice) + " (this rank's) cannot reach GPU " +
                            std::to_string(h.device) + " (rank " + std::to_string(peer) +
                            "'s) by peer access, which ranks of one process need to exchange device buffers; " +
                            "put these ranks on GPUs with peer access (nvidia-smi topo -p2p r), or on one GPU");
      }
      cuda::DeviceGuard on(ctx.cudaDevice);
      CHORUS_TRY(on.status());
      CHORUS_TRY(cuda::enablePeerAccess(h.device));
    }
    auto* block = reinterpret_cast<InProcBlock*>(h.block);
    block->refs.fetch_add(1, std::memory_order_relaxed);
    return std::unique_ptr<Connection>(
        new InProcConnection(peer, block, FifoView::at(block->mem, h.nslots, h.slotBytes)));
  }

  Status finishRecv(ConnectContext&, Connection&, int, uint64_t) override { return Status::ok(); }
};

}  // namespace

std::unique_ptr<Transport> makeInProcTransport(const TransportEnv&) { return std::make_unique<InProcTransport>(); }

}  // namespace chorus
