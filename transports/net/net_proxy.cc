#include "transports/net/net_proxy.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <utility>

#include "src/common/crc32c.h"

namespace chorus {
namespace {

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

// The last WARN or INFO line of a network on this thread, and whether it was a WARN. A network
// says at INFO that a peer closed its comm between messages (its communicator was destroyed, or
// its process ended), and at WARN that something broke (docs/network.md).
struct NetMessage {
  std::string text;
  bool warn = false;
};
thread_local NetMessage lastNetMessage;

const Logger& processNetLog() {
  static const Logger log = [] {
    Result<Config> c = Config::fromEnv();
    return c.isOk() ? Logger(c.value().logLevel, c.value().logSubsys, -1) : Logger();
  }();
  return log;
}

}  // namespace

std::string takeNetMessage() { return std::exchange(lastNetMessage, NetMessage{}).text; }

void netLogger(chorusNetLogLevel_t level, unsigned long, const char* file, int line, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  const Logger& log = processNetLog();
  const char* base = file ? std::strrchr(file, '/') : nullptr;
  const std::string where = file ? std::string(base ? base + 1 : file) + ":" + std::to_string(line) : "";
  switch (level) {
    case chorusNetLogWarn:
    case chorusNetLogAbort:
      lastNetMessage = {buf, true};
      log.warn(kSubsysNet, "{} ({})", buf, where);
      break;
    case chorusNetLogInfo:
      lastNetMessage = {buf, false};
      log.info(kSubsysNet, "{}", buf);
      break;
    case chorusNetLogVersion:
      log.info(kSubsysNet, "{}", buf);
      break;
    case chorusNetLogTrace:
      log.trace(kSubsysNet, "{} ({})", buf, where);
      break;
    default:
      break;
  }
}

NetProxy::NetProxy(Logger log, const chorusNet_v1_t* net, void* ctx, FailureHook onFailure, bool checksum)
    : log_(log), net_(net), ctx_(ctx), onFailure_(std::move(onFailure)), checksum_(checksum) {}

Status NetProxy::start() {
  wake_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_.valid()) return errnoStatus("eventfd for the network proxy", errno);
  thread_ = std::thread([this] {
    setThreadName("chorus-net");
    loop();
  });
  return Status::ok();
}

NetProxy::~NetProxy() {
  if (thread_.joinable()) {
    stop_.store(true, std::memory_order_release);
    uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof(one));
    thread_.join();
  }
  // Comms not handed to the thread yet, and those it served: closed here, before the context goes.
  for (Link& l : incoming_) {
    Entry e;
    e.l = std::move(l);
    entries_.push_back(std::move(e));
  }
  for (Entry& e : entries_) close(e);
}

void NetProxy::add(Link link) {
  {
    std::lock_guard<std::mutex> g(mu_);
    incoming_.push_back(std::move(link));
  }
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
}

