#include "transports/net/socket_net.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "src/bootstrap/socket.h"
#include "src/common/config.h"
#include "src/common/os.h"

namespace chorus {
namespace {

constexpr uint64_t kHandleMagic = 0x31544e53524f4843ull;  // "CHORSNT1"
constexpr uint64_t kHelloMagic = 0x6f6c6c65482d4e53ull;   // "SN-Hello"
constexpr int kMaxRecvs = 8;
constexpr int kSendBatch = 8;  // messages per sendmsg()
// A receive comm's read-ahead: small messages arrive many per recv() and are copied out of it; the
// rest of a body of at least kDirectBytes is read straight into its receive (with what follows it
// into the stage). Small, so that little of a large body is copied.
constexpr size_t kStageBytes = 4096;
constexpr size_t kDirectBytes = 2048;
constexpr unsigned long kNetFlag = 0x10;  // NCCL_NET, the subsystem bit of a network's log lines

// A context: the logger and what the comms made under it report with.
struct Context {
  uint64_t commId = 0;
  chorusNetLogger_t logger = nullptr;
  std::atomic<int> comms{0};
};

#define NET_LOG(ctx, level, ...)                                                                 \
  do {                                                                                           \
    if ((ctx) && (ctx)->logger) (ctx)->logger(level, kNetFlag, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

// The one device: the interface found once per process.
struct Device {
  bool ok = false;
  SockAddr addr;
  std::string ifname;
  std::string why;  // when !ok
  int speedMbps = 10000;
};

const Device& device() {
  static const Device d = [] {
    Device dev;
    Result<Config> cfg = Config::fromEnv();
    const std::string spec = cfg.isOk() ? cfg.value().socketIfname : std::string();
    Result<SockAddr> a = localInterfaceAddr(spec, &dev.ifname);
    if (!a.isOk()) {
      dev.why = a.status().message();
      return dev;
    }
    dev.ok = true;
    dev.addr = a.value();
    dev.addr.setPort(0);
    std::ifstream f("/sys/class/net/" + dev.ifname + "/speed");
    int speed = 0;
    if (f >> speed && speed > 0) dev.speedMbps = speed;
    return dev;
  }();
  return d;
}

// What listen writes and connect reads; connect keeps its progress after the address.
struct Handle {
  uint64_t magic = 0;
  uint64_t nonce = 0;
  SockAddr addr;
  // connect's progress (the caller passes the same handle to each call of one connection)
  int32_t stage = 0;  // 0 nothing yet, 1 connecting, 2 sending the hello
  int32_t fd = -1;
  uint32_t helloSent = 0;
};
static_assert(sizeof(Handle) <= CHORUS_NET_HANDLE_MAXSIZE, "a handle must fit NCCL's 128 bytes");

struct Hello {
  uint64_t magic = kHelloMagic;
  uint64_t nonce = 0;
};

struct MsgHeader {
  int32_t tag = 0;
  uint32_t reserved = 0;
  uint64_t size = 0;
};

struct Comm;

struct Request {
  Comm* comm = nullptr;
  bool inUse = false;
  bool done = false;
  int n = 0;  // messages (1 for a send)
  char* data[kMaxRecvs] = {};
  size_t cap[kMaxRecvs] = {};  // send: the size
  int tag[kMaxRecvs] = {};
  size_t got[kMaxRecvs] = {};
  bool filled[kMaxRecvs] = {};
  int filledCount = 0;
  MsgHeader wire;    // send: the message's header
  size_t moved = 0;  // send: bytes of header and body on their way
};

struct Memory {
  char* data = nullptr;
  size_t size = 0;
};

// A send or receive comm: one TCP connection and its requests in issue order.
struct Comm {
  Context* ctx = nullptr;
  UniqueFd fd;
  bool send = false;
  bool failed = false;
  Request slots[CHORUS_NET_MAX_REQUESTS];
  std::deque<Request*> order;  // issued and not yet collected by test
  // Receive: bytes read ahead of the message being filled (small messages: many per call, then
  // copied out), the next message's header, and the message being filled: its request, part,
  // size and how much of it is in.
  std::vector<char> stage;
  size_t stageBegin = 0;
  size_t stageEnd = 0;
  MsgHeader hdr;
  size_t hdrMoved = 0;
  bool inBody = false;
  Request* active = nullptr;
  int part = -1;
  size_t bodySize = 0;
  size_t bodyMoved = 0;

  Request* freeSlot() {
    for (Request& r : slots) {
      if (!r.inUse) return &r;
    }
    return nullptr;
  }
  // `level`: a peer that closed between messages (it finished, or died) is told at INFO; the
  // caller that needed the comm makes the error of it.
  void fail(const std::string& why, chorusNetLogLevel_t level = chorusNetLogWarn) {
    if (!failed) NET_LOG(ctx, level, "Socket network: %s", why.c_str());
    failed = true;
  }
};

struct ListenComm {
  Context* ctx = nullptr;
  UniqueFd fd;
  uint64_t nonce = 0;
  SockAddr addr;
  struct Pending {
    UniqueFd fd;
    Hello hello;
    size_t got = 0;
  };
  std::vector<Pending> pending;  // accepted, hello not yet complete
};

// The first request not yet done, or null.
Request* nextUndone(Comm& c) {
  for (Request* r : c.order) {
    if (!r->done) return r;
  }
  return nullptr;
}

// Sends what the undone requests have left, up to kSendBatch messages (each header and body) in
// one sendmsg(): a stream of small messages costs one call per batch, not two per message.
void progressSend(Comm& c) {
  while (!c.failed) {
    iovec iov[2 * kSendBatch];
    Request* batch[kSendBatch];
    int niov = 0;
    int nb = 0;
    for (Request* r : c.order) {
      if (r->done) continue;
      if (nb == kSendBatch) break;
      batch[nb++] = r;
      size_t skip = r->moved;
      if (skip < sizeof(MsgHeader)) {
        iov[niov++] = {reinterpret_cast<char*>(&r->wire) + skip, sizeof(MsgHeader) - skip};
        skip = 0;
      } else {
        skip -= sizeof(MsgHeader);
      }
      if (r->cap[0] > skip) iov[niov++] = {r->data[0] + skip, r->cap[0] - skip};
    }
    if (nb == 0) return;
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<size_t>(niov);
    ssize_t k;
    do {
      k = ::sendmsg(c.fd.get(), &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (k < 0 && errno == EINTR);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (k < 0) return c.fail(std::string("sending a message: ") + std::strerror(errno));
    size_t left = static_cast<size_t>(k);
    for (int i = 0; i < nb; ++i) {
      Request& r = *batch[i];
      const size_t total = sizeof(MsgHeader) + r.cap[0];
      const size_t take = std::min(left, total - r.moved);
      r.moved += take;
      left -= take;
      if (r.moved < total) return;  // the socket took no more: try again when it has room
      r.got[0] = r.cap[0];
      r.done = true;
    }
  }
}

// Reads what the socket has into the empty stage: true when bytes came; false when none did (the
// socket is empty, or the comm failed).
bool fillStage(Comm& c) {
  for (;;) {
    const ssize_t k = ::recv(c.fd.get(), c.stage.data(), c.stage.size(), MSG_DONTWAIT);
    if (k > 0) {
      c.stageBegin = 0;
      c.stageEnd = size_t(k);
      return true;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    if (k == 0) {
      // Between messages (no byte of the next one yet) an end is a peer that closed, not a broken
      // stream.
      const bool between = !c.inBody && c.hdrMoved == 0;
      c.fail(std::string("the peer closed the connection while this side was ") +
                 (c.inBody ? "receiving a message" : "receiving a message header"),
             between ? chorusNetLogInfo : chorusNetLogWarn);
      return false;
    }
    c.fail(std::string("receiving: ") + std::strerror(errno));
    return false;
  }
}

// Fills the undone receives in order: from the stage, which one recv() refills with as much as the
// socket has, or, for the rest of a large body, straight from the socket (what follows the body
// lands in the stage in the same call).
void progressRecv(Comm& c) {
  while (!c.failed) {
    const size_t staged = c.stageEnd - c.stageBegin;
    if (!c.inBody) {
      Request* r = nextUndone(c);
      if (!r) return;  // nothing posted: the bytes wait
      if (c.hdrMoved < sizeof(MsgHeader)) {
        if (staged == 0) {
          if (!fillStage(c)) return;
          continue;
        }
        const size_t take = std::min(staged, sizeof(MsgHeader) - c.hdrMoved);
        std::memcpy(reinterpret_cast<char*>(&c.hdr) + c.hdrMoved, c.stage.data() + c.stageBegin, take);
        c.stageBegin += take;
        c.hdrMoved += take;
        continue;
      }
      // Which receive of the group takes it: the first unfilled one with its tag.
      int part = -1;
      for (int i = 0; i < r->n && part < 0; ++i) {
        if (!r->filled[i] && r->tag[i] == c.hdr.tag) part = i;
      }
      if (part < 0) {
        return c.fail("a message tagged " + std::to_string(c.hdr.tag) + " arrived where none of the " +
                      std::to_string(r->n - r->filledCount) +
                      " receives left in the group has that tag: sends and receives must be issued in the same order");
      }
      if (c.hdr.size > r->cap[part]) {
        return c.fail("a message of " + std::to_string(c.hdr.size) + " bytes arrived for a receive of " +
                      std::to_string(r->cap[part]) + " bytes (tag " + std::to_string(c.hdr.tag) + ")");
      }
      c.active = r;
      c.part = part;
      c.bodySize = c.hdr.size;
      c.bodyMoved = 0;
      c.hdrMoved = 0;
      c.inBody = true;
      continue;
    }
    Request& r = *c.active;
    const size_t rest = c.bodySize - c.bodyMoved;
    if (rest > 0) {
      if (staged > 0) {
        const size_t take = std::min(staged, rest);
        std::memcpy(r.data[c.part] + c.bodyMoved, c.stage.data() + c.stageBegin, take);
        c.stageBegin += take;
        c.bodyMoved += take;
        continue;
      }
      if (rest < kDirectBytes) {
        if (!fillStage(c)) return;
        continue;
      }
      iovec iov[2] = {{r.data[c.part] + c.bodyMoved, rest}, {c.stage.data(), c.stage.size()}};
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = 2;
      ssize_t k;
      do {
        k = ::recvmsg(c.fd.get(), &m, MSG_DONTWAIT);
      } while (k < 0 && errno == EINTR);
      if (k == 0) return c.fail("the peer closed the connection while this side was receiving a message");
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (k < 0) return c.fail(std::string("receiving a message: ") + std::strerror(errno));
      const size_t take = std::min(size_t(k), rest);
      c.bodyMoved += take;
      c.stageBegin = 0;
      c.stageEnd = size_t(k) - take;
      continue;
    }
    r.got[c.part] = c.bodySize;
    r.filled[c.part] = true;
    ++r.filledCount;
    c.inBody = false;
    c.active = nullptr;
    c.part = -1;
    if (r.filledCount == r.n) r.done = true;
  }
}

void progress(Comm& c) {
  if (c.send) {
    progressSend(c);
  } else {
    progressRecv(c);
  }
}

// ---- the ABI ----

chorusResult_t netInit(void** ctx, uint64_t commId, const chorusNetCommConfig_v1_t*, chorusNetLogger_t logger) {
  if (!ctx) return chorusInvalidArgument;
  auto* c = new Context();
  c->commId = commId;
  c->logger = logger;
  const Device& d = device();
  if (d.ok) {
    NET_LOG(c, chorusNetLogInfo, "Socket network: device 0 is %s (%s), %d Mbps", d.ifname.c_str(),
            d.addr.toString().c_str(), d.speedMbps);
  } else {
    NET_LOG(c, chorusNetLogWarn, "Socket network: no interface to use: %s", d.why.c_str());
  }
  *ctx = c;
  return chorusSuccess;
}

chorusResult_t netFinalize(void* ctx) {
  auto* c = static_cast<Context*>(ctx);
  if (!c) return chorusInvalidArgument;
  if (c->comms.load() != 0) {
    NET_LOG(c, chorusNetLogWarn, "Socket network: finalize with %d comms still open; close them first",
            c->comms.load());
    return chorusInvalidUsage;
  }
  delete c;
  return chorusSuccess;
}

chorusResult_t netDevices(int* ndev) {
  if (!ndev) return chorusInvalidArgument;
  *ndev = device().ok ? 1 : 0;
  return chorusSuccess;
}

chorusResult_t netGetProperties(int dev, chorusNetProperties_v1_t* props) {
  const Device& d = device();
  if (!props || dev != 0 || !d.ok) return chorusInvalidArgument;
  *props = chorusNetProperties_v1_t{};
  props->name = const_cast<char*>(d.ifname.c_str());
  props->pciPath = nullptr;
  props->guid = fnv1a(d.ifname.data(), d.ifname.size());
  props->ptrSupport = CHORUS_NET_PTR_HOST;
  props->regIsGlobal = 1;
  props->forceFlush = 0;
  props->speed = d.speedMbps;
  props->port = 0;
  props->latency = 0;
  props->maxComms = 65536;
  props->maxRecvs = kMaxRecvs;
  props->maxP2pBytes = size_t(1) << 40;
  props->maxCollBytes = size_t(1) << 40;
  return chorusSuccess;
}

chorusResult_t netListen(void* ctx, int dev, void* handle, void** listenComm) {
  auto* c = static_cast<Context*>(ctx);
  const Device& d = device();
  if (!c || !handle || !listenComm || dev != 0) return chorusInvalidArgument;
  *listenComm = nullptr;
  if (!d.ok) {
    NET_LOG(c, chorusNetLogWarn, "Socket network: cannot listen: %s", d.why.c_str());
    return chorusSystemError;
  }
  auto l = std::make_unique<ListenComm>();
  l->ctx = c;
  Result<UniqueFd> fd = listenOn(d.addr, &l->addr);
  if (!fd.isOk()) {
    NET_LOG(c, chorusNetLogWarn, "Socket network: %s", fd.status().message().c_str());
    return chorusSystemError;
  }
  l->fd = std::move(fd.value());
  setNonBlocking(l->fd.get(), true);
  l->nonce = randomU64();
  Handle h;
  h.magic = kHandleMagic;
  h.nonce = l->nonce;
  h.addr = l->addr;
  std::memset(handle, 0, CHORUS_NET_HANDLE_MAXSIZE);
  std::memcpy(handle, &h, sizeof(h));
  ++c->comms;
  *listenComm = l.release();
  return chorusSuccess;
}

Comm* makeComm(Context* ctx, UniqueFd fd, bool send) {
  setNonBlocking(fd.get(), true);
  setNoDelay(fd.get());
  auto* c = new Comm();
  c->ctx = ctx;
  c->fd = std::move(fd);
  c->send = send;
  if (!send) c->stage.resize(kStageBytes);
  for (Request& r : c->slots) r.comm = c;
  ++ctx->comms;
  return c;
}

chorusResult_t netConnect(void* ctx, int dev, void* handle, void** sendComm) {
  auto* c = static_cast<Context*>(ctx);
  if (!c || !handle || !sendComm || dev != 0) return chorusInvalidArgument;
  *sendComm = nullptr;
  Handle h;
  std::memcpy(&h, handle, sizeof(h));
  if (h.magic != kHandleMagic || !h.addr.valid()) {
    NET_LOG(c, chorusNetLogWarn, "Socket network: connect: the handle is not one of this network's listen calls");
    return chorusInvalidArgument;
  }
  auto refused = [](int err) {
    return std::string(std::strerror(err)) +
           (err == ECONNREFUSED ? " (the listener is gone: its comm was closed, or its process ended)" : "");
  };
  auto failWith = [&](const std::string& why) {
    if (h.fd >= 0) ::close(h.fd);
    h.fd = -1;
    h.stage = 0;
    std::memcpy(handle, &h, sizeof(h));
    NET_LOG(c, chorusNetLogWarn, "Socket network: connecting to %s: %s", h.addr.toString().c_str(), why.c_str());
    return chorusRemoteError;
  };
  if (h.stage == 0) {
    const int fd = ::socket(h.addr.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return failWith(std::string("socket: ") + std::strerror(errno));
    h.fd = fd;
    h.helloSent = 0;
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&h.addr.storage), h.addr.len) == 0) {
      h.stage = 2;
    } else if (errno == EINPROGRESS || errno == EINTR) {
      h.stage = 1;
    } else {
      return failWith(refused(errno));
    }
  }
  if (h.stage == 1) {
    pollfd p{h.fd, POLLOUT, 0};
    if (::poll(&p, 1, 0) == 0) {
      std::memcpy(handle, &h, sizeof(h));
      return chorusSuccess;  // not yet
    }
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(h.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return failWith(refused(err));
    h.stage = 2;
  }
  // Stage 2: the hello, as far as it goes.
  Hello hello;
  hello.nonce = h.nonce;
  while (h.helloSent < sizeof(hello)) {
    const ssize_t k = ::send(h.fd, reinterpret_cast<const char*>(&hello) + h.helloSent, sizeof(hello) - h.helloSent,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      h.helloSent += uint32_t(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      std::memcpy(handle, &h, sizeof(h));
      return chorusSuccess;
    }
    return failWith(std::string("sending the hello: ") + std::strerror(errno));
  }
  *sendComm = makeComm(c, UniqueFd(h.fd), true);
  h.fd = -1;
  h.stage = 0;
  std::memcpy(handle, &h, sizeof(h));
  return chorusSuccess;
}

chorusResult_t netAccept(void* listenComm, void** recvComm) {
  auto* l = static_cast<ListenComm*>(listenComm);
  if (!l || !recvComm) return chorusInvalidArgument;
  *recvComm = nullptr;
  for (;;) {
    const int fd = ::accept4(l->fd.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      l->pending.push_back({UniqueFd(fd), Hello{}, 0});
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    NET_LOG(l->ctx, chorusNetLogWarn, "Socket network: accept on %s: %s", l->addr.toString().c_str(),
            std::strerror(errno));
    return chorusSystemError;
  }
  for (size_t i = 0; i < l->pending.size(); ++i) {
    ListenComm::Pending& p = l->pending[i];
    bool drop = false;
    while (p.got < sizeof(Hello)) {
      const ssize_t k =
          ::recv(p.fd.get(), reinterpret_cast<char*>(&p.hello) + p.got, sizeof(Hello) - p.got, MSG_DONTWAIT);
      if (k > 0) {
        p.got += size_t(k);
        continue;
      }
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      drop = true;  // closed or failed before its hello: not a peer of ours
      break;
    }
    if (!drop && p.got == sizeof(Hello)) {
      if (p.hello.magic != kHelloMagic || p.hello.nonce != l->nonce) {
        NET_LOG(l->ctx, chorusNetLogWarn,
                "Socket network: a connection to %s did not come from this listener's handle; closed",
                l->addr.toString().c_str());
        drop = true;
      } else {
        *recvComm = makeComm(l->ctx, std::move(p.fd), false);
        l->pending.erase(l->pending.begin() + long(i));
        return chorusSuccess;
      }
    }
    if (drop) {
      l->pending.erase(l->pending.begin() + long(i));
      --i;
    }
  }
  return chorusSuccess;
}

chorusResult_t netRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  auto* c = static_cast<Comm*>(comm);
  if (!c || !mhandle || (!data && size)) return chorusInvalidArgument;
  if (type != CHORUS_NET_PTR_HOST) {
    NET_LOG(c->ctx, chorusNetLogWarn,
            "Socket network: memory of type %d cannot be registered; it moves host memory only", type);
    return chorusInvalidArgument;
  }
  *mhandle = new Memory{static_cast<char*>(data), size};
  return chorusSuccess;
}

chorusResult_t netDeregMr(void* comm, void* mhandle) {
  if (!comm || !mhandle) return chorusInvalidArgument;
  delete static_cast<Memory*>(mhandle);
  return chorusSuccess;
}

// Whether [p, p + n) lies in the registered range.
bool inside(const void* mhandle, const void* p, size_t n) {
  const auto* m = static_cast<const Memory*>(mhandle);
  if (!m) return false;
  const char* c = static_cast<const char*>(p);
  return n == 0 || (c >= m->data && n <= m->size && c - m->data <= ptrdiff_t(m->size - n));
}

chorusResult_t netIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
  auto* c = static_cast<Comm*>(sendComm);
  if (!c || !request || !c->send) return chorusInvalidArgument;
  *request = nullptr;
  if (c->failed) return chorusRemoteError;
  if (!inside(mhandle, data, size)) {
    NET_LOG(c->ctx, chorusNetLogWarn, "Socket network: isend of %zu bytes outside its registered memory", size);
    return chorusInvalidArgument;
  }
  Request* r = c->freeSlot();
  if (!r) return chorusSuccess;  // too many in flight: again later
  *r = Request{};
  r->comm = c;
  r->inUse = true;
  r->n = 1;
  r->data[0] = static_cast<char*>(data);
  r->cap[0] = size;
  r->tag[0] = tag;
  r->wire = MsgHeader{tag, 0, size};
  c->order.push_back(r);
  *request = r;
  return chorusSuccess;
}

chorusResult_t netIrecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** request) {
  auto* c = static_cast<Comm*>(recvComm);
  if (!c || !request || c->send || n < 1 || n > kMaxRecvs || !data || !sizes || !tags || !mhandles) {
    return chorusInvalidArgument;
  }
  *request = nullptr;
  if (c->failed) return chorusRemoteError;
  for (int i = 0; i < n; ++i) {
    if (!inside(mhandles[i], data[i], sizes[i])) {
      NET_LOG(c->ctx, chorusNetLogWarn, "Socket network: irecv %d of %zu bytes outside its registered memory", i,
              sizes[i]);
      return chorusInvalidArgument;
    }
  }
  Request* r = c->freeSlot();
  if (!r) return chorusSuccess;
  *r = Request{};
  r->comm = c;
  r->inUse = true;
  r->n = n;
  for (int i = 0; i < n; ++i) {
    r->data[i] = static_cast<char*>(data[i]);
    r->cap[i] = sizes[i];
    r->tag[i] = tags[i];
  }
  c->order.push_back(r);
  *request = r;
  return chorusSuccess;
}

chorusResult_t netIflush(void* recvComm, int, void**, size_t*, void**, void** request) {
  if (!recvComm || !request) return chorusInvalidArgument;
  *request = nullptr;  // host memory: nothing to flush
  return chorusSuccess;
}

chorusResult_t netTest(void* request, int* done, size_t* sizes) {
  auto* r = static_cast<Request*>(request);
  if (!r || !done || !r->inUse) return chorusInvalidArgument;
  Comm& c = *r->comm;
  *done = 0;
  progress(c);
  // A request that completed before the comm failed (the peer sent its last message and closed)
  // is reported done: only the requests the failure cut short fail.
  if (!r->done) return c.failed ? chorusRemoteError : chorusSuccess;
  *done = 1;
  if (sizes) {
    for (int i = 0; i < r->n; ++i) sizes[i] = r->got[i];
  }
  for (auto it = c.order.begin(); it != c.order.end(); ++it) {
    if (*it == r) {
      c.order.erase(it);
      break;
    }
  }
  r->inUse = false;
  return chorusSuccess;
}

chorusResult_t netWaitFd(void* comm, int* fd, short* events) {
  auto* c = static_cast<Comm*>(comm);
  if (!c || !fd || !events) return chorusInvalidArgument;
  *fd = c->fd.get();
  *events = 0;
  // Something to move when the socket has room (sends) or bytes (receives posted).
  if (nextUndone(*c)) *events = c->send ? POLLOUT : POLLIN;
  return chorusSuccess;
}

chorusResult_t closeComm(void* comm) {
  auto* c = static_cast<Comm*>(comm);
  if (!c) return chorusInvalidArgument;
  --c->ctx->comms;
  delete c;
  return chorusSuccess;
}

chorusResult_t netCloseListen(void* listenComm) {
  auto* l = static_cast<ListenComm*>(listenComm);
  if (!l) return chorusInvalidArgument;
  --l->ctx->comms;
  delete l;
  return chorusSuccess;
}

const chorusNet_v1_t kSocketNet = {
    "Socket",  netInit,   netFinalize, netDevices,     netGetProperties, netListen, netConnect,
    netAccept, netRegMr,  nullptr,     netDeregMr,     netIsend,         netIrecv,  netIflush,
    netTest,   closeComm, closeComm,   netCloseListen, netWaitFd,
};

}  // namespace

const chorusNet_v1_t& socketNetwork() { return kSocketNet; }

int socketRequestParts(const void* request) { return request ? static_cast<const Request*>(request)->n : 0; }

}  // namespace chorus
