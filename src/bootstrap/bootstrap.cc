#include "src/bootstrap/bootstrap.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "src/bootstrap/root.h"

namespace chorus {
namespace {

// A connection to a rank's listener that brings no byte for this long is dropped: every real
// sender writes its whole message right after connecting.
constexpr int64_t kStrangerNs = 2ll * 1000000000;
// At most this many connections are read at once; a new one past the cap pushes out the one that
// has been silent longest, so strangers cannot hold the listener's descriptors.
constexpr size_t kMaxPending = 128;
constexpr uint64_t kDefaultSecret[2] = {0x63686f7275732d31ull, 0x64656661756c7421ull};

}  // namespace

struct Bootstrap::Pending {
  UniqueFd fd;
  BootstrapReader reader;
  int64_t since = 0;  // the last byte (or the accept)
};

namespace {

// Index of the pending connection silent longest.
template <typename T, typename F>
size_t stalest(const std::vector<T>& v, F since) {
  size_t k = 0;
  for (size_t i = 1; i < v.size(); ++i) {
    if (since(v[i]) < since(v[k])) k = i;
  }
  return k;
}

}  // namespace

std::pair<char*, size_t> BootstrapReader::next() {
  if (got_ < sizeof(header_)) return {reinterpret_cast<char*>(&header_) + got_, sizeof(header_) - got_};
  const size_t off = got_ - sizeof(header_);
  return {payload_.data() + off, payload_.size() - off};
}

BootstrapReader::State BootstrapReader::advance(size_t n) {
  const size_t before = got_;
  got_ += n;
  if (got_ < sizeof(header_)) return State::kMore;
  if (before < sizeof(header_)) {
    const BootstrapHeader& h = header_;
    if (h.magic != BootstrapHeader::kMagic || !constantTimeEqual(h.secret, secret_) ||
        (h.kind != BootstrapHeader::kMessage && h.kind != BootstrapHeader::kNotice)) {
      why_ = "a connection without the clique's secret or with garbage";
      return State::kDrop;
    }
    if (h.cliqueId != cliqueId_ || h.src < 0 || h.src >= nranks_) {
      why_ = "a message for another clique or from an unknown rank " + std::to_string(h.src);
      return State::kDrop;
    }
    if (h.len > BootstrapHeader::kMaxMessageBytes ||
        (h.kind == BootstrapHeader::kNotice && h.len > BootstrapHeader::kMaxNoticeBytes)) {
      why_ = "a message claiming " + std::to_string(h.len) + " bytes";
      return State::kDrop;
    }
    payload_.resize(h.len);
  }
  return got_ == sizeof(header_) + payload_.size() ? State::kDone : State::kMore;
}

chorusUniqueId BootstrapId::toUniqueId() const {
  chorusUniqueId u;
  std::memset(&u, 0, sizeof(u));
  std::memcpy(u.internal, this, sizeof(*this));
  return u;
}

Result<BootstrapId> BootstrapId::fromUniqueId(const chorusUniqueId& u) {
  BootstrapId id;
  std::memcpy(&id, u.internal, sizeof(id));
  if (id.magic != kMagic) {
    return invalidArgument(
        "the chorusUniqueId is not one made by chorusGetUniqueId (bad magic); pass every rank "
        "the same id, copied byte for byte from the rank that created it");
  }
  if (id.version != CHORUS_VERSION_CODE) {
    return invalidUsage("the chorusUniqueId was made by Chorus version " + std::to_string(id.version) +
                        " but this library is " + std::to_string(CHORUS_VERSION_CODE) +
                        "; run the same Chorus build on every rank");
  }
  if (!id.root.valid()) {
    return invalidArgument("the chorusUniqueId holds no valid root address (family " +
                           std::to_string(id.root.storage.ss_family) + ", length " + std::to_string(id.root.len) +
                           "); pass every rank the same id, copied byte for byte from the rank that created it");
  }
  return id;
}

const TextSetting kCommIdSetting{"CHORUS_COMM_ID", SettingScope::kLaunch,
                                 "host:port: every rank's unique id names this root, which rank 0 hosts"};
static const TextSetting kCommSecret{"CHORUS_COMM_SECRET", SettingScope::kLaunch,
                                     "the secret that goes with CHORUS_COMM_ID"};

std::string launcherJobId() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v && *v ? v : "";
  };
  if (std::string j = env("OMPI_MCA_ess_base_jobid"); !j.empty()) return "ompi:" + j;
  if (std::string j = env("PMIX_NAMESPACE"); !j.empty()) return "pmix:" + j;
  if (std::string j = env("SLURM_JOB_ID"); !j.empty()) return "slurm:" + j + "." + env("SLURM_STEP_ID");
  // torchrun's default run id is "none" for every job: no identity at all.
  if (std::string j = env("TORCHELASTIC_RUN_ID"); !j.empty() && j != "none") return "torchelastic:" + j;
  return "";
}

