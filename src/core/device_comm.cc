#include "src/core/device_comm.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "src/common/os.h"
#include "src/common/types.h"
#include "src/device/cuda.h"

namespace chorus {

std::string sharedGpuWarning(int sharers, int connections) {
  if (sharers <= 0 || connections >= 32) return "";
  return std::to_string(sharers + 1) +
         " ranks of this process share this rank's GPU, and each one's kernels wait on the others': CUDA feeds "
         "the process's streams to the GPU through CUDA_DEVICE_MAX_CONNECTIONS hardware queues (" +
         std::to_string(connections) +
         " here), and a kernel queued behind another rank's in one queue may not start until that one ends, "
         "which stalls both until the deadline. Set CUDA_DEVICE_MAX_CONNECTIONS=32 before the process first uses "
         "CUDA (docs/environment.md)";
}

std::string sharedGpuStallHint(int sharers, int connections) {
  if (sharers <= 0) return "";
  return " Other ranks of this process share this GPU: a rank's kernel held back in a CUDA hardware queue behind "
         "another rank's stalls both (CUDA_DEVICE_MAX_CONNECTIONS, " +
         std::to_string(connections) + " queues here; docs/environment.md)";
}

using device::DeviceCommState;
using device::DeviceConnector;
using device::DeviceError;
using device::LaunchParams;

namespace {

// Uploaded schedules live in chunks of this much device memory.
constexpr size_t kStepChunkBytes = size_t(1) << 20;

// `into` and `more`, both sorted and unique, merged.
void mergePeers(std::vector<int>* into, const std::vector<int>& more) {
  std::vector<int> out;
  out.reserve(into->size() + more.size());
  std::set_union(into->begin(), into->end(), more.begin(), more.end(), std::back_inserter(out));
  *into = std::move(out);
}

// Whether every lane of `p` copies its input to its output as it is, with no peer: a one-rank
// communicator's out-of-place collective whose operator does not pre-multiply
// (Communicator::planOneRank), and its copies to itself. Such a launch is enqueued as the copies
// it is (copyLanes), as NCCL's one-rank path does: cudaMemcpyAsync moves bytes at the memory's
// rate over the whole GPU, where the launch kernel's blocks take at most half of it.
bool plainCopies(const LaunchParams& p, int nranks) {
  if (nranks != 1 || p.nblocks == 0) return false;
  for (uint32_t li = 0; li < p.laneBegin[p.nblocks]; ++li) {
    const device::DeviceLane& l = p.lanes[li];
    if (l.nsteps != 1 || l.step.prim != Prim::kLocal || l.oneCopy || l.spec.hasPre || l.spec.scalePtr) return false;
    for (int i = 0; i < kMaxLanePeers; ++i) {
      if (l.send[i] != device::kNoConnector || l.recv[i] != device::kNoConnector) return false;
    }
  }
  return true;
}

// Enqueues plainCopies' lanes as cudaMemcpyAsync calls on `stream`, one per lane.
Status copyLanes(const LaunchParams& p, void* stream) {
  for (uint32_t li = 0; li < p.laneBegin[p.nblocks]; ++li) {
    const device::DeviceLane& l = p.lanes[li];
    const size_t elem = typeSize(static_cast<chorusDataType_t>(l.type));
    const char* from = l.input + l.step.inOff * elem;
    char* to = l.output + l.step.outOff * elem;
    if (l.step.count && from != to) CHORUS_TRY(cuda::copyAsync(to, from, l.step.count * elem, stream));
  }
  return Status::ok();
}

}  // namespace

uint32_t LaunchTracker::counterOf(device::SeqKind kind, int32_t index, int nranks) {
  const auto i = static_cast<uint32_t>(index);
  constexpr auto kChannels = static_cast<uint32_t>(DeviceCommState::kMaxChannels);
  switch (kind) {
    case device::SeqKind::kColl:
      return i;
    case device::SeqKind::kP2pSend:
      return kChannels + i;
    case device::SeqKind::kP2pRecv:
      return kChannels + static_cast<uint32_t>(nranks * kMaxP2pChannels) + i;
  }
  return i;
}

void LaunchTracker::add(void* event, Span flight, const std::vector<int>& peers,
                        const std::vector<uint32_t>& laneCounters) {
  const bool merge = !launches_.empty() && event == launches_.back().event;
  if (!merge) launches_.emplace_back().event = event;
  Launch& l = launches_.back();
  if (flight.first != 0) l.flight.push_back(flight);
  mergePeers(&l.peers, peers);
  for (uint32_t c : laneCounters) {
    if (c >= seq_.size()) seq_.resize(c + 1, 0);
    const uint64_t v = ++seq_[c];
    auto it = std::find_if(l.lastSeq.begin(), l.lastSeq.end(), [c](const auto& p) { return p.first == c; });
    if (it == l.lastSeq.end()) {
      l.lastSeq.emplace_back(c, v);
    } else {
      it->second = v;
    }
  }
}

LaunchTracker::Found LaunchTracker::look(const std::function<bool(void*)>& eventDone,
                                         const std::function<DeviceState()>& state) {
  Found f;
  size_t done = 0;
  if (!faultSeen_) {
    while (done < launches_.size() && eventDone(launches_[done].event)) ++done;
  }
  // After the events: a fault or a stop that ended one of the launches just seen done shows here.
  const DeviceState st = state();
  auto spans = [](std::vector<Span>* to, const Launch& l) { to->insert(to->end(), l.flight.begin(), l.flight.end()); };
  if (!faultSeen_ && st.faulted) {
    faultSeen_ = true;
    // The launch whose lanes took the faulting value; with none (graph replays), the oldest.
    size_t at = 0;
    for (size_t i = 0; i < launches_.size(); ++i) {
      const auto& seqs = launches_[i].lastSeq;
      auto it = std::find_if(seqs.begin(), seqs.end(), [&](const auto& p) { return p.first == st.faultCounter; });
      if (it != seqs.end() && it->second >= st.faultSeq) {
        at = i;
        break;
      }
    }
    for (size_t i = 0; i < launches_.size(); ++i)
      spans(i < at ? &f.done : i == at ? &f.faulted : &f.notRun, launches_[i]);
    done = launches_.size();
  } else if (faultSeen_) {
    for (const Launch& l : launches_) spans(&f.notRun, l);
    done = launches_.size();
  } else if (st.stopped) {
    for (const Launch& l : launches_) spans(&f.stopped, l);
    done = launches_.size();
  } else {
    for (size_t i = 0; i < done; ++i) spans(&f.done, launches_[i]);
  }
  for (size_t i = 0; i < done; ++i) f.freed.push_back(launches_[i].event);
  launches_.erase(launches_.begin(), launches_.begin() + static_cast<std::ptrdiff_t>(done));
  return f;
}

std::vector<int> LaunchTracker::peers() const {
  std::vector<int> all;
  for (const Launch& l : launches_) mergePeers(&all, l.peers);
  return all;
}

Status failureInFlight(const std::vector<Status>& failures, const std::vector<int>& peersInFlight) {
  for (const Status& s : failures) {
    if (s.isOk()) continue;
    if (s.subject() < 0 || std::binary_search(peersInFlight.begin(), peersInFlight.end(), s.subject())) return s;
  }
  return Status::ok();
}

Result<std::unique_ptr<DeviceComm>> DeviceComm::create(int device, int nranks, size_t maxSlotBytes) {
  cuda::DeviceGuard on(device);
  CHORUS_TRY(on.status());
  std::unique_ptr<DeviceComm> d(new DeviceComm());
  d->device_ = device;
  d->nranks_ = nranks;
  d->maxSlotBytes_ = (maxSlotBytes + 15) / 16 * 16;
  CHORUS_TRY(cuda::loadKernels());
  CHORUS_ASSIGN_OR_RETURN(d->ownStream_, cuda::streamCreate());
  CHORUS_ASSIGN_OR_RETURN(d->copyStream_, cuda::streamCreate());
  CHORUS_ASSIGN_OR_RETURN(void* staging, cuda::hostAllocMapped(kStagingBytes));
  d->staging_ = static_cast<char*>(staging);
  CHORUS_ASSIGN_OR_RETURN(d->lastEvent_, cuda::eventCreate());
  d->events_.push_back(d->lastEvent_);
  d->freeEvents_.push_back(d->lastEvent_);
  // Every family's ends, both ways: rings by channel (kRingSets sets), point-to-point by peer and
  // channel, the others by peer.
  d->capacity_ = 2 * (static_cast<size_t>(kRingSets) * DeviceCommState::kMaxChannels +
                      static_cast<size_t>(kConnFamilies - 2 + kMaxP2pChannels) * static_cast<size_t>(nranks));
  CHORUS_ASSIGN_OR_RETURN(void* table, cuda::deviceAlloc(d->capacity_ * sizeof(DeviceConnector), d->copyStream_));
  d->deviceTable_ = static_cast<DeviceConnector*>(table);
  const size_t p2pCounters = static_cast<size_t>(nranks) * kMaxP2pChannels;
  const size_t stateBytes = sizeof(DeviceCommState) + 2 * sizeof(uint64_t) * p2pCounters;
  CHORUS_ASSIGN_OR_RETURN(void* state, cuda::deviceAlloc(stateBytes, d->copyStream_));
  d->state_ = static_cast<DeviceCommState*>(state);
  // The counters start at 0 (deviceAlloc zeroes); the per-peer and channel arrays follow the
  // struct.
  DeviceCommState init{};
  init.p2pSendSeq = reinterpret_cast<uint64_t*>(d->state_ + 1);
  init.p2pRecvSeq = init.p2pSendSeq + p2pCounters;
  CHORUS_TRY(d->copyIn(d->state_, &init, sizeof(init)));
  CHORUS_ASSIGN_OR_RETURN(void* scratch,
                          cuda::deviceAlloc(d->maxSlotBytes_ * DeviceCommState::kMaxChannels, d->copyStream_));
  d->scratch_ = static_cast<char*>(scratch);
  CHORUS_ASSIGN_OR_RETURN(void* mapped, cuda::hostAllocMapped(sizeof(DeviceError) + 64));
  d->error_ = static_cast<DeviceError*>(mapped);
  d->abortWord_ = reinterpret_cast<uint32_t*>(static_cast<char*>(mapped) + sizeof(DeviceError) + 32);
  return d;
}

Status DeviceComm::copyIn(void* dst, const void* data, size_t n) {
  for (size_t at = 0; at < n; at += kStagingBytes) {
    const size_t part = std::min(kStagingBytes, n - at);
    std::memcpy(staging_, static_cast<const char*>(data) + at, part);
    CHORUS_TRY(cuda::copyToDevice(static_cast<char*>(dst) + at, staging_, part, copyStream_));
  }
  return Status::ok();
}

DeviceComm::~DeviceComm() {
  cuda::DeviceGuard on(device_);
  // Kernels still running would touch what is freed here: the owner waited (drain) or stopped
  // them; whatever is left gets the abort word and a last bounded wait.
  if (!drain(nowNs() + 2'000'000'000)) {
    stop();
    (void)drain(nowNs() + 10'000'000'000);
  }
  for (void* c : chunks_) cuda::deviceFree(c);
  for (void* m : mapped_) (void)cuda::freeShareable(m);
  // This one's area and its peers': each freed by its last holder (signalAreas()).
  peerSignals_.clear();
  signal_.reset();
  cuda::deviceFree(deviceTable_);
  cuda::deviceFree(state_);
  cuda::deviceFree(scratch_);
  cuda::hostFreeMapped(error_);
  cuda::hostFreeMapped(staging_);
  for (void* e : events_) cuda::eventDestroy(e);
  cuda::eventDestroy(forkEvent_);
  cuda::eventDestroy(joinEvent_);
  cuda::streamDestroy(ownStream_);
  cuda::streamDestroy(copyStream_);
}

Status DeviceComm::addConnector(ConnFamily f, int index, bool send, const FifoView& fifo, int peer) {
  // Lanes name ends by 16-bit index (kNoConnector is none).
  if (table_.size() >= capacity_ || table_.size() >= device::kNoConnector) {
    return internalError("the device connector table is full");
  }
  const auto at = static_cast<uint16_t>(table_.size());
  table_.push_back(device::deviceConnector(fifo, peer));
  cuda::DeviceGuard on(device_);
  CHORUS_TRY(on.status());
  // Entries are only appended, and kernels read only entries their launch names: no launch in
  // flight reads this one.
  CHORUS_TRY(copyIn(deviceTable_ + at, &table_.back(), sizeof(DeviceConnector)));
  index_[{f, index, send}] = at;
  return Status::ok();
}

Result<const Step*> DeviceComm::steps(const std::vector<Step>& s) {
  // The key is every field, in order (not the raw bytes: padding is not part of a step).
  std::string key;
  key.reserve(s.size() * 32);
  for (const Step& st : s) {
    const uint64_t words[4] = {static_cast<uint64_t>(st.prim), st.inOff, st.outOff, st.count};
    const uint8_t small[5] = {st.sendTo, st.recvFrom, static_cast<uint8_t>(st.flags & 0xff),
                              static_cast<uint8_t>(st.flags >> 8), st.recvFirst};
    key.append(reinterpret_cast<const char*>(words), sizeof(words));
    key.append(reinterpret_cast<const char*>(small), sizeof(small));
  }
  CHORUS_ASSIGN_OR_RETURN(const void* at, upload(std::move(key), s.data(), s.size() * sizeof(Step)));
  return static_cast<const Step*>(at);
}

Result<const device::OneCopyArgs*> DeviceComm::oneCopyArgs(const device::OneCopyArgs& a) {
  // Every field is a word or a pointer: no padding in the key.
  std::string key(1, '\1');  // apart from schedules' keys
  key.append(reinterpret_cast<const char*>(&a), sizeof(a));
  CHORUS_ASSIGN_OR_RETURN(const void* at, upload(std::move(key), &a, sizeof(a)));
  return static_cast<const device::OneCopyArgs*>(at);
}

Result<const void*> DeviceComm::upload(std::string key, const void* data, size_t n) {
  auto it = uploads_.find(key);
  if (it != uploads_.end()) return it->second;
  const size_t bytes = (n + 63) / 64 * 64;
  cuda::DeviceGuard on(device_);
  CHORUS_TRY(on.status());
  if (bytes > chunkLeft_) {
    const size_t chunk = bytes > kStepChunkBytes ? bytes : kStepChunkBytes;
    CHORUS_ASSIGN_OR_RETURN(void* mem, cuda::deviceAlloc(chunk, copyStream_));
    chunks_.push_back(mem);
    chunkAt_ = static_cast<char*>(mem);
    chunkLeft_ = chunk;
  }
  char* dst = chunkAt_;
  CHORUS_TRY(copyIn(dst, data, n));
  chunkAt_ += bytes;
  chunkLeft_ -= bytes;
  uploads_.emplace(std::move(key), dst);
  return static_cast<const void*>(dst);
}

namespace {

// The signal areas of this process's communicators, by address: a communicator whose one-copy
// peers are threads of this process holds theirs too (a kernel of it may still write into a
// peer's area after that peer is destroyed), so an area goes with the last holder.
struct SignalAreas {
  std::mutex mu;
  std::map<uintptr_t, std::weak_ptr<void>> byAddress;  // guarded by mu
};
SignalAreas& signalAreas() {
  static auto* a = new SignalAreas();
  return *a;
}

}  // namespace

Result<uint64_t*> DeviceComm::oneCopySignal() {
  if (signal_) return static_cast<uint64_t*>(signal_.get());
  cuda::DeviceGuard on(device_);
  CHORUS_TRY(on.status());
  CHORUS_ASSIGN_OR_RETURN(void* mem, cuda::allocShareable(device::oneCopySignalBytes(), device_));
  const int device = device_;
  std::shared_ptr<void> area(mem, [device](void* p) {
    {
      std::lock_guard<std::mutex> g(signalAreas().mu);
      signalAreas().byAddress.erase(reinterpret_cast<uintptr_t>(p));
    }
    cuda::DeviceGuard on(device);
    (void)cuda::freeShareable(p);
  });
  CHORUS_TRY(cuda::zeroDevice(mem, device::oneCopySignalBytes()));
  {
    std::lock_guard<std::mutex> g(signalAreas().mu);
    signalAreas().byAddress[reinterpret_cast<uintptr_t>(mem)] = area;
  }
  signal_ = std::move(area);
  return static_cast<uint64_t*>(mem);
}

Status DeviceComm::holdPeerSignal(uint64_t address) {
  std::shared_ptr<void> area;
  {
    std::lock_guard<std::mutex> g(signalAreas().mu);
    auto it = signalAreas().byAddress.find(address);
    if (it != signalAreas().byAddress.end()) area = it->second.lock();
  }
  if (!area) return remoteError("a peer's one-copy signal area is gone: its communicator was destroyed");
  if (std::find(peerSignals_.begin(), peerSignals_.end(), area) == peerSignals_.end()) {
    peerSignals_.push_back(std::move(area));
  }
  return Status::ok();
}

device::LaunchHeader DeviceComm::base(uint64_t commId, uint64_t timeoutNs) const {
  return device::LaunchHeader{deviceTable_, state_, error_, abortWord_, commId, timeoutNs};
}

Result<bool> DeviceComm::enqueue(const std::vector<LaunchParams>& launches, void* stream, LaunchTracker::Span flight) {
  if (launches.empty()) return false;
  cuda::DeviceGuard on(device_);
  CHORUS_TRY(on.status());
  void* s = stream ? stream : ownStream_;
  CHORUS_ASSIGN_OR_RETURN(const bool capturing, cuda::streamCapturing(s));
  // The event that will tell this launch is over, taken before anything is enqueued (a failure
  // leaves nothing untracked behind): a free one, a new one, or past kMaxLaunches the newest
  // launch's, recorded again (the two are then over together).
  void* event = nullptr;
  if (!capturing) {
    if (tracker_.full()) {
      event = tracker_.newestEvent();
    } else if (!freeEvents_.empty()) {
      event = freeEvents_.back();
      freeEvents_.pop_back();
    } else {
      CHORUS_ASSIGN_OR_RETURN(event, cuda::eventCreate());
      events_.push_back(event);
    }
  }
  auto giveBack = [&] {
    if (event && event != tracker_.newestEvent()) freeEvents_.push_back(event);
  };
  // Kernels of one communicator share its FIFOs and counters: one at a time, in issue order. A
  // launch on another stream than the last waits for the last (outside a capture: a graph's
  // order against other streams is the graph's own, as NCCL's).
  if (!capturing && lastStream_ && lastStream_ != s) {
    if (Status w = cuda::streamWaitEvent(s, lastEvent_); !w.isOk()) {
      giveBack();
      return w;
    }
  }
  for (const LaunchParams& p : launches) {
    if (Status l = plainCopies(p, nranks_) ? copyLanes(p, s) : cuda::launch(p, s); !l.isOk()) {
      giveBack();  // a launch before this one may run untracked: the communicator fails with this
      return l;
    }
  }
  anyLaunch_ = true;
  if (capturing) return true;
  if (Status r = cuda::eventRecord(event, s); !r.isOk()) {
    giveBack();
    return r;
  }
  lastEvent_ = event;
  lastStream_ = s;
  tracker_.add(event, flight, peersOf(launches), countersOf(launches));
  tracked_.store(tracker_.size(), std::memory_order_relaxed);
  return false;
}

std::vector<int> DeviceComm::peersOf(const std::vector<LaunchParams>& launches) const {
  std::vector<char> waits(static_cast<size_t>(nranks_), 0);
  auto mark = [&](uint16_t c) {
    if (c == device::kNoConnector || c >= table_.size()) return;
    const int peer = table_[c].peer;
    if (peer >= 0 && peer < nranks_) waits[static_cast<size_t>(peer)] = 1;
  };
  for (const LaunchParams& p : launches) {
    for (uint32_t li = 0; li < p.laneBegin[p.nblocks]; ++li) {
      const device::DeviceLane& l = p.lanes[li];
      // A one-copy part waits on every rank of the communicator through the signal areas.
      if (l.oneCopy) std::fill(waits.begin(), waits.end(), 1);
      for (int i = 0; i < kMaxLanePeers; ++i) {
        mark(l.send[i]);
        mark(l.recv[i]);
      }
    }
  }
  std::vector<int> peers;
  for (int r = 0; r < nranks_; ++r) {
    if (waits[static_cast<size_t>(r)]) peers.push_back(r);
  }
  return peers;
}

std::vector<uint32_t> DeviceComm::countersOf(const std::vector<LaunchParams>& launches) const {
  std::vector<uint32_t> counters;
  for (const LaunchParams& p : launches) {
    for (uint32_t li = 0; li < p.laneBegin[p.nblocks]; ++li) {
      counters.push_back(LaunchTracker::counterOf(p.lanes[li].seqKind, p.lanes[li].seqIndex, nranks_));
    }
  }
  return counters;
}

Status DeviceComm::order(void** event, void* before, void* after) {
  cuda::DeviceGuard on(device_);
  CHORUS_TRY(on.status());
  if (!*event) {
    CHORUS_ASSIGN_OR_RETURN(*event, cuda::eventCreate());
  }
  CHORUS_TRY(cuda::eventRecord(*event, before));
  return cuda::streamWaitEvent(after, *event);
}

Status DeviceComm::forkFrom(void* stream) { return order(&forkEvent_, stream, ownStream_); }

Status DeviceComm::joinInto(void* stream) { return order(&joinEvent_, ownStream_, stream); }

LaunchTracker::Found DeviceComm::look() {
  if (tracker_.size() == 0) return {};
  cuda::DeviceGuard on(device_);
  LaunchTracker::Found f =
      tracker_.look([](void* e) { return cuda::eventDone(e); },
                    [this] {
                      LaunchTracker::DeviceState st;
                      st.faulted = faulted();  // acquire: the record's fields after
                      if (st.faulted) {
                        st.faultCounter = LaunchTracker::counterOf(static_cast<device::SeqKind>(error_->seqKind),
                                                                   error_->seqIndex, nranks_);
                        st.faultSeq = error_->seq;
                      }
                      st.stopped = std::atomic_ref<uint32_t>(*abortWord_).load(std::memory_order_acquire) != 0;
                      return st;
                    });
  freeEvents_.insert(freeEvents_.end(), f.freed.begin(), f.freed.end());
  tracked_.store(tracker_.size(), std::memory_order_relaxed);
  return f;
}

bool DeviceComm::busy() const {
  if (!anyLaunch_) return false;
  cuda::DeviceGuard on(device_);
  return !(cuda::eventDone(lastEvent_) && cuda::streamDone(ownStream_));
}

bool DeviceComm::ownDone() const {
  cuda::DeviceGuard on(device_);
  return cuda::streamDone(ownStream_);
}

bool DeviceComm::faulted() const {
  return std::atomic_ref<uint32_t>(error_->status).load(std::memory_order_acquire) != 0;
}

void DeviceComm::stop() { std::atomic_ref<uint32_t>(*abortWord_).store(1, std::memory_order_release); }

bool DeviceComm::drain(int64_t deadlineNs) const {
  if (!anyLaunch_) return true;
  cuda::DeviceGuard on(device_);
  while (!(cuda::eventDone(lastEvent_) && cuda::streamDone(ownStream_))) {
    if (nowNs() > deadlineNs) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

}  // namespace chorus
