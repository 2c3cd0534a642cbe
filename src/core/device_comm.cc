#include "src/core/device_comm.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "src/common/os.h"
#include "src/device/cuda.h"

namespace chorus {

using device::DeviceCommState;
using device::DeviceConnector;
using device::DeviceError;
using device::LaunchParams;

namespace {

// Uploaded schedules live in chunks of this much device memory.
constexpr size_t kStepChunkBytes = size_t(1) << 20;

}  // namespace

Result<std::unique_ptr<DeviceComm>> DeviceComm::create(int device, int nranks, size_t maxSlotBytes) {
  cuda::DeviceGuard on(device);
  CHORUS_TRY(on.status());
  std::unique_ptr<DeviceComm> d(new DeviceComm());
  d->device_ = device;
  d->nranks_ = nranks;
  d->maxSlotBytes_ = (maxSlotBytes + 15) / 16 * 16;
  CHORUS_ASSIGN_OR_RETURN(d->ownStream_, cuda::streamCreate());
  CHORUS_ASSIGN_OR_RETURN(d->copyStream_, cuda::streamCreate());
  CHORUS_ASSIGN_OR_RETURN(d->lastEvent_, cuda::eventCreate());
  // Every family's ends, both ways: rings by channel (kRingSets sets), the others by peer.
  d->capacity_ = 2 * (static_cast<size_t>(kRingSets) * DeviceCommState::kMaxChannels +
                      static_cast<size_t>(kConnFamilies - 1) * static_cast<size_t>(nranks));
  CHORUS_ASSIGN_OR_RETURN(void* table, cuda::deviceAlloc(d->capacity_ * sizeof(DeviceConnector), d->copyStream_));
  d->deviceTable_ = static_cast<DeviceConnector*>(table);
  const size_t stateBytes = sizeof(DeviceCommState) + 2 * sizeof(uint64_t) * static_cast<size_t>(nranks);
  CHORUS_ASSIGN_OR_RETURN(void* state, cuda::deviceAlloc(stateBytes, d->copyStream_));
  d->state_ = static_cast<DeviceCommState*>(state);
  // The counters start at 0 (deviceAlloc zeroes); the per-peer arrays follow the struct.
  DeviceCommState init{};
  init.p2pSendSeq = reinterpret_cast<uint64_t*>(d->state_ + 1);
  init.p2pRecvSeq = init.p2pSendSeq + nranks;
  CHORUS_TRY(cuda::copyToDevice(d->state_, &init, sizeof(init), d->copyStream_));
  CHORUS_ASSIGN_OR_RETURN(void* scratch,
                          cuda::deviceAlloc(d->maxSlotBytes_ * DeviceCommState::kMaxChannels, d->copyStream_));
  d->scratch_ = static_cast<char*>(scratch);
  CHORUS_ASSIGN_OR_RETURN(void* mapped, cuda::hostAllocMapped(sizeof(DeviceError) + 64));
  d->error_ = static_cast<DeviceError*>(mapped);
  d->abortWord_ = reinterpret_cast<uint32_t*>(static_cast<char*>(mapped) + sizeof(DeviceError) + 32);
  return d;
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
  cuda::eventDestroy(lastEvent_);
  cuda::streamDestroy(ownStream_);
  cuda::streamDestroy(copyStream_);
}

Status DeviceComm::addConnector(ConnFamily f, int index, bool send, const FifoView& fifo, int peer) {
  if (table_.size() >= capacity_) return internalError("the device connector table is full");
  const auto at = static_cast<uint16_t>(table_.size());
  table_.push_back(device::deviceConnector(fifo, peer));
  cuda::DeviceGuard on(device_);
  CHORUS_TRY(on.status());
  // Entries are only appended, and kernels read only entries their launch names: no launch in
  // flight reads this one.
  CHORUS_TRY(cuda::copyToDevice(deviceTable_ + at, &table_.back(), sizeof(DeviceConnector), copyStream_));
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
  CHORUS_TRY(cuda::copyToDevice(dst, data, n, copyStream_));
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

LaunchParams DeviceComm::base(uint64_t commId, uint64_t timeoutNs) const {
  LaunchParams p;
  p.connectors = deviceTable_;
  p.state = state_;
  p.error = error_;
  p.abortFlag = abortWord_;
  p.commId = commId;
  p.timeoutNs = timeoutNs;
  return p;
}

Status DeviceComm::enqueue(const std::vector<LaunchParams>& launches, void* stream) {
  if (launches.empty()) return Status::ok();
  cuda::DeviceGuard on(device_);
  CHORUS_TRY(on.status());
  void* s = stream ? stream : ownStream_;
  CHORUS_ASSIGN_OR_RETURN(const bool capturing, cuda::streamCapturing(s));
  // Kernels of one communicator share its FIFOs and counters: one at a time, in issue order. A
  // launch on another stream than the last waits for the last (outside a capture: a graph's
  // order against other streams is the graph's own, as NCCL's).
  if (!capturing && lastStream_ && lastStream_ != s) CHORUS_TRY(cuda::streamWaitEvent(s, lastEvent_));
  for (const LaunchParams& p : launches) CHORUS_TRY(cuda::launch(p, s));
  if (!capturing) {
    CHORUS_TRY(cuda::eventRecord(lastEvent_, s));
    lastStream_ = s;
  }
  anyLaunch_ = true;
  return Status::ok();
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
