// The communicator's device path (device_path.h): its device side and watchdog, device
// connections and their transports, launches across CUDA streams and the waits for them, and the
// kernels' errors as sentences. The plan's lowering into launches is in device_plan.cc.
#include "src/core/device_path.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "src/core/comm.h"
#include "src/core/stream.h"
#include "src/device/cuda.h"
#include "src/device/prims_device.h"

namespace chorus {

DevicePath::DevicePath(Communicator& comm) : comm_(comm), oneCopy_(std::make_unique<OneCopyExchange>(comm)) {}

Status DevicePath::chooseCudaDevice(const CommOptions& options) {
  if (options.cudaDevice >= 0) {
    CHORUS_TRY(cuda::checkDevice(options.cudaDevice, "config->cudaDevice"));
    cudaDevice_.store(options.cudaDevice, std::memory_order_release);
  } else if (options.deviceFromCurrent && cuda::built() && cuda::driverLoaded()) {
    // As NCCL binds a communicator to the device current at init. A program that loaded CUDA
    // without a device (or a driver without one) leaves it to the first device buffer.
    Result<int> d = cuda::currentDevice();
    if (d.isOk()) cudaDevice_.store(d.value(), std::memory_order_release);
  }
  return Status::ok();
}

void DevicePath::placeRanks(const std::vector<GpuSeat>& seats, bool singleHost) {
  const Communicator& c = comm_;
  transport_.assign(c.nranks_, nullptr);
  counters_.p2pSend.assign(c.nranks_, 0);
  counters_.p2pRecv.assign(c.nranks_, 0);
  channels_ = deviceChannelLimit(c.config_.deviceChannels, seats, singleHost);
  oneGpu_ = true;
  for (const GpuSeat& s : seats) {
    oneGpu_ = oneGpu_ && s.sms > 0 && s.uuid[0] == seats[0].uuid[0] && s.uuid[1] == seats[0].uuid[1];
  }
  const GpuSeat& mine = seats[c.rank_];
  for (int r = 0; r < c.nranks_; ++r) {
    const bool sameGpu = mine.sms > 0 && seats[r].uuid[0] == mine.uuid[0] && seats[r].uuid[1] == mine.uuid[1];
    if (r != c.rank_ && sameGpu && sameProcess(c.peers_[c.rank_], c.peers_[r])) ++threadSharers_;
  }
  // Once per process: every communicator of such a clique would say the same.
  static std::atomic<bool> warned{false};
  const std::string w = sharedGpuWarning(threadSharers_, c.config_.cudaConnections);
  if (!w.empty() && !warned.exchange(true)) c.log_.warn(kSubsysInit, "{}", w);
}

DevicePeer DevicePath::self() const { return DevicePeer{comm_.peers_[comm_.rank_], gpuInfo_}; }

Tuner::Choice DevicePath::choice(const OpInfo& op) const {
  return op.chosen ? op.choice : comm_.tuner_.choose(op.coll, agreedCount(op) * typeSize(op.type), MemKind::kDevice);
}

void DevicePath::choose(OpInfo& op) const {
  if (!op.device || !runsOnChannels(op.coll)) return;
  op.choice = choice(op);
  op.chosen = true;
}

Status DevicePath::ensure() {
  if (deviceComm()) return Status::ok();
  std::lock_guard<std::mutex> g(mu_);
  if (dev_) return Status::ok();
  const int d = cudaDevice();
  if (d < 0) return internalError("a device operation on a communicator with no CUDA device bound");
  // Scratch serves the lanes that stash a piece: per-peer FIFOs' (the direct all-reduce in place).
  const size_t slot = comm_.config_.devicePeerSlots();
  CHORUS_ASSIGN_OR_RETURN(std::vector<cuda::GpuIdentity> reach, cuda::reachableGpus(d));
  gpuInfo_ = GpuInfo();
  std::memcpy(gpuInfo_.uuid, reach[0].uuid, sizeof(gpuInfo_.uuid));
  std::memcpy(gpuInfo_.busId, reach[0].busId, sizeof(gpuInfo_.busId));
  gpuInfo_.ordinal = d;
  for (const cuda::GpuIdentity& g : reach) {
    if (gpuInfo_.nreach == GpuInfo::kMaxReach) break;
    std::memcpy(gpuInfo_.reach[gpuInfo_.nreach++], g.uuid, sizeof(g.uuid));
  }
  CHORUS_ASSIGN_OR_RETURN(dev_, DeviceComm::create(d, comm_.nranks_, slot));
  raw_.store(dev_.get(), std::memory_order_release);
  watch_.start("chorus-devwatch", std::chrono::milliseconds(50), [this] { watch(); });
  comm_.log_.info(kSubsysInit,
                  "device path on GPU {}: {} threads per block, one block per channel and per point-to-point queue", d,
                  device::kLaunchThreads);
  return Status::ok();
}

Status DevicePath::chooseTransport(int peer, const GpuInfo& theirs) {
  const DevicePeer mine = self();
  const DevicePeer other{comm_.peers_[peer], theirs};
  for (auto& t : comm_.transports_) {
    if (!t->canConnectDevice(mine, other)) continue;
    transport_[peer] = t.get();
    comm_.log_.info(kSubsysInit, "device connections to {} (GPU {}{}) via {}", comm_.describePeer(peer),
                    theirs.has() ? std::string(theirs.busId, strnlen(theirs.busId, sizeof(theirs.busId))) : "none",
                    theirs.same(gpuInfo_) ? ", this rank's GPU" : "", t->name());
    return Status::ok();
  }
  return internalError("no transport can carry device buffers to " + comm_.describePeer(peer));
}

void DevicePath::watch() {
  // A peer gone, or a socket closed, is a failure only if kernels that wait on that peer still run
  // a second later: a rank may leave once its part is done while the others finish theirs (as the
  // host path, which looks only when a wait stalls), and a launch that does not involve it must
  // not fail for it however long it runs (failureInFlight).
  constexpr int64_t kGraceNs = 1'000'000'000;
  bool busy = false;
  std::vector<int> inFlight;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (dev_) {
      busy = dev_->busy();
      inFlight = lookLocked();
    }
  }
  Status s;
  if (busy && !comm_.health_.failed()) s = trouble(inFlight);
  if (s.isOk()) {
    troubleSince_ = -1;
  } else if (troubleSince_ < 0) {
    troubleSince_ = nowNs();
  } else if (nowNs() - troubleSince_ >= kGraceNs) {
    comm_.health_.fail(s, true);
    troubleSince_ = -1;
  }
}

