// A communicator's device side (made on its first operation on device memory): everything its
// kernels reach and the host keeps for them.
//   - the connector table: each device connection end (a FIFO in the receiver's device memory,
//     src/transports/inproc) as the kernel's DeviceConnector, indexed like the host's ConnTable;
//   - DeviceCommState: the sequence numbers kernels advance (per channel, per peer and direction);
//   - a slot of scratch per channel, for schedules that stash a piece;
//   - schedules (Steps) in device memory, uploaded once per distinct schedule and kept;
//   - the error record and the abort word, in mapped host memory: kernels write the first and
//     poll the second, the host reads the first and sets the second (chorusCommAbort, failure);
//   - its own CUDA streams (launches for the NULL stream and host streams; uploads), and the
//     event that orders a launch on one stream after the last one on another.
// Calls are serialised by the caller (Communicator::deviceMu_) but faulted()/stop(), which any
// thread may call.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "src/algo/connections.h"
#include "src/algo/fifo.h"
#include "src/algo/schedule.h"
#include "src/common/status.h"
#include "src/device/launch_desc.h"

namespace chorus {

class DeviceComm {
 public:
  // On device `device`; `nranks` sizes the point-to-point counters, `maxSlotBytes` the scratch.
  static Result<std::unique_ptr<DeviceComm>> create(int device, int nranks, size_t maxSlotBytes);
  ~DeviceComm();
  DeviceComm(const DeviceComm&) = delete;
  DeviceComm& operator=(const DeviceComm&) = delete;

  int device() const { return device_; }

  // Connections.
  bool has(ConnFamily f, int index, bool send) const { return index_.count({f, index, send}) != 0; }
  uint16_t connector(ConnFamily f, int index, bool send) const {
    auto it = index_.find({f, index, send});
    return it == index_.end() ? device::kNoConnector : it->second;
  }
  // Adds an end; `fifo` is in device memory reachable from this device. Uploaded at once.
  Status addConnector(ConnFamily f, int index, bool send, const FifoView& fifo, int peer);

  // Device copies of schedules: the same steps give the same copy back.
  Result<const Step*> steps(const std::vector<Step>& s);
  // One-copy all-reduce arguments in device memory: the same arguments give the same copy back.
  Result<const device::OneCopyArgs*> oneCopyArgs(const device::OneCopyArgs& a);
  // This rank's one-copy signal area (shareable device memory, zeroed), made on first use.
  Result<uint64_t*> oneCopySignal();
  // Peers' memory mapped here (importShareable): unmapped when this goes, after its kernels.
  void adoptMapping(void* p) { mapped_.push_back(p); }
  // Keeps the signal area at `address` of a peer in this process (oneCopySignal of its
  // DeviceComm) while this lives; an error if it is gone already.
  Status holdPeerSignal(uint64_t address);

  // A slot of scratch for channel `channel`'s lanes.
  char* scratch(int channel) const { return scratch_ + static_cast<size_t>(channel) * maxSlotBytes_; }

  // What every launch of this communicator has but its lanes.
  device::LaunchParams base(uint64_t commId, uint64_t timeoutNs) const;

  // Enqueues the launches on `stream` (a cudaStream_t; null: the communicator's own stream),
  // after this communicator's last launch on any other stream (outside a graph capture).
  Status enqueue(const std::vector<device::LaunchParams>& launches, void* stream);
  // Whether everything enqueued on the own stream is done.
  bool ownDone() const;
  // Whether a launch made outside a graph capture may still run: the last one is not done. A
  // graph's replays are not seen here (nothing tells the host when one starts): a kernel of a
  // replay waiting on a dead peer ends at its deadline (CHORUS_TIMEOUT) or on abort.
  bool busy() const;

  // The first failure of a kernel of this communicator (status 0: none).
  const device::DeviceError& error() const { return *error_; }
  bool faulted() const;
  // Sets the abort word: every kernel of this communicator, running or to come, stops at its
  // next check and runs nothing more.
  void stop();
  // Until the last launch on every stream is done, or `deadlineNs` (nowNs clock) passes.
  bool drain(int64_t deadlineNs) const;

 private:
  DeviceComm() = default;

  int device_ = -1;
  int nranks_ = 0;
  size_t maxSlotBytes_ = 0;
  void* ownStream_ = nullptr;   // launches for the NULL stream and host streams
  void* copyStream_ = nullptr;  // uploads (never behind a launch)
  void* lastEvent_ = nullptr;   // recorded after each launch
  void* lastStream_ = nullptr;  // where it was recorded (null: nowhere yet)
  bool anyLaunch_ = false;

  // The connector table: the host's copy and the device's (fixed capacity, entries added only).
  std::map<std::tuple<ConnFamily, int, bool>, uint16_t> index_;
  std::vector<device::DeviceConnector> table_;
  device::DeviceConnector* deviceTable_ = nullptr;
  size_t capacity_ = 0;

  device::DeviceCommState* state_ = nullptr;  // device memory, with the two per-peer arrays after it
  char* scratch_ = nullptr;                   // kMaxChannels slots
  device::DeviceError* error_ = nullptr;      // mapped host memory
  uint32_t* abortWord_ = nullptr;             // mapped host memory, in the same allocation

  // `n` bytes uploaded once per distinct key (the same key gives the same copy back).
  Result<const void*> upload(std::string key, const void* data, size_t n);

  // Uploads (schedules, one-copy arguments), by content, in chunks of device memory that live as
  // long as this.
  std::unordered_map<std::string, const void*> uploads_;
  std::vector<void*> chunks_;
  std::shared_ptr<void> signal_;                    // oneCopySignal
  std::vector<std::shared_ptr<void>> peerSignals_;  // holdPeerSignal
  std::vector<void*> mapped_;                       // adoptMapping
  char* chunkAt_ = nullptr;
  size_t chunkLeft_ = 0;
};

}  // namespace chorus
