// What a transport may ask of the bootstrap network while it connects two ranks, and nothing
// more: descriptors a connection is built from, and bounded waits for a peer. The Bootstrap
// implements it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "src/common/os.h"
#include "src/common/status.h"

namespace chorus {

class OutOfBand {
 public:
  virtual ~OutOfBand() = default;

  // Where `peer` is, for messages ("host:port").
  virtual std::string peerAddress(int peer) const = 0;

  // Descriptor passing on one host: exportFd offers `fd` to `peer` under `token` (claimable
  // once); importFd fetches it from the exporter's server, whose name (fdServerName() on the
  // exporting rank) travels in the connection's handle; awaitClaim waits until the peer took it.
  virtual const std::string& fdServerName() const = 0;
  virtual void exportFd(int peer, uint64_t token, UniqueFd fd) = 0;
  virtual Result<UniqueFd> importFd(int peer, const std::string& serverName, uint64_t token) = 0;
  virtual Status awaitClaim(int peer, uint64_t token) = 0;

  // Waits until ready() says true (or fails: its error), calling it every few milliseconds at
  // most, for something `peer` must do (`what`: "a network connection", for messages). The
  // Bootstrap bounds the wait as its own (the init timeout, an abort, a failure notice, a peer
  // whose process is gone); this default, for tests' channels, only by `timeoutNs`.
  virtual Status awaitPeer(int peer, const char* what, const std::function<Result<bool>()>& ready,
                           int64_t timeoutNs = int64_t(60) * 1000000000) {
    const int64_t deadline = nowNs() + timeoutNs;
    for (;;) {
      Result<bool> r = ready();
      if (!r.isOk()) return r.status();
      if (r.value()) return Status::ok();
      if (nowNs() > deadline) {
        return remoteError("rank " + std::to_string(peer) + " did not complete " + what + " in time");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
};

}  // namespace chorus
