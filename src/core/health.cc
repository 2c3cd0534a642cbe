// A communicator's failure handling (src/core/health.h): the error that broke it, notices to and
// from peers, watching the peers, and what a hang report says of them.
#include "src/core/health.h"

#include "src/core/comm.h"

#include <algorithm>
#include <thread>

namespace chorus {
namespace {

// How long the failure notices may take, and how often a stalled wait polls the peers' pidfds.
constexpr int64_t kNoticeNs = int64_t(2) * 1000000000;
constexpr int64_t kPeerCheckEveryNs = int64_t(50) * 1000000;

}  // namespace

int Health::rank() const { return comm_.rank(); }

int64_t Health::timeoutNs() const { return comm_.config().timeoutNs; }

Status Health::asyncError() const {
  if (!failed_.load(std::memory_order_acquire)) {
    // A kernel's failure becomes the communicator's when someone asks (it is in mapped memory:
    // reading it costs a load).
    const DeviceComm* d = comm_.device_.deviceComm();
    if (!d || !d->faulted()) return Status::ok();  // every call asks: keep it lock-free
    const_cast<Health*>(this)->fail(comm_.device_.fault(), true);
  }
  return recordedError();
}

Status Health::recordedError() const {
  std::lock_guard<std::mutex> g(errMu_);
  return asyncError_;
}

void Health::fail(const Status& s, bool tellPeers, bool requested) {
  {
    std::lock_guard<std::mutex> g(errMu_);
    if (!asyncError_.isOk()) return;
    asyncError_ = s;
    failed_.store(true, std::memory_order_release);
  }
  const Logger& log = comm_.log();
  if (requested) {
    log.info(kSubsysAll, "communicator stopped as asked: {}", s.message());
  } else {
    log.warn(kSubsysAll, "communicator failed: {}", s.message());
  }
  // The device entries as far as the host can tell now, before the log and the dump show them
  // (a kernel's fault marks its launch's entries failed), and before the abort word below makes
  // a launch that finishes from now on indistinguishable from one it stopped. Only tried: an
  // enqueue may hold the device path's lock while blocked on kernels that only the abort word
  // below ends.
  comm_.device_.look(/*tryOnly=*/true);
  if (!requested && log.enabled(LogLevel::kWarn, kSubsysAll)) {
    if (const std::string last = comm_.diag_.lastOps(8); !last.empty()) {
      log.warn(kSubsysAll, "its last operations (oldest first):\n{}", last);
    }
  }
  if (!requested) (void)comm_.diag_.writeDump("failure: " + s.message());
  // The notice goes before the connections close: a peer that sees a connection to this rank
  // close then finds the reason already told, instead of blaming this rank for the closing. On
  // the failing thread itself: one poll over every rank's connection, over at once where the
  // ranks are up or gone, and never longer than kNoticeNs (a host that does not answer at all).
  if (tellPeers && comm_.bootstrap_ && comm_.nranks_ > 1 && !aborted()) tellFailure(s);
  // Kernels of this communicator stop at their next check and run nothing more.
  comm_.device_.stop();
  // A peer waiting on this rank over shared memory sees its connection close at once.
  comm_.host_.closeAll();
  stopTraffic();
}

void Health::stopTraffic() {
  // A transport's threads may send from and receive into the caller's buffers (by reference):
  // once an operation has failed or been aborted, they stop, so the caller may free its buffers
  // when the failed call returns.
  for (auto& t : comm_.transports_) t->stopTraffic();
}

void Health::tellFailure(const Status& s) {
  // A failure about another rank (waited for in vain, found dead) leads with that rank: this
  // rank only noticed it, and every rank it tells should name the same culprit.
  const int rank = comm_.rank();
  const bool aboutOther = s.subject() >= 0 && s.subject() != rank;
  const std::string text = aboutOther ? s.message() + " (noticed by " + describePeer(rank) + ")"
                                      : describePeer(rank) + " failed: " + s.message();
  const int told = comm_.bootstrap_->noticeAll(text, nowNs() + kNoticeNs);
  comm_.log().info(kSubsysAll, "failure notice sent to {} of {} other ranks", told, comm_.nranks() - 1);
}

void Health::watchPeers() {
  // Only processes this process can see by pid (same boot and pid namespace), and only when the
  // pid still names the process that joined (its start time matches).
  const std::vector<PeerInfo>& peers = comm_.peers();
  const int rank = comm_.rank();
  const int nranks = comm_.nranks();
  Bootstrap& bootstrap = comm_.bootstrap();
  peerPidfd_.clear();
  peerPidfd_.resize(nranks);
  const PeerInfo& me = peers[rank];
  for (int r = 0; r < nranks; ++r) {
    const PeerInfo& p = peers[r];
    if (r == rank || p.processNonce == me.processNonce || p.pidSpace != me.pidSpace || p.startTicks == 0) continue;
    UniqueFd fd = openPidfd(p.pid);
    if (fd.valid() && processStartTicks(p.pid) == p.startTicks) peerPidfd_[r] = std::move(fd);
  }
  std::vector<std::string> names;
  for (const PeerInfo& p : peers) names.push_back(std::string("host ") + p.host + ", pid " + std::to_string(p.pid));
  bootstrap.describePeers(std::move(names));
  bootstrap.setNoticeHandler([this](int src, const std::string& text) {
    fail(remoteError(text + " (reported by rank " + std::to_string(src) + ")"), false);
  });
  // A notice that came while init ran (before the handler): this communicator is failed already.
  if (std::string early = bootstrap.earlyNotice(); !early.empty()) fail(remoteError(early), false);
}

std::vector<int> Health::exitedPeers() const {
  std::vector<int> gone;
  for (int r = 0; r < static_cast<int>(peerPidfd_.size()); ++r) {
    if (peerPidfd_[r].valid() && pidfdExited(peerPidfd_[r].get())) gone.push_back(r);
  }
  return gone;
}

Status Health::checkPeers(int64_t now, bool force, int waited, int64_t stalledNs) {
  if (!force && now - lastPeerCheckNs_.load(std::memory_order_relaxed) < kPeerCheckEveryNs) return Status::ok();
  lastPeerCheckNs_.store(now, std::memory_order_relaxed);
  // Corrupted data closes the FIFO it came on: the reason, for the lane that finds it closed.
  for (auto& t : comm_.transports_) {
    if (std::vector<Status> bad = t->dataErrors(); !bad.empty()) {
      const int from = bad.front().subject();
      return remoteError("corrupted data from " + describePeer(from) + ": " + bad.front().message()).about(from);
    }
  }
  std::vector<int> gone = exitedPeers();
  if (!force && waited >= 0) {
    gone.erase(std::remove_if(gone.begin(), gone.end(), [waited](int r) { return r != waited; }), gone.end());
  }
  if (gone.empty() && waited >= 0 && waited < comm_.nranks() && waited != comm_.rank() &&
      !peerPidfd_[static_cast<size_t>(waited)].valid()) {
    // A peer this rank cannot watch: a killed process's listener refuses, a lost host answers
    // nothing, and the network it was reached over (an RDMA fabric, a plugin, a blackholed TCP
    // connection) may never say so. The bootstrap probes it once a second, without blocking.
    Status probed = comm_.bootstrap_->probePeer(waited, "data");
    if (!probed.isOk()) {
      Status told = asyncError();
      if (!told.isOk()) return told;
      if (probed.subject() == waited) return probed;         // says it all: unreachable
      if (stalledNs < kRefusedQuietNs) return Status::ok();  // its last data may be on its way
      return remoteError(describePeer(waited) + " is gone: " + probed.message()).about(waited);
    }
  }
  if (gone.empty()) return Status::ok();
  // A rank that failed on its own tells the others before its process ends, but the notice may
  // still sit unread on this rank's listener: give it a moment to say more than this.
  for (int i = 0; i < 20 && !failed_.load(std::memory_order_acquire); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  Status told = asyncError();
  if (!told.isOk()) return told;
  return remoteError(describePeer(gone[0]) + " is gone: its process exited or was killed").about(gone[0]);
}

void Health::flightMark(uint64_t first, uint64_t last, FlightEntry::State state, int result) {
  comm_.diag_.mark(first, last, state, result);
}

void Health::noteStall(const WaitInfo& w, int64_t waitedNs, int64_t* nextWarnNs) {
  comm_.diag_.noteStall(w, waitedNs, nextWarnNs);
}

std::string Health::describePeer(int peer) const { return comm_.describePeer(peer); }

std::string Health::stoppedPeers() const {
  std::string s;
  for (int r = 0; r < static_cast<int>(peerPidfd_.size()); ++r) {
    if (!peerPidfd_[r].valid()) continue;  // only processes this rank watches: same host, same pid space
    const char state = processState(comm_.peers()[r].pid);
    if (state == 'T' || state == 't') s += (s.empty() ? "" : ", ") + describePeer(r);
  }
  return s;
}

int64_t Health::timeoutGraceNs(int peer) const {
  if (peer < 0 || peer >= static_cast<int>(peerPidfd_.size()) || !peerPidfd_[peer].valid()) return 0;
  if (pidfdExited(peerPidfd_[peer].get())) return 0;
  const char state = processState(comm_.peers()[peer].pid);
  if (state == 'T' || state == 't' || state == 'Z' || state == 'X') return 0;
  return std::min<int64_t>(2000000000, comm_.config().timeoutNs / 4);
}

std::string Health::describeChannels() const { return comm_.host_.describeChannels(); }

}  // namespace chorus