Status DevicePath::trouble(const std::vector<int>& inFlight) {
  std::vector<Status> found;
  for (int r : comm_.health_.exitedPeers()) {
    found.push_back(remoteError(comm_.describePeer(r) + " is gone: its process exited or was killed").about(r));
  }
  for (auto& t : comm_.transports_) {
    std::vector<Status> broken = t->kernelFifoErrors();
    found.insert(found.end(), broken.begin(), broken.end());
    broken = t->dataErrors();
    found.insert(found.end(), broken.begin(), broken.end());
  }
  return failureInFlight(found, inFlight);
}

void DevicePath::look(bool tryOnly) {
  std::unique_lock<std::mutex> g(mu_, std::defer_lock);
  if (!tryOnly) {
    g.lock();
  } else if (!g.try_lock()) {
    return;
  }
  if (dev_) (void)lookLocked();
}

std::vector<int> DevicePath::lookLocked() {
  const LaunchTracker::Found f = dev_->look();
  FlightRecorder* flight = comm_.diag_.recorder();
  if (flight && flight->enabled()) {
    const int64_t now = nowNs();
    auto mark = [&](const std::vector<LaunchTracker::Span>& spans, FlightEntry::State state, int result,
                    const std::string& why) {
      for (const LaunchTracker::Span& sp : spans) flight->mark(sp.first, sp.last, state, result, now, why);
    };
    mark(f.done, FlightEntry::State::kDone, 0, {});
    if (!f.faulted.empty() || !f.notRun.empty()) {
      const Status why = fault();
      mark(f.faulted, FlightEntry::State::kFailed, why.code(), why.message());
      mark(f.notRun, FlightEntry::State::kFailed, why.code(),
           "not run: a kernel of an earlier launch of this communicator failed, which stops every later one");
    }
    if (!f.stopped.empty()) {
      chorusResult_t code = chorusRemoteError;  // aborted, when the communicator has no error
      if (const Status e = comm_.health_.recordedError(); !e.isOk()) code = e.code();
      mark(f.stopped, FlightEntry::State::kFailed, code,
           "stopped: the communicator failed or was aborted before its launch was seen finished (it may have "
           "finished just before)");
    }
  }
  return dev_->peersInFlight();
}

