// Bootstrap: how the ranks of a clique find each other, and the small blocking collectives
// (allgather, barrier, send, recv) that init, split and connection setup use.
//
// As in NCCL, the process that calls chorusGetUniqueId runs a root in the background; the id holds
// the root's address and a random secret. Each rank starts a listener, tells the root its address,
// and receives the full address table. From then on the root is not needed: every rank keeps its
// listener and the table for the communicator's lifetime, so split (and, later, shrink) works even
// when the root's process is gone.
//
// Messages are one TCP connection each: a header proving the secret, naming the clique, sender
// and tag, then the payload. A connection that does not prove the secret or sends garbage is
// dropped and logged. The mailbox is thread-safe; every wait has a deadline and watches an abort
// flag.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "include/chorus/chorus.h"
#include "src/bootstrap/out_of_band.h"
#include "src/bootstrap/socket.h"
#include "src/common/log.h"
#include "src/common/os.h"
#include "src/common/settings.h"
#include "src/common/status.h"

namespace chorus {

// The contents of a chorusUniqueId.
struct BootstrapId {
  static constexpr uint32_t kMagic = 0x43485253;  // "CHRS"
  uint32_t magic = kMagic;
  uint32_t version = CHORUS_VERSION_CODE;
  uint64_t secret[2] = {0, 0};
  uint64_t cliqueId = 0;     // tells cliques apart on a shared listener
  uint32_t rootByRank0 = 0;  // CHORUS_COMM_ID: rank 0 hosts the root at `root`
  uint32_t pad = 0;
  SockAddr root;

  chorusUniqueId toUniqueId() const;
  static Result<BootstrapId> fromUniqueId(const chorusUniqueId& id);
};
static_assert(sizeof(BootstrapId) <= CHORUS_UNIQUE_ID_BYTES, "BootstrapId must fit in chorusUniqueId");

// CHORUS_COMM_ID: host:port of a root that rank 0 hosts (read here and by chorusCommInitFromEnv).
extern const TextSetting kCommIdSetting;

// The id of a clique whose root rank 0 hosts at `hostPort`; the secret comes from
// CHORUS_COMM_SECRET or a documented fixed value. Every rank computes the same id.
Result<BootstrapId> fixedBootstrapId(const std::string& hostPort);
// Makes an id with a running root in this process (or, with CHORUS_COMM_ID, the fixed id). The
// root logs through `log` (its level and subsystems; its lines say rank -1).
Result<BootstrapId> makeBootstrapId(const std::string& ifnameSpec, int64_t timeoutNs, int64_t warnNs,
                                    const Logger& log);
// A random id with a running root in this process, whatever CHORUS_COMM_ID says. `stop`, when
// given, ends the root early (see startBootstrapRoot).
Result<BootstrapId> makeRandomBootstrapId(const std::string& ifnameSpec, int64_t timeoutNs, int64_t warnNs,
                                          const Logger& log, std::shared_ptr<const std::atomic<bool>> stop = nullptr);

// Runs the root on `listenFd` in a detached thread until nranks ranks have joined, or the
// timeout (the init timeout) passes; every `warnNs` (doubling) it tells the joined ranks which
// ranks are still missing. The thread owns everything it uses. Setting `stop` (the ranks that
// would join have all given up, as a failed chorusCommInitAll's) ends it within 100 ms, and its
// listener and connections close with it.
void startBootstrapRoot(UniqueFd listenFd, BootstrapId id, int64_t timeoutNs, int64_t warnNs, Logger log,
                        std::shared_ptr<const std::atomic<bool>> stop = nullptr);
// Ends the root this process runs for `id`, if it runs one that startBootstrapRoot was given no
// `stop` for: an id that no rank will join (chorusCommInitRankScalable's ids beside the first).
void stopLocalRoot(const BootstrapId& id);

// The header in front of every bootstrap message on the wire.
struct BootstrapHeader {
  static constexpr uint32_t kMagic = 0x43484d53;  // "CHMS"
  // (2 was a data connection of the socket transport, which the net transport replaced: refused.)
  static constexpr uint32_t kMessage = 1, kNotice = 3;
  static constexpr size_t kMaxMessageBytes = 256u << 20;
  static constexpr size_t kMaxNoticeBytes = 4096;
  uint32_t magic;
  uint32_t kind;
  uint64_t secret[2];
  uint64_t cliqueId;
  int32_t src;
  int32_t pad;
  uint64_t tag;
  uint64_t len;
};

// Reads one message off a connection from anyone, in whatever pieces the bytes arrive: the
// caller receives into next() and reports how many bytes came with advance(). The header is
// checked as soon as it is complete (magic, secret, clique, sender, kind, length), so a stranger
// is dropped before any payload is allocated for it.
class BootstrapReader {
 public:
  enum class State { kMore, kDone, kDrop };
  BootstrapReader(const uint64_t secret[2], uint64_t cliqueId, int nranks)
      : secret_{secret[0], secret[1]}, cliqueId_(cliqueId), nranks_(nranks) {}

