// TCP helpers for the bootstrap and the socket network: addresses, listening, connecting and
// whole-buffer transfers bounded by a deadline. These block (with a deadline); transports use
// the non-blocking calls on the descriptors directly.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "src/common/os.h"
#include "src/common/status.h"

namespace chorus {

// An IPv4 or IPv6 address and port, trivially copyable so it can travel in ids and tables.
struct SockAddr {
  // Room for sockaddr_in and sockaddr_in6 (not sockaddr_storage, whose 128 bytes would not fit
  // in a chorusUniqueId); the family comes first as in every sockaddr.
  struct alignas(8) Storage {
    sa_family_t ss_family;
    char rest[sizeof(sockaddr_in6) - sizeof(sa_family_t)];
  };
  Storage storage{};
  uint32_t len = 0;

  std::string toString() const;
  // An IPv4 or IPv6 address whose length matches its family: what a SockAddr that came off the
  // wire or out of a unique id must be before anyone connects to it.
  bool valid() const;
  bool isLoopback() const;  // 127.0.0.0/8 or ::1
  uint16_t port() const;
  void setPort(uint16_t port);
  // "host:port" or "[v6]:port"; host may be a name.
  static Result<SockAddr> parse(const std::string& hostPort);
};

// The address this host should be reached at: CHORUS_SOCKET_IFNAME's interface (prefix match;
// "=name" exact; "^a,b" excludes), else the first non-loopback interface that is up, else loopback.
// When none fits, the error lists every interface found, with its address and state.
Result<SockAddr> localInterfaceAddr(const std::string& ifnameSpec, std::string* ifname);

// The address to be reached at by ranks that reach `dest` (the bootstrap root): with
// CHORUS_SOCKET_IFNAME set, that interface's; otherwise the source address the routing table
// picks toward `dest` (what a connection to it would use), so a host with several interfaces
// listens on the one the job's network goes through. Loopback only when `dest` is loopback.
Result<SockAddr> interfaceToward(const SockAddr& dest, const std::string& ifnameSpec, std::string* ifname);

// Listens on `addr` (port 0: any); returns the bound address in *bound. The backlog is as deep as
// the kernel allows (net.core.somaxconn caps it): a process that is stopped accepts nothing, and
// once its queue is full the kernel drops new connections silently, so peers' once-a-second
// liveness probes would read its host as unreachable.
Result<UniqueFd> listenOn(const SockAddr& addr, SockAddr* bound, int backlog = 4096);

// The error of a connection `what`'s listener at `addr` refused: its process is gone.
Status refusedError(const std::string& what, const SockAddr& addr);

// Connects, retrying refused connections until the deadline; `what` names the peer in errors.
// With `refusedIsFinal`, a refused connection fails at once: for a peer known to listen already
// (a rank's bootstrap listener outlives its hello to the root), it means the peer is gone.
Result<UniqueFd> connectTo(const SockAddr& addr, int64_t deadlineNs, const std::string& what,
                           const std::atomic<bool>* abortFlag = nullptr, bool refusedIsFinal = false);

// Transfers exactly n bytes or fails at the deadline, on EOF, or when *abortFlag becomes true.
Status sendAll(int fd, const void* data, size_t n, int64_t deadlineNs, const std::string& what,
               const std::atomic<bool>* abortFlag = nullptr);
Status recvAll(int fd, void* data, size_t n, int64_t deadlineNs, const std::string& what,
               const std::atomic<bool>* abortFlag = nullptr);

void setNonBlocking(int fd, bool on);
void setNoDelay(int fd);

}  // namespace chorus
