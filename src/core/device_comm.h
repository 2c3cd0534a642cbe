// A communicator's device side (made on its first operation on device memory): everything its
// kernels reach and the host keeps for them.
//   - the connector table: each device connection end (a FIFO in the receiver's device memory,
//     src/transports/inproc) as the kernel's DeviceConnector, indexed like the host's ConnTable;
//   - DeviceCommState: the sequence numbers kernels advance (per channel, per peer and direction);
//   - a slot of scratch per channel, for schedules that stash a piece;
//   - schedules (Steps) in device memory, uploaded once per distinct schedule and kept;
//   - the error record and the abort word, in mapped host memory: kernels write the first and
//     poll the second, the host reads the first and sets the second (chorusCommAbort, failure);
//   - its own CUDA streams (launches for the NULL stream and host streams; uploads), and an
//     event recorded after each launch: the last one orders a launch on one stream after the last
//     one on another, and each tells the host, without waiting, when its launch is over
//     (LaunchTracker: the flight recorder's device entries, the peers of launches in flight).
// Calls are serialised by the caller (DevicePath::mu_) but faulted(), stop() and
// launchesInFlight(), which any thread may call.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "src/algo/connections.h"
#include "src/algo/fifo.h"
#include "src/algo/schedule.h"
#include "src/common/status.h"
#include "src/device/launch_desc.h"

namespace chorus {

// Ranks that share one GPU as threads of one process: each rank's kernels wait on the others', so
// they must run at once, and CUDA may not let them. It feeds a process's streams to the GPU through
// CUDA_DEVICE_MAX_CONNECTIONS hardware queues (8 unless set, at most 32), each in order: when two
// ranks' streams share a queue, a rank's kernel queued there behind another rank's launch that
// waits for an earlier kernel cannot start, and both stall until the deadline. The warning a rank
// logs once per process (`sharers` other ranks of it on the GPU, `connections` queues), or "" when
// none is due (no sharer, or the most queues CUDA gives).
std::string sharedGpuWarning(int sharers, int connections);
// What a device deadline's message adds on such a rank: the same cause, in a sentence.
std::string sharedGpuStallHint(int sharers, int connections);

// The launches of one communicator the host has not yet seen over, oldest first, with what each
// tells when it is: its flight recorder entries and the peers its lanes wait on. Pure bookkeeping
// (a launch's event is opaque here and asked through a callback), so tests drive it without a
// device.
//
// What the host can know without waiting on the device: launches of one communicator run one at
// a time, in issue order (DeviceComm::enqueue orders each after the last), so the first launch
// not seen done is the one in flight, and every launch before a done one is done. A kernel fault
// stops every later launch (lane_exec.h, runBlock: they run nothing), and so does the abort word.
// Which launch faulted: the fault record names the lane's sequence counter and the value the lane
// took, and the tracker counts the lanes enqueued on each counter (each lane advances its counter
// by one), so the launch whose lanes took that value is the one. A CUDA graph's replays advance the
// device's counters without the host knowing: the count then lags, no launch matches, and the
// oldest launch not seen done (the one in flight) is taken. A look asks the events first and reads
// the fault record and the abort word after: a fault or a stop that a completion shows is seen in
// the same look, so a launch that a fault or stop ended is never taken as done.
//
// Thread-compatible: DeviceComm's owner serialises its calls (DevicePath::mu_).
class LaunchTracker {
 public:
  // Flight recorder ids [first, last] (0: none recorded).
  struct Span {
    uint64_t first = 0;
    uint64_t last = 0;
  };
  // The device's side, read once per look after the events.
  struct DeviceState {
    bool faulted = false;       // DeviceError::status != 0
    uint32_t faultCounter = 0;  // the faulting lane's counter (counterOf) and the value it took
    uint64_t faultSeq = 0;
    bool stopped = false;  // the abort word
  };
  // What one look found.
  struct Found {
    std::vector<Span> done;     // over, before any fault or stop
    std::vector<Span> faulted;  // the launch whose kernel recorded the fault
    std::vector<Span> notRun;   // after the faulted launch: they ran nothing
    // Over or cut short once the abort word was set (no fault recorded): finished, or stopped,
    // the host cannot tell which.
    std::vector<Span> stopped;
    std::vector<void*> freed;  // events of the launches that left the tracker
  };
  // Launches kept apart at most; a launch past that merges into the newest (its event, recorded
  // again after it, then tells both are over).
  static constexpr size_t kMaxLaunches = 256;

  // The counter of a lane (DeviceCommState): collectives per channel, then point-to-point sends
  // and receives per peer and channel (device::p2pSeqIndex).
  static uint32_t counterOf(device::SeqKind kind, int32_t index, int nranks);