  // Where the next bytes go and how many fit (never 0 before kDone).
  std::pair<char*, size_t> next();
  // `n` bytes (at most next().second) were written at next().first.
  State advance(size_t n);

  size_t got() const { return got_; }
  const BootstrapHeader& header() const { return header_; }
  std::vector<char>& payload() { return payload_; }
  // Why the message was dropped (for the log).
  const std::string& why() const { return why_; }

 private:
  uint64_t secret_[2];
  uint64_t cliqueId_;
  int nranks_;
  BootstrapHeader header_{};
  size_t got_ = 0;
  std::vector<char> payload_;
  std::string why_;
};

// Tags of bootstrap messages: the high byte says who uses them.
enum class TagSpace : uint64_t {
  kColl = 1,
  kConnect = 2,
  kSplit = 3,
  kUser = 4,
  kShrink = 5,
  kDeviceInfo = 6,
  kOneCopy = 7
};
inline uint64_t makeTag(TagSpace space, uint64_t value) {
  return (uint64_t(space) << 56) | (value & ((1ull << 56) - 1));
}

// One rank's endpoint in one clique: listener, accept thread, mailbox, address table.
// Thread-safe. Destroying it stops the accept thread.
class Bootstrap : public OutOfBand {
 public:
  ~Bootstrap() override;

  // How long joining may take, and when to say that it takes long.
  struct JoinTiming {
    int64_t timeoutNs;  // the wait for the root (CHORUS_INIT_TIMEOUT)
    int64_t warnNs;     // the first word about a slow join (CHORUS_WARN_AFTER_MS)
  };
  // Joins the clique: start a listener, register with the root, receive the address table.
  // `timeoutNs` bounds the bootstrap's later waits. `abortFlag` ends them, the wait for the root
  // included, for its whole life (a chorusCommInitAll whose rank failed sets it for the others).
  static Result<std::unique_ptr<Bootstrap>> join(const BootstrapId& id, int rank, int nranks,
                                                 const std::string& ifnameSpec, int64_t timeoutNs,
                                                 const JoinTiming& timing, const Logger& log,
                                                 const std::atomic<bool>* abortFlag);
  // A new clique from known addresses (split/shrink): `peers` are the new ranks' listeners, and
  // `listener` this rank's already-listening socket, bound at `peers[rank]`.
  static Result<std::unique_ptr<Bootstrap>> fromTable(uint64_t cliqueId, const uint64_t secret[2], int rank,
                                                      std::vector<SockAddr> peers, UniqueFd listener, int64_t timeoutNs,
                                                      const Logger& log, const std::atomic<bool>* abortFlag);

  int rank() const { return rank_; }
  int nranks() const { return static_cast<int>(peers_.size()); }
  uint64_t cliqueId() const { return cliqueId_; }
  const uint64_t* secret() const { return secret_; }
  const SockAddr& address(int rank) const { return peers_[rank]; }
  int64_t timeoutNs() const { return timeoutNs_; }
  // From this long on, and each time the wait doubles, a wait for a peer (a message, a
  // connection, a claim) says so in a WARN line naming the peer; 0: never. Set before any wait.
  void setStallWarn(int64_t ns) { warnNs_ = ns; }
  // How long a waited-on peer may leave every probe of its listener unanswered (no reply at all:
  // its host is down or cut off) before the wait ends naming it (Config::unreachableNs).
  void setUnreachableAfter(int64_t ns) { unreachableNs_ = ns; }

