#include "transports/socket/socket_proxy.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include "src/bootstrap/socket.h"

namespace chorus {

SocketProxy::SocketProxy(Logger log, FailureHook onPolledFailure)
    : log_(log), onPolledFailure_(std::move(onPolledFailure)) {}

Status SocketProxy::start() {
  wake_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_.valid()) return errnoStatus("eventfd for the socket proxy", errno);
  thread_ = std::thread([this] {
    setThreadName("chorus-sockets");
    loop();
  });
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

void SocketProxy::add(UniqueFd fd, FifoView fifo, bool isSend, int peer, std::string peerName, bool polled) {
  setNonBlocking(fd.get(), true);
  setNoDelay(fd.get());
  Entry e;
  e.fd = std::move(fd);
  e.fifo = fifo;
  e.fifo.notifyFd = -1;  // the lane's end rings this thread; its own publish/release need not
  e.isSend = isSend;
  e.peer = peer;
  e.peerName = std::move(peerName);
  e.polled = polled;
  {
    std::lock_guard<std::mutex> g(mu_);
    incoming_.push_back(std::move(e));
  }
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
}

void SocketProxy::quiesce(int64_t timeoutNs) {
  if (!thread_.joinable()) return;
  // Two passes begun after now: the one running at the call (if any) has ended.
  const uint64_t target = passes_.load(std::memory_order_acquire) + 2;
  const int64_t deadline = nowNs() + timeoutNs;
  uint64_t one = 1;
  while (passes_.load(std::memory_order_acquire) < target && nowNs() < deadline) {
    (void)!::write(wake_.get(), &one, sizeof(one));
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void SocketProxy::fail(Entry& e, const std::string& why) {
  // Closing the FIFO is enough: a lane that still needs this connection fails at once with a
  // message naming the peer, and a peer that closed after its last operation harms nobody.
  const bool closedHere = e.fifo.closed();
  e.failed = true;
  e.fifo.close();
  log_.info(kSubsysNet, "socket connection {} rank {} ({}) ended: {}", e.isSend ? "to" : "from", e.peer, e.peerName,
            why);
  // A closed FIFO the communicator itself closed (a failure or an abort here) is no news.
  if (e.polled && onPolledFailure_ && !closedHere) onPolledFailure_(e.peer, e.peerName, why);
}

bool SocketProxy::progress(Entry& e) { return e.isSend ? progressSend(e) : progressRecv(e); }

bool SocketProxy::progressSend(Entry& e) {
  // One sendmsg() for every published slot (up to kMaxSlotsPerCall): each slot's header, then its
  // payload, which is in the slot or where the lane published it by reference.
  bool moved = false;
  e.wantWrite = false;
  while (e.fifo.hasData(e.next)) {
    iovec iov[2 * kMaxSlotsPerCall];
    size_t niov = 0;
    size_t skip = e.offset;
    for (uint32_t k = 0; k < kMaxSlotsPerCall && e.fifo.hasData(e.next + k); ++k) {
      SlotHeader* h = e.fifo.header(e.next + k);
      const char* ref = e.fifo.refs ? e.fifo.refs[(e.next + k) % e.fifo.nslots] : nullptr;
      const char* payload = ref ? ref : reinterpret_cast<const char*>(h) + sizeof(SlotHeader);
      const std::pair<const char*, size_t> parts[2] = {{reinterpret_cast<const char*>(h), sizeof(SlotHeader)},
                                                       {payload, h->bytes}};
      for (const auto& [p, len] : parts) {
        if (skip >= len) {
          skip -= len;
          continue;
        }
        iov[niov++] = {const_cast<char*>(p) + skip, len - skip};
        skip = 0;
      }
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = niov;
    const ssize_t r = ::sendmsg(e.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        e.wantWrite = true;
        break;
      }
      fail(e, std::strerror(errno));
      return true;
    }
    moved = moved || r > 0;
    // Release every slot now wholly on its way.
    size_t left = e.offset + static_cast<size_t>(r);
    uint32_t freed = 0;
    for (;;) {
      const size_t total = sizeof(SlotHeader) + e.fifo.header(e.next + freed)->bytes;
      if (left < total) break;
      left -= total;
      if (e.fifo.refs) e.fifo.refs[(e.next + freed) % e.fifo.nslots] = nullptr;
      ++freed;
      if (left == 0) break;
    }
    e.offset = left;
    if (freed > 0) {
      e.next += freed;
      e.fifo.release(e.next);
    }
    if (static_cast<size_t>(r) == 0) break;
  }
  return moved;
}

bool SocketProxy::headerArrived(Entry& e, SlotHeader& h) {
  if (h.bytes > e.fifo.slotBytes) {
    fail(e, "a slot header claims " + std::to_string(h.bytes) + " bytes, more than the slot's " +
                std::to_string(e.fifo.slotBytes));
    return false;
  }
  // Where the payload goes: the destination the consumer posted for this slot when it expects
  // exactly this many bytes, else the slot (which the consumer then copies from).
  e.payload = reinterpret_cast<char*>(&h) + sizeof(SlotHeader);
  if (e.fifo.dests && h.bytes > 0) {
    const uint32_t idx = e.next % e.fifo.nslots;
    uintptr_t posted = 0;
    if (!e.fifo.dests[idx].compare_exchange_strong(posted, FifoView::kDestInSlot, std::memory_order_acq_rel,
                                                   std::memory_order_acquire) &&
        posted != FifoView::kDestInSlot) {
      if (e.fifo.destBytes[idx] == h.bytes) {
        e.payload = reinterpret_cast<char*>(posted);
      } else {
        e.fifo.dests[idx].store(FifoView::kDestInSlot, std::memory_order_relaxed);
      }
    }
  }
  return true;
}

bool SocketProxy::progressRecv(Entry& e) {
  // The size of a slot's payload is in its header, so one recvmsg() reads at most the rest of one
  // slot plus the next slot's header (when that slot is free): one call per slot when data flows.
  bool moved = false;
  while (e.fifo.hasSpace(e.next)) {
    SlotHeader* h = e.fifo.header(e.next);
    iovec iov[2];
    size_t niov = 0;
    if (e.offset < sizeof(SlotHeader)) {
      iov[niov++] = {reinterpret_cast<char*>(h) + e.offset, sizeof(SlotHeader) - e.offset};
    } else {
      iov[niov++] = {e.payload + (e.offset - sizeof(SlotHeader)), sizeof(SlotHeader) + h->bytes - e.offset};
      if (e.fifo.hasSpace(e.next + 1)) iov[niov++] = {e.fifo.header(e.next + 1), sizeof(SlotHeader)};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = niov;
    const ssize_t r = ::recvmsg(e.fd.get(), &msg, MSG_DONTWAIT);
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
    size_t got = static_cast<size_t>(r);
    const bool hadHeader = e.offset >= sizeof(SlotHeader);
    if (!hadHeader) {
      e.offset += got;
      got = 0;
      if (e.offset < sizeof(SlotHeader)) continue;
      if (!headerArrived(e, *h)) return true;
    } else {
      const size_t rest = sizeof(SlotHeader) + h->bytes - e.offset;
      const size_t take = std::min(got, rest);
      e.offset += take;
      got -= take;
    }
    // A slot is complete when its header and payload are in; a header read past it belongs to
    // the next slot.
    while (e.offset == sizeof(SlotHeader) + e.fifo.header(e.next)->bytes) {
      e.fifo.publish(++e.next);
      e.offset = got;
      got = 0;
      if (e.offset < sizeof(SlotHeader)) break;
      if (!headerArrived(e, *e.fifo.header(e.next))) return true;
    }
  }
  return moved;
}

void SocketProxy::loop() {
  std::vector<Entry> entries;
  std::vector<pollfd> fds;
  while (!stop_.load(std::memory_order_acquire)) {
    passes_.fetch_add(1, std::memory_order_acq_rel);
    {
      std::lock_guard<std::mutex> g(mu_);
      for (auto& e : incoming_) entries.push_back(std::move(e));
      incoming_.clear();
    }
    bool moved = false;
    bool polling = false;  // a live FIFO for kernels: nothing will ring
    for (auto& e : entries) {
      if (e.failed || e.fifo.closed()) continue;
      moved = progress(e) || moved;
      polling = polling || e.polled;
    }
    idlePasses_ = moved ? 0 : idlePasses_ + 1;
    if (moved) continue;
    fds.clear();
    fds.push_back({wake_.get(), POLLIN, 0});
    for (auto& e : entries) {
      if (e.failed || e.fifo.closed()) {
        // Closed on this side after a failure or an abort: shut the socket down so the peer hears
        // of it at once (end of stream) instead of at its timeout.
        if (!e.shut && e.fifo.closed()) ::shutdown(e.fd.get(), SHUT_RDWR);
        e.shut = true;
        continue;
      }
      short ev = 0;
      if (e.isSend && e.wantWrite) ev |= POLLOUT;
      if (!e.isSend && e.fifo.hasSpace(e.next)) ev |= POLLIN;
      fds.push_back({e.fd.get(), ev, 0});  // POLLHUP/POLLERR are reported even with no events
    }
    ::poll(fds.data(), fds.size(), !polling ? 100 : idlePasses_ < kSpinPasses ? 0 : 1);
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      while (::read(wake_.get(), &v, sizeof(v)) > 0) {
      }
    }
  }
}

}  // namespace chorus
