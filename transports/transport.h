// The transport interface: how two ranks get a FIFO between them.
//
// Which transport connects a pair is decided by chooseTransport() from the two ranks' allgathered
// PeerInfo records, so both sides always agree. Setting up one direction (sender -> receiver)
// takes three phases, run for all connections of a launch at once so that no rank can wait on
// a phase another rank has not reached:
//   1. the receiver calls setupRecv() and sends the handle it returns to the sender (bootstrap);
//   2. the sender receives the handle and calls connectSend();
//   3. the receiver calls finishRecv().
// A Connection owns whatever backs its FIFO (heap block, shared mapping, socket) and is destroyed
// only when the communicator is. Algorithms see only the FifoView.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/common/status.h"
#include "transports/fifo.h"

namespace chorus {

class Bootstrap;
class Logger;
class SocketProxy;
struct Config;

// What each rank tells every other at init; the inputs of chooseTransport().
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

enum class TransportKind : uint8_t { kInProc = 0, kShm = 1, kSocket = 2 };
const char* transportName(TransportKind kind);

// The same answer on both sides: a setting that disables a transport on either rank disables it
// for the pair.
TransportKind chooseTransport(const PeerInfo& a, const PeerInfo& b);

class Connection {
 public:
  Connection(TransportKind kind, int peer) : kind_(kind), peer_(peer) {}
  virtual ~Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  const FifoView& fifo() const { return fifo_; }
  TransportKind kind() const { return kind_; }
  int peer() const { return peer_; }

 protected:
  FifoView fifo_;

 private:
  TransportKind kind_;
  int peer_;
};

struct ConnectContext {
  Bootstrap* bootstrap = nullptr;
  const Config* config = nullptr;
  const Logger* log = nullptr;
  SocketProxy* proxy = nullptr;  // present when any socket connection may be made
  int rank = -1;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual TransportKind kind() const = 0;
  // Phase 1 (receiver).
  virtual Result<std::unique_ptr<Connection>> setupRecv(ConnectContext& ctx, int peer, uint64_t tag,
                                                        std::vector<char>* handle) = 0;
  // Phase 2 (sender).
  virtual Result<std::unique_ptr<Connection>> connectSend(ConnectContext& ctx, int peer, uint64_t tag,
                                                          const std::vector<char>& handle) = 0;
  // Phase 3 (receiver).
  virtual Status finishRecv(ConnectContext& ctx, Connection& conn, int peer, uint64_t tag) = 0;
};

// The built-in transports; each is stateless and shared.
Transport& inProcTransport();
Transport& shmTransport();
Transport& socketTransport();
Transport& transportFor(TransportKind kind);

}  // namespace chorus
