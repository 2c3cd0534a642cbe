// The flight recorder: the last N operations of one communicator, kept in a ring so a hang or a
// failure can be explained after the fact. Each entry is written when the operation is issued
// (planned with its sequence number), marked running when its task first runs, and done or
// failed when it ends. Dumped as text (chorusCommDumpState, a failure, an abort or a signal with
// CHORUS_FLIGHT_DUMP) and as a Chrome trace (CHORUS_FLIGHT_TRACE).
//
// Thread-safe: the issuing thread and the thread running the task both write; one mutex, taken
// for a few stores per operation.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace chorus {

struct FlightEntry {
  enum class State : uint8_t { kIssued, kRunning, kDone, kFailed };
  uint64_t id = 0;   // position in the recorder, from 1
  uint64_t seq = 0;  // the operation's sequence number: collectives count per communicator,
                     // point-to-point per peer and direction
  const char* coll = "";
  const char* algo = "";  // ring, tree, direct, direct (inline), slice, p2p
  size_t count = 0;
  int type = 0;   // chorusDataType_t
  int op = -1;    // chorusRedOp_t, -1 when none
  int root = -1;  // root or peer, -1 when none
  State state = State::kIssued;
  int result = 0;  // chorusResult_t once failed
  int64_t issuedNs = 0;
  int64_t startNs = 0;
  int64_t endNs = 0;
};

const char* flightStateName(FlightEntry::State s);

class FlightRecorder {
 public:
  // capacity 0: records nothing (every call returns at once).
  explicit FlightRecorder(size_t capacity) : ring_(capacity) {}

  bool enabled() const { return !ring_.empty(); }
  // Records a new operation; returns its id (0 when disabled).
  uint64_t issue(FlightEntry e);
  // Marks the entries [first, last] running, done or failed, where still in the ring and not
  // already past that state.
  void mark(uint64_t first, uint64_t last, FlightEntry::State state, int result, int64_t now);
  // The entries still in the ring, oldest first.
  std::vector<FlightEntry> snapshot() const;

  // One line per entry, oldest first; `last` > 0 keeps only that many of the newest.
  static std::string text(const std::vector<FlightEntry>& entries, size_t last = 0);
  // Chrome trace events ("X" spans per operation, an instant for the ones not finished) for one
  // rank: pid is the rank, tid the communicator's name or id.
  static std::string chromeTrace(const std::vector<FlightEntry>& entries, int rank, const std::string& thread);

 private:
  mutable std::mutex mu_;
  std::vector<FlightEntry> ring_;
  uint64_t next_ = 1;
};

}  // namespace chorus