void DevicePath::keep(std::unique_ptr<Connection> conn) { connections_.push_back(std::move(conn)); }

Status DevicePath::addEnd(const ConnKey& n, const Connection& conn, const char* transport) {
  const FifoView fifo = conn.kernelFifo();
  CHORUS_TRY(dev_->addConnector(n.family, n.index, n.send, fifo, n.peer));
  if (!n.send) return Status::ok();
  // Pieces a kernel publishes to a socket wait for its proxy: shutdown() lets it send them.
  if (conn.viaProxy()) proxySends_.push_back(conn.fifo());
  const Logger& log = comm_.log_;
  const int rank = comm_.rank_;
  if (n.family == ConnFamily::kRing) {
    log.info(kSubsysInit, "Channel {:02d} : {} -> {} via {} (device)", n.index, rank, n.peer, transport);
  } else if (n.family == ConnFamily::kP2p) {
    log.info(kSubsysP2p, "P2P channel {:02d} : {} -> {} via {} (device)", p2pChannel(n.index), rank, n.peer, transport);
  } else {
    log.info(kSubsysInit, "{} : {} -> {} via {} (device)", connFamilyName(n.family), rank, n.peer, transport);
  }
  // The FIFO is in the receiver's device memory: the same device as this rank's means two ranks
  // share a GPU, which NCCL refuses and Chorus allows.
  auto where = cuda::memInfo(fifo.ctrl);
  if (!sharedGpuLogged_ && where.isOk() && where.value().ordinal == dev_->device()) {
    sharedGpuLogged_ = true;
    log.info(kSubsysInit,
             "rank {} shares GPU {} with rank {}: several ranks on one GPU are allowed (NCCL refuses them); their "
             "kernels run side by side, each on part of the GPU",
             rank, dev_->device(), n.peer);
  }
  return Status::ok();
}

Status DevicePath::fork(void* cudaStream) {
  std::lock_guard<std::mutex> g(mu_);
  return dev_->forkFrom(cudaStream);
}

Status DevicePath::join(void* cudaStream) {
  std::lock_guard<std::mutex> g(mu_);
  return dev_->joinInto(cudaStream);
}

Status DevicePath::enqueue(const std::vector<device::LaunchParams>& launches, void* cudaStream,
                           std::vector<FlightEntry> flight, bool viaOwn) {
  std::lock_guard<std::mutex> g(mu_);
  FlightRecorder* recorder = comm_.diag_.recorder();
  // The entries go in first, under mu_ with the launch: the watchdog's look, which marks
  // them, waits for both.
  LaunchTracker::Span span;
  if (recorder && recorder->enabled() && !flight.empty()) {
    const int64_t now = nowNs();
    for (FlightEntry& e : flight) {
      e.state = FlightEntry::State::kEnqueued;
      e.gpu = dev_->device();
      e.cudaStream = reinterpret_cast<uintptr_t>(cudaStream);
      e.issuedNs = now;
    }
    span.first = recorder->issueAll(flight);
    span.last = span.first + flight.size() - 1;
  }
  Result<bool> captured = dev_->enqueue(launches, viaOwn ? nullptr : cudaStream, span);
  if (!captured.isOk()) {
    if (span.first) {
      recorder->mark(span.first, span.last, FlightEntry::State::kFailed, captured.status().code(), nowNs(),
                     "its launch failed: " + captured.status().message());
    }
    return captured.status();
  }
  if (span.first && captured.value()) {
    recorder->mark(span.first, span.last, FlightEntry::State::kCaptured, 0, nowNs());
  } else if (span.first && launches.empty()) {
    recorder->mark(span.first, span.last, FlightEntry::State::kDone, 0, nowNs());  // nothing to run
  }
  return Status::ok();
}