void NetProxy::quiesce(int64_t timeoutNs) {
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

std::string NetProxy::callFailed(const char* call, chorusResult_t rc, bool* peerClosed) const {
  const bool warned = lastNetMessage.warn;
  const std::string said = takeNetMessage();
  if (peerClosed) *peerClosed = !said.empty() && !warned;
  std::string why = std::string(net_->name) + " network: " + call + " failed (" + chorusGetErrorString(rc) + ")";
  if (!said.empty()) why += ": " + said;
  return why;
}

void NetProxy::fail(Entry& e, const std::string& why, bool peerClosed, bool corrupt) {
  // Closing the FIFO is enough: a lane that still needs this connection fails at once with a
  // message naming the peer, and a peer that closed after its last operation harms nobody.
  const bool closedHere = e.l.fifo.closed();
  e.failed = true;
  e.l.fifo.close();
  if (corrupt) {
    log_.warn(kSubsysNet, "network connection from rank {} ({}): {}", e.l.peer, e.l.peerName, why);
  } else if (peerClosed) {
    // The receives posted ahead for the peer's next slots end with its comm: at every clean
    // destroy, on whichever side closes last. Not a failure until a lane needs those slots.
    log_.trace(kSubsysNet, "network connection from rank {} ({}) closed by the peer: {}", e.l.peer, e.l.peerName, why);
  } else {
    log_.info(kSubsysNet, "network connection {} rank {} ({}) ended: {}", e.l.isSend ? "to" : "from", e.l.peer,
              e.l.peerName, why);
  }
  // A closed FIFO the communicator itself closed (a failure or an abort here) is no news.
  if ((e.l.polled || corrupt) && onFailure_ && !closedHere) onFailure_(e.l.peer, e.l.peerName, why, corrupt);
}

void NetProxy::close(Entry& e) {
  if (e.closed) return;
  e.closed = true;
  if (!e.l.comm) return;
  // Requests in flight are abandoned with their comm; registrations go first.
  for (Slot& s : e.slots) {
    if (s.mr) (void)net_->deregMr(e.l.comm, s.mr);
    s = Slot{};
  }
  if (e.mr) (void)net_->deregMr(e.l.comm, e.mr);
  e.mr = nullptr;
  if (e.wireMr) (void)net_->deregMr(e.l.comm, e.wireMr);
  e.wireMr = nullptr;
  (void)(e.l.isSend ? net_->closeSend(e.l.comm) : net_->closeRecv(e.l.comm));
  e.l.comm = nullptr;
}

bool NetProxy::connect(Entry& e) {
  void* comm = nullptr;
  const chorusResult_t rc = net_->connect(ctx_, e.l.dev, e.l.handle.data(), &comm);
  if (rc != chorusSuccess) {
    fail(e, callFailed("connect", rc));
    return true;
  }
  if (!comm) {
    if (nowNs() > e.l.deadlineNs) {
      fail(e, std::string(net_->name) +
                  " network: connect did not complete in time (the connection timeout, "
                  "CHORUS_INIT_TIMEOUT, passed)");
      return true;
    }
    return false;
  }
  e.l.comm = comm;
  return true;
}

bool NetProxy::ready(Entry& e) {
  if (e.mr) return true;
  const chorusResult_t rc = net_->regMr(e.l.comm, e.l.mem, e.l.memBytes, CHORUS_NET_PTR_HOST, &e.mr);
  if (rc != chorusSuccess) {
    e.mr = nullptr;
    fail(e, callFailed("registering the FIFO's memory", rc));
    return false;
  }
  e.slots.assign(e.l.fifo.nslots, Slot{});
  if (checksum_) {
    e.wire.assign(e.l.fifo.nslots, WireHeader{});
    const chorusResult_t wrc =
        net_->regMr(e.l.comm, e.wire.data(), e.wire.size() * sizeof(WireHeader), CHORUS_NET_PTR_HOST, &e.wireMr);
    if (wrc != chorusSuccess) {
      e.wireMr = nullptr;
      fail(e, callFailed("registering the checksummed headers", wrc));
      return false;
    }
  }
  log_.info(kSubsysNet, "network connection {} rank {} ({}) over {} is up", e.l.isSend ? "to" : "from", e.l.peer,
            e.l.peerName, net_->name);
  return true;
}

bool NetProxy::progressSend(Entry& e) {
  const FifoView& f = e.l.fifo;
  bool moved = false;
  // Post both messages of every published slot, in order.
  while (e.posted - e.next < kMaxSlotsInFlight && f.hasData(e.posted)) {
    Slot& s = e.slots[e.posted % f.nslots];
    SlotHeader* h = f.header(e.posted);
    const char* ref = e.l.lane.refs ? e.l.lane.refs[e.posted % f.nslots] : nullptr;
    char* payload = ref ? const_cast<char*>(ref) : f.payload(e.posted);
    if (!s.headerPosted) {
      void* head = h;
      size_t headBytes = sizeof(SlotHeader);
      void* headMr = e.mr;
      if (checksum_) {
        WireHeader& w = e.wire[e.posted % f.nslots];
        std::memcpy(w.header, h, sizeof(SlotHeader));
        w.crc = crc32c(crc32c(0, w.header, sizeof(w.header)), payload, h->bytes);
        head = &w;
        headBytes = sizeof(WireHeader);
        headMr = e.wireMr;
      }
      const chorusResult_t rc = net_->isend(e.l.comm, head, headBytes, kTagHeader, headMr, &s.req[0]);
      if (rc != chorusSuccess) {
        fail(e, callFailed("isend", rc));
        return true;
      }
      if (!s.req[0]) break;  // the network is full: again on a later pass
      s.headerPosted = true;
      moved = true;
    }
    void* mr = e.mr;
    if (ref && !s.mr) {
      const chorusResult_t rc = net_->regMr(e.l.comm, payload, h->bytes, CHORUS_NET_PTR_HOST, &s.mr);
      if (rc != chorusSuccess) {
        s.mr = nullptr;
        fail(e, callFailed("registering a send buffer", rc));
        return true;
      }
    }
    if (ref) mr = s.mr;
    const chorusResult_t rc = net_->isend(e.l.comm, payload, h->bytes, kTagPayload, mr, &s.req[1]);
    if (rc != chorusSuccess) {
      fail(e, callFailed("isend", rc));
      return true;
    }
    if (!s.req[1]) break;
    s.headerPosted = false;
    ++e.posted;
    moved = true;
  }
  // Free, in order, every slot whose two sends are done.
  const uint32_t before = e.next;
  while (e.next != e.posted) {
    Slot& s = e.slots[e.next % f.nslots];
    for (void*& r : s.req) {
      if (!r) continue;
      int done = 0;
      const chorusResult_t rc = net_->test(r, &done, nullptr);
      if (rc != chorusSuccess) {
        if (e.next != before) f.release(e.next);
        fail(e, callFailed("a send", rc));
        return true;
      }
      if (done) r = nullptr;
    }
    if (s.req[0] || s.req[1]) break;
    if (s.mr) {
      (void)net_->deregMr(e.l.comm, s.mr);
      s.mr = nullptr;
    }
    if (e.l.lane.refs) e.l.lane.refs[e.next % f.nslots] = nullptr;
    ++e.next;
  }
  if (e.next != before) {
    f.release(e.next);
    moved = true;
  }
  return moved;
}

bool NetProxy::progressRecv(Entry& e) {
  // What arrived first (a peer that sent its last message and closed fails the receives posted
  // after it, never the ones before), then new receives, then what they found at once.
  bool moved = false;
  if (!completeRecvs(e, &moved)) return true;
  if (!postRecvs(e, &moved)) return true;
  if (!completeRecvs(e, &moved)) return true;
  return moved;
}

bool NetProxy::postRecvs(Entry& e, bool* moved) {
  const FifoView& f = e.l.fifo;
  // A receive for every free slot, up to the limits.
  while (e.posted - e.next < kMaxSlotsInFlight * 2 && f.hasSpace(e.posted)) {
    const uint32_t idx = e.posted % f.nslots;
    Slot& s = e.slots[idx];
    char* dst = f.payload(e.posted);
    size_t cap = f.slotBytes;
    void* mr = e.mr;
    if (e.l.lane.dests) {
      uintptr_t d = e.l.lane.dests[idx].load(std::memory_order_acquire);
      if (d == 0) {
        if (e.posted - e.next >= kBlindDepth) break;  // the lane may still post where this one goes
        // Taken for the slot; or the lane posted in between, and d is its destination now.
        (void)e.l.lane.dests[idx].compare_exchange_strong(d, ProxyLink::kDestInSlot, std::memory_order_acq_rel,
                                                          std::memory_order_acquire);
      }
      if (d != 0 && d != ProxyLink::kDestInSlot && e.l.lane.destBytes[idx] > 0) {
        dst = reinterpret_cast<char*>(d);
        cap = e.l.lane.destBytes[idx];
        if (!s.mr) {
          const chorusResult_t rc = net_->regMr(e.l.comm, dst, cap, CHORUS_NET_PTR_HOST, &s.mr);
          if (rc != chorusSuccess) {
            s.mr = nullptr;
            fail(e, callFailed("registering a receive buffer", rc));
            return false;
          }
        }
        mr = s.mr;
      }
    }
    s.dst = dst;
    void* data[2] = {f.header(e.posted), dst};
    size_t sizes[2] = {sizeof(SlotHeader), cap};
    int tags[2] = {kTagHeader, kTagPayload};
    void* mrs[2] = {e.mr, mr};
    if (checksum_) {
      data[0] = &e.wire[idx];
      sizes[0] = sizeof(WireHeader);
      mrs[0] = e.wireMr;
    }
    const chorusResult_t rc = net_->irecv(e.l.comm, 2, data, sizes, tags, mrs, &s.req[0]);
    if (rc != chorusSuccess) {
      bool peerClosed = false;
      const std::string why = callFailed("irecv", rc, &peerClosed);
      fail(e, why, peerClosed);
      return false;
    }
    if (!s.req[0]) break;  // the network is full
    ++e.posted;
    *moved = true;
  }
  return true;
}

bool NetProxy::completeRecvs(Entry& e, bool* moved) {
  const FifoView& f = e.l.fifo;
  // Publish, in order, every slot whose receive is done, with one store for them all (the
  // consumer sees every completed slot at once); those done before a failure too.
  const uint32_t before = e.next;
  std::string failure;
  bool peerClosed = false;  // the failure is the peer's close between messages (the network said so at INFO)
  bool corrupt = false;     // the failure is a checksum that did not match
  while (e.next != e.posted) {
    Slot& s = e.slots[e.next % f.nslots];
    int done = 0;
    size_t got[2] = {0, 0};
    const chorusResult_t rc = net_->test(s.req[0], &done, got);
    if (rc != chorusSuccess) {
      failure = callFailed("a receive", rc, &peerClosed);
      break;
    }
    if (!done) break;
    s.req[0] = nullptr;
    if (s.mr) {
      (void)net_->deregMr(e.l.comm, s.mr);
      s.mr = nullptr;
    }
    SlotHeader* h = f.header(e.next);
    const size_t headBytes = checksum_ ? sizeof(WireHeader) : sizeof(SlotHeader);
    const WireHeader* w = checksum_ ? &e.wire[e.next % f.nslots] : nullptr;
    // The header as it arrived: in the slot, or in its wire copy until the checksum holds (a
    // kernel may act on a slot's header alone, so nothing unchecked goes into the slot).
    SlotHeader wireCopy;
    if (w) std::memcpy(static_cast<void*>(&wireCopy), w->header, sizeof(SlotHeader));
    const SlotHeader* arrived = w ? &wireCopy : h;
    if (got[0] != headBytes || arrived->bytes != got[1]) {
      failure = "a slot arrived with a header of " + std::to_string(got[0]) + " bytes saying " +
                std::to_string(got[0] == headBytes ? arrived->bytes : 0) + " payload bytes, and " +
                std::to_string(got[1]) + " payload bytes: the two sides disagree on the wire format";
      break;
    }
    if (w) {
      const uint32_t crc = crc32c(crc32c(0, w->header, sizeof(w->header)), s.dst, got[1]);
      if (crc != w->crc) {
        corrupt = true;
        failure = "a slot of " + std::to_string(got[1]) + " bytes of operation #" + std::to_string(arrived->seq) +
                  ", step " + std::to_string(arrived->step) + " arrived over the " + net_->name + " network from " +
                  e.l.peerName + " with CRC32C " + hex(crc) + ", the sender computed " + hex(w->crc) +
                  " (CHORUS_NET_CHECKSUM): a NIC, a switch or memory on the path between the two hosts changed it";
        break;
      }
      *h = wireCopy;
    }
    ++e.next;
  }
  if (e.next != before) {
    f.publish(e.next);
    *moved = true;
  }
  if (failure.empty()) return true;
  fail(e, failure, peerClosed, corrupt);
  return false;
}

void NetProxy::loop() {
  std::vector<pollfd> fds;
  while (!stop_.load(std::memory_order_acquire)) {
    passes_.fetch_add(1, std::memory_order_acq_rel);
    (void)takeNetMessage();  // what the network said before this pass explains no failure in it
    {
      std::lock_guard<std::mutex> g(mu_);
      for (Link& l : incoming_) {
        Entry e;
        e.l = std::move(l);
        entries_.push_back(std::move(e));
      }
      incoming_.clear();
    }
    bool moved = false;
    bool polling = false;  // something will not wake poll(): a FIFO for kernels, a connect, a network without waitFd
    bool kernels = false;  // a FIFO for kernels among them: spin longer before napping
    for (Entry& e : entries_) {
      if (e.closed || e.failed) continue;  // a comm the network failed stays, unused, until the proxy ends
      if (e.l.fifo.closed()) {
        // Closed on this side after a failure or an abort: the comm goes, so the peer hears of
        // it at once (end of stream) instead of at its timeout.
        close(e);
        continue;
      }
      if (!e.l.comm) {
        moved = connect(e) || moved;
        polling = true;
        continue;
      }
      if (!ready(e)) continue;
      moved = (e.l.isSend ? progressSend(e) : progressRecv(e)) || moved;
      polling = polling || e.l.polled || !net_->waitFd;
      kernels = kernels || e.l.polled;
    }
    idlePasses_ = moved ? 0 : idlePasses_ + 1;
    if (moved) napNs_ = kNapNs;
    if (moved) continue;
    fds.clear();
    fds.push_back({wake_.get(), POLLIN, 0});
    if (!polling) {
      for (Entry& e : entries_) {
        if (e.closed || e.failed || !e.l.comm) continue;
        int fd = -1;
        short events = 0;
        if (net_->waitFd(e.l.comm, &fd, &events) != chorusSuccess) {
          polling = true;
          break;
        }
        if (fd >= 0) fds.push_back({fd, events, 0});  // POLLHUP/POLLERR are reported even with no events
      }
    }
    if (polling) fds.resize(1);
    // Sleeping in poll() on every comm; else spinning, then naps from kNapNs doubling to
    // kNapMaxNs while nothing moves (a network without waitFd tells nothing when a message
    // arrives: the nap is the latency it may add).
    const int spin = kernels ? kSpinPasses : kSpinPassesHost;
    timespec nap{0, 100 * 1000000};
    if (polling) {
      nap.tv_nsec = idlePasses_ < spin ? 0 : napNs_;
      if (idlePasses_ >= spin) napNs_ = std::min(napNs_ * 2, kNapMaxNs);
    }
    ::ppoll(fds.data(), fds.size(), &nap, nullptr);
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      while (::read(wake_.get(), &v, sizeof(v)) > 0) {
      }
    }
  }
}

}  // namespace chorus
