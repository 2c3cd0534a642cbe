// A communicator's settings: the environment's snapshot (every CHORUS_* variable is declared
// beside the code that reads it, with src/common/settings.h's kinds) and typed copies of the
// settings config.cc declares, which several parts of a communicator read. docs/environment.md
// lists them all; a bad value is an error that names the variable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "src/common/cpu_isa.h"
#include "src/common/settings.h"
#include "src/common/status.h"

namespace chorus {

// An integer variable in [lo, hi] into *out; unset leaves *out alone. Anything else is an error
// that names the variable, its value and the range: the one parser of integer variables.
Status readEnvInt(const char* name, int64_t lo, int64_t hi, int64_t* out);

// CHORUS_SOCKET_IFNAME (every communicator's, and the ibverbs network's side channel).
extern const TextSetting kSocketIfname;
// CHORUS_DEBUG (read by Config::fromEnv, and by userMessage for TRACE's source locations).
extern const TextSetting kDebugLevel;

enum class LogLevel : int { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

enum Subsys : uint32_t {
  kSubsysInit = 1u << 0,
  kSubsysColl = 1u << 1,
  kSubsysP2p = 1u << 2,
  kSubsysNet = 1u << 3,
  kSubsysShm = 1u << 4,
  kSubsysBoot = 1u << 5,
  kSubsysEngine = 1u << 6,
  kSubsysEnv = 1u << 7,
  kSubsysAll = 0xffffffffu,
  // What INFO shows unless CHORUS_DEBUG_SUBSYS says otherwise, as NCCL_DEBUG_SUBSYS's default:
  // init, bootstrap and the environment, not a line per operation.
  kSubsysDefault = kSubsysInit | kSubsysBoot | kSubsysEnv,
};

// What ends a wait whose limit is `timeoutNs` (set by `variable`), as a sentence for the messages
// that report a stuck wait: the limit, or that only an abort ends it (Config::kNoDeadlineSeconds).
std::string deadlineText(int64_t timeoutNs, const char* variable);

struct Config {
  // The longest CHORUS_TIMEOUT (2^30 s, 34 years): no deadline. The NCCL drop-in sets it when
  // CHORUS_TIMEOUT is unset, since NCCL waits until the program aborts the communicator.
  static constexpr int64_t kNoDeadlineSeconds = int64_t(1) << 30;

  int64_t timeoutNs = int64_t(1800) * 1000000000;  // CHORUS_TIMEOUT (seconds)
  int64_t initTimeoutNs = 0;                       // CHORUS_INIT_TIMEOUT (seconds); 0: initTimeout()
  LogLevel logLevel = LogLevel::kWarn;             // CHORUS_DEBUG
  uint32_t logSubsys = kSubsysDefault;             // CHORUS_DEBUG_SUBSYS
  std::string socketIfname;                        // CHORUS_SOCKET_IFNAME
  int socketThreads = 1;                           // CHORUS_SOCKET_NTHREADS: net proxy threads
  std::string netPlugin;                           // CHORUS_NET_PLUGIN: a network library (docs/network.md)
  std::string netName;                             // CHORUS_NET: IB or Socket; empty: IB where offered
  size_t slotBytes = 128 * 1024;                   // CHORUS_SLOT_BYTES: payload of one FIFO slot
  int slots = 8;                                   // CHORUS_SLOTS: slots per FIFO
  size_t peerSlotBytes = 32 * 1024;                // CHORUS_P2P_SLOT_BYTES: slots of per-peer FIFOs
  size_t deviceSlotBytes = 512 * 1024;             // CHORUS_DEVICE_SLOT_BYTES: device ring FIFOs' slots
  int nChannels = 1;                               // CHORUS_NCHANNELS: rings run in parallel
  int deviceChannels = 0;                          // CHORUS_DEVICE_NCHANNELS: device collectives' most; 0: from the GPU
  std::string algo;                                // CHORUS_ALGO: ring | direct | slice | tree; empty: chosen per call
  std::string proto;                               // CHORUS_PROTO (simple, ll: device lanes)
  int64_t warnAfterNs = 0;                         // CHORUS_WARN_AFTER_MS; 0: min(60 s, timeout / 2)
  int64_t unreachableAfterNs = 0;                  // CHORUS_UNREACHABLE_AFTER (seconds); 0: unreachableNs()
  bool check = false;                              // CHORUS_CHECK: compare every collective across ranks
  bool netChecksum = false;                        // CHORUS_NET_CHECKSUM: CRC32C on every network message
  int oneCopy = -1;                                // CHORUS_ONECOPY: -1 by the tuning table, 0 never, 1 always
  bool ll128 = false;                              // CHORUS_LL128: the tuner may choose LL128 on device lanes
  bool printVersion = false;                       // CHORUS_DEBUG=VERSION (or INFO and up): the version line
  // CUDA_DEVICE_MAX_CONNECTIONS, CUDA's own (read, never set): the hardware queues through which
  // CUDA feeds a process's streams to a GPU. Ranks that share a GPU as threads of one process are
  // warned when it is low (docs/environment.md); CUDA's default, 8, when unset or not 1 to 32.
  int cudaConnections = 8;

