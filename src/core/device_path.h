// A communicator's device path: everything about its operations on device memory, from the CUDA
// device it is bound to, through the device connections and their transports, the tuner's choice
// and the one-copy agreement, to the plan's lowering into kernel launches, their enqueue (or
// fork and join across CUDA streams), the waits for them, and the watchdog that fails the
// communicator for what its kernels cannot see. The host path never reads what lives here.
//
// A part of its Communicator (made with it, never without it): it reads the communicator's
// identity, configuration, transports and flight recorder, and fails it through Communicator::fail.
// Thread-safety: its DeviceComm's calls are serialised by mu_; launches of one communicator come
// from one thread at a time (as NCCL: one thread issues a communicator's calls), the watchdog's
// looks and a failure's from others.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "src/algo/algorithm.h"
#include "src/algo/connections.h"
#include "src/algo/tuner.h"
#include "src/common/status.h"
#include "src/core/call_plan.h"
#include "src/core/device_comm.h"
#include "src/core/flight.h"
#include "src/core/onecopy.h"
#include "src/core/ticker.h"
#include "src/device/launch_desc.h"
#include "src/transport/transport.h"

namespace chorus {

class Communicator;
class Stream;
struct OpInfo;
struct CommOptions;

// One communicator's share of a device launch: its ops, in issue order, on `stream` (null: the
// NULL stream) and the other CUDA streams `also` (see group.cc's CommOps).
struct DeviceWork {
  Communicator* comm;
  std::shared_ptr<Stream> stream;
  const std::vector<OpInfo>* ops;
  const std::vector<std::shared_ptr<Stream>>* also;
};

class DevicePath {
 public:
  explicit DevicePath(Communicator& comm);
  DevicePath(const DevicePath&) = delete;
  DevicePath& operator=(const DevicePath&) = delete;

  // The CUDA device of this communicator's device buffers; -1 while none is bound.
  int cudaDevice() const { return cudaDevice_.load(std::memory_order_acquire); }
  // Binds device `d` unless another is bound already; then that one.
  int bindCudaDevice(int d) {
    int expected = -1;
    return cudaDevice_.compare_exchange_strong(expected, d, std::memory_order_acq_rel) ? d : expected;
  }
  // The device of options.cudaDevice, else the current one when the program has loaded CUDA.
  Status chooseCudaDevice(const CommOptions& options);
  void inheritCudaDevice(int d) { cudaDevice_.store(d, std::memory_order_release); }

  // At init, from every rank's GPU (`seats`, rank order): how many channels a device collective
  // runs, whether every rank's kernels run on one GPU, and how many other ranks of this process
  // share this rank's (warned about once per process); the per-peer tables sized.
  void placeRanks(const std::vector<GpuSeat>& seats, bool singleHost);
  int channels() const { return channels_; }
  bool oneGpu() const { return oneGpu_; }

  // Makes the device side on first use (on the bound device), and the watchdog with it.
  Status ensure();
  DeviceComm* deviceComm() const { return raw_.load(std::memory_order_acquire); }

  // The tuner's choice for a device collective (algorithm and protocol): the call's own when it
  // was made at submission (choose), else the tuner's now (the same: the tuner never changes).
  Tuner::Choice choice(const OpInfo& op) const;
  // Makes a device collective's choice once, at submission: the device tuner takes about 150 ns a
  // choice (every algorithm and protocol estimated), which a call used to pay three times.
  void choose(OpInfo& op) const;
  // What a device collective of protocol `proto` is planned in: the channels the tuner gives its
  // size (device::laneContext); the second, `channels` of them. Device FIFOs' slot sizes.
  AlgoContext context(const OpInfo& op, ProtoKind proto) const;
  AlgoContext context(int channels, ProtoKind proto) const;
  // The lanes of a collective of a one-rank communicator: none in place (unless the operator
  // multiplies), else a copy over up to channels() blocks, parts of at least kOneRankPartBytes.
  std::vector<LanePlan> planOneRank(const OpInfo& op) const;
  static constexpr size_t kOneRankPartBytes = size_t(64) << 10;
  // Whether a one-rank collective multiplies its input (a pre-multiplied sum, or a scalar in
  // device memory): then it runs the launch kernel, else it is a copy or nothing.
  static bool oneRankScales(const OpInfo& op);
  OpCounters& counters() { return counters_; }

  // Connections. The algorithms whose device connections all exist (a bit each): a launch after
  // the first asks nothing of the registry for them.
  std::atomic<uint32_t>& connectedAlgos() const { return connectedAlgos_; }
  // The transport of device connections to `peer`: chosen from both ranks' DevicePeer records,
  // which the two exchange before their first device connection; null until then.
  Transport* transport(int peer) const { return transport_[peer]; }
  // Before the connection phases: each rank's GPU record to and from each peer a device
  // connection in `needs` is the first to, and the transport chosen from them (both sides alike).
  static Status exchangeInfo(std::vector<std::pair<Communicator*, std::vector<ConnKey>>>& needs);
  // A device connection made by the connection phases: kept here (host code never closes or reads
  // its FIFO, which is device memory), and its end put into the kernels' connector table.
  void keep(std::unique_ptr<Connection> conn);
  Status addEnd(const ConnKey& n, const Connection& conn, const char* transport);
  // This rank's side of a device connection: its GPU's record, which ensure() fills from CUDA (a
  // test may set a made-up one before the first exchange).
  DevicePeer self() const;
  void setGpuInfo(const GpuInfo& g) { gpuInfo_ = g; }