Result<BootstrapId> fixedBootstrapId(const std::string& hostPort) {
  BootstrapId id;
  auto root = SockAddr::parse(hostPort);
  if (!root.isOk()) return invalidArgument("bootstrap address: " + root.status().message());
  id.root = root.value();
  // The secret: CHORUS_COMM_SECRET (chorusrun sets a random one); else the launcher's job, so two
  // jobs started on one CHORUS_COMM_ID cannot merge; else a fixed value.
  std::string secret = kCommSecret.raw();
  if (secret.empty()) secret = launcherJobId();
  if (!secret.empty()) {
    id.secret[0] = fnv1a(secret.data(), secret.size());
    id.secret[1] = fnv1a(secret.data(), secret.size(), 0x9e3779b97f4a7c15ull);
  } else {
    id.secret[0] = kDefaultSecret[0];
    id.secret[1] = kDefaultSecret[1];
  }
  id.cliqueId = fnv1a(hostPort.data(), hostPort.size(), id.secret[0]);
  id.rootByRank0 = 1;
  return id;
}

Result<BootstrapId> makeBootstrapId(const std::string& ifnameSpec, int64_t timeoutNs, int64_t warnNs,
                                    const Logger& log) {
  if (const std::string fixed = kCommIdSetting.raw(); !fixed.empty()) return fixedBootstrapId(fixed);
  return makeRandomBootstrapId(ifnameSpec, timeoutNs, warnNs, log);
}

Result<BootstrapId> makeRandomBootstrapId(const std::string& ifnameSpec, int64_t timeoutNs, int64_t warnNs,
                                          const Logger& log, std::shared_ptr<const std::atomic<bool>> stop) {
  BootstrapId id;
  id.secret[0] = randomU64();
  id.secret[1] = randomU64();
  id.cliqueId = randomU64();
  CHORUS_ASSIGN_OR_RETURN(SockAddr local, localInterfaceAddr(ifnameSpec, nullptr));
  CHORUS_ASSIGN_OR_RETURN(UniqueFd fd, listenOn(local, &id.root));
  startBootstrapRoot(std::move(fd), id, timeoutNs, warnNs, log, std::move(stop));
  return id;
}

