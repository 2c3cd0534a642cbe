// The transport interface: how two ranks get a FIFO between them.
//
// A communicator makes one instance of every registered transport (makeTransports) and, for each
// peer, uses the first that says it can connect the pair, from the two ranks' allgathered
// PeerInfo records, so both sides always agree. Setting up one direction (sender -> receiver)
// takes three phases, run for all connections of a launch at once so that no rank can wait on
// a phase another rank has not reached:
//   1. the receiver calls setupRecv() and sends the handle it returns to the sender (bootstrap);
//   2. the sender receives the handle and calls connectSend();
//   3. the receiver calls finishRecv().
// A transport gets the FIFO shape to build and a narrow out-of-band interface, and owns whatever
// threads it needs. A Connection owns whatever backs its FIFO (heap block, shared mapping, socket)
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
  // >= 0: a FIFO for kernels, in device memory (the receiver's device; this is this rank's
  // device). The FIFO is then never touched by host code: its connection neither closes it nor
  // reads its counters.
  int cudaDevice = -1;
};

// What a communicator's transports are made with.
struct TransportEnv {
  const Logger* log = nullptr;
  int socketThreads = 1;  // CHORUS_SOCKET_NTHREADS
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
  // Whether it builds FIFOs in device memory (ConnectContext::cudaDevice).
  virtual bool carriesDevice() const { return false; }
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
};

// The registry: one instance of each transport, in the order they are preferred (in-process,
// shared memory, sockets). Adding a transport is a factory here and its file.
std::vector<std::unique_ptr<Transport>> makeTransports(const TransportEnv& env);
std::unique_ptr<Transport> makeInProcTransport(const TransportEnv& env);
std::unique_ptr<Transport> makeShmTransport(const TransportEnv& env);
std::unique_ptr<Transport> makeSocketTransport(const TransportEnv& env);

}  // namespace chorus
