#include "src/bootstrap/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

namespace chorus {

std::string SockAddr::toString() const {
  char host[INET6_ADDRSTRLEN] = {0};
  if (storage.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&storage);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(ntohs(a->sin_port));
  }
  if (storage.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&storage);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(a->sin6_port));
  }
  return "<no address>";
}

bool SockAddr::valid() const {
  return (storage.ss_family == AF_INET && len == sizeof(sockaddr_in)) ||
         (storage.ss_family == AF_INET6 && len == sizeof(sockaddr_in6));
}

bool SockAddr::isLoopback() const {
  if (storage.ss_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr) >> 24) == 127;
  }
  if (storage.ss_family == AF_INET6) {
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr);
  }
  return false;
}

uint16_t SockAddr::port() const {
  if (storage.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (storage.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

void SockAddr::setPort(uint16_t port) {
  if (storage.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
  if (storage.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
}

Result<SockAddr> SockAddr::parse(const std::string& hostPort) {
  std::string host;
  std::string port;
  if (!hostPort.empty() && hostPort[0] == '[') {
    size_t close = hostPort.find(']');
    if (close == std::string::npos || close + 1 >= hostPort.size() || hostPort[close + 1] != ':') {
      return invalidArgument("address '" + hostPort + "' is not of the form [v6addr]:port");
    }
    host = hostPort.substr(1, close - 1);
    port = hostPort.substr(close + 2);
  } else {
    size_t colon = hostPort.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return invalidArgument("address '" + hostPort + "' is not of the form host:port");
    }
    host = hostPort.substr(0, colon);
    port = hostPort.substr(colon + 1);
  }
  char* end = nullptr;
  long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 0 || p > 65535) {
    return invalidArgument("address '" + hostPort + "' has no valid port (0-65535)");
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res) {
    return invalidArgument("cannot resolve host '" + host + "' of '" + hostPort + "': " + gai_strerror(rc));
  }
  SockAddr a;
  if (res->ai_addrlen > sizeof(a.storage)) {
    freeaddrinfo(res);
    return invalidArgument("address of '" + host + "' is of an unsupported family");
  }
  std::memcpy(&a.storage, res->ai_addr, res->ai_addrlen);
  a.len = res->ai_addrlen;
  freeaddrinfo(res);
  a.setPort(static_cast<uint16_t>(p));
  return a;
}

namespace {

bool ifnameMatches(const std::string& spec, const char* name) {
  if (spec.empty()) return true;
  std::string s = spec;
  bool exclude = false;
  bool exact = false;
  if (s[0] == '^') {
    exclude = true;
    s.erase(0, 1);
  }
  if (!s.empty() && s[0] == '=') {
    exact = true;
    s.erase(0, 1);
  }
  bool any = false;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) {
      bool m = exact ? item == name : std::strncmp(name, item.c_str(), item.size()) == 0;
      any = any || m;
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return exclude ? !any : any;
}

}  // namespace

namespace {

// Every interface with an address, once each with all its addresses, for error messages:
// "eth0 (up) 10.0.0.2 fd00::2, lo (up) 127.0.0.1 ::1".
std::string listInterfaces(ifaddrs* list) {
  std::vector<std::pair<std::string, std::string>> seen;  // name, "(up) addr addr ..."
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
    SockAddr a;
    std::memcpy(&a.storage, i->ifa_addr,
                i->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    std::string addr = a.toString();
    addr = addr.substr(0, addr.rfind(':'));  // no port
    auto it = std::find_if(seen.begin(), seen.end(), [&](const auto& e) { return e.first == i->ifa_name; });
    if (it == seen.end()) {
      seen.emplace_back(i->ifa_name, (i->ifa_flags & IFF_UP) ? "(up)" : "(down)");
      it = seen.end() - 1;
    }
    it->second += " " + addr;
  }
  std::string out;
  for (const auto& [name, what] : seen) out += (out.empty() ? "" : ", ") + name + " " + what;
  return out.empty() ? "none" : out;
}

}  // namespace

Result<SockAddr> localInterfaceAddr(const std::string& ifnameSpec, std::string* ifname) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return errnoStatus("getifaddrs", errno);
  SockAddr best;
  SockAddr loopback;
  std::string bestName;
  std::string loName;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
    if (i->ifa_addr->sa_family != AF_INET) continue;  // IPv4 first; IPv6 by name through CHORUS_COMM_ID
    if (!ifnameMatches(ifnameSpec, i->ifa_name)) continue;
    SockAddr a;
    std::memcpy(&a.storage, i->ifa_addr, sizeof(sockaddr_in));
    a.len = sizeof(sockaddr_in);
    if (i->ifa_flags & IFF_LOOPBACK) {
      if (loopback.len == 0) {
        loopback = a;
        loName = i->ifa_name;
      }
    } else if (best.len == 0) {
      best = a;
      bestName = i->ifa_name;
    }
  }
  const std::string found = listInterfaces(list);
  freeifaddrs(list);
  if (best.len == 0 && loopback.len != 0) {
    best = loopback;
    bestName = loName;
  }
  if (best.len == 0) {
    return systemError("no IPv4 network interface is up" +
                       (ifnameSpec.empty() ? std::string() : " that matches CHORUS_SOCKET_IFNAME=" + ifnameSpec) +
                       "; interfaces found: " + found +
                       ". Set CHORUS_SOCKET_IFNAME to one of them (a prefix, =exact, or ^excluded,...)");
  }
  if (ifname) *ifname = bestName;
  best.setPort(0);
  return best;
}

Result<SockAddr> interfaceToward(const SockAddr& dest, const std::string& ifnameSpec, std::string* ifname) {
  if (!ifnameSpec.empty()) return localInterfaceAddr(ifnameSpec, ifname);
  // connect() on a datagram socket sends nothing: it only asks the routing table for a source.
  UniqueFd fd(::socket(dest.storage.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  SockAddr local;
  socklen_t len = sizeof(local.storage);
  if (!fd.valid() || ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&dest.storage), dest.len) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local.storage), &len) != 0) {
    return localInterfaceAddr(ifnameSpec, ifname);  // no route known: the first interface that is up
  }
  local.len = len;
  local.setPort(0);
  if (ifname) {
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) == 0) {
      for (ifaddrs* i = list; i; i = i->ifa_next) {
        if (i->ifa_addr && i->ifa_addr->sa_family == local.storage.ss_family) {
          SockAddr a;
          std::memcpy(&a.storage, i->ifa_addr, len);
          a.len = len;
          a.setPort(0);
          if (a.toString() == local.toString()) *ifname = i->ifa_name;
        }
      }
      freeifaddrs(list);
    }
  }
  return local;
}