Result<std::unique_ptr<Bootstrap>> Bootstrap::join(const BootstrapId& id, int rank, int nranks,
                                                   const std::string& ifnameSpec, int64_t timeoutNs,
                                                   const JoinTiming& timing, const Logger& log,
                                                   const std::atomic<bool>* abortFlag) {
  const int64_t start = nowNs();
  const int64_t deadline = start + timing.timeoutNs;
  const int64_t warnNs = std::max<int64_t>(timing.warnNs, 100000000);
  if (id.rootByRank0 && rank == 0) {
    // CHORUS_COMM_ID: rank 0 hosts the root at the fixed port, on every local address (the name
    // others use for this host may resolve differently here, e.g. to 127.0.1.1).
    SockAddr bindAddr = id.root;
    if (bindAddr.storage.ss_family == AF_INET) {
      reinterpret_cast<sockaddr_in*>(&bindAddr.storage)->sin_addr.s_addr = htonl(INADDR_ANY);
    } else {
      reinterpret_cast<sockaddr_in6*>(&bindAddr.storage)->sin6_addr = in6addr_any;
    }
    SockAddr bound;
    auto fd = listenOn(bindAddr, &bound);
    if (!fd.isOk()) {
      const bool inUse = fd.status().message().find("in use") != std::string::npos;
      return Status(chorusSystemError,
                    "rank 0 cannot host the bootstrap root at CHORUS_COMM_ID=" + id.root.toString() + ": " +
                        fd.status().message() +
                        (inUse ? " (another process listens there: a second rank 0, if two processes were given "
                                 "rank 0; another job on the same CHORUS_COMM_ID; or another program. Give each "
                                 "job its own port and each process its own rank)"
                               : ""));
    }
    startBootstrapRoot(fd.take(), id, timing.timeoutNs, timing.warnNs, log);
  }
  SockAddr myAddr;
  std::string ifname;
  CHORUS_ASSIGN_OR_RETURN(SockAddr local, interfaceToward(id.root, ifnameSpec, &ifname));
  CHORUS_ASSIGN_OR_RETURN(UniqueFd listener, listenOn(local, &myAddr));
  log.info(kSubsysBoot, "rank {} listens on {} ({}{})", rank, myAddr.toString(), ifname.empty() ? "?" : ifname,
           ifnameSpec.empty() ? ", the interface toward the root" : ", CHORUS_SOCKET_IFNAME");

  const std::string rootName = "the bootstrap root at " + id.root.toString();
  // Connecting retries while nothing listens yet (rank 0 may start later); past `warnNs` this
  // rank says so, doubling, until the init timeout. connectTo retries such failures itself until
  // the time it is given: one it returns sooner will not mend by trying again (no descriptor for a
  // socket, an address that cannot be used) and ends the join at once.
  UniqueFd c;
  for (int64_t nextWarn = start + warnNs, every = warnNs;;) {
    const int64_t until = std::min(deadline, nextWarn);
    Result<UniqueFd> conn = connectTo(id.root, until, rootName, abortFlag);
    if (conn.isOk()) {
      c = conn.take();
      break;
    }
    const bool stopped = abortFlag && abortFlag->load(std::memory_order_acquire);
    if (!stopped && nowNs() < until) {
      return Status(conn.status().code(),
                    "rank " + std::to_string(rank) + " cannot connect to " + rootName + ": " + conn.status().message());
    }
    if (nowNs() >= deadline || stopped) {
      return Status(conn.status().code(), conn.status().message() + " (init timeout " +
                                              std::to_string(timing.timeoutNs / 1000000000) +
                                              " s, CHORUS_INIT_TIMEOUT): is rank 0 running, and is CHORUS_COMM_ID "
                                              "(or the unique id) the same on every rank?");
    }
    log.warn(kSubsysBoot,
             "rank {} cannot reach {} after {} s ({}): is rank 0 running, and is CHORUS_COMM_ID (or the unique id) "
             "the same on every rank? Retrying until the init timeout ({} s)",
             rank, rootName, (nowNs() - start) / 1000000000, conn.status().message(), timing.timeoutNs / 1000000000);
    every *= 2;
    nextWarn = nowNs() + every;
  }
  RootHello h{};
  h.magic = kHelloMagic;
  h.rank = rank;
  h.nranks = nranks;
  h.version = CHORUS_VERSION_CODE;
  h.secret[0] = id.secret[0];
  h.secret[1] = id.secret[1];
  h.cliqueId = id.cliqueId;
  h.listen = myAddr;
  CHORUS_TRY(sendAll(c.get(), &h, sizeof(h), deadline, rootName, abortFlag));
  // The root answers a hello at once (in progress), says which ranks are missing while it waits,
  // and ends with the table or the reason it cannot give one.
  constexpr int64_t kAnswerNs = 5ll * 1000000000;
  // The root's own deadline may come a little after this rank's (it may have started later):
  // its verdict names the missing ranks, so it is worth a short wait past this rank's.
  const int64_t verdictDeadline = deadline + 2ll * 1000000000;
  bool answered = false;
  RootReply r{};
  while (true) {
    const int64_t until = answered ? verdictDeadline : std::min(deadline, nowNs() + kAnswerNs);
    Status st = recvAll(c.get(), &r, sizeof(r), until, rootName + " (waiting for all ranks to join)", abortFlag);
    if (!st.isOk()) {
      if (!answered && nowNs() >= until && until < deadline && nowNs() < deadline) {
        return systemError("connected to " + id.root.toString() +
                           " but it did not answer as a Chorus bootstrap root "
                           "within 5 s: another program listens on that port (check CHORUS_COMM_ID)");
      }
      if (st.message().find("reset by peer") == std::string::npos) return st;
      return Status(st.code(), st.message() +
                                   ": the root closed the connection without an answer (it gave up; its warning says "
                                   "why, e.g. too many open files in its process)");
    }
    r.message[sizeof(r.message) - 1] = 0;
    if (r.status != chorusInProgress) break;
    if (answered) log.warn(kSubsysBoot, "rank {}: {}", rank, r.message);
    answered = true;
  }
  if (r.status != chorusSuccess) {
    return Status(static_cast<chorusResult_t>(r.status),
                  std::string("bootstrap root refused rank ") + std::to_string(rank) + ": " + r.message);
  }
  std::vector<SockAddr> peers(nranks);
  CHORUS_TRY(recvAll(c.get(), peers.data(), sizeof(SockAddr) * nranks, deadline, rootName, abortFlag));
  for (int r = 0; r < nranks; ++r) {
    if (!peers[r].valid())
      return systemError(rootName + " sent an address table with no valid address for rank " + std::to_string(r));
  }
  return fromTable(id.cliqueId, id.secret, rank, std::move(peers), std::move(listener), timeoutNs, log, abortFlag);
}

Result<std::unique_ptr<Bootstrap>> Bootstrap::fromTable(uint64_t cliqueId, const uint64_t secret[2], int rank,
                                                        std::vector<SockAddr> peers, UniqueFd listener,
                                                        int64_t timeoutNs, const Logger& log,
                                                        const std::atomic<bool>* abortFlag) {
  std::unique_ptr<Bootstrap> b(new Bootstrap());
  b->rank_ = rank;
  b->cliqueId_ = cliqueId;
  b->secret_[0] = secret[0];
  b->secret_[1] = secret[1];
  b->peers_ = std::move(peers);
  b->timeoutNs_ = timeoutNs;
  b->log_ = log;
  b->abort_ = abortFlag;
  b->probes_.resize(b->peers_.size());
  CHORUS_TRY(b->start(std::move(listener)));
  return b;
}

