// What a communicator tells about itself when something goes wrong: the flight recorder, stall
// warnings, state dumps (on request, on failure, on abort, on a signal) and Chrome traces.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>

#include <fmt/format.h>

#include "src/common/os.h"
#include "src/core/comm.h"

namespace chorus {
namespace {

const IntSetting kFlightEntries{"CHORUS_FLIGHT_ENTRIES",
                                1024,
                                0,
                                1 << 20,
                                SettingScope::kRank,
                                "operations the flight recorder keeps; 0 turns it off"};
const TextSetting kFlightDump{"CHORUS_FLIGHT_DUMP", SettingScope::kRank, "path prefix of state dumps"};
const BoolSetting kFlightTrace{"CHORUS_FLIGHT_TRACE", false, SettingScope::kRank, "1: a Chrome trace beside each dump"};
const IntSetting kFlightSignal{"CHORUS_FLIGHT_SIGNAL",
                               10,
                               1,
                               64,
                               SettingScope::kRank,
                               "the signal that makes every communicator dump (with CHORUS_FLIGHT_DUMP)"};

// Communicators that dump on CHORUS_FLIGHT_SIGNAL. The handler only writes a byte to a pipe; a
// thread of its own (started with the first such communicator, never stopped) does the dumping,
// under the registry's mutex, which a communicator's destructor takes to leave.
struct DumpRegistry {
  std::mutex mu;
  std::set<const Communicator*> comms;
  int pipe[2] = {-1, -1};
  bool started = false;
};

DumpRegistry& registry() {
  static DumpRegistry* r = new DumpRegistry();  // never destroyed: the thread may outlive main
  return *r;
}

void onDumpSignal(int) {
  const int saved = errno;
  const char b = 1;
  (void)!::write(registry().pipe[1], &b, 1);
  errno = saved;
}

void startDumpThread(int sig) {
  DumpRegistry& r = registry();  // r.mu held by the caller
  if (r.started) return;
  if (::pipe2(r.pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
  r.started = true;
  std::thread([&r, sig] {
    setThreadName("chorus-dump");
    // The thread inherits the mask of whichever thread made the first communicator. Programs and
    // launchers often block signals in their threads; unblocked here, a process-directed signal
    // (kill -USR1 PID) always has this thread to land on.
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, sig);
    ::pthread_sigmask(SIG_UNBLOCK, &only, nullptr);
    while (true) {
      pollfd p{r.pipe[0], POLLIN, 0};
      if (::poll(&p, 1, -1) <= 0) continue;
      char buf[64];
      while (::read(r.pipe[0], buf, sizeof(buf)) > 0) {
      }
      std::lock_guard<std::mutex> g(r.mu);
      for (const Communicator* c : r.comms) (void)c->writeDump("signal");
    }
  }).detach();
  struct sigaction sa {};
  sa.sa_handler = onDumpSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(sig, &sa, nullptr);
}

const char* stateName(Communicator::State s) {
  switch (s) {
    case Communicator::State::kInitializing:
      return "initializing";
    case Communicator::State::kReady:
      return "ready";
    case Communicator::State::kFailed:
      return "failed";
    case Communicator::State::kFinalized:
      return "finalized";
  }
  return "?";
}

}  // namespace

void Communicator::startFlight() {
  flight_ = std::make_unique<FlightRecorder>(static_cast<size_t>(kFlightEntries.get(config_.env)));
  if (kFlightDump.get(config_.env).empty()) return;
  DumpRegistry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  startDumpThread(static_cast<int>(kFlightSignal.get(config_.env)));
  r.comms.insert(this);
}

void Communicator::stopFlight() {
  if (!flight_) return;
  if (kFlightTrace.get(config_.env)) {
    Status s = writeTrace(dumpName() + ".json");
    if (!s.isOk()) log_.warn(kSubsysAll, "{}", s.message());
  }
  if (!kFlightDump.get(config_.env).empty()) {
    DumpRegistry& r = registry();
    std::lock_guard<std::mutex> g(r.mu);
    r.comms.erase(this);
  }
}

namespace {

FlightRecorder::HostOp hostOpOf(const OpInfo& op, uint64_t seq, const char* algo) {
  const bool rooted = op.coll == CollType::kBroadcast || op.coll == CollType::kReduce || op.coll == CollType::kGather ||
                      op.coll == CollType::kScatter || op.coll == CollType::kSend || op.coll == CollType::kRecv;
  return FlightRecorder::HostOp{seq,
                                collName(op.coll),
                                algo,
                                op.count,
                                static_cast<int>(op.type),
                                reduces(op.coll) ? static_cast<int>(op.op) : -1,
                                rooted ? op.root : -1};
}

}  // namespace

FlightEntry Communicator::flightEntry(const OpInfo& op, uint64_t seq, const char* algo) {
  const FlightRecorder::HostOp h = hostOpOf(op, seq, algo);
  FlightEntry e;
  e.seq = h.seq;
  e.coll = h.coll;
  e.algo = h.algo;
  e.count = h.count;
  e.type = h.type;
  e.op = h.op;
  e.root = h.root;
  return e;
}

uint64_t Communicator::recordFlight(const OpInfo& op, uint64_t seq, const char* algo, int64_t now, bool running) {
  if (!flight_ || !flight_->enabled()) return 0;
  return flight_->issueHost(hostOpOf(op, seq, algo), running, now);
}

void Communicator::noteStall(const WaitInfo& w, int64_t waitedNs, int64_t* nextWarnNs) {
  const int64_t first = config_.stallWarnNs();
  if (waitedNs < first) {
    *nextWarnNs = first;  // progress since the last warning: start over
    return;
  }
  if (*nextWarnNs == 0) *nextWarnNs = first;
  if (waitedNs < *nextWarnNs) return;
  *nextWarnNs = waitedNs * 2;  // again after twice as long, until the timeout
  // The operation waited in, from the recorder: the newest running entry with that sequence.
  std::string what = "operation #" + std::to_string(w.seq);
  if (flight_) {
    const auto entries = flight_->snapshot();
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
      if (it->seq == w.seq && it->state == FlightEntry::State::kRunning) {
        what = fmt::format("{} #{} (count {} {}, algo {})", it->coll, it->seq, it->count,
                           typeName(static_cast<chorusDataType_t>(it->type)), it->algo);
        break;
      }
    }
  }
  log_.warn(kSubsysAll, "{} has made no progress for {:.1f} s: waiting for {} {} at step {} ({}). Channels: {}. {}",
            what, static_cast<double>(waitedNs) / 1e9, w.forData ? "data from" : "free space at", describePeer(w.peer),
            w.step, primName(w.prim), describeChannels(), config_.deadlineText());
}

std::string Communicator::dumpState() const {
  std::string s =
      fmt::format("Chorus communicator {:#x}{} rank {} of {} on host {} pid {}: {}", commId_,
                  name_.empty() ? "" : " (" + name_ + ")", rank_, nranks_,
                  peers_.empty() ? hostName() : std::string(peers_[rank_].host), ::getpid(), stateName(state()));
  Status e = asyncError();
  if (!e.isOk()) s += fmt::format(", failed: {}", e.message());
  if (aborted()) s += ", aborted";
  s += fmt::format("\n  launches outstanding: {}\n", work_.outstanding());
  if (const DeviceComm* d = device_.deviceComm()) {
    // As of the device watchdog's last look (every 50 ms): no wait on the device here.
    s += fmt::format("  device path on GPU {}: {} kernel launches not yet seen finished{}\n", d->device(),
                     d->launchesInFlight(), d->faulted() ? ", a kernel recorded a fault" : "");
  }
  if (const std::string channels = host_.describeChannels(); !channels.empty()) s += "  channels: " + channels + "\n";
  if (!flight_ || !flight_->enabled()) return s + "  flight recorder off (CHORUS_FLIGHT_ENTRIES=0)\n";
  const auto entries = flight_->snapshot();
  s += fmt::format("  last {} operations (oldest first; CHORUS_FLIGHT_ENTRIES={}):\n", entries.size(),
                   static_cast<size_t>(kFlightEntries.get(config_.env)));
  return s + FlightRecorder::text(entries);
}

std::string Communicator::dumpName() const {
  const std::string prefix = kFlightDump.get(config_.env).empty() ? "chorus-flight" : kFlightDump.get(config_.env);
  std::string name = name_.empty() ? fmt::format("{:x}", commId_) : name_;
  for (char& ch : name) {
    if (ch == '/' || static_cast<unsigned char>(ch) < 0x20) ch = '_';  // a file name, not a path
  }
  return fmt::format("{}.{}.{}", prefix, name, rank_);
}

Status Communicator::writeTrace(const std::string& path) const {
  if (!flight_ || !flight_->enabled()) return Status::ok();
  makePrivateFile(path);
  std::ofstream f(path, std::ios::trunc);
  f << FlightRecorder::chromeTrace(flight_->snapshot(), rank_,
                                   name_.empty() ? fmt::format("comm {:x}", commId_) : name_);
  f.close();
  if (!f) return systemError("could not write the flight recorder's trace to " + path);
  return Status::ok();
}

Status Communicator::writeDump(const std::string& why) const {
  if (kFlightDump.get(config_.env).empty()) return Status::ok();
  const std::string path = dumpName() + ".txt";
  makePrivateFile(path);
  std::ofstream f(path, std::ios::app);
  f << "== " << why << "\n" << dumpState();
  f.close();
  if (!f) return systemError("could not write the state dump to " + path + " (CHORUS_FLIGHT_DUMP)");
  if (kFlightTrace.get(config_.env)) CHORUS_TRY(writeTrace(dumpName() + ".json"));
  log_.warn(kSubsysAll, "state dumped to {} ({})", path, why);
  return Status::ok();
}

}  // namespace chorus