Result<UniqueFd> listenOn(const SockAddr& addr, SockAddr* bound, int backlog) {
  UniqueFd fd(::socket(addr.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return errnoStatus("socket", errno);
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.len) != 0) {
    return errnoStatus("bind to " + addr.toString(), errno);
  }
  if (::listen(fd.get(), backlog) != 0) return errnoStatus("listen on " + addr.toString(), errno);
  SockAddr b;
  socklen_t len = sizeof(b.storage);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&b.storage), &len);
  b.len = len;
  if (bound) *bound = b;
  return fd;
}

void setNonBlocking(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

void setNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

Status refusedError(const std::string& what, const SockAddr& addr) {
  return remoteError(what + " refused the connection at " + addr.toString() +
                     ": its listener is closed, so its process exited, was killed or destroyed its communicator");
}

Result<UniqueFd> connectTo(const SockAddr& addr, int64_t deadlineNs, const std::string& what,
                           const std::atomic<bool>* abortFlag, bool refusedIsFinal) {
  int64_t backoffUs = 1000;
  int lastErr = 0;
  while (true) {
    UniqueFd fd(::socket(addr.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return errnoStatus("socket", errno);
    setNonBlocking(fd.get(), true);
    int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.len);
    if (rc != 0 && errno == EINPROGRESS) {
      while (true) {
        pollfd p{fd.get(), POLLOUT, 0};
        int64_t left = (deadlineNs - nowNs()) / 1000000;
        int prc = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left, 100))));
        if (prc > 0) {
          int err = 0;
          socklen_t l = sizeof(err);
          ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &l);
          rc = err ? -1 : 0;
          errno = err;
          break;
        }
        if (abortFlag && abortFlag->load(std::memory_order_acquire)) {
          return Status(chorusRemoteError, "connecting to " + what + " was aborted");
        }
        if (nowNs() >= deadlineNs) {
          rc = -1;
          errno = ETIMEDOUT;
          break;
        }
      }
    }
    if (rc == 0) {
      setNonBlocking(fd.get(), false);
      setNoDelay(fd.get());
      return fd;
    }
    lastErr = errno;
    if (lastErr == ECONNREFUSED && refusedIsFinal) {
      return refusedError(what, addr);
    }
    bool retry = lastErr == ECONNREFUSED || lastErr == ETIMEDOUT || lastErr == ECONNRESET || lastErr == EAGAIN ||
                 lastErr == ENETUNREACH || lastErr == EHOSTUNREACH;
    if (!retry || nowNs() >= deadlineNs) break;
    if (abortFlag && abortFlag->load(std::memory_order_acquire)) {
      return Status(chorusRemoteError, "connecting to " + what + " was aborted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(backoffUs));
    backoffUs = std::min<int64_t>(backoffUs * 2, 100000);
  }
  return systemError("could not connect to " + what + " at " + addr.toString() + ": " + std::strerror(lastErr) +
                     (lastErr == ETIMEDOUT || lastErr == ECONNREFUSED
                          ? " (is that process running and reachable? raise CHORUS_TIMEOUT if it starts late)"
                          : ""));
}