Status Bootstrap::start(UniqueFd listener) {
  listener_ = std::move(listener);
  wakeFd_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wakeFd_.valid()) return errnoStatus("eventfd", errno);
  setNonBlocking(listener_.get(), true);

  char name[64];
  std::snprintf(name, sizeof(name), "chorus-fd-%d-%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(randomU64()));
  fdServerName_ = name;
  fdServer_ = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fdServer_.valid()) return errnoStatus("socket(AF_UNIX)", errno);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, fdServerName_.data(), fdServerName_.size());  // abstract: leading NUL
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + fdServerName_.size());
  if (::bind(fdServer_.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fdServer_.get(), 64) != 0) {
    return errnoStatus("listening on the shared-memory descriptor socket", errno);
  }
  acceptThread_ = std::thread([this] {
    setThreadName("chorus-boot");
    acceptLoop();
  });
  return Status::ok();
}

Bootstrap::~Bootstrap() {
  if (acceptThread_.joinable()) {
    uint64_t one = 1;
    (void)!::write(wakeFd_.get(), &one, sizeof(one));
    acceptThread_.join();
  }
}

void Bootstrap::acceptLoop() {
  std::vector<Pending> pending;
  int64_t pausedUntil = 0;  // accepts paused after running out of descriptors
  WarnLimiter dropWarn(log_, kSubsysBoot);
  auto since = [](const Pending& p) { return p.since; };
  while (true) {
    const bool paused = nowNs() < pausedUntil;
    std::vector<pollfd> fds;
    fds.push_back({wakeFd_.get(), POLLIN, 0});
    fds.push_back({listener_.get(), static_cast<short>(paused ? 0 : POLLIN), 0});
    fds.push_back({fdServer_.get(), static_cast<short>(paused ? 0 : POLLIN), 0});
    for (auto& p : pending) fds.push_back({p.fd.get(), POLLIN, 0});
    ::poll(fds.data(), fds.size(), paused ? 20 : 500);
    if (fds[0].revents) return;
    if (fds[2].revents & POLLIN) {
      while (true) {
        UniqueFd c(::accept4(fdServer_.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (!c.valid()) {
          if (outOfDescriptors(errno)) pausedUntil = nowNs() + kAcceptBackoffNs;
          break;
        }
        serveFd(c.get());
      }
    }
    if (fds[1].revents & POLLIN) {
      while (true) {
        if (pending.size() >= kMaxPending) {
          pending.erase(pending.begin() + static_cast<long>(stalest(pending, since)));
          dropWarn.warn("bootstrap dropped a connection to make room: {} connections were being read at once",
                        kMaxPending);
        }
        int c = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) {
          if (outOfDescriptors(errno)) {
            // Give a descriptor back (the stalest connection, most likely a stranger's) and leave
            // the listener alone for a while instead of spinning on it.
            const int err = errno;
            if (!pending.empty()) pending.erase(pending.begin() + static_cast<long>(stalest(pending, since)));
            pausedUntil = nowNs() + kAcceptBackoffNs;
            dropWarn.warn("bootstrap cannot accept connections: {} ({} connections open to this listener; {})",
                          std::strerror(err), pending.size(), describeFdLimit());
          }
          break;
        }
        pending.push_back(Pending{UniqueFd(c), BootstrapReader(secret_, cliqueId_, nranks()), nowNs()});
      }
    }
    const int64_t now = nowNs();
    for (size_t i = 0; i < pending.size();) {
      Pending& p = pending[i];
      bool drop = false;
      bool done = false;
      while (!drop && !done) {
        auto [dst, want] = p.reader.next();
        ssize_t r = ::recv(p.fd.get(), dst, want, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          if (p.reader.got() > 0) dropWarn.warn("bootstrap dropped a connection that closed mid-message");
          drop = true;
          break;
        }
        if (r < 0) break;
        p.since = now;
        switch (p.reader.advance(static_cast<size_t>(r))) {
          case BootstrapReader::State::kMore:
            break;
          case BootstrapReader::State::kDone:
            done = true;
            break;
          case BootstrapReader::State::kDrop:
            dropWarn.warn("bootstrap dropped {}", p.reader.why());
            drop = true;
            break;
        }
      }
      if (!drop && !done && now - p.since > kStrangerNs) {
        dropWarn.warn("bootstrap dropped a connection silent for {} s", kStrangerNs / 1000000000);
        drop = true;
      }
      if (done) {
        const BootstrapHeader h = p.reader.header();
        deliver(h.cliqueId, h.src, h.tag, h.kind, std::move(p.reader.payload()));
      }
      if (drop || done) {
        pending.erase(pending.begin() + static_cast<long>(i));
      } else {
        ++i;
      }
    }
  }
}

namespace {
struct FdRequest {
  uint64_t secret[2];
  uint64_t token;
  int32_t rank;
  int32_t pad;
};
}  // namespace

void Bootstrap::serveFd(int client) {
  FdRequest req{};
  if (!recvAll(client, &req, sizeof(req), nowNs() + 1000000000ll, "a descriptor request").isOk() ||
      !constantTimeEqual(req.secret, secret_)) {
    log_.warn(kSubsysShm, "descriptor server dropped a request without the clique's secret");
    return;
  }
  UniqueFd fd;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = exported_.find(req.token);
    if (it != exported_.end() && it->second.first == req.rank) {
      fd = std::move(it->second.second);
      exported_.erase(it);
    }
  }
  cv_.notify_all();  // awaitClaim
  char status = fd.valid() ? 1 : 0;
  iovec iov{&status, 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {0};
  if (fd.valid()) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    int raw = fd.get();
    std::memcpy(CMSG_DATA(c), &raw, sizeof(int));
  }
  if (::sendmsg(client, &msg, MSG_NOSIGNAL) < 0) {
    log_.warn(kSubsysShm, "descriptor server could not answer rank {}: {}", req.rank, std::strerror(errno));
  }
}

