#include "src/common/config.h"

#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

namespace chorus {

const char* envValue(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

Status readEnvInt(const char* name, int64_t lo, int64_t hi, int64_t* out) {
  const char* v = envValue(name);
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

namespace {

std::string upper(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

// Every CHORUS_* variable the library and its launcher read (docs/environment.md).
constexpr const char* kKnownVars[] = {"CHORUS_ALGO",
                                      "CHORUS_CHECK",
                                      "CHORUS_COMM_ID",
                                      "CHORUS_COMM_SECRET",
                                      "CHORUS_CUMEM_ENABLE",
                                      "CHORUS_CPU_ISA",
                                      "CHORUS_DEBUG",
                                      "CHORUS_DEBUG_FILE",
                                      "CHORUS_DEBUG_SUBSYS",
                                      "CHORUS_DEVICE_NCHANNELS",
                                      "CHORUS_DEVICE_SLOT_BYTES",
                                      "CHORUS_DIRECT_MAX_BYTES",
                                      "CHORUS_FLIGHT_DUMP",
                                      "CHORUS_FLIGHT_ENTRIES",
                                      "CHORUS_FLIGHT_SIGNAL",
                                      "CHORUS_FLIGHT_TRACE",
                                      "CHORUS_HOSTID",
                                      "CHORUS_INIT_TIMEOUT",
                                      "CHORUS_LL128",
                                      "CHORUS_LOCAL_RANK",
                                      "CHORUS_LOCAL_SIZE",
                                      "CHORUS_NCHANNELS",
                                      "CHORUS_NRANKS",
                                      "CHORUS_ONECOPY",
                                      "CHORUS_P2P_DISABLE",
                                      "CHORUS_P2P_SLOT_BYTES",
                                      "CHORUS_PROTO",
                                      "CHORUS_RANK",
                                      "CHORUS_RSH",
                                      "CHORUS_SHM_DISABLE",
                                      "CHORUS_SLEEP_MAX_US",
                                      "CHORUS_SLOTS",
                                      "CHORUS_SLOT_BYTES",
                                      "CHORUS_SOCKET_IFNAME",
                                      "CHORUS_SOCKET_NTHREADS",
                                      "CHORUS_NET",
                                      "CHORUS_NET_PLUGIN",
                                      "CHORUS_IB_ADAPTIVE_ROUTING",
                                      "CHORUS_IB_ADDR_FAMILY",
                                      "CHORUS_IB_ADDR_RANGE",
                                      "CHORUS_IB_AR_THRESHOLD",
                                      "CHORUS_IB_DISABLE",
                                      "CHORUS_IB_GID_INDEX",
                                      "CHORUS_IB_HCA",
                                      "CHORUS_IB_PKEY",
                                      "CHORUS_IB_QPS_PER_CONNECTION",
                                      "CHORUS_IB_RETRY_CNT",
                                      "CHORUS_IB_ROCE_VERSION_NUM",
                                      "CHORUS_IB_SL",
                                      "CHORUS_IB_SPLIT_DATA_ON_QPS",
                                      "CHORUS_IB_TC",
                                      "CHORUS_IB_TIMEOUT",
                                      "CHORUS_OFI_PROVIDER",
                                      "CHORUS_SPIN_NS",
                                      "CHORUS_TIMEOUT",
                                      "CHORUS_TOPO_DUMP_FILE",
                                      "CHORUS_TOPO_FILE",
                                      "CHORUS_WARN_AFTER_MS",
                                      "CHORUS_WORKERS_PER_CHANNEL",
                                      "CHORUS_YIELD_ITERS"};

size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// Notes every CHORUS_* variable of the environment: known ones as set, unknown ones (a typo
// such as CHORUS_ALG) as a warning with the nearest known name. Test programs' own variables
// (CHORUS_TEST_*, CHORUS_GRID*) are theirs.
void noteEnvironment(Config* c) {
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    if (entry.rfind("CHORUS_", 0) != 0) continue;
    const size_t eq = entry.find('=');
    const std::string name(entry.substr(0, eq));
    const std::string value(eq == std::string_view::npos ? "" : entry.substr(eq + 1));
    if (name.rfind("CHORUS_TEST_", 0) == 0 || name.rfind("CHORUS_GRID", 0) == 0) continue;
    bool known = false;
    const char* nearest = nullptr;
    size_t best = 4;
    for (const char* k : kKnownVars) {
      known = known || name == k;
      const size_t d = editDistance(name, k);
      if (d < best) {
        best = d;
        nearest = k;
      }
    }
    if (known) {
      // A secret's value is never written anywhere: whoever reads it could join the job.
      c->envSettings.push_back(name == "CHORUS_COMM_SECRET" ? name + " set by environment (value redacted)"
                                                            : name + " set by environment to " + value);
    } else {
      c->envWarnings.push_back(name + " is not a Chorus setting and is ignored" +
                               (nearest ? std::string("; did you mean ") + nearest + "?" : std::string()) +
                               " (docs/environment.md lists them)");
    }
  }
}

Status readBool(const char* name, bool* out) {
  int64_t x = *out ? 1 : 0;
  CHORUS_TRY(readEnvInt(name, 0, 1, &x));
  *out = x != 0;
  return Status::ok();
}

}  // namespace

std::string deadlineText(int64_t timeoutNs, const char* variable) {
  if (timeoutNs >= Config::kNoDeadlineSeconds * 1000000000) {
    return std::string("Nothing ends it but an abort (no deadline: ") + variable +
           " is unset under the NCCL drop-in, which waits as NCCL does)";
  }
  return "The timeout ends it after " + std::to_string(timeoutNs / 1000000000) + " s (" + variable + ")";
}

Result<Config> Config::fromEnv() {
  Config c;
  int64_t x = c.timeoutNs / 1000000000;
  CHORUS_TRY(readEnvInt("CHORUS_TIMEOUT", 1, kNoDeadlineSeconds, &x));
  c.timeoutNs = x * 1000000000;
  x = 0;
  CHORUS_TRY(readEnvInt("CHORUS_INIT_TIMEOUT", 1, int64_t(1) << 30, &x));
  c.initTimeoutNs = x * 1000000000;

  // As NCCL_DEBUG and NCCL_DEBUG_SUBSYS: names match whatever their case, and a value that
  // cannot be used is reported (once the logger exists) rather than refused: logging settings
  // must never stop a job.
  if (const char* v = envValue("CHORUS_DEBUG")) {
    const std::string s = upper(v);
    if (s == "WARN" || s == "ABORT") {
      c.logLevel = LogLevel::kWarn;
    } else if (s == "INFO") {
      c.logLevel = LogLevel::kInfo;
    } else if (s == "TRACE") {
      c.logLevel = LogLevel::kTrace;
    } else if (s == "NONE") {
      c.logLevel = LogLevel::kNone;
    } else if (s == "VERSION") {
      c.logLevel = LogLevel::kNone;
      c.printVersion = true;
    } else {
      c.envWarnings.push_back(std::string("CHORUS_DEBUG=") + v +
                              " is not one of NONE, VERSION, WARN, INFO, TRACE (any case); using WARN");
    }
    c.printVersion = c.printVersion || c.logLevel >= LogLevel::kInfo;
  }
  if (const char* v = envValue("CHORUS_DEBUG_SUBSYS")) {
    // Comma-separated names; a leading ^ inverts the set, as NCCL_DEBUG_SUBSYS.
    std::string_view s(v);
    bool invert = false;
    if (!s.empty() && s[0] == '^') {
      invert = true;
      s.remove_prefix(1);
    }
    uint32_t mask = 0;
    std::string unknown;
    while (!s.empty()) {
      size_t comma = s.find(',');
      const std::string name = upper(std::string(s.substr(0, comma)));
      struct Named {
        const char* name;
        uint32_t bit;
      };
      // NCCL's other subsystems (TUNING, GRAPH, ...) are accepted and select nothing here.
      static constexpr Named kNames[] = {{"INIT", kSubsysInit},
                                         {"COLL", kSubsysColl},
                                         {"P2P", kSubsysP2p},
                                         {"NET", kSubsysNet},
                                         {"SHM", kSubsysShm},
                                         {"BOOTSTRAP", kSubsysBoot},
                                         {"ENGINE", kSubsysEngine},
                                         {"ENV", kSubsysEnv},
                                         {"ALL", kSubsysAll},
                                         {"TUNING", kSubsysInit},
                                         {"GRAPH", 0},
                                         {"TOPO", kSubsysInit},
                                         {"ALLOC", 0},
                                         {"CALL", kSubsysColl},
                                         {"PROXY", kSubsysNet},
                                         {"NVLS", 0},
                                         {"REG", 0},
                                         {"PROFILE", 0},
                                         {"RAS", 0}};
      bool found = name.empty();
      for (const auto& n : kNames) {
        if (name == n.name) {
          mask |= n.bit;
          found = true;
        }
      }
      if (!found) unknown += (unknown.empty() ? "" : ", ") + name;
      if (comma == std::string_view::npos) break;
      s.remove_prefix(comma + 1);
    }
    if (!unknown.empty()) {
      c.envWarnings.push_back("CHORUS_DEBUG_SUBSYS names " + unknown +
                              ", which Chorus does not know; ignored (known: INIT, COLL, P2P, NET, SHM, BOOTSTRAP, "
                              "ENGINE, ENV, ALL)");
    }
    c.logSubsys = invert ? ~mask : mask;
  }
  CHORUS_TRY(readBool("CHORUS_SHM_DISABLE", &c.shmDisable));
  CHORUS_TRY(readBool("CHORUS_P2P_DISABLE", &c.p2pDisable));
  CHORUS_TRY(readBool("CHORUS_LL128", &c.ll128));
  if (const char* v = envValue("CUDA_DEVICE_MAX_CONNECTIONS")) {
    // CUDA's variable, not ours: a value it would not take is not an error here, only noted.
    char* end = nullptr;
    errno = 0;
    const long x = std::strtol(v, &end, 10);
    if (errno == 0 && *end == '\0' && x >= 1 && x <= 32) {
      c.cudaConnections = static_cast<int>(x);
    } else {
      c.envWarnings.push_back(std::string("CUDA_DEVICE_MAX_CONNECTIONS=") + v +
                              " is not a number from 1 to 32; Chorus assumes CUDA's default of 8 hardware queues");
    }
  }
  {
    int64_t oneCopy = c.oneCopy;
    CHORUS_TRY(readEnvInt("CHORUS_ONECOPY", 0, 1, &oneCopy));
    c.oneCopy = static_cast<int>(oneCopy);
  }
  // Read where device memory is allocated (src/device/cuda_runtime.cc); checked here so that a
  // value that is not a boolean fails init with the others.
  bool cumem = true;
  CHORUS_TRY(readBool("CHORUS_CUMEM_ENABLE", &cumem));
  if (const char* v = envValue("CHORUS_SOCKET_IFNAME")) c.socketIfname = v;
  if (const char* v = envValue("CHORUS_NET_PLUGIN")) c.netPlugin = v;
  if (const char* v = envValue("CHORUS_NET")) {
    if (::strcasecmp(v, "ib") != 0 && ::strcasecmp(v, "socket") != 0) {
      return Status(chorusInvalidArgument, std::string("CHORUS_NET=") + v +
                                               " names no built-in network: set IB or Socket (a network library "
                                               "goes in CHORUS_NET_PLUGIN)");
    }
    c.netName = v;
  }
  if (const char* v = envValue("CHORUS_TOPO_FILE")) c.topoFile = v;
  if (const char* v = envValue("CHORUS_TOPO_DUMP_FILE")) c.topoDumpFile = v;
  if (const char* v = envValue("CHORUS_FLIGHT_DUMP")) c.flightDump = v;
  CHORUS_TRY(readBool("CHORUS_FLIGHT_TRACE", &c.flightTrace));
  CHORUS_TRY(readBool("CHORUS_CHECK", &c.check));
  x = static_cast<int64_t>(c.flightEntries);
  CHORUS_TRY(readEnvInt("CHORUS_FLIGHT_ENTRIES", 0, 1 << 20, &x));
  c.flightEntries = static_cast<size_t>(x);
  x = c.flightSignal;
  CHORUS_TRY(readEnvInt("CHORUS_FLIGHT_SIGNAL", 1, 64, &x));
  c.flightSignal = static_cast<int>(x);
  x = c.warnAfterNs / 1000000;
  CHORUS_TRY(readEnvInt("CHORUS_WARN_AFTER_MS", 0, int64_t(1) << 40, &x));
  c.warnAfterNs = x * 1000000;

  x = c.socketThreads;
  CHORUS_TRY(readEnvInt("CHORUS_SOCKET_NTHREADS", 1, 16, &x));
  c.socketThreads = static_cast<int>(x);
  CHORUS_TRY(readEnvInt("CHORUS_SPIN_NS", 0, int64_t(10) * 1000000000, &c.spinNs));
  x = c.yieldIters;
  CHORUS_TRY(readEnvInt("CHORUS_YIELD_ITERS", 0, 1000000, &x));
  c.yieldIters = static_cast<int>(x);
  x = c.sleepMaxNs / 1000;
  CHORUS_TRY(readEnvInt("CHORUS_SLEEP_MAX_US", 1, 1000000, &x));
  c.sleepMaxNs = x * 1000;
  x = static_cast<int64_t>(c.slotBytes);
  CHORUS_TRY(readEnvInt("CHORUS_SLOT_BYTES", 4096, int64_t(64) << 20, &x));
  if (x % 64 != 0) return invalidArgument("CHORUS_SLOT_BYTES must be a multiple of 64");
  c.slotBytes = static_cast<size_t>(x);
  x = static_cast<int64_t>(c.peerSlotBytes);
  CHORUS_TRY(readEnvInt("CHORUS_P2P_SLOT_BYTES", 4096, int64_t(64) << 20, &x));
  if (x % 64 != 0) return invalidArgument("CHORUS_P2P_SLOT_BYTES must be a multiple of 64");
  c.peerSlotBytes = static_cast<size_t>(x);
  x = static_cast<int64_t>(c.deviceSlotBytes);
  CHORUS_TRY(readEnvInt("CHORUS_DEVICE_SLOT_BYTES", 4096, int64_t(64) << 20, &x));
  if (x % 64 != 0) return invalidArgument("CHORUS_DEVICE_SLOT_BYTES must be a multiple of 64");
  c.deviceSlotBytes = static_cast<size_t>(x);
  x = c.slots;
  CHORUS_TRY(readEnvInt("CHORUS_SLOTS", 2, 64, &x));
  // A power of two: a slot is its 32-bit FIFO position modulo the count, and only a count that
  // divides 2^32 keeps the slots in turn when the positions wrap.
  if ((x & (x - 1)) != 0) {
    return invalidArgument("CHORUS_SLOTS=" + std::to_string(x) + " is not a power of two: set 2, 4, 8, 16, 32 or 64");
  }
  c.slots = static_cast<int>(x);
  x = c.nChannels;
  CHORUS_TRY(readEnvInt("CHORUS_NCHANNELS", 1, 32, &x));
  c.nChannels = static_cast<int>(x);
  x = c.deviceChannels;
  CHORUS_TRY(readEnvInt("CHORUS_DEVICE_NCHANNELS", 0, 32, &x));
  c.deviceChannels = static_cast<int>(x);
  x = c.workersPerChannel;
  CHORUS_TRY(readEnvInt("CHORUS_WORKERS_PER_CHANNEL", 1, 64, &x));
  c.workersPerChannel = static_cast<int>(x);

  if (const char* v = envValue("CHORUS_CPU_ISA")) {
    auto isa = parseCpuIsa(v);
    if (!isa) return invalidArgument(std::string("CHORUS_CPU_ISA=") + v + " is not one of scalar, avx2, avx512");
    if (!cpuRuns(*isa)) {
      return invalidArgument(std::string("CHORUS_CPU_ISA=") + v + " but this CPU cannot run that instruction set");
    }
    c.cpuIsa = isa;
  }
  // CHORUS_ALGO and CHORUS_PROTO are parsed (and refused when unknown) by the communicator
  // (parseAlgoSetting, parseProtoSetting); compared across ranks as written here, in lower case.
  if (const char* v = envValue("CHORUS_ALGO")) {
    c.algo = v;
    for (char& ch : c.algo) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  x = static_cast<int64_t>(c.directMaxBytes);
  CHORUS_TRY(readEnvInt("CHORUS_DIRECT_MAX_BYTES", 0, int64_t(1) << 40, &x));
  c.directMaxBytes = static_cast<size_t>(x);
  if (const char* v = envValue("CHORUS_PROTO")) {
    c.proto = v;
    for (char& ch : c.proto) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  noteEnvironment(&c);
  return c;
}

}  // namespace chorus