  Status send(int peer, uint64_t tag, const void* data, size_t bytes);
  Result<std::vector<char>> recv(int peer, uint64_t tag);
  // Whether a message from `peer` with `tag` waits in the mailbox (nothing is taken, nothing waits).
  bool pending(int peer, uint64_t tag);
  // Like recv, into a buffer of exactly `bytes` bytes (a different size is an error).
  Status recvInto(int peer, uint64_t tag, void* data, size_t bytes);
  // Every rank's `bytes` bytes, in rank order, into all (nranks * bytes).
  Status allGather(void* all, size_t bytes);
  Status barrier();

  // Whether `peer`'s process is still there (its listener takes a connection, closed at once): an
  // error naming it when its listener refuses or has answered no probe for the unreachable bound,
  // or the first failure notice that arrives within 200 ms after that (the cause it may have gone
  // for). For a wait (on `what`) that a transport cannot end itself; never blocks: a probe in
  // flight is looked at by the next call.
  Status probePeer(int peer, const char* what);
  // Bounded as recv is: the timeout, an abort, a failure notice, the peer's liveness.
  Status awaitPeer(int peer, const char* what, const std::function<Result<bool>()>& ready, int64_t timeoutNs) override;
  std::string peerAddress(int peer) const override { return peers_[peer].toString(); }

  // Descriptor passing for shared memory on one host: exportFd offers `fd` to `peer` under
  // `token` (claimable once); importFd fetches it from the exporter's server, whose name
  // (fdServerName() on the exporting rank) travels in the connection handle.
  void exportFd(int peer, uint64_t token, UniqueFd fd) override;
  // Takes back an offer nobody claimed (no effect once claimed).
  void withdrawFd(uint64_t token);
  // Waits until `peer` has claimed the offer of `token` (within the timeout, unless aborted).
  Status awaitClaim(int peer, uint64_t token) override;
  Result<UniqueFd> importFd(int peer, const std::string& serverName, uint64_t token) override;
  const std::string& fdServerName() const override { return fdServerName_; }

  // Failure notices: a rank whose communicator failed tells every other rank why, so ranks that
  // wait on someone else than the failed one hear of it at once instead of at their timeout. The
  // handler runs on the accept thread; setting it to null waits for a call in progress.
  void setNoticeHandler(std::function<void(int src, const std::string& text)> handler);
  // What messages call each rank besides its bootstrap address ("host h, pid p"), once known.
  void describePeers(std::vector<std::string> names);
  // The first notice that came before any handler was set, "... (reported by rank R)", or empty.
  // Such a notice also ends every wait in recv() at once.
  std::string earlyNotice();
  // Sends `text` to every other rank, all at once, giving up on a rank at `deadlineNs` (best
  // effort: a rank that is gone cannot be told). Returns how many were told.
  int noticeAll(const std::string& text, int64_t deadlineNs);
  // Sends one small message (it must fit a socket buffer) to each rank of `ranks` at once, as
  // noticeAll does: no rank that cannot be reached delays the others, and nothing is retried.
  // Returns, per entry of `ranks`, whether it was handed to that rank's socket by `deadlineNs`.
  std::vector<bool> sendAllAtOnce(const std::vector<int>& ranks, uint64_t tag, const std::string& body,
                                  int64_t deadlineNs);

 private:
  struct Pending;
  Bootstrap() = default;
  Status start(UniqueFd listener);
  void acceptLoop();
  void serveFd(int client);
  void deliver(uint64_t cliqueId, int src, uint64_t tag, uint32_t kind, std::vector<char> payload);
  // The header of a message from this rank.
  BootstrapHeader header(uint32_t kind, uint64_t tag, uint64_t len) const;
  Status writeMessage(int peer, uint64_t tag, uint32_t kind, const void* data, size_t bytes, UniqueFd* keep);
  std::vector<bool> writeAllAtOnce(const std::vector<int>& ranks, uint32_t kind, uint64_t tag, const std::string& body,
                                   int64_t deadlineNs);