void Bootstrap::exportFd(int peer, uint64_t token, UniqueFd fd) {
  std::lock_guard<std::mutex> g(mu_);
  exported_[token] = {peer, std::move(fd)};
}

Status Bootstrap::awaitClaim(int peer, uint64_t token) {
  const int64_t start = nowNs();
  const int64_t deadline = start + timeoutNs_;
  int64_t nextWarn = start + warnNs_;
  int64_t nextProbe = start + kProbeEveryNs;
  std::unique_lock<std::mutex> lk(mu_);
  const auto claimed = [&] { return exported_.count(token) == 0; };
  while (!claimed()) {
    if (abort_ && abort_->load(std::memory_order_acquire)) {
      return Status(chorusRemoteError, "waiting for rank " + std::to_string(peer) + " to map its FIFO was aborted");
    }
    if (!earlyNotice_.empty()) return remoteError(earlyNotice_);
    if (nowNs() >= deadline) {
      return Status(chorusSystemError, "rank " + std::to_string(peer) + " did not map the shared-memory FIFO offered " +
                                           "to it within the timeout (" + std::to_string(timeoutNs_ / 1000000000) +
                                           " s)");
    }
    noteSlowWait(start, &nextWarn, peer, "the mapping of a shared-memory FIFO");
    if (Status gone = probeWaitedPeer(lk, peer, "the mapping of a shared-memory FIFO", &nextProbe, claimed);
        !gone.isOk()) {
      return gone;
    }
    if (claimed()) break;
    cv_.wait_for(lk, std::chrono::milliseconds(10));
  }
  return Status::ok();
}

void Bootstrap::withdrawFd(uint64_t token) {
  std::lock_guard<std::mutex> g(mu_);
  exported_.erase(token);
}

Result<UniqueFd> Bootstrap::importFd(int peer, const std::string& serverName, uint64_t token) {
  const std::string what = "rank " + std::to_string(peer) + "'s shared-memory descriptor server";
  UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return errnoStatus("socket(AF_UNIX)", errno);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (serverName.size() + 2 > sizeof(addr.sun_path)) return internalError("descriptor server name too long");
  std::memcpy(addr.sun_path + 1, serverName.data(), serverName.size());
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + serverName.size());
  if (::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return errnoStatus("connecting to " + what + " (are both ranks in the same network namespace?)", errno);
  }
  FdRequest req{};
  req.secret[0] = secret_[0];
  req.secret[1] = secret_[1];
  req.token = token;
  req.rank = rank_;
  const int64_t deadline = nowNs() + timeoutNs_;
  CHORUS_TRY(sendAll(s.get(), &req, sizeof(req), deadline, what, abort_));
  char status = 0;
  iovec iov{&status, 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {0};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t r;
  do {
    r = ::recvmsg(s.get(), &msg, MSG_CMSG_CLOEXEC);
  } while (r < 0 && errno == EINTR);
  if (r <= 0 || status != 1) {
    return systemError(what + " did not hand over the shared-memory segment (token unknown or peer gone)");
  }
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (!c || c->cmsg_type != SCM_RIGHTS) return systemError(what + " answered without a descriptor");
  int raw;
  std::memcpy(&raw, CMSG_DATA(c), sizeof(int));
  return UniqueFd(raw);
}

void Bootstrap::deliver(uint64_t, int src, uint64_t tag, uint32_t kind, std::vector<char> payload) {
  if (kind == BootstrapHeader::kNotice) {
    std::string text(payload.begin(), payload.end());
    {
      std::lock_guard<std::mutex> g(mu_);
      if (firstNotice_.empty()) firstNotice_ = text + " (reported by rank " + std::to_string(src) + ")";
    }
    cv_.notify_all();
    {
      std::lock_guard<std::mutex> g(noticeMu_);
      if (onNotice_) {
        onNotice_(src, text);
        return;
      }
    }
    // No communicator listens yet (it is still being built): the first notice ends every
    // bootstrap wait of this rank, so init fails with the reason instead of at the timeout.
    {
      std::lock_guard<std::mutex> g(mu_);
      if (earlyNotice_.empty()) earlyNotice_ = text + " (reported by rank " + std::to_string(src) + ")";
    }
    cv_.notify_all();
    return;
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    messages_[{src, tag}].push_back(std::move(payload));
  }
  cv_.notify_all();
}

BootstrapHeader Bootstrap::header(uint32_t kind, uint64_t tag, uint64_t len) const {
  BootstrapHeader h{};
  h.magic = BootstrapHeader::kMagic;
  h.kind = kind;
  h.secret[0] = secret_[0];
  h.secret[1] = secret_[1];
  h.cliqueId = cliqueId_;
  h.src = rank_;
  h.tag = tag;
  h.len = len;
  return h;
}

