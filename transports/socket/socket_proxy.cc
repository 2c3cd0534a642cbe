#include "transports/socket/socket_proxy.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "src/bootstrap/socket.h"

namespace chorus {

SocketProxy::SocketProxy(Logger log) : log_(log) {}

Status SocketProxy::start() {
  wake_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_.valid()) return errnoStatus("eventfd for the socket proxy", errno);
  thread_ = std::thread([this] { loop(); });
  return Status::ok();
}

SocketProxy::~SocketProxy() {
  if (thread_.joinable()) {
    stop_.store(true, std::memory_order_release);
    uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof(one));
    thread_.join();
  }
}

void SocketProxy::add(UniqueFd fd, FifoView fifo, bool isSend, int peer, std::string peerName) {
  setNonBlocking(fd.get(), true);
  setNoDelay(fd.get());
  Entry e;
  e.fd = std::move(fd);
  e.fifo = fifo;
  e.isSend = isSend;
  e.peer = peer;
  e.peerName = std::move(peerName);
  {
    std::lock_guard<std::mutex> g(mu_);
    incoming_.push_back(std::move(e));
  }
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
}

void SocketProxy::fail(Entry& e, const std::string& why) {
  // Closing the FIFO is enough: a lane that still needs this connection fails at once with a
  // message naming the peer, and a peer that closed after its last operation harms nobody.
  e.failed = true;
  e.fifo.close();
  log_.info(kSubsysNet, "socket connection {} rank {} ({}) ended: {}", e.isSend ? "to" : "from", e.peer, e.peerName,
            why);
}

bool SocketProxy::progress(Entry& e) {
  bool moved = false;
  const size_t stride = fifoSlotStride(e.fifo.slotBytes);
  (void)stride;
  e.wantWrite = false;
  if (e.isSend) {
    while (e.fifo.hasData(e.next)) {
      SlotHeader* h = e.fifo.header(e.next);
      const size_t total = sizeof(SlotHeader) + h->bytes;
      ssize_t r =
          ::send(e.fd.get(), reinterpret_cast<char*>(h) + e.offset, total - e.offset, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
          e.wantWrite = true;
          break;
        }
        fail(e, std::strerror(errno));
        return true;
      }
      moved = moved || r > 0;
      e.offset += static_cast<size_t>(r);
      if (e.offset == total) {
        e.offset = 0;
        e.fifo.release(++e.next);
      }
    }
    return moved;
  }
  while (e.fifo.hasSpace(e.next)) {
    SlotHeader* h = e.fifo.header(e.next);
    size_t total = e.offset < sizeof(SlotHeader) ? sizeof(SlotHeader) : sizeof(SlotHeader) + h->bytes;
    ssize_t r = ::recv(e.fd.get(), reinterpret_cast<char*>(h) + e.offset, total - e.offset, MSG_DONTWAIT);
    if (r == 0) {
      fail(e, "the peer closed the connection");
      return true;
    }
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
      fail(e, std::strerror(errno));
      return true;
    }
    moved = true;
    e.offset += static_cast<size_t>(r);
    if (e.offset == sizeof(SlotHeader)) {
      if (h->bytes > e.fifo.slotBytes) {
        fail(e, "a slot header claims " + std::to_string(h->bytes) + " bytes, more than the slot's " +
                    std::to_string(e.fifo.slotBytes));
        return true;
      }
      if (h->bytes != 0) continue;
    }
    if (e.offset == sizeof(SlotHeader) + h->bytes) {
      e.offset = 0;
      e.fifo.publish(++e.next);
    }
  }
  return moved;
}

void SocketProxy::loop() {
  std::vector<Entry> entries;
  std::vector<pollfd> fds;
  while (!stop_.load(std::memory_order_acquire)) {
    {
      std::lock_guard<std::mutex> g(mu_);
      for (auto& e : incoming_) entries.push_back(std::move(e));
      incoming_.clear();
    }
    bool moved = false;
    for (auto& e : entries) {
      if (!e.failed && !e.fifo.closed()) moved = progress(e) || moved;
    }
    if (moved) continue;
    fds.clear();
    fds.push_back({wake_.get(), POLLIN, 0});
    for (auto& e : entries) {
      if (e.failed || e.fifo.closed()) continue;
      short ev = 0;
      if (e.isSend && e.wantWrite) ev |= POLLOUT;
      if (!e.isSend && e.fifo.hasSpace(e.next)) ev |= POLLIN;
      fds.push_back({e.fd.get(), ev, 0});  // POLLHUP/POLLERR are reported even with no events
    }
    ::poll(fds.data(), fds.size(), 100);
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      while (::read(wake_.get(), &v, sizeof(v)) > 0) {
      }
    }
  }
}

}  // namespace chorus