namespace {

Status transfer(bool sending, int fd, void* data, size_t n, int64_t deadlineNs, const std::string& what,
                const std::atomic<bool>* abortFlag) {
  char* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < n) {
    ssize_t r = sending ? ::send(fd, p + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : ::recv(fd, p + done, n - done, MSG_DONTWAIT);
    if (r > 0) {
      done += static_cast<size_t>(r);
      continue;
    }
    if (r == 0 && !sending) {
      return remoteError(what + " closed the connection after " + std::to_string(done) + " of " + std::to_string(n) +
                         " bytes");
    }
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return errnoStatus(std::string(sending ? "sending to " : "receiving from ") + what, errno);
    }
    if (abortFlag && abortFlag->load(std::memory_order_acquire)) {
      return Status(chorusRemoteError, "transfer with " + what + " was aborted");
    }
    int64_t left = deadlineNs - nowNs();
    if (left <= 0) {
      return Status(chorusSystemError, "Timed out " + std::string(sending ? "sending to " : "waiting for data from ") +
                                           what + " (" + std::to_string(done) + " of " + std::to_string(n) +
                                           " bytes moved)");
    }
    pollfd pfd{fd, static_cast<short>(sending ? POLLOUT : POLLIN), 0};
    ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left / 1000000 + 1, 100)));
  }
  return Status::ok();
}

}  // namespace

Status sendAll(int fd, const void* data, size_t n, int64_t deadlineNs, const std::string& what,
               const std::atomic<bool>* abortFlag) {
  return transfer(true, fd, const_cast<void*>(data), n, deadlineNs, what, abortFlag);
}

Status recvAll(int fd, void* data, size_t n, int64_t deadlineNs, const std::string& what,
               const std::atomic<bool>* abortFlag) {
  return transfer(false, fd, data, n, deadlineNs, what, abortFlag);
}

}  // namespace chorus
