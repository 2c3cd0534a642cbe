// The bootstrap root: the thread, started by chorusGetUniqueId (or rank 0 under CHORUS_COMM_ID),
// that collects one hello per rank and hands every rank the table of the ranks' addresses. The wire
// format is in root.h; the ranks' side is Bootstrap::join (bootstrap.cc).
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "src/bootstrap/bootstrap.h"
#include "src/bootstrap/root.h"
#include "src/common/log.h"
#include "src/common/os.h"

namespace chorus {

namespace {

// The root's work: collect one hello per rank, then send everyone the table. The root is the one
// place that knows who joined, so it says so: each rank's hello is answered at once with an
// in-progress reply (a listener that does not answer is no Chorus root), every `warnNs` (doubling)
// the joined ranks hear which ranks are still missing, and at the init deadline, or when one rank's
// arguments make the job impossible (nranks differ, a rank joins twice), every joined rank gets the
// final reason instead of waiting out its own timeout.
void runRoot(UniqueFd listenFd, BootstrapId id, int64_t timeoutNs, int64_t warnNs, Logger log,
             const std::shared_ptr<const std::atomic<bool>>& stop) {
  const int64_t start = nowNs();
  const int64_t deadline = start + timeoutNs;
  int64_t nextWarn = start + std::max<int64_t>(warnNs, 100000000);
  int nranks = -1;
  std::vector<SockAddr> table;
  std::vector<std::string> from;  // per rank: the address its connection to the root came from
  std::vector<UniqueFd> conns;
  int joined = 0;
  log.setRank(-1);
  auto reply = [](int fd, chorusResult_t code, const std::string& msg, int n) {
    RootReply r{};
    r.status = code;
    r.nranks = n;
    std::snprintf(r.message, sizeof(r.message), "%s", msg.c_str());
    (void)sendAll(fd, &r, sizeof(r), nowNs() + 5ll * 1000000000, "a rank");
  };
  auto missing = [&] {
    std::string m;
    int listed = 0;
    for (int r = 0; r < nranks; ++r) {
      if (conns[r].valid()) continue;
      if (listed++ < 16) m += (m.empty() ? "" : ", ") + std::to_string(r);
    }
    if (listed > 16) m += " and " + std::to_string(listed - 16) + " more";
    return m;
  };
  // Every joined rank gets `code` and `msg` (in progress: a word; otherwise the end of the join).
  // Rank 0 last: it most often hosts this root, and a rank 0 told first may exit with its process,
  // root and all, before the others are told.
  auto tellJoined = [&](chorusResult_t code, const std::string& msg) {
    for (size_t r = conns.size(); r-- > 0;) {
      if (conns[r].valid()) reply(conns[r].get(), code, msg, nranks);
    }
  };
  bool fatal = false;  // a join made the job impossible; every joined rank has been told
  // Connections whose hello is still arriving, read side by side: a stranger that sends nothing,
  // or sends slowly, is dropped at its own deadline and never holds up the ranks behind it.
  struct Joining {
    UniqueFd fd;
    RootHello hello{};
    size_t got = 0;
    int64_t until = 0;
  };
  std::vector<Joining> joining;
  int64_t pausedUntil = 0;   // accepts paused after running out of descriptors
  int64_t starvedSince = 0;  // accepts failing for want of descriptors since then
  constexpr int64_t kStarvedNs = 1000000000;
  WarnLimiter warn(log, kSubsysBoot);
  setNonBlocking(listenFd.get(), true);  // accept until there is no one left to accept
  constexpr int64_t kHelloNs = 5ll * 1000000000;
  constexpr size_t kMaxJoining = 1024;
  auto handle = [&](UniqueFd c, const RootHello& h) {
    if (h.magic != kHelloMagic) {
      warn.warn("bootstrap root dropped a connection that did not prove the id's secret");
      return;
    }
    if (!constantTimeEqual(h.secret, id.secret) || h.cliqueId != id.cliqueId) {
      // A Chorus rank of another job (or with another CHORUS_COMM_SECRET): told why, so it fails
      // at once instead of at its timeout. The reply reveals nothing but that this root exists.
      warn.warn("bootstrap root dropped a connection that did not prove the id's secret");
      reply(c.get(), chorusInvalidUsage,
            "this root at " + id.root.toString() +
                " serves another job: the ranks' secrets differ (CHORUS_COMM_SECRET, or the launcher's job id: "
                "OMPI_MCA_ess_base_jobid, SLURM_JOB_ID, TORCHELASTIC_RUN_ID); two jobs on one CHORUS_COMM_ID?",
            0);
      return;
    }
    if (h.version != CHORUS_VERSION_CODE) {
      reply(c.get(), chorusInvalidUsage,
            "rank " + std::to_string(h.rank) + " runs Chorus " + std::to_string(h.version) + " but the root runs " +
                std::to_string(CHORUS_VERSION_CODE),
            0);
      return;
    }
    if (nranks < 0) {
      if (h.nranks <= 0) {
        reply(c.get(), chorusInvalidArgument, "nranks must be positive", 0);
        return;
      }
      nranks = h.nranks;
      table.resize(nranks);
      from.resize(nranks);
      conns.resize(nranks);
    }
    // Arguments that make the job impossible: the newcomer and every rank that joined hear why.
    auto failJob = [&](const std::string& why) {
      reply(c.get(), chorusInvalidArgument, why, 0);
      tellJoined(chorusInvalidArgument, why);
      fatal = true;
    };
    if (h.nranks != nranks) {
      return failJob("rank " + std::to_string(h.rank) + " was given nranks=" + std::to_string(h.nranks) +
                     " but other ranks of this id were given nranks=" + std::to_string(nranks) +
                     ": every rank must be given the same number of ranks");
    }
    if (h.rank < 0 || h.rank >= nranks || conns[h.rank].valid()) {
      return failJob("rank " + std::to_string(h.rank) + " is out of range or joined twice; every rank of the " +
                     std::to_string(nranks) + " must pass a distinct rank in [0, nranks)");
    }
    if (!h.listen.valid()) {
      reply(c.get(), chorusInvalidArgument, "rank " + std::to_string(h.rank) + " sent no valid listening address", 0);
      return;
    }
    table[h.rank] = h.listen;
    SockAddr peer;
    socklen_t plen = sizeof(peer.storage);
    if (::getpeername(c.get(), reinterpret_cast<sockaddr*>(&peer.storage), &plen) == 0) {
      peer.len = plen;
      peer.setPort(0);
      from[h.rank] = peer.toString();
    }
    setNonBlocking(c.get(), false);
    ++joined;
    reply(c.get(), chorusInProgress,
          "rank " + std::to_string(h.rank) + " joined: " + std::to_string(joined) + " of " + std::to_string(nranks),
          nranks);
    conns[h.rank] = std::move(c);
  };
  int64_t warnEvery = nextWarn - start;
  while (nranks < 0 || joined < nranks) {
    if (fatal) return;
    // Everyone that would join has given up: the ranks that did are told, and the listener closes.
    if (stop && stop->load(std::memory_order_acquire)) {
      tellJoined(chorusSystemError, "the ranks of this process stopped their init (one of them failed)");
      return;
    }
    const int64_t now = nowNs();
    if (now > deadline) {
      const std::string why =
          "Timed out after " + std::to_string((now - start) / 1000000000) +
          " s (CHORUS_INIT_TIMEOUT) at the bootstrap root " + id.root.toString() + ": " + std::to_string(joined) +
          " of " + (nranks < 0 ? std::string("?") : std::to_string(nranks)) + " ranks joined" +
          (nranks < 0 ? std::string() : "; ranks " + missing() + " never did") +
          " (not started, a different CHORUS_COMM_ID or unique id, or unable to reach this address)";
      log.warn(kSubsysBoot, "{}", why);
      tellJoined(chorusSystemError, why);
      return;
    }
    if (nranks > 0 && now >= nextWarn) {
      const std::string word = "bootstrap root at " + id.root.toString() + ": " + std::to_string(joined) + " of " +
                               std::to_string(nranks) + " ranks joined in " +
                               std::to_string((now - start) / 1000000000) + " s; still waiting for ranks " + missing() +
                               ". " + deadlineText(timeoutNs, "CHORUS_INIT_TIMEOUT");
      log.warn(kSubsysBoot, "{}", word);
      tellJoined(chorusInProgress, word);
      warnEvery *= 2;
      nextWarn = now + warnEvery;
    }
    const bool paused = now < pausedUntil;
    std::vector<pollfd> fds;
    fds.push_back({listenFd.get(), static_cast<short>(paused ? 0 : POLLIN), 0});
    for (auto& j : joining) fds.push_back({j.fd.get(), POLLIN, 0});
    if (::poll(fds.data(), fds.size(), paused ? 20 : 100) < 0) continue;
    for (size_t k = joining.size(); k-- > 0;) {
      Joining& j = joining[k];
      bool drop = false;
      if (fds[k + 1].revents) {
        const ssize_t r =
            ::recv(j.fd.get(), reinterpret_cast<char*>(&j.hello) + j.got, sizeof(j.hello) - j.got, MSG_DONTWAIT);
        if (r > 0) {
          j.got += static_cast<size_t>(r);
        } else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          warn.warn("bootstrap root dropped a connection that closed after {} of {} hello bytes", j.got,
                    sizeof(j.hello));
          drop = true;
        }
      }
      if (!drop && j.got == sizeof(j.hello)) {
        Joining done = std::move(j);
        joining.erase(joining.begin() + static_cast<long>(k));
        handle(std::move(done.fd), done.hello);
        continue;
      }
      if (!drop && now > j.until) {
        warn.warn("bootstrap root dropped a connection that sent {} of {} hello bytes in {} s", j.got, sizeof(j.hello),
                  kHelloNs / 1000000000);
        drop = true;
      }
      if (drop) joining.erase(joining.begin() + static_cast<long>(k));
    }
    if (fds[0].revents & POLLIN) {
      while (joining.size() < kMaxJoining) {
        UniqueFd c(::accept4(listenFd.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
        if (!c.valid()) {
          if (outOfDescriptors(errno)) {
            // The listener stays readable: leave it alone a while rather than spin on it. Hellos
            // still arriving may free descriptors (a stranger's); once none is left to wait for
            // and accepting has failed for a second, the job cannot start in this process: every
            // rank that joined is told why, and closing the listener resets the ones still queued.
            const int err = errno;
            const int64_t t = nowNs();
            if (starvedSince == 0) starvedSince = t;
            pausedUntil = t + kAcceptBackoffNs;
            if (joining.empty() && t - starvedSince > kStarvedNs) {
              const std::string why =
                  "the root cannot accept ranks (" + std::to_string(joined) + " of " + std::to_string(nranks) +
                  " joined): " +
                  (err == EMFILE ? "too many open files: " + describeFdLimit() : std::string(std::strerror(err)));
              log.warn(kSubsysBoot, "{}", why);
              for (int r = 0; r < nranks; ++r) {
                if (conns[r].valid()) reply(conns[r].get(), chorusSystemError, why, nranks);
              }
              // The listener closes last: the ranks told why fail before the ones still queued
              // on it see their connection reset.
              std::this_thread::sleep_for(std::chrono::milliseconds(200));
              return;
            }
          }
          break;
        }
        starvedSince = 0;
        joining.push_back(Joining{std::move(c), RootHello{}, 0, nowNs() + kHelloNs});
      }
    }
  }
  // A rank that listens on loopback can only be reached from its own host: fine when every rank
  // is on one host, a sure failure when others listen on addresses other hosts reach or reached
  // the root from different addresses (different hosts).
  std::string lo;
  bool spread = false;
  for (int r = 0; r < nranks; ++r) {
    spread = spread || !table[r].isLoopback() || from[r] != from[0];
    if (table[r].isLoopback() && lo.size() < 60) lo += (lo.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!lo.empty() && spread) {
    const std::string msg = "ranks " + lo +
                            " listen on loopback, which ranks on other hosts cannot reach; set "
                            "CHORUS_SOCKET_IFNAME to an interface every host can reach (not lo)";
    log.warn(kSubsysBoot, "bootstrap root: {}", msg);
    for (int r = 0; r < nranks; ++r) reply(conns[r].get(), chorusInvalidUsage, msg, nranks);
    return;
  }
  for (int r = 0; r < nranks; ++r) {
    RootReply ok{};
    ok.status = chorusSuccess;
    ok.nranks = nranks;
    int64_t dl = nowNs() + 10ll * 1000000000;
    if (sendAll(conns[r].get(), &ok, sizeof(ok), dl, "rank " + std::to_string(r)).isOk()) {
      (void)sendAll(conns[r].get(), table.data(), sizeof(SockAddr) * nranks, dl, "rank " + std::to_string(r));
    }
  }
}

// The roots this process runs that no caller stops (ids from chorusGetUniqueId, rank 0's root of
// CHORUS_COMM_ID), by clique id, each with the flag that ends it (stopLocalRoot). An entry leaves
// when its root ends.
struct LocalRoots {
  std::mutex mu;
  std::unordered_map<uint64_t, std::shared_ptr<std::atomic<bool>>> byClique;
};
LocalRoots& localRoots() {
  static auto* roots = new LocalRoots();
  return *roots;
}

}  // namespace

void stopLocalRoot(const BootstrapId& id) {
  LocalRoots& roots = localRoots();
  std::lock_guard<std::mutex> g(roots.mu);
  auto it = roots.byClique.find(id.cliqueId);
  if (it == roots.byClique.end()) return;
  it->second->store(true, std::memory_order_release);
  roots.byClique.erase(it);
}

void startBootstrapRoot(UniqueFd listenFd, BootstrapId id, int64_t timeoutNs, int64_t warnNs, Logger log,
                        std::shared_ptr<const std::atomic<bool>> stop) {
  std::shared_ptr<std::atomic<bool>> own;
  if (!stop) {
    own = std::make_shared<std::atomic<bool>>(false);
    stop = own;
    LocalRoots& roots = localRoots();
    std::lock_guard<std::mutex> g(roots.mu);
    roots.byClique[id.cliqueId] = own;
  }
  std::thread([fd = std::move(listenFd), id, timeoutNs, warnNs, log, stop = std::move(stop), own]() mutable {
    runRoot(std::move(fd), id, timeoutNs, warnNs, log, stop);
    if (own) {
      LocalRoots& roots = localRoots();
      std::lock_guard<std::mutex> g(roots.mu);
      auto it = roots.byClique.find(id.cliqueId);
      if (it != roots.byClique.end() && it->second == own) roots.byClique.erase(it);
    }
  }).detach();
}

}  // namespace chorus