  // Every registered setting as the environment gave it at init (settings declared elsewhere
  // read theirs from it: kX.get(config.env)).
  EnvSnapshot env;

  // What reading the environment found to say, logged once the communicator has a logger:
  // settings it could not use (WARN) and every CHORUS_* variable set ("X set by environment to
  // Y", INFO, subsystem ENV).
  std::vector<std::string> envWarnings;
  std::vector<std::string> envSettings;

  static Result<Config> fromEnv();
  // What ends a stuck wait, for the messages that say so.
  std::string deadlineText() const { return chorus::deadlineText(timeoutNs, "CHORUS_TIMEOUT"); }
  // How long an operation may make no progress before its rank logs what it waits for.
  int64_t stallWarnNs() const {
    if (warnAfterNs > 0) return warnAfterNs;
    return timeoutNs / 2 < int64_t(60) * 1000000000 ? timeoutNs / 2 : int64_t(60) * 1000000000;
  }
  // How long a waited-on peer of another host may answer no probe at all before it is declared
  // unreachable (its host down or cut off): CHORUS_UNREACHABLE_AFTER, else the shorter of 20 s
  // and half the timeout.
  int64_t unreachableNs() const {
    if (unreachableAfterNs > 0) return unreachableAfterNs;
    return timeoutNs / 2 < int64_t(20) * 1000000000 ? timeoutNs / 2 : int64_t(20) * 1000000000;
  }
  // Slot payload of per-peer connections (point-to-point, direct): never above a ring slot; on
  // device memory, never above a device ring slot.
  size_t peerSlots() const { return peerSlotBytes < slotBytes ? peerSlotBytes : slotBytes; }
  size_t devicePeerSlots() const { return peerSlotBytes < deviceSlotBytes ? peerSlotBytes : deviceSlotBytes; }
  // How long ranks may take to find each other at init: CHORUS_INIT_TIMEOUT, else the shorter of
  // 10 minutes and the communicator's timeout.
  int64_t initTimeout() const {
    if (initTimeoutNs > 0) return initTimeoutNs;
    return timeoutNs < int64_t(600) * 1000000000 ? timeoutNs : int64_t(600) * 1000000000;
  }
  // When a slow join is first reported: CHORUS_WARN_AFTER_MS, else the shorter of 10 s and half
  // the init timeout.
  int64_t initWarnNs() const {
    if (warnAfterNs > 0) return warnAfterNs;
    return initTimeout() / 2 < int64_t(10) * 1000000000 ? initTimeout() / 2 : int64_t(10) * 1000000000;
  }
};

}  // namespace chorus