void Bootstrap::describePeers(std::vector<std::string> names) {
  std::lock_guard<std::mutex> g(mu_);
  peerNames_ = std::move(names);
}

std::string Bootstrap::label(int peer) {
  const std::string name = size_t(peer) < peerNames_.size() ? peerNames_[size_t(peer)] : std::string();
  return "rank " + std::to_string(peer) + " (" + (name.empty() ? "" : name + ", ") + "bootstrap " +
         peers_[peer].toString() + ")";
}

Status Bootstrap::writeMessage(int peer, uint64_t tag, uint32_t kind, const void* data, size_t bytes, UniqueFd* keep) {
  if (peer < 0 || peer >= nranks()) return internalError("bootstrap send to rank out of range");
  const int64_t deadline = nowNs() + timeoutNs_;
  std::string what;
  {
    std::lock_guard<std::mutex> g(mu_);
    what = label(peer);
  }
  Result<UniqueFd> conn = connectTo(peers_[peer], deadline, what, abort_, /*refusedIsFinal=*/true);
  Status s = conn.status();
  if (s.isOk()) {
    const BootstrapHeader h = header(kind, tag, bytes);
    s = sendAll(conn.value().get(), &h, sizeof(h), deadline, what, abort_);
    if (s.isOk() && bytes) s = sendAll(conn.value().get(), data, bytes, deadline, what, abort_);
  }
  if (s.isOk()) {
    if (keep) *keep = conn.take();
    return s;
  }
  // A peer gone in the middle of init has usually told this rank why first: a rank that failed
  // sends its notice before its listener closes, and the notice may still be on its way through
  // this rank's accept thread. It names the culprit; this error would name the messenger. Once a
  // communicator listens for notices (after init) they fail it directly, and there is no wait.
  {
    std::lock_guard<std::mutex> g(noticeMu_);
    if (onNotice_) return s.about(peer);
  }
  for (int i = 0; i < 40 && earlyNotice().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (std::string told = earlyNotice(); !told.empty()) return remoteError(told);
  return s.about(peer);
}

void Bootstrap::setNoticeHandler(std::function<void(int, const std::string&)> handler) {
  std::lock_guard<std::mutex> g(noticeMu_);
  onNotice_ = std::move(handler);
}

std::string Bootstrap::earlyNotice() {
  std::lock_guard<std::mutex> g(mu_);
  return earlyNotice_;
}

int Bootstrap::noticeAll(const std::string& text, int64_t deadlineNs) {
  // Not cancelled by an abort: the notices are what spare the others their timeout.
  std::vector<int> ranks;
  for (int p = 0; p < nranks(); ++p) {
    if (p != rank_) ranks.push_back(p);
  }
  const auto told =
      writeAllAtOnce(ranks, BootstrapHeader::kNotice, 0, text.substr(0, BootstrapHeader::kMaxNoticeBytes), deadlineNs);
  return static_cast<int>(std::count(told.begin(), told.end(), true));
}

std::vector<bool> Bootstrap::sendAllAtOnce(const std::vector<int>& ranks, uint64_t tag, const std::string& body,
                                           int64_t deadlineNs) {
  return writeAllAtOnce(ranks, BootstrapHeader::kMessage, tag, body, deadlineNs);
}

std::vector<bool> Bootstrap::writeAllAtOnce(const std::vector<int>& ranks, uint32_t kind, uint64_t tag,
                                            const std::string& body, int64_t deadlineNs) {
  // Every rank at once from this thread (non-blocking connects, one poll): a rank that cannot be
  // reached must not delay the others, and no thread is made on this path. The message is small
  // enough for the socket's buffer, so it is written whole the moment the connection is up.
  const BootstrapHeader h = header(kind, tag, body.size());
  std::string wire(reinterpret_cast<const char*>(&h), sizeof(h));
  wire += body;
  std::vector<bool> told(ranks.size(), false);
  std::vector<std::pair<size_t, UniqueFd>> fds;  // (index into ranks, connecting socket)
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int p = ranks[i];
    if (p < 0 || p >= nranks() || p == rank_) continue;
    UniqueFd fd(::socket(peers_[p].storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) continue;
    const int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&peers_[p].storage), peers_[p].len);
    if (rc == 0 || errno == EINPROGRESS) fds.emplace_back(i, std::move(fd));
  }
  while (!fds.empty() && nowNs() < deadlineNs) {
    std::vector<pollfd> p;
    for (auto& f : fds) p.push_back({f.second.get(), POLLOUT, 0});
    const int64_t leftMs = std::max<int64_t>(1, (deadlineNs - nowNs()) / 1000000);
    if (::poll(p.data(), p.size(), static_cast<int>(std::min<int64_t>(leftMs, 100))) <= 0) continue;
    std::vector<std::pair<size_t, UniqueFd>> still;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!p[i].revents) {
        still.push_back(std::move(fds[i]));
        continue;
      }
      int err = 0;
      socklen_t l = sizeof(err);
      ::getsockopt(fds[i].second.get(), SOL_SOCKET, SO_ERROR, &err, &l);
      told[fds[i].first] = err == 0 && ::send(fds[i].second.get(), wire.data(), wire.size(),
                                              MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(wire.size());
    }
    fds = std::move(still);
  }
  return told;
}

