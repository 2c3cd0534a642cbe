// What a communicator tells about itself, above all when something goes wrong: the flight
// recorder of its last operations, the stall warnings of a wait that makes no progress, the
// settings it runs with, state dumps (chorusCommDumpState, a failure, an abort, a signal with
// CHORUS_FLIGHT_DUMP) and Chrome traces (CHORUS_FLIGHT_TRACE).
//
// A part of its Communicator (made with it, never without it): it reads the communicator's
// identity, configuration, state and channels, and writes nothing of it. Thread-safe: the
// recorder has its own lock, and a dump reads only what the communicator lets any thread read.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "src/common/status.h"
#include "src/core/flight.h"

namespace chorus {

class Communicator;
struct OpInfo;
struct WaitInfo;

class Diagnostics {
 public:
  explicit Diagnostics(const Communicator& comm) : comm_(comm) {}
  Diagnostics(const Diagnostics&) = delete;
  Diagnostics& operator=(const Diagnostics&) = delete;

  // The version line, the settings the environment could not use, and every CHORUS_* set.
  void logEnvironment() const;

  // At the end of init: the recorder (CHORUS_FLIGHT_ENTRIES), and the signal dump when
  // CHORUS_FLIGHT_DUMP is set. stop(), before the communicator goes: the trace
  // (CHORUS_FLIGHT_TRACE), and out of the signal dump's reach.
  void start();
  void stop();

  // The recorder (null before start): the device path writes and marks its entries itself.
  FlightRecorder* recorder() const { return flight_.get(); }
  // Records a host operation, issued at `now` (and running from then when it starts at once: the
  // inline path); returns its id (0: recorder off).
  uint64_t record(const OpInfo& op, uint64_t seq, const char* algo, int64_t now, bool running = false);
  // The recorder's entry for `op`, but its state and times.
  static FlightEntry entry(const OpInfo& op, uint64_t seq, const char* algo);
  void mark(uint64_t first, uint64_t last, FlightEntry::State state, int result);
  // The last `n` entries as text (empty with the recorder off): what a failure's warning shows.
  std::string lastOps(size_t n) const;

  // A wait of `waitedNs` without progress: past Config::stallWarnNs, says what it waits for, then
  // again after twice as long (*nextWarnNs is the waiter's, 0 at first).
  void noteStall(const WaitInfo& w, int64_t waitedNs, int64_t* nextWarnNs) const;

  // What the communicator is and was doing: identity, state, channels, the flight recorder.
  std::string state() const;
  // With CHORUS_FLIGHT_DUMP: writes state() (and, with CHORUS_FLIGHT_TRACE, the Chrome trace) to
  // <prefix>.<comm>.<rank>.txt/.json, saying `why`. Returns what it could not write.
  Status writeDump(const std::string& why) const;
  Status writeTrace(const std::string& path) const;

 private:
  std::string dumpName() const;  // <prefix>.<name or comm id>.<rank>

  const Communicator& comm_;
  std::unique_ptr<FlightRecorder> flight_;
};

}  // namespace chorus