Status DevicePath::fault() const {
  const device::DeviceError& e = dev_->error();
  const int nranks = comm_.nranks_;
  const auto why = static_cast<device::DeviceFault>(e.status);
  std::string where;
  switch (static_cast<device::SeqKind>(e.seqKind)) {
    case device::SeqKind::kColl:
      where = "channel " + std::to_string(e.seqIndex);
      break;
    case device::SeqKind::kP2pSend:
    case device::SeqKind::kP2pRecv: {
      // seqIndex is p2pSeqIndex: the peer, and the channel the transfer's part ran on.
      const bool send = static_cast<device::SeqKind>(e.seqKind) == device::SeqKind::kP2pSend;
      const int channel = e.seqIndex / nranks;
      where = std::string("its point-to-point queue ") + (send ? "to" : "from") + " rank " +
              std::to_string(e.seqIndex % nranks) + (channel ? " (channel " + std::to_string(channel) + ")" : "");
      break;
    }
  }
  const bool oneCopy = e.waiting == 3 || e.waiting == 4;
  const std::string at = " on " + where + (oneCopy ? "" : ", step " + std::to_string(e.step) + " of its schedule") +
                         " (operation #" + std::to_string(e.seq) + " there)";
  const std::string peer = e.peer >= 0 ? comm_.describePeer(e.peer) : std::string("its peer");
  std::string waited = "with " + peer;
  if (e.waiting == 1) waited = "waiting for data from " + peer;
  if (e.waiting == 2) waited = "waiting for room in the FIFO to " + peer;
  if (e.waiting == 3) waited = "waiting for " + peer + " to reach a one-copy collective";
  if (e.waiting == 4) waited = "waiting for " + peer + " to finish its part of a one-copy collective";
  switch (why) {
    case device::DeviceFault::kTimeout: {
      Status s =
          systemError("a kernel of this communicator (GPU " + std::to_string(dev_->device()) + ") gave up after " +
                      std::to_string(comm_.config_.timeoutNs / 1'000'000'000) + " s without progress, " + waited + at +
                      ". That rank never issued the matching operation, or is stuck; CHORUS_TIMEOUT sets the "
                      "limit." +
                      sharedGpuStallHint(threadSharers_, comm_.config_.cudaConnections));
      return s.about(e.peer);
    }
    case device::DeviceFault::kAborted:
      return remoteError("the communicator was aborted while a kernel was " + waited + at);
    case device::DeviceFault::kMismatch:
      if (oneCopy) {
        return invalidUsage("a kernel of this communicator found " + peer + " at a later one-copy collective" + at +
                            ": the ranks issued different operations");
      }
      return invalidUsage("a kernel of this communicator received a piece from " + peer + at +
                          " that belongs to another operation (expected " + std::to_string(e.bytes) +
                          " bytes of this one): the ranks issued different operations, or sizes");
    case device::DeviceFault::kRefused:
      return internalError("a kernel of this communicator was offered " + peer + "'s memory to read in place" + at +
                           ", which kernels do not take");
    default:
      return internalError("a kernel of this communicator failed" + at + " (fault " + std::to_string(e.status) + ")");
  }
}

}  // namespace chorus