Status Bootstrap::send(int peer, uint64_t tag, const void* data, size_t bytes) {
  return writeMessage(peer, tag, BootstrapHeader::kMessage, data, bytes, nullptr);
}

void Bootstrap::noteSlowWait(int64_t startNs, int64_t* nextWarnNs, int peer, const char* what) const {
  const int64_t now = nowNs();
  if (warnNs_ <= 0 || now < *nextWarnNs) return;
  log_.warn(kSubsysBoot,
            "rank {} has waited {:.1f} s for {} from rank {} ({}): is that rank alive and in the same call? The first "
            "operation between two ranks connects them and waits for both. {}",
            rank_, static_cast<double>(now - startNs) / 1e9, what, peer, peers_[peer].toString(),
            deadlineText(timeoutNs_, "CHORUS_TIMEOUT"));
  *nextWarnNs = startNs + 2 * (*nextWarnNs - startNs);
}

Result<std::vector<char>> Bootstrap::recv(int peer, uint64_t tag) {
  const int64_t start = nowNs();
  const int64_t deadline = start + timeoutNs_;
  int64_t nextWarn = start + warnNs_;
  int64_t nextProbe = start + kProbeEveryNs;
  std::unique_lock<std::mutex> lk(mu_);
  const auto arrived = [&] {
    auto m = messages_.find({peer, tag});
    return m != messages_.end() && !m->second.empty();
  };
  while (true) {
    auto it = messages_.find({peer, tag});
    if (it != messages_.end() && !it->second.empty()) {
      std::vector<char> m = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) messages_.erase(it);
      return m;
    }
    if (abort_ && abort_->load(std::memory_order_acquire)) {
      return Status(chorusRemoteError, "bootstrap wait for rank " + std::to_string(peer) + " was aborted");
    }
    if (!earlyNotice_.empty()) return remoteError(earlyNotice_);
    if (nowNs() >= deadline) {
      return Status(chorusSystemError, "Timed out after " + std::to_string(timeoutNs_ / 1000000000) +
                                           " s waiting for a bootstrap message from rank " + std::to_string(peer) +
                                           " (" + peers_[peer].toString() + "); is it alive and in the same call?");
    }
    noteSlowWait(start, &nextWarn, peer, "a bootstrap message");
    if (Status gone = probeWaitedPeer(lk, peer, "a message", &nextProbe, arrived); !gone.isOk()) return gone;
    if (arrived()) continue;  // taken at the top
    cv_.wait_for(lk, std::chrono::milliseconds(100));
  }
}

Status Bootstrap::probePeer(int peer, const char* what) {
  std::unique_lock<std::mutex> lk(mu_);
  int64_t next = 0;
  return probeWaitedPeer(
      lk, peer, what, &next, [] { return false; }, 200'000'000);
}

Status Bootstrap::lookAtProbe(int peer, const std::string& who, int64_t* nextProbeNs) {
  PeerProbe& p = probes_[static_cast<size_t>(peer)];
  int64_t now = nowNs();
  int err = -1;  // -1: no answer yet; 0: answered; else the attempt's error
  if (!p.fd.valid()) {
    if (now < *nextProbeNs || now < p.nextNs) return Status::ok();
    const SockAddr& addr = peers_[static_cast<size_t>(peer)];
    UniqueFd fd(::socket(addr.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) return Status::ok();  // out of descriptors: no word either way
    p.startedNs = now;
    p.nextNs = now + kProbeEveryNs;
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.len) == 0) {
      err = 0;
    } else if (errno == EINPROGRESS) {
      p.fd = std::move(fd);
    } else {
      err = errno;
    }
  }
  if (p.fd.valid()) {
    pollfd pfd{p.fd.get(), POLLOUT, 0};
    if (::poll(&pfd, 1, 0) > 0) {
      socklen_t len = sizeof(err);
      err = 0;
      ::getsockopt(p.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    } else if (now - p.startedNs >= kProbeWindowNs) {
      err = ETIMEDOUT;
    }
    if (err < 0) return Status::ok();  // still waiting
    p.fd.reset();
  }
  *nextProbeNs = std::max(*nextProbeNs, p.nextNs);
  if (err == 0) {
    p.silentSinceNs = 0;
    p.misses = 0;
    return Status::ok();
  }
  if (err == ECONNREFUSED) {
    return refusedError(who, peers_[static_cast<size_t>(peer)]);
  }
  // A miss. A run of them is broken by a gap (the wait ended, and the next one starts afresh).
  now = nowNs();
  if (p.silentSinceNs == 0 || now - p.lastMissNs > 3 * kProbeEveryNs) {
    p.silentSinceNs = p.startedNs;
    p.misses = 0;
    log_.info(kSubsysBoot, "{} did not answer a liveness probe ({}); unreachable if it answers none for {} s", who,
              std::strerror(err), unreachableNs_ / 1000000000);
  }
  ++p.misses;
  p.lastMissNs = now;
  if (p.misses < kMinMisses || now - p.silentSinceNs < unreachableNs_) return Status::ok();
  const int64_t silentMs = (now - p.silentSinceNs) / 1000000;
  return remoteError(who + " is unreachable: its listener at " + peers_[static_cast<size_t>(peer)].toString() +
                     " answered none of " + std::to_string(p.misses) + " connection attempts in " +
                     std::to_string(silentMs / 1000) + "." + std::to_string(silentMs % 1000 / 100) +
                     " s (last: " + std::strerror(err) +
                     "), so its host is down or cut off from this one (CHORUS_UNREACHABLE_AFTER sets how long)")
      .about(peer);
}

