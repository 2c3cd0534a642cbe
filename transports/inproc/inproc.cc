// In-process transport: ranks that are threads of one process share a heap FIFO by pointer.
//
// The receiver allocates the block and sends its address (and this process's nonce, so a handle
// can never be taken for a pointer of another process). Both connections hold a reference; the
// last one to go frees the block.
#include <atomic>
#include <cstring>
#include <memory>
#include <new>

#include "transports/transport.h"

namespace chorus {
namespace {

struct InProcBlock {
  std::atomic<int> refs{1};
  size_t bytes = 0;
  void* mem = nullptr;

  static InProcBlock* make(size_t bytes) {
    auto* b = new InProcBlock();
    b->bytes = bytes;
    b->mem = ::operator new(bytes, std::align_val_t(4096));
    std::memset(b->mem, 0, bytes);
    return b;
  }
  void unref() {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      ::operator delete(mem, std::align_val_t(4096));
      delete this;
    }
  }
};

struct Handle {
  uint64_t nonce;
  uint64_t block;
  uint32_t nslots;
  uint32_t slotBytes;
};

class InProcConnection : public Connection {
 public:
  InProcConnection(int peer, InProcBlock* block, FifoView fifo) : Connection(peer), block_(block) { fifo_ = fifo; }
  ~InProcConnection() override {
    fifo_.close();
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

  Result<std::unique_ptr<Connection>> setupRecv(ConnectContext& ctx, int peer, uint64_t,
                                                std::vector<char>* handle) override {
    const uint32_t nslots = ctx.nslots;
    const uint32_t slotBytes = ctx.slotBytes;
    InProcBlock* block = InProcBlock::make(fifoBytes(nslots, slotBytes));
    FifoView fifo = FifoView::layout(block->mem, nslots, slotBytes);
    Handle h{currentProcessNonce(), reinterpret_cast<uint64_t>(block), nslots, slotBytes};
    handle->resize(sizeof(h));
    std::memcpy(handle->data(), &h, sizeof(h));
    return std::unique_ptr<Connection>(new InProcConnection(peer, block, fifo));
  }

  Result<std::unique_ptr<Connection>> connectSend(ConnectContext&, int peer, uint64_t,
                                                  const std::vector<char>& handle) override {
    Handle h{};
    if (handle.size() != sizeof(h)) return internalError("in-process connection handle has the wrong size");
    std::memcpy(&h, handle.data(), sizeof(h));
    if (h.nonce != currentProcessNonce()) {
      return internalError("in-process connection handle from rank " + std::to_string(peer) +
                           " belongs to another process");
    }
    auto* block = reinterpret_cast<InProcBlock*>(h.block);
    block->refs.fetch_add(1, std::memory_order_relaxed);
    FifoView fifo;
    fifo.ctrl = static_cast<FifoControl*>(block->mem);
    fifo.slots = static_cast<char*>(block->mem) + sizeof(FifoControl);
    fifo.nslots = h.nslots;
    fifo.slotBytes = h.slotBytes;
    return std::unique_ptr<Connection>(new InProcConnection(peer, block, fifo));
  }

  Status finishRecv(ConnectContext&, Connection&, int, uint64_t) override { return Status::ok(); }
};

}  // namespace

std::unique_ptr<Transport> makeInProcTransport(const TransportEnv&) { return std::make_unique<InProcTransport>(); }

}  // namespace chorus
