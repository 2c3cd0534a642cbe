// The communicator's device path: its device side, device connections, the algorithm a device
// collective runs, launches, and the kernels' errors as sentences. Planning is in launch.cc
// (planDevice), next to the host path's.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "src/core/comm.h"
#include "src/device/cuda.h"
#include "src/device/prims_device.h"

namespace chorus {

Status Communicator::ensureDevice() {
  if (deviceComm()) return Status::ok();
  std::lock_guard<std::mutex> g(deviceMu_);
  if (device_) return Status::ok();
  const int d = cudaDevice();
  if (d < 0) return internalError("a device operation on a communicator with no CUDA device bound");
  // Scratch serves the lanes that stash a piece: per-peer FIFOs' (the direct all-reduce in place).
  const size_t slot = config_.devicePeerSlots();
  CHORUS_ASSIGN_OR_RETURN(std::vector<cuda::GpuIdentity> reach, cuda::reachableGpus(d));
  gpuInfo_ = GpuInfo();
  std::memcpy(gpuInfo_.uuid, reach[0].uuid, sizeof(gpuInfo_.uuid));
  std::memcpy(gpuInfo_.busId, reach[0].busId, sizeof(gpuInfo_.busId));
  gpuInfo_.ordinal = d;
  for (const cuda::GpuIdentity& g : reach) {
    if (gpuInfo_.nreach == GpuInfo::kMaxReach) break;
    std::memcpy(gpuInfo_.reach[gpuInfo_.nreach++], g.uuid, sizeof(g.uuid));
  }
  CHORUS_ASSIGN_OR_RETURN(device_, DeviceComm::create(d, nranks_, slot));
  deviceRaw_.store(device_.get(), std::memory_order_release);
  deviceWatch_.start("chorus-devwatch", std::chrono::milliseconds(50), [this] { watchDevice(); });
  log_.info(kSubsysInit,
            "device path on GPU {}: {} threads per block, one block per channel and per point-to-point queue", d,
            device::kLaunchThreads);
  return Status::ok();
}

Status Communicator::chooseDeviceTransport(int peer, const GpuInfo& theirs) {
  const DevicePeer self = devicePeer();
  const DevicePeer other{peers_[peer], theirs};
  for (auto& t : transports_) {
    if (!t->canConnectDevice(self, other)) continue;
    deviceTransport_[peer] = t.get();
    log_.info(kSubsysInit, "device connections to {} (GPU {}{}) via {}", describePeer(peer),
              theirs.has() ? std::string(theirs.busId, strnlen(theirs.busId, sizeof(theirs.busId))) : "none",
              theirs.same(gpuInfo_) ? ", this rank's GPU" : "", t->name());
    return Status::ok();
  }
  return internalError("no transport can carry device buffers to " + describePeer(peer));
}

void Communicator::watchDevice() {
  // A peer gone, or a socket closed, is a failure only if kernels that wait on that peer still run
  // a second later: a rank may leave once its part is done while the others finish theirs (as the
  // host path, which looks only when a wait stalls), and a launch that does not involve it must
  // not fail for it however long it runs (failureInFlight).
  constexpr int64_t kGraceNs = 1'000'000'000;
  bool busy = false;
  std::vector<int> inFlight;
  {
    std::lock_guard<std::mutex> g(deviceMu_);
    if (device_) {
      busy = device_->busy();
      inFlight = lookAtDeviceLocked();
    }
  }
  Status s;
  if (busy && !failed_.load(std::memory_order_acquire)) s = deviceTrouble(inFlight);
  if (s.isOk()) {
    deviceTroubleSince_ = -1;
  } else if (deviceTroubleSince_ < 0) {
    deviceTroubleSince_ = nowNs();
  } else if (nowNs() - deviceTroubleSince_ >= kGraceNs) {
    fail(s, true);
    deviceTroubleSince_ = -1;
  }
}

Status Communicator::deviceTrouble(const std::vector<int>& inFlight) {
  std::vector<Status> found;
  for (int r : exitedPeers()) {
    found.push_back(remoteError(describePeer(r) + " is gone: its process exited or was killed").about(r));
  }
  for (auto& t : transports_) {
    std::vector<Status> broken = t->kernelFifoErrors();
    found.insert(found.end(), broken.begin(), broken.end());
  }
  return failureInFlight(found, inFlight);
}

void Communicator::lookAtDevice() {
  std::lock_guard<std::mutex> g(deviceMu_);
  if (device_) (void)lookAtDeviceLocked();
}

std::vector<int> Communicator::lookAtDeviceLocked() {
  const LaunchTracker::Found f = device_->look();
  if (flight_ && flight_->enabled()) {
    const int64_t now = nowNs();
    auto mark = [&](const std::vector<LaunchTracker::Span>& spans, FlightEntry::State state, int result,
                    const std::string& why) {
      for (const LaunchTracker::Span& sp : spans) flight_->mark(sp.first, sp.last, state, result, now, why);
    };
    mark(f.done, FlightEntry::State::kDone, 0, {});
    if (!f.faulted.empty() || !f.notRun.empty()) {
      const Status fault = deviceFault();
      mark(f.faulted, FlightEntry::State::kFailed, fault.code(), fault.message());
      mark(f.notRun, FlightEntry::State::kFailed, fault.code(),
           "not run: a kernel of an earlier launch of this communicator failed, which stops every later one");
    }
    if (!f.stopped.empty()) {
      chorusResult_t code = chorusRemoteError;  // aborted, when the communicator has no error
      {
        std::lock_guard<std::mutex> e(errMu_);
        if (!asyncError_.isOk()) code = asyncError_.code();
      }
      mark(f.stopped, FlightEntry::State::kFailed, code,
           "stopped: the communicator failed or was aborted before its launch was seen finished (it may have "
           "finished just before)");
    }
  }
  return device_->peersInFlight();
}

Status Communicator::addDeviceEnd(const ConnNeed& n, const Connection& conn, const char* transport) {
  const FifoView fifo = conn.kernelFifo();
  CHORUS_TRY(device_->addConnector(n.family, n.index, n.send, fifo, n.peer));
  if (!n.send) return Status::ok();
  if (n.family == ConnFamily::kRing) {
    log_.info(kSubsysInit, "Channel {:02d} : {} -> {} via {} (device)", n.index, rank_, n.peer, transport);
  } else if (n.family == ConnFamily::kP2p) {
    log_.info(kSubsysP2p, "P2P channel {:02d} : {} -> {} via {} (device)", p2pChannel(n.index), rank_, n.peer,
              transport);
  } else {
    log_.info(kSubsysInit, "{} : {} -> {} via {} (device)", connFamilyName(n.family), rank_, n.peer, transport);
  }
  // The FIFO is in the receiver's device memory: the same device as this rank's means two ranks
  // share a GPU, which NCCL refuses and Chorus allows.
  auto where = cuda::memInfo(fifo.ctrl);
  if (!sharedGpuLogged_ && where.isOk() && where.value().ordinal == device_->device()) {
    sharedGpuLogged_ = true;
    log_.info(kSubsysInit,
              "rank {} shares GPU {} with rank {}: several ranks on one GPU are allowed (NCCL refuses them); their "
              "kernels run side by side, each on part of the GPU",
              rank_, device_->device(), n.peer);
  }
  return Status::ok();
}

Status Communicator::forkDevice(void* cudaStream) {
  std::lock_guard<std::mutex> g(deviceMu_);
  return device_->forkFrom(cudaStream);
}

Status Communicator::joinDevice(void* cudaStream) {
  std::lock_guard<std::mutex> g(deviceMu_);
  return device_->joinInto(cudaStream);
}

Status Communicator::enqueueDevice(const std::vector<device::LaunchParams>& launches, void* cudaStream,
                                   std::vector<FlightEntry> flight, bool viaOwn) {
  std::lock_guard<std::mutex> g(deviceMu_);
  // The entries go in first, under deviceMu_ with the launch: the watchdog's look, which marks
  // them, waits for both.
  LaunchTracker::Span span;
  if (flight_ && flight_->enabled() && !flight.empty()) {
    const int64_t now = nowNs();
    for (FlightEntry& e : flight) {
      e.state = FlightEntry::State::kEnqueued;
      e.gpu = device_->device();
      e.cudaStream = reinterpret_cast<uintptr_t>(cudaStream);
      e.issuedNs = now;
    }
    span.first = flight_->issueAll(flight);
    span.last = span.first + flight.size() - 1;
  }
  Result<bool> captured = device_->enqueue(launches, viaOwn ? nullptr : cudaStream, span);
  if (!captured.isOk()) {
    if (span.first) {
      flight_->mark(span.first, span.last, FlightEntry::State::kFailed, captured.status().code(), nowNs(),
                    "its launch failed: " + captured.status().message());
    }
    return captured.status();
  }
  if (span.first && captured.value()) {
    flight_->mark(span.first, span.last, FlightEntry::State::kCaptured, 0, nowNs());
  } else if (span.first && launches.empty()) {
    flight_->mark(span.first, span.last, FlightEntry::State::kDone, 0, nowNs());  // nothing to run
  }
  return Status::ok();
}

Status Communicator::deviceFault() const {
  const device::DeviceError& e = device_->error();
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
      const int channel = e.seqIndex / nranks_;
      where = std::string("its point-to-point queue ") + (send ? "to" : "from") + " rank " +
              std::to_string(e.seqIndex % nranks_) + (channel ? " (channel " + std::to_string(channel) + ")" : "");
      break;
    }
  }
  const bool oneCopy = e.waiting == 3 || e.waiting == 4;
  const std::string at = " on " + where + (oneCopy ? "" : ", step " + std::to_string(e.step) + " of its schedule") +
                         " (operation #" + std::to_string(e.seq) + " there)";
  const std::string peer = e.peer >= 0 ? describePeer(e.peer) : std::string("its peer");
  std::string waited = "with " + peer;
  if (e.waiting == 1) waited = "waiting for data from " + peer;
  if (e.waiting == 2) waited = "waiting for room in the FIFO to " + peer;
  if (e.waiting == 3) waited = "waiting for " + peer + " to reach a one-copy collective";
  if (e.waiting == 4) waited = "waiting for " + peer + " to finish its part of a one-copy collective";
  switch (why) {
    case device::DeviceFault::kTimeout: {
      Status s =
          systemError("a kernel of this communicator (GPU " + std::to_string(device_->device()) + ") gave up after " +
                      std::to_string(config_.timeoutNs / 1'000'000'000) + " s without progress, " + waited + at +
                      ". That rank never issued the matching operation, or is stuck; CHORUS_TIMEOUT sets the "
                      "limit." +
                      sharedGpuStallHint(gpuThreadSharers_, config_.cudaConnections));
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