Status Bootstrap::probeWaitedPeer(std::unique_lock<std::mutex>& lk, int peer, const char* what, int64_t* nextProbeNs,
                                  const std::function<bool()>& arrived, int64_t graceNs) {
  if (peer == rank_ || (abort_ && abort_->load())) return Status::ok();
  Status gone = lookAtProbe(peer, label(peer) + ", waited on for " + what + ",", nextProbeNs);
  if (gone.isOk()) return gone;
  // Gone. It may have gone because another rank failed first, whose notice (the cause) is on its
  // way: a moment for it, or for what the peer did before it went. (A notice a communicator's
  // handler took counts too: firstNotice_.)
  const int64_t grace = nowNs() + graceNs;
  while (nowNs() < grace && firstNotice_.empty() && !arrived()) cv_.wait_for(lk, std::chrono::milliseconds(20));
  if (arrived()) return Status::ok();
  return firstNotice_.empty() ? gone : remoteError(firstNotice_);
}

bool Bootstrap::pending(int peer, uint64_t tag) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = messages_.find({peer, tag});
  return it != messages_.end() && !it->second.empty();
}

Status Bootstrap::recvInto(int peer, uint64_t tag, void* data, size_t bytes) {
  CHORUS_ASSIGN_OR_RETURN(std::vector<char> m, recv(peer, tag));
  if (m.size() != bytes) {
    return internalError("bootstrap message from rank " + std::to_string(peer) + " has " + std::to_string(m.size()) +
                         " bytes, expected " + std::to_string(bytes) + " (ranks disagree on the call sequence)");
  }
  if (bytes) std::memcpy(data, m.data(), bytes);
  return Status::ok();
}

Status Bootstrap::allGather(void* all, size_t bytes) {
  std::lock_guard<std::mutex> g(collMu_);
  const int n = nranks();
  const uint64_t seq = ++collSeq_;
  char* base = static_cast<char*>(all);
  // Ring: at step s, pass on the block that came from rank (rank - s).
  for (int s = 0; s < n - 1; ++s) {
    const int sendBlock = (rank_ - s + n) % n;
    const int recvBlock = (rank_ - s - 1 + n) % n;
    const uint64_t tag = makeTag(TagSpace::kColl, (seq << 16) | static_cast<uint64_t>(s));
    CHORUS_TRY(send((rank_ + 1) % n, tag, base + sendBlock * bytes, bytes));
    CHORUS_TRY(recvInto((rank_ - 1 + n) % n, tag, base + recvBlock * bytes, bytes));
  }
  return Status::ok();
}

Status Bootstrap::barrier() {
  std::vector<char> v(nranks());
  return allGather(v.data(), 1);
}

Status Bootstrap::awaitPeer(int peer, const char* what, const std::function<Result<bool>()>& ready, int64_t) {
  const int64_t start = nowNs();
  const int64_t deadline = start + timeoutNs_;
  int64_t nextWarn = start + warnNs_;
  int64_t nextProbe = start + kProbeEveryNs;
  int64_t napNs = 10000;
  bool done = false;
  const auto arrived = [&] { return done; };
  std::unique_lock<std::mutex> lk(mu_);
  while (true) {
    lk.unlock();
    Result<bool> r = ready();
    lk.lock();
    if (!r.isOk()) return r.status();
    done = r.value();
    if (done) return Status::ok();
    if (abort_ && abort_->load(std::memory_order_acquire)) {
      return Status(chorusRemoteError,
                    std::string("waiting for ") + what + " from rank " + std::to_string(peer) + " was aborted");
    }
    if (!earlyNotice_.empty()) return remoteError(earlyNotice_);
    if (nowNs() >= deadline) {
      return Status(chorusSystemError, "Timed out waiting for rank " + std::to_string(peer) + " (" +
                                           peers_[peer].toString() + ") to complete " + what);
    }
    noteSlowWait(start, &nextWarn, peer, what);
    if (Status gone = probeWaitedPeer(lk, peer, what, &nextProbe, arrived); !gone.isOk()) return gone;
    cv_.wait_for(lk, std::chrono::nanoseconds(napNs));
    napNs = std::min<int64_t>(napNs * 2, 1000000);
  }
}

}  // namespace chorus
