// The transport interface: how two ranks get a FIFO between them.
//
// A communicator makes one instance of every registered transport (makeTransports) and, for each
// peer, uses the first that says it can connect the pair, from the two ranks' allgathered
// PeerInfo records, so both sides always agree. FIFOs for kernels (the device path) are chosen the
// same way, by canConnectDevice, from both ranks' DevicePeer records, which the two exchange
// before their first device connection: in-process (device memory, peer access), cuda_ipc
// (device memory of another process), then host-staged FIFOs in pinned host memory that kernels
// reach over PCIe: shm between processes of a host, net (a proxy thread polls the FIFO and
// moves its slots over a network: sockets, or a plugin's) between hosts. Setting up one direction (sender -> receiver)
// takes three phases, run for all connections of a launch at once so that no rank can wait on
// a phase another rank has not reached:
//   1. the receiver calls setupRecv() and sends the handle it returns to the sender (bootstrap);
//   2. the sender receives the handle and calls connectSend();
//   3. the receiver calls finishRecv().
// A transport gets the FIFO shape to build and a narrow out-of-band interface, and owns whatever
// threads it needs. A Connection owns whatever backs its FIFO (heap block, shared mapping, network comm)
// and is destroyed only when the communicator is, after its transports. Algorithms see only the
// FifoView and the connection's capabilities.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/algo/fifo.h"
#include "src/bootstrap/out_of_band.h"
#include "src/common/status.h"

namespace chorus {

class Logger;
struct Config;

// What each rank tells every other at init; the inputs of each transport's canConnect().
struct PeerInfo {
  uint64_t hostHash = 0;      // hostname + boot id + network namespace, or CHORUS_HOSTID
  uint64_t processNonce = 0;  // random per process: equal means threads of one process
  int32_t pid = 0;
  uint32_t flags = 0;       // kPeerShmDisabled | kPeerP2pDisabled
  uint64_t pidSpace = 0;    // boot and pid namespace: equal means this pid can be watched
  uint64_t startTicks = 0;  // the process's start time, which tells it from a later one of that pid
  char host[64] = {0};

  static constexpr uint32_t kShmDisabled = 1;
  static constexpr uint32_t kP2pDisabled = 2;

  static PeerInfo local(const Config& config);
};

// What a rank tells a peer about its GPU before their first device connection (a communicator
// may bind its GPU only at its first device buffer, after init). Trivially copyable: it travels
// as bytes.
struct GpuInfo {
  static constexpr int kMaxReach = 31;
  uint64_t uuid[2] = {0, 0};  // zero: no GPU
  int32_t ordinal = -1;       // in its own process's numbering: for messages only
  uint32_t nreach = 0;
  uint64_t reach[kMaxReach][2] = {};  // the GPUs its GPU reaches by peer access, itself first
  char busId[16] = {0};

  bool has() const { return uuid[0] != 0 || uuid[1] != 0; }
  bool reaches(const uint64_t other[2]) const;
  bool same(const GpuInfo& o) const { return has() && uuid[0] == o.uuid[0] && uuid[1] == o.uuid[1]; }
};

// One side of a device connection: the rank's PeerInfo and its GPU.
struct DevicePeer {
  PeerInfo host;
  GpuInfo gpu;
};
// Whether kernels of the two ranks may write each other's device memory: both have a GPU, each
// reaches the other's (the same GPU, or peer access both ways), and neither set CHORUS_P2P_DISABLE.
bool gpuPeers(const DevicePeer& a, const DevicePeer& b);

// Random per process, fixed for its lifetime (made again in a child after fork()).
uint64_t currentProcessNonce();
// Whether two ranks are threads of one process, and whether they run on one host.
bool sameProcess(const PeerInfo& a, const PeerInfo& b);
bool sameHost(const PeerInfo& a, const PeerInfo& b);

class Connection {
 public:
  explicit Connection(int peer) : peer_(peer) {}
  virtual ~Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  const FifoView& fifo() const { return fifo_; }
  int peer() const { return peer_; }
  // The producer writes each slot header's `ready` word last, with release order, straight into
  // the consumer's FIFO: a consumer may take a slot on seeing its header, without the tail.
  virtual bool headerPublishes() const { return true; }
  // Published slots leave through a thread of the transport: published is not yet sent.
  virtual bool viaProxy() const { return false; }
  // The FIFO as kernels address it (a FIFO for kernels in host memory is mapped at another
  // address for the device); fifo() is the host's view of the same memory.
  virtual FifoView kernelFifo() const { return fifo_; }
  // What the FIFO's lane shares with a proxy thread of the transport (net); empty for the others.
  virtual ProxyLink proxyLink() const { return {}; }

