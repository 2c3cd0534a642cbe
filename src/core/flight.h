// The flight recorder: the last N operations of one communicator, kept in a ring so a hang or a
// failure can be explained after the fact. A host operation's entry is written when the operation
// is issued (planned with its sequence number), marked running when its task first runs, and done
// or failed when it ends. A device operation's entry (gpu >= 0) is written when its kernels are
// enqueued on a CUDA stream, and then moves only as far as the host can tell without waiting on
// the device (src/core/device_comm.h, LaunchTracker): done once the event recorded after its
// launch is seen complete, failed when its launch is the one a kernel fault stopped (or it was
// stopped with the communicator), captured (and nothing after) when the stream was capturing a
// CUDA graph, whose replays nothing tells the host about. Device entries are never marked
// running: when a kernel starts is not known to the host. Dumped as text (chorusCommDumpState, a
// failure, an abort or a signal with CHORUS_FLIGHT_DUMP) and as a Chrome trace
// (CHORUS_FLIGHT_TRACE).
//
// Thread-safe: the issuing thread and the thread running the task both write; one mutex, taken
// for a few stores per operation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace chorus {

// FlightRecorder::issueHost writes every field of an entry in place: a field added here is set
// there too (flight_test checks that a reused slot keeps nothing of its last entry).
struct FlightEntry {
  // In the order an entry moves through them (mark() never moves one back); kEnqueued and
  // kCaptured are device entries' only. kCaptured is last: a captured entry takes no other state.
  enum class State : uint8_t { kIssued, kEnqueued, kRunning, kDone, kFailed, kCaptured };
  uint64_t id = 0;   // position in the recorder, from 1
  uint64_t seq = 0;  // the operation's sequence number: collectives count per communicator,
                     // point-to-point per peer and direction; device operations count apart
  const char* coll = "";
  const char* algo = "";   // ring, tree, direct, direct (inline), slice, p2p, one-copy
  const char* proto = "";  // device entries: Simple or LL ("" where no FIFO protocol applies)
  int blocks = 0;          // device operations: the blocks (lanes) its kernel ran; 0: not said
  size_t count = 0;
  int type = 0;   // chorusDataType_t
  int op = -1;    // chorusRedOp_t, -1 when none
  int root = -1;  // root or peer, -1 when none
  State state = State::kIssued;
  int result = 0;            // chorusResult_t once failed
  int gpu = -1;              // device entries: the CUDA device; -1: a host operation
  uintptr_t cudaStream = 0;  // device entries: the cudaStream_t enqueued on; 0: the communicator's own
  int64_t issuedNs = 0;      // device entries: when enqueued
  int64_t startNs = 0;       // device entries: never known (0)
  int64_t endNs = 0;         // device entries: when the host saw the launch over
  std::string why;           // what failed (a kernel's fault, a launch refused), when known

  bool onDevice() const { return gpu >= 0; }
};

const char* flightStateName(FlightEntry::State s);

class FlightRecorder {
 public:
  // capacity 0: records nothing (every call returns at once).
  explicit FlightRecorder(size_t capacity) : ring_(capacity) {}

  bool enabled() const { return !ring_.empty(); }
  // Records a new operation; returns its id (0 when disabled).
  uint64_t issue(const FlightEntry& e);
  // What issueHost records of a host operation.
  struct HostOp {
    uint64_t seq;
    const char* coll;
    const char* algo;
    size_t count;
    int type;
    int op;
    int root;
  };
  // issue() for a host operation, issued at `now` (running from then, with `running`): its fields
  // written into the ring in place, no entry built and copied (a small collective's every call).
  uint64_t issueHost(const HostOp& h, bool running, int64_t now);
  // Records several operations under consecutive ids (no other entry between them); returns the
  // first id (0 when disabled or `es` is empty).
  uint64_t issueAll(const std::vector<FlightEntry>& es);
  // Marks the entries [first, last] running, done, failed or captured, where still in the ring and
  // not already past that state (done and captured are final). `why` goes with a failure.
  void mark(uint64_t first, uint64_t last, FlightEntry::State state, int result, int64_t now,
            const std::string& why = {});
  // The entries still in the ring, oldest first.
  std::vector<FlightEntry> snapshot() const;

  // One line per entry, oldest first; `last` > 0 keeps only that many of the newest.
  static std::string text(const std::vector<FlightEntry>& entries, size_t last = 0);
  // Chrome trace events ("X" spans per operation, an instant for the ones not finished) for one
  // rank: pid is the rank, tid 0 the communicator's host operations (named `thread`), tid 1 its
  // device operations, from enqueue to when the host saw them over.
  static std::string chromeTrace(const std::vector<FlightEntry>& entries, int rank, const std::string& thread);

 private:
  mutable std::mutex mu_;
  std::vector<FlightEntry> ring_;
  uint64_t next_ = 1;
};

}  // namespace chorus
