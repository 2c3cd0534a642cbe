// What a communicator tells about itself (src/core/diagnostics.h): the flight recorder, stall
// warnings, the settings it runs with, state dumps and Chrome traces.
#include "src/core/diagnostics.h"

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
  std::set<const Diagnostics*> comms;
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
      for (const Diagnostics* d : r.comms) (void)d->writeDump("signal");
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

void Diagnostics::logEnvironment() const {
  const Config& config = comm_.config();
  if (config.printVersion && comm_.rank() == 0) {
    // Not through the level filter: CHORUS_DEBUG=VERSION prints this line and nothing else.
    Logger(LogLevel::kInfo, kSubsysAll, comm_.rank())
        .info(kSubsysAll, "Chorus version {}.{}.{}", CHORUS_MAJOR, CHORUS_MINOR, CHORUS_PATCH);
  }
  for (const std::string& w : config.envWarnings) comm_.log().warn(kSubsysEnv, "{}", w);
  for (const std::string& line : config.envSettings) comm_.log().info(kSubsysEnv, "{}", line);
}

void Diagnostics::start() {
  const Config& config = comm_.config();
  flight_ = std::make_unique<FlightRecorder>(static_cast<size_t>(kFlightEntries.get(config.env)));
  if (kFlightDump.get(config.env).empty()) return;
  DumpRegistry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  startDumpThread(static_cast<int>(kFlightSignal.get(config.env)));
  r.comms.insert(this);
}

void Diagnostics::stop() {
  if (!flight_) return;
  const Config& config = comm_.config();
  if (kFlightTrace.get(config.env)) {
    Status s = writeTrace(dumpName() + ".json");
    if (!s.isOk()) comm_.log().warn(kSubsysAll, "{}", s.message());
  }
  if (!kFlightDump.get(config.env).empty()) {
    DumpRegistry& r = registry();
    std::lock_guard<std::mutex> g(r.mu);
    r.comms.erase(this);
  }
}

namespace {

FlightRecorder::HostOp hostOpOf(const OpInfo& op, uint64_t seq, const char* algo) {
  // A send's or receive's peer shows as its root.
  const bool rooted = collective(op.coll).root != Collective::Root::kNone;
  return FlightRecorder::HostOp{seq,
                                collName(op.coll),
                                algo,
                                op.count,
                                static_cast<int>(op.type),
                                reduces(op.coll) ? static_cast<int>(op.op) : -1,
                                rooted ? op.root : -1};
}

}  // namespace

FlightEntry Diagnostics::entry(const OpInfo& op, uint64_t seq, const char* algo) {
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

uint64_t Diagnostics::record(const OpInfo& op, uint64_t seq, const char* algo, int64_t now, bool running) {
  if (!flight_ || !flight_->enabled()) return 0;
  return flight_->issueHost(hostOpOf(op, seq, algo), running, now);
}

void Diagnostics::mark(uint64_t first, uint64_t last, FlightEntry::State state, int result) {
  if (flight_) flight_->mark(first, last, state, result, nowNs());
}

std::string Diagnostics::lastOps(size_t n) const {
  if (!flight_ || !flight_->enabled()) return {};
  const auto entries = flight_->snapshot();
  return entries.empty() ? std::string() : FlightRecorder::text(entries, n);
}

void Diagnostics::noteStall(const WaitInfo& w, int64_t waitedNs, int64_t* nextWarnNs) const {
  const Config& config = comm_.config();
  const int64_t first = config.stallWarnNs();
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
  comm_.log().warn(
      kSubsysAll, "{} has made no progress for {:.1f} s: waiting for {} {} at step {} ({}). Channels: {}. {}", what,
      static_cast<double>(waitedNs) / 1e9, w.forData ? "data from" : "free space at", comm_.describePeer(w.peer),
      w.step, primName(w.prim), comm_.host_.describeChannels(), config.deadlineText());
}

std::string Diagnostics::state() const {
  const Communicator& c = comm_;
  std::string s = fmt::format("Chorus communicator {:#x}{} rank {} of {} on host {} pid {}: {}", c.commId_,
                              c.name_.empty() ? "" : " (" + c.name_ + ")", c.rank_, c.nranks_,
                              c.peers_.empty() ? hostName() : std::string(c.peers_[c.rank_].host), ::getpid(),
                              stateName(c.state()));
  Status e = c.health_.asyncError();
  if (!e.isOk()) s += fmt::format(", failed: {}", e.message());
  if (c.health_.aborted()) s += ", aborted";
  s += fmt::format("\n  launches outstanding: {}\n", c.work_.outstanding());
  if (const DeviceComm* d = c.device_.deviceComm()) {
    // As of the device watchdog's last look (every 50 ms): no wait on the device here.
    s += fmt::format("  device path on GPU {}: {} kernel launches not yet seen finished{}\n", d->device(),
                     d->launchesInFlight(), d->faulted() ? ", a kernel recorded a fault" : "");
  }
  if (const std::string channels = c.host_.describeChannels(); !channels.empty()) s += "  channels: " + channels + "\n";
  if (!flight_ || !flight_->enabled()) return s + "  flight recorder off (CHORUS_FLIGHT_ENTRIES=0)\n";
  const auto entries = flight_->snapshot();
  s += fmt::format("  last {} operations (oldest first; CHORUS_FLIGHT_ENTRIES={}):\n", entries.size(),
                   static_cast<size_t>(kFlightEntries.get(c.config().env)));
  return s + FlightRecorder::text(entries);
}

std::string Diagnostics::dumpName() const {
  const Communicator& c = comm_;
  const std::string& prefix = kFlightDump.get(c.config().env);
  std::string name = c.name_.empty() ? fmt::format("{:x}", c.commId_) : c.name_;
  for (char& ch : name) {
    if (ch == '/' || static_cast<unsigned char>(ch) < 0x20) ch = '_';  // a file name, not a path
  }
  return fmt::format("{}.{}.{}", prefix.empty() ? "chorus-flight" : prefix, name, c.rank_);
}

Status Diagnostics::writeTrace(const std::string& path) const {
  if (!flight_ || !flight_->enabled()) return Status::ok();
  makePrivateFile(path);
  std::ofstream f(path, std::ios::trunc);
  f << FlightRecorder::chromeTrace(flight_->snapshot(), comm_.rank_,
                                   comm_.name_.empty() ? fmt::format("comm {:x}", comm_.commId_) : comm_.name_);
  f.close();
  if (!f) return systemError("could not write the flight recorder's trace to " + path);
  return Status::ok();
}

Status Diagnostics::writeDump(const std::string& why) const {
  const Config& config = comm_.config();
  if (kFlightDump.get(config.env).empty()) return Status::ok();
  const std::string path = dumpName() + ".txt";
  makePrivateFile(path);
  std::ofstream f(path, std::ios::app);
  f << "== " << why << "\n" << state();
  f.close();
  if (!f) return systemError("could not write the state dump to " + path + " (CHORUS_FLIGHT_DUMP)");
  if (kFlightTrace.get(config.env)) CHORUS_TRY(writeTrace(dumpName() + ".json"));
  comm_.log().warn(kSubsysAll, "state dumped to {} ({})", path, why);
  return Status::ok();
}

}  // namespace chorus