  int rank_ = -1;
  uint64_t cliqueId_ = 0;
  uint64_t secret_[2] = {0, 0};
  std::vector<SockAddr> peers_;
  int64_t timeoutNs_ = 0;
  int64_t warnNs_ = 0;
  // The WARN line of a wait for `peer` that takes long; moves *nextWarnNs on (doubling).
  void noteSlowWait(int64_t startNs, int64_t* nextWarnNs, int peer, const char* what) const;
  // For a wait on `peer` (`lk` holds mu_): a peer that died after the last thing it sent this rank
  // sends nothing more and may close no connection of this rank's, so from *nextProbeNs on, once a
  // second, its listener is asked whether it is still there: a non-blocking connection attempt,
  // looked at by the next call and closed once answered (its accept loop drops it without a
  // word). Refused: its process is gone. No answer within kProbeWindowNs (or an ICMP error): a
  // miss; misses without an answer between them for unreachableNs_ (at least kMinMisses of
  // them): its host is down or cut off. A process that is merely slow or stopped is answered
  // for by its kernel. A gone or unreachable peer ends the wait with the first failure notice
  // that reaches this rank within graceNs (the cause it may have gone for), else naming it,
  // unless arrived() becomes true meanwhile.
  Status probeWaitedPeer(std::unique_lock<std::mutex>& lk, int peer, const char* what, int64_t* nextProbeNs,
                         const std::function<bool()>& arrived, int64_t graceNs = 3 * kProbeEveryNs);
  // One peer's probing (guarded by mu_).
  struct PeerProbe {
    UniqueFd fd;                // the connection attempt in flight, if any
    int64_t startedNs = 0;      // when it began
    int64_t nextNs = 0;         // the next may begin from then
    int64_t silentSinceNs = 0;  // the first unanswered attempt of the current run; 0: none
    int64_t lastMissNs = 0;
    int misses = 0;
  };
  // The outcome of the probe of `peer` so far: ok (answered, or still waiting), or the error that
  // ends the wait (its listener refused, or it is unreachable).
  Status lookAtProbe(int peer, const std::string& who, int64_t* nextProbeNs);
  static constexpr int64_t kProbeEveryNs = 1'000'000'000;
  // A probe's connection attempt is a miss after this long unanswered: a lost SYN is sent again
  // after a second, so one attempt is one round trip and one retry at most.
  static constexpr int64_t kProbeWindowNs = 1'000'000'000;
  static constexpr int kMinMisses = 3;
  int64_t unreachableNs_ = int64_t(20) * 1000000000;
  std::vector<PeerProbe> probes_;  // by rank; guarded by mu_
  Logger log_;
  const std::atomic<bool>* abort_ = nullptr;
  uint64_t collSeq_ = 0;  // allgather/barrier counter, advanced identically on every rank
  std::mutex collMu_;     // one bootstrap collective at a time per rank

  UniqueFd listener_;
  UniqueFd wakeFd_;    // eventfd that stops the accept loop
  UniqueFd fdServer_;  // abstract Unix socket serving exported descriptors
  std::string fdServerName_;
  std::map<uint64_t, std::pair<int, UniqueFd>> exported_;  // token -> (peer, fd); guarded by mu_
  std::thread acceptThread_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::tuple<int, uint64_t>, std::deque<std::vector<char>>> messages_;
  std::mutex noticeMu_;  // held while the handler runs
  std::function<void(int, const std::string&)> onNotice_;
  std::string earlyNotice_;             // guarded by mu_: the first notice that came before any handler
  std::vector<std::string> peerNames_;  // guarded by mu_ (describePeers)
  // "rank R (host h, pid p, bootstrap a)", or without host and pid before describePeers.
  std::string label(int peer);
  std::string firstNotice_;  // guarded by mu_: the first notice, handled or not (probeWaitedPeer)
};

}  // namespace chorus