  // A launch just enqueued, with the counter of each of its lanes (once per lane) and the ranks
  // its lanes wait on. `event` equal to newestEvent() merges it into the newest launch.
  void add(void* event, Span flight, const std::vector<int>& peers, const std::vector<uint32_t>& laneCounters);
  bool full() const { return launches_.size() >= kMaxLaunches; }
  void* newestEvent() const { return launches_.empty() ? nullptr : launches_.back().event; }
  size_t size() const { return launches_.size(); }
  // One look: `eventDone` for the launches oldest first (until one is not done), then `state`.
  Found look(const std::function<bool(void*)>& eventDone, const std::function<DeviceState()>& state);
  // The ranks the launches not yet seen over wait on, sorted.
  std::vector<int> peers() const;

 private:
  struct Launch {
    void* event = nullptr;
    std::vector<Span> flight;
    std::vector<int> peers;                              // sorted, unique
    std::vector<std::pair<uint32_t, uint64_t>> lastSeq;  // per counter its lanes use: the value after them
  };
  std::deque<Launch> launches_;
  std::vector<uint64_t> seq_;  // per counter: lanes enqueued on it so far
  bool faultSeen_ = false;     // a fault was settled: every launch after it runs nothing
};

// The failure the device watchdog acts on, of `failures` found while kernels run (a FIFO for
// kernels whose socket ended, a peer process gone): the first that is about no rank in particular
// (Status::subject() < 0), or about a rank that a launch in flight waits on (`peersInFlight`,
// sorted); ok when none. A peer may leave once its part is done, so a failure about it is no
// failure of launches that do not involve it.
Status failureInFlight(const std::vector<Status>& failures, const std::vector<int>& peersInFlight);

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
  // One-copy arguments in device memory: the same arguments give the same copy back.
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
  device::LaunchHeader base(uint64_t commId, uint64_t timeoutNs) const;

  // Enqueues the launches on `stream` (a cudaStream_t; null: the communicator's own stream),
  // after this communicator's last launch on any other stream (outside a graph capture), and
  // tracks them (look()) with their flight recorder entries `flight`. Returns whether the stream
  // was capturing a graph: then nothing is tracked. Never waits on the device.
  Result<bool> enqueue(const std::vector<device::LaunchParams>& launches, void* stream,
                       LaunchTracker::Span flight = {});
  // The own stream's launches in the order of a CUDA stream that several communicators of one
  // launch share (one stream would run their kernels one after the other, and ranks on one GPU
  // wait for each other): forkFrom orders the own stream after the work on `stream` so far, and
  // joinInto orders `stream` after the own stream's work so far. Every fork of a launch comes
  // before any join (a join first would make the next fork wait for this kernel). Inside a graph
  // capture the pair joins the own stream to the capture and back, as CUDA's fork-join pattern.
  Status forkFrom(void* stream);
  Status joinInto(void* stream);
  // What the host can tell now of the launches it tracks, without waiting on the device (events,
  // the error record, the abort word); see LaunchTracker.
  LaunchTracker::Found look();
  // The ranks the launches not yet seen over wait on (as of the last look), sorted.
  std::vector<int> peersInFlight() const { return tracker_.peers(); }
  // Launches not yet seen over (as of the last look); any thread may ask.
  size_t launchesInFlight() const { return tracked_.load(std::memory_order_relaxed); }
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
  void* lastEvent_ = nullptr;   // recorded after the last launch (one of events_)
  void* lastStream_ = nullptr;  // where it was recorded (null: nowhere yet)
  void* forkEvent_ = nullptr;   // forkFrom's and joinInto's (a wait takes the event as it is then)
  void* joinEvent_ = nullptr;
  // Orders `after` behind the work on `before` so far, through *event (made on first use).
  Status order(void** event, void* before, void* after);
  bool anyLaunch_ = false;
  // Events recorded after launches: all of them (destroyed with this), those free (their launch
  // left the tracker), and the launches they track. Like every member, serialised by the owner
  // (DevicePath::mu_); tracked_ mirrors tracker_.size() for readers without it.
  std::vector<void*> events_;
  std::vector<void*> freeEvents_;
  LaunchTracker tracker_;
  std::atomic<size_t> tracked_{0};
  // The ranks a launch's lanes wait on (from the host copy of the connector table; a one-copy
  // lane waits on every rank), and each lane's counter.
  std::vector<int> peersOf(const std::vector<device::LaunchParams>& launches) const;
  std::vector<uint32_t> countersOf(const std::vector<device::LaunchParams>& launches) const;

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
  // Copies host bytes to device memory through staging_ (pinned), waited for. With ranks as
  // threads of one process, pageable copies beside their collectives stalled the ranks on a GPU
  // (docs/records/2026-11-29-gpu-runs.md, run 8: which driver resource they shared was not found); Chorus adds none.
  Status copyIn(void* dst, const void* data, size_t n);
  static constexpr size_t kStagingBytes = 64 << 10;
  char* staging_ = nullptr;  // pinned host memory, kStagingBytes

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