namespace chorus {

Status DevicePath::exchangeInfo(std::vector<std::pair<Communicator*, std::vector<ConnKey>>>& needs) {
  // A device connection here means its peer has the matching one in this launch: the two
  // exchange their records now, both before any setup, and choose alike.
  std::vector<std::pair<Communicator*, std::vector<int>>> ask;
  for (auto& [c, keys] : needs) {
    std::vector<int> peers;
    for (const auto& n : keys) {
      if (n.device && !c->devicePath().transport(n.peer) &&
          std::find(peers.begin(), peers.end(), n.peer) == peers.end()) {
        peers.push_back(n.peer);
      }
    }
    if (!peers.empty()) ask.emplace_back(c, std::move(peers));
  }
  const uint64_t tag = makeTag(TagSpace::kDeviceInfo, 0);
  for (auto& [c, peers] : ask) {
    const GpuInfo& mine = c->devicePath().gpuInfo_;
    for (int p : peers) {
      if (p != c->rank()) CHORUS_TRY(c->bootstrap().send(p, tag, &mine, sizeof(GpuInfo)));
    }
  }
  for (auto& [c, peers] : ask) {
    for (int p : peers) {
      GpuInfo theirs = c->devicePath().gpuInfo_;
      if (p != c->rank()) {
        CHORUS_ASSIGN_OR_RETURN(std::vector<char> bytes, c->bootstrap().recv(p, tag));
        if (bytes.size() != sizeof(GpuInfo)) {
          return internalError(c->describePeer(p) + " sent a GPU record of " + std::to_string(bytes.size()) +
                               " bytes, not " + std::to_string(sizeof(GpuInfo)) + " (another build of Chorus?)");
        }
        std::memcpy(&theirs, bytes.data(), sizeof(theirs));
      }
      CHORUS_TRY(c->devicePath().chooseTransport(p, theirs));
    }
  }
  return Status::ok();
}

namespace {

// The CUDA stream a wrapper launches on: its own, or the legacy default stream for 0, as NCCL
// takes it (never the communicator's own stream, which nothing of the caller's waits for).
void* launchStreamOf(const Stream& s) { return s.cudaStream() ? s.cudaStream() : cuda::legacyDefaultStream(); }

}  // namespace

Status DevicePath::launch(const std::vector<DeviceWork>& work) {
  std::vector<std::pair<Communicator*, const std::vector<OpInfo>*>> ops;
  for (const DeviceWork& w : work) ops.emplace_back(w.comm, w.ops);
  std::vector<std::vector<const device::OneCopyArgs*>> oneCopy;
  if (Status s = OneCopyExchange::exchange(ops, &oneCopy); !s.isOk()) {
    for (const DeviceWork& w : work) w.comm->health().setAsyncError(s);
    return s;
  }
  std::vector<std::vector<device::LaunchParams>> launches(work.size());
  std::vector<std::vector<FlightEntry>> flight(work.size());  // recorded when enqueued
  for (size_t i = 0; i < work.size(); ++i) {
    auto r = work[i].comm->devicePath().plan(*work[i].ops, oneCopy[i], &flight[i]);
    if (!r.isOk()) {
      work[i].comm->health().setAsyncError(r.status());
      return r.status();
    }
    launches[i] = r.take();
  }
  // CUDA streams (launchStreamOf). Communicators of this launch that share a CUDA stream, and
  // one whose ops came on several, run on their own streams, forked from every stream concerned
  // and joined back, all forks before any launch and every join after (DeviceComm::forkFrom).
  std::vector<void*> cudaStream(work.size(), nullptr);
  std::vector<char> viaOwn(work.size(), 0);
  for (size_t i = 0; i < work.size(); ++i) {
    const std::shared_ptr<Stream>& s = work[i].stream;
    if (s && s->isCuda()) cudaStream[i] = launchStreamOf(*s);
    viaOwn[i] = !work[i].also->empty();
  }
  for (size_t i = 0; i < work.size(); ++i) {
    for (size_t j = 0; j < work.size() && cudaStream[i]; ++j) {
      if (j != i && cudaStream[j] == cudaStream[i]) viaOwn[i] = 1;
    }
  }
  // Every stream communicator i's launch joins.
  auto streamsOf = [&](size_t i) {
    std::vector<void*> all{cudaStream[i]};
    for (const auto& s : *work[i].also) all.push_back(launchStreamOf(*s));
    return all;
  };
  size_t forked = 0;
  Status failed;
  for (; forked < work.size() && failed.isOk(); ++forked) {
    if (!viaOwn[forked]) continue;
    for (void* s : streamsOf(forked)) {
      if (failed.isOk()) failed = work[forked].comm->devicePath().fork(s);
    }
  }
  std::vector<Communicator*> waitHere;
  for (size_t i = 0; i < work.size() && failed.isOk(); ++i) {
    Communicator* c = work[i].comm;
    DevicePath& path = c->devicePath();
    const std::shared_ptr<Stream>& s = work[i].stream;
    if (cudaStream[i]) {
      failed = path.enqueue(launches[i], cudaStream[i], std::move(flight[i]), viaOwn[i]);
      continue;
    }
    if (s) {
      c->work().started();
      s->enqueue([c, l = std::move(launches[i]), f = std::move(flight[i])]() mutable {
        Status st = c->devicePath().enqueue(l, nullptr, std::move(f));
        if (st.isOk()) st = wait({c});
        c->work().finished();
        return st;
      });
      continue;
    }
    // The NULL stream is synchronous, as a CUDA call without a stream is: its kernels start after
    // the legacy default stream's work so far (a cudaMemcpy from pageable memory may return before
    // its bytes arrive, and the own stream is non-blocking).
    failed = path.fork(cuda::legacyDefaultStream());
    if (failed.isOk()) failed = path.enqueue(launches[i], nullptr, std::move(flight[i]));
    if (failed.isOk()) waitHere.push_back(c);
  }
  // Joined back even after a failure: a capture must end with every forked stream joined.
  for (size_t i = 0; i < forked; ++i) {
    if (!viaOwn[i]) continue;
    for (void* s : streamsOf(i)) {
      Status j = work[i].comm->devicePath().join(s);
      if (failed.isOk()) failed = j;
    }
  }
  CHORUS_TRY(failed);
  return waitHere.empty() ? Status::ok() : wait(waitHere);
}

Status DevicePath::wait(const std::vector<Communicator*>& comms, bool everyStream) {
  const int64_t start = nowNs();
  for (int polls = 0;; ++polls) {
    bool done = true;
    for (Communicator* c : comms) {
      const DeviceComm* d = c->devicePath().deviceComm();
      done = done && (everyStream ? !d->busy() : d->ownDone());
    }
    if (done) break;
    for (Communicator* c : comms) {
      const int64_t limit = c->config().timeoutNs + 5'000'000'000;
      if (c->health().aborted() || nowNs() - start > limit) {
        // The kernels see the abort word at their next check.
        c->devicePath().deviceComm()->stop();
      }
    }
    if (polls < 2000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  // Their flight entries done (or failed, for a kernel's fault) now, not at the watchdog's next look.
  for (Communicator* c : comms) c->devicePath().look();
  for (Communicator* c : comms) {
    if (c->health().aborted()) return remoteError("the communicator was aborted");
    CHORUS_TRY(c->health().asyncError());  // a kernel's failure (DeviceComm::faulted) becomes the communicator's
  }
  return Status::ok();
}

void DevicePath::stop(int64_t waitNs) {
  DeviceComm* d = deviceComm();
  if (!d) return;
  d->stop();
  if (waitNs > 0 && !d->drain(nowNs() + waitNs)) {
    comm_.log_.warn(kSubsysAll,
                    "chorusCommAbort: a kernel of this communicator is still queued after {} s (work before it on "
                    "its stream has not finished)",
                    waitNs / 1'000'000'000);
  }
}

void DevicePath::shutdown() {
  if (dev_) {
    // Kernels still enqueued read the FIFOs and state freed below: wait for them (as long as a
    // wait may last), else stop them.
    const int64_t deadline = nowNs() + comm_.config_.timeoutNs;
    if (!dev_->drain(deadline)) dev_->stop();
    // Pieces a kernel published to a socket may still wait for the proxy (a host-staged FIFO's
    // counters are host memory): until the proxy has sent them all.
    auto pending = [this] {
      for (const FifoView& f : proxySends_) {
        if (!f.closed() &&
            f.ctrl->head.load(std::memory_order_acquire) != f.ctrl->tail.load(std::memory_order_acquire)) {
          return true;
        }
      }
      return false;
    };
    while (!comm_.health_.aborted() && !comm_.health_.failed() && nowNs() < deadline && pending()) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  // The watchdog ran through the waits above: a kernel waiting on a dead peer still ends within
  // seconds rather than at the deadline.
  watch_.stop();
  if (dev_) {
    std::lock_guard<std::mutex> g(mu_);
    raw_.store(nullptr, std::memory_order_release);
    dev_.reset();
  }
}

}  // namespace chorus