 protected:
  FifoView fifo_;

 private:
  int peer_;
};

// What one connection's setup gets: the FIFO to build and the out-of-band channel to the peer.
struct ConnectContext {
  OutOfBand* oob = nullptr;
  uint32_t nslots = 0;
  uint32_t slotBytes = 0;
  // A FIFO for kernels: in device memory (in-process, cuda_ipc: the receiver's device), or in
  // host memory mapped for this rank's device (shm, net); no one rings a notifier for it, and
  // the net proxy polls its counters. The host never closes a FIFO in device memory nor reads
  // its counters.
  bool forKernels = false;
  // This rank's device (>= 0 when forKernels, except in tests where host threads stand in for the
  // kernel of a host-staged FIFO: -1 maps nothing).
  int cudaDevice = -1;
};

// What a communicator's transports are made with.
struct TransportEnv {
  const Logger* log = nullptr;
  int socketThreads = 1;  // CHORUS_SOCKET_NTHREADS: the net transport's proxy threads
  std::string netPlugin;  // CHORUS_NET_PLUGIN: a network library to use instead of the built-in ones
  std::string netName;    // CHORUS_NET: the built-in network ("IB", "Socket"); empty: IB where offered
  int64_t connectTimeoutNs = int64_t(10) * 1000000000;  // how long a network connection may take
  bool netChecksum = false;  // CHORUS_NET_CHECKSUM: a CRC32C of every network message, checked
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  // Whether this transport connects the two ranks; both answer alike.
  virtual bool canConnect(const PeerInfo& self, const PeerInfo& peer) const = 0;
  // How the peers it connects may read each other's memory besides its FIFOs (MemShare).
  enum class MemoryReach : uint8_t { kNone, kAddressSpace, kSharedMapping };
  virtual MemoryReach memoryReach() const { return MemoryReach::kNone; }
  // Whether it connects the two ranks with a FIFO for kernels (ConnectContext::forKernels); both
  // answer alike.
  virtual bool canConnectDevice(const DevicePeer&, const DevicePeer&) const { return false; }
  // Phase 1 (receiver).
  virtual Result<std::unique_ptr<Connection>> setupRecv(ConnectContext& ctx, int peer, uint64_t tag,
                                                        std::vector<char>* handle) = 0;
  // Phase 2 (sender).
  virtual Result<std::unique_ptr<Connection>> connectSend(ConnectContext& ctx, int peer, uint64_t tag,
                                                          const std::vector<char>& handle) = 0;
  // Phase 3 (receiver).
  virtual Status finishRecv(ConnectContext& ctx, Connection& conn, int peer, uint64_t tag) = 0;
  // After a failure or an abort: stops moving data on this transport's connections, closing them,
  // and returns once its threads no longer touch the callers' buffers.
  virtual void stopTraffic() {}
  // Why FIFOs for kernels this transport serves broke (a peer's connection ended, say): the first
  // failure about each peer (Status::subject() names it) and any about no peer in particular;
  // kept for the transport's life. Kernels cannot see a closed FIFO: the communicator's watchdog
  // asks here while they run, and counts a failure about a peer only while a launch that waits on
  // that peer runs (failureInFlight, src/core/device_comm.h): a peer may close its connections
  // once its part is done. Thread-safe.
  virtual std::vector<Status> kernelFifoErrors() const { return {}; }
  // Data that arrived corrupted (a checksum that did not match), one per peer: the FIFO it came on
  // is closed, and a lane that finds it closed says this instead.
  virtual std::vector<Status> dataErrors() const { return {}; }
};

// One instance of each transport, in the order they are preferred (in-process, CUDA IPC, shared
// memory, network): the transports' registry (transports/registry.cc), which the core sees only
// through this function.
std::vector<std::unique_ptr<Transport>> makeTransports(const TransportEnv& env);

// Host memory of a FIFO for kernels (host-staged transports): pinned and mapped for `device`, and
// the view kernels use; with device -1 (host threads stand in for the kernel) the host's view.
// Undo with unmapForKernels(base, device) before the memory goes.
Result<FifoView> mapForKernels(const FifoView& host, void* base, size_t bytes, int device);
void unmapForKernels(void* base, int device);

}  // namespace chorus
