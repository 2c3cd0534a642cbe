#include "src/core/config.h"

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace chorus {
namespace {

const char* getEnv(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

Status readInt(const char* name, int64_t lo, int64_t hi, int64_t* out) {
  const char* v = getEnv(name);
  if (!v) return Status::ok();
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v, &end, 10);
  if (errno != 0 || *end != '\0' || x < lo || x > hi) {
    return invalidArgument(std::string(name) + "=" + v + " is not an integer in [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "]; unset it or give such a number");
  }
  *out = x;
  return Status::ok();
}

Status readBool(const char* name, bool* out) {
  int64_t x = *out ? 1 : 0;
  CHORUS_TRY(readInt(name, 0, 1, &x));
  *out = x != 0;
  return Status::ok();
}

}  // namespace

Result<Config> Config::fromEnv() {
  Config c;
  int64_t x = c.timeoutNs / 1000000000;
  CHORUS_TRY(readInt("CHORUS_TIMEOUT", 1, int64_t(1) << 30, &x));
  c.timeoutNs = x * 1000000000;

  if (const char* v = getEnv("CHORUS_DEBUG")) {
    std::string_view s(v);
    if (s == "WARN" || s == "warn") {
      c.logLevel = LogLevel::kWarn;
    } else if (s == "INFO" || s == "info") {
      c.logLevel = LogLevel::kInfo;
    } else if (s == "TRACE" || s == "trace") {
      c.logLevel = LogLevel::kTrace;
    } else if (s == "NONE" || s == "none" || s == "VERSION") {
      c.logLevel = LogLevel::kNone;
    } else {
      return invalidArgument(std::string("CHORUS_DEBUG=") + v + " is not one of NONE, WARN, INFO, TRACE");
    }
  }
  if (const char* v = getEnv("CHORUS_DEBUG_SUBSYS")) {
    // Comma-separated names; a leading ^ inverts the set, as NCCL_DEBUG_SUBSYS.
    std::string_view s(v);
    bool invert = false;
    if (!s.empty() && s[0] == '^') {
      invert = true;
      s.remove_prefix(1);
    }
    uint32_t mask = 0;
    while (!s.empty()) {
      size_t comma = s.find(',');
      std::string_view name = s.substr(0, comma);
      struct Named {
        const char* name;
        uint32_t bit;
      };
      static constexpr Named kNames[] = {{"INIT", kSubsysInit},     {"COLL", kSubsysColl}, {"P2P", kSubsysP2p},
                                         {"NET", kSubsysNet},       {"SHM", kSubsysShm},   {"BOOTSTRAP", kSubsysBoot},
                                         {"ENGINE", kSubsysEngine}, {"ENV", kSubsysEnv},   {"ALL", kSubsysAll}};
      bool found = false;
      for (const auto& n : kNames) {
        if (name == n.name) {
          mask |= n.bit;
          found = true;
        }
      }
      if (!found) {
        return invalidArgument("CHORUS_DEBUG_SUBSYS names an unknown subsystem '" + std::string(name) +
                               "'; known: INIT, COLL, P2P, NET, SHM, BOOTSTRAP, ENGINE, ENV, ALL");
      }
      if (comma == std::string_view::npos) break;
      s.remove_prefix(comma + 1);
    }
    c.logSubsys = invert ? ~mask : mask;
  }
  CHORUS_TRY(readBool("CHORUS_SHM_DISABLE", &c.shmDisable));
  CHORUS_TRY(readBool("CHORUS_P2P_DISABLE", &c.p2pDisable));
  if (const char* v = getEnv("CHORUS_SOCKET_IFNAME")) c.socketIfname = v;
  if (const char* v = getEnv("CHORUS_TOPO_FILE")) c.topoFile = v;
  if (const char* v = getEnv("CHORUS_TOPO_DUMP_FILE")) c.topoDumpFile = v;
  if (const char* v = getEnv("CHORUS_FLIGHT_DUMP")) c.flightDump = v;
  CHORUS_TRY(readBool("CHORUS_FLIGHT_TRACE", &c.flightTrace));
  CHORUS_TRY(readBool("CHORUS_CHECK", &c.check));
  x = static_cast<int64_t>(c.flightEntries);
  CHORUS_TRY(readInt("CHORUS_FLIGHT_ENTRIES", 0, 1 << 20, &x));
  c.flightEntries = static_cast<size_t>(x);
  x = c.flightSignal;
  CHORUS_TRY(readInt("CHORUS_FLIGHT_SIGNAL", 1, 64, &x));
  c.flightSignal = static_cast<int>(x);
  x = c.warnAfterNs / 1000000;
  CHORUS_TRY(readInt("CHORUS_WARN_AFTER_MS", 0, int64_t(1) << 40, &x));
  c.warnAfterNs = x * 1000000;

  x = c.socketThreads;
  CHORUS_TRY(readInt("CHORUS_SOCKET_NTHREADS", 1, 16, &x));
  c.socketThreads = static_cast<int>(x);
  CHORUS_TRY(readInt("CHORUS_SPIN_NS", 0, int64_t(10) * 1000000000, &c.spinNs));
  x = c.yieldIters;
  CHORUS_TRY(readInt("CHORUS_YIELD_ITERS", 0, 1000000, &x));
  c.yieldIters = static_cast<int>(x);
  x = c.sleepMaxNs / 1000;
  CHORUS_TRY(readInt("CHORUS_SLEEP_MAX_US", 1, 1000000, &x));
  c.sleepMaxNs = x * 1000;
  x = static_cast<int64_t>(c.slotBytes);
  CHORUS_TRY(readInt("CHORUS_SLOT_BYTES", 4096, int64_t(64) << 20, &x));
  if (x % 64 != 0) return invalidArgument("CHORUS_SLOT_BYTES must be a multiple of 64");
  c.slotBytes = static_cast<size_t>(x);
  x = static_cast<int64_t>(c.peerSlotBytes);
  CHORUS_TRY(readInt("CHORUS_P2P_SLOT_BYTES", 4096, int64_t(64) << 20, &x));
  if (x % 64 != 0) return invalidArgument("CHORUS_P2P_SLOT_BYTES must be a multiple of 64");
  c.peerSlotBytes = static_cast<size_t>(x);
  x = c.slots;
  CHORUS_TRY(readInt("CHORUS_SLOTS", 2, 64, &x));
  c.slots = static_cast<int>(x);
  x = c.nChannels;
  CHORUS_TRY(readInt("CHORUS_NCHANNELS", 1, 32, &x));
  c.nChannels = static_cast<int>(x);

  if (const char* v = getEnv("CHORUS_CPU_ISA")) {
    auto isa = parseCpuIsa(v);
    if (!isa) return invalidArgument(std::string("CHORUS_CPU_ISA=") + v + " is not one of scalar, avx2, avx512");
    if (!hostKernelsFor(*isa)) {
      return invalidArgument(std::string("CHORUS_CPU_ISA=") + v + " but this CPU cannot run that instruction set");
    }
    c.cpuIsa = isa;
  }
  if (const char* v = getEnv("CHORUS_ALGO")) {
    std::string lower(v);
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (lower != "ring" && lower != "direct" && lower != "slice" && lower != "tree") {
      return invalidArgument(
          std::string("CHORUS_ALGO=") + v +
          " is not an algorithm this build has (ring, direct, slice, tree); unset it to let Chorus choose");
    }
    c.algo = lower;
  }
  x = static_cast<int64_t>(c.directMaxBytes);
  CHORUS_TRY(readInt("CHORUS_DIRECT_MAX_BYTES", 0, int64_t(1) << 40, &x));
  c.directMaxBytes = static_cast<size_t>(x);
  if (const char* v = getEnv("CHORUS_PROTO")) {
    if (std::string_view(v) != "simple" && std::string_view(v) != "Simple") {
      return invalidArgument(std::string("CHORUS_PROTO=") + v + " is not a protocol this build has (simple)");
    }
    c.proto = "simple";
  }
  return c;
}

}  // namespace chorus