  // The one-copy collectives' host side (src/core/onecopy.h).
  OneCopyExchange& oneCopy() { return *oneCopy_; }
  // The device lowering of the communicator's plan (planCalls): the kernel launches of device ops,
  // in the order they must run (src/device/launch_pack.h); `oneCopy` (empty, or one per op): the
  // one-copy arguments where the op takes it. `flight`, when given, gets each op's flight
  // recorder entry (for enqueue).
  Result<std::vector<device::LaunchParams>> plan(const std::vector<OpInfo>& ops,
                                                 const std::vector<const device::OneCopyArgs*>& oneCopy = {},
                                                 std::vector<FlightEntry>* flight = nullptr);
  // Device operations of a launch, checked and connected already (the group's checkAndConnect,
  // for every communicator together): the one-copy records exchanged where a collective may take
  // it, planned on the calling thread, then enqueued on their CUDA streams (returning at once), or
  // on each communicator's own stream and waited for (the NULL stream here; a host stream on its
  // worker).
  static Status launch(const std::vector<DeviceWork>& work);
  // Waits for the launches of `comms` on their own CUDA streams (the NULL stream and host
  // streams), or with `everyStream` for every launch of theirs (the last one on any stream): until
  // each is done, the communicator is aborted, or the timeout (plus a grace for the kernel's own
  // deadline to fire first) passes. Then each kernel's failure, if any, as the call's error.
  static Status wait(const std::vector<Communicator*>& comms, bool everyStream = false);

  // Enqueues launches on a CUDA stream (null: the communicator's own) under mu_, and records their
  // ops' entries (plan) in the flight recorder as enqueued, or captured when the stream is
  // capturing a graph. Never waits on the device. `viaOwn`: on the own stream, between fork and
  // join on `cudaStream` (DeviceComm::forkFrom), which the entries name.
  Status enqueue(const std::vector<device::LaunchParams>& launches, void* cudaStream,
                 std::vector<FlightEntry> flight = {}, bool viaOwn = false);
  Status fork(void* cudaStream);
  Status join(void* cudaStream);
  // Marks the flight entries of device launches that the host can tell are over (done, failed,
  // stopped: LaunchTracker) without waiting on the device. Takes mu_; the watchdog does this
  // every 50 ms, a call on the NULL stream when its launch is done. `tryOnly`: not when another
  // thread holds mu_ (a failure: an enqueue may hold it while blocked on kernels that only the
  // abort word ends; no caller holds mu_ itself).
  void look(bool tryOnly = false);
  // The error a kernel recorded, as a sentence (DeviceComm::faulted() holds).
  Status fault() const;
  // Kernels of this communicator stop at their next check and run nothing more. `waitNs`: and
  // until they are gone, at most that long (chorusCommAbort); warns when they are not.
  void stop(int64_t waitNs = 0);
  // The end of the communicator, before its transports go: kernels still enqueued read FIFOs and
  // state about to be freed, so they are waited for (as long as a wait may last), else stopped,
  // and the socket proxy is let send what they published; then the watchdog and the device side
  // go. Connections go with dropConnections(), after the transports that move their bytes.
  void shutdown();
  void dropConnections() { connections_.clear(); }

 private:
  // One look of the watchdog (every 50 ms), and since when what it found has lasted (-1: nothing
  // found; the watchdog's thread only).
  void watch();
  int64_t troubleSince_ = -1;
  // look() with mu_ held; returns the ranks the launches still in flight wait on.
  std::vector<int> lookLocked();
  // What the watchdog fails the communicator for while kernels run: a peer process gone, a FIFO
  // for kernels broken, where about no rank in particular or a rank in `inFlight`.
  Status trouble(const std::vector<int>& inFlight);
  Status chooseTransport(int peer, const GpuInfo& theirs);

  Communicator& comm_;
  std::atomic<int> cudaDevice_{-1};
  int channels_ = 1;       // the most channels a device collective runs (deviceChannelLimit)
  bool oneGpu_ = false;    // every rank's kernels run on one GPU (the same UUID)
  int threadSharers_ = 0;  // other ranks of this process on this rank's GPU (sharedGpuWarning)
  // The device side (made on the first device op), and its pointer for readers without mu_.
  std::unique_ptr<DeviceComm> dev_;
  std::atomic<DeviceComm*> raw_{nullptr};
  // Serialises dev_'s calls (DeviceComm is thread-compatible: its launch tracker, events) and with
  // them the marking of its launches' flight entries. Held while the communicator's error mutex
  // and the flight recorder's are taken, never the other way round.
  mutable std::mutex mu_;
  GpuInfo gpuInfo_;                    // this rank's GPU (ensure)
  std::vector<Transport*> transport_;  // per peer, once chosen (one launching thread at a time)
  std::vector<std::unique_ptr<Connection>> connections_;
  std::vector<FifoView> proxySends_;  // of those, the send FIFOs a socket proxy empties
  mutable std::atomic<uint32_t> connectedAlgos_{0};
  bool sharedGpuLogged_ = false;
  OpCounters counters_;
  std::unique_ptr<OneCopyExchange> oneCopy_;
  // The watchdog: while kernels of this communicator run, it turns what they cannot see (a peer's
  // process gone, the socket under a host-staged FIFO closed) into the communicator's failure,
  // which sets their abort word.
  Ticker watch_;
};

}  // namespace chorus
