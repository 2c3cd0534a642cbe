#include "src/common/config.h"

#include <strings.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "src/common/settings.h"

namespace chorus {

Status readEnvInt(const char* name, int64_t lo, int64_t hi, int64_t* out) {
  const char* v = envValue(name);
  return v ? parseIntInRange(name, v, lo, hi, out) : Status::ok();
}

namespace {

std::string upper(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

Status builtInNetwork(const char* name, const std::string& v) {
  if (::strcasecmp(v.c_str(), "ib") == 0 || ::strcasecmp(v.c_str(), "socket") == 0) return Status::ok();
  return invalidArgument(std::string(name) + "=" + v +
                         " names no built-in network: set IB or Socket (a network library goes in "
                         "CHORUS_NET_PLUGIN)");
}

// The settings of every communicator (src/common/settings.h). Logging settings have no rule: a
// value that cannot be used is reported once the logger exists, never refused.
const IntSetting kTimeout{"CHORUS_TIMEOUT",
                          1800,
                          1,
                          Config::kNoDeadlineSeconds,
                          SettingScope::kRank,
                          "seconds any wait may last before it fails naming the peer waited for"};
const IntSetting kInitTimeout{"CHORUS_INIT_TIMEOUT",
                              0,
                              1,
                              int64_t(1) << 30,
                              SettingScope::kRank,
                              "seconds the ranks of a new communicator may take to find each other"};
const TextSetting kDebugSubsys{"CHORUS_DEBUG_SUBSYS", SettingScope::kRank, "the subsystems INFO and TRACE lines show"};
const BoolSetting kLl128{"CHORUS_LL128", false, SettingScope::kPlan,
                         "1: the tuner may choose LL128 for device collectives"};
const IntSetting kOneCopy{"CHORUS_ONECOPY",
                          -1,
                          0,
                          1,
                          SettingScope::kPlan,
                          "one-copy collectives: unset by the tuning table, 0 never, 1 always"};
const TextSetting kNetPlugin{"CHORUS_NET_PLUGIN", SettingScope::kRank, "the network connections between hosts use"};
const TextSetting kNet{"CHORUS_NET", SettingScope::kRank, "the built-in network: IB or Socket", builtInNetwork};
const BoolSetting kNetChecksum{"CHORUS_NET_CHECKSUM", false, SettingScope::kPlan,
                               "1: every network message carries a CRC32C of its bytes, checked on arrival"};
const BoolSetting kCheck{"CHORUS_CHECK", false, SettingScope::kPlan, "1: compare every collective across ranks"};
const IntSetting kWarnAfterMs{"CHORUS_WARN_AFTER_MS",
                              0,
                              0,
                              int64_t(1) << 40,
                              SettingScope::kRank,
                              "milliseconds without progress before a wait is reported"};
const IntSetting kUnreachableAfter{
    "CHORUS_UNREACHABLE_AFTER",
    0,
    0,
    Config::kNoDeadlineSeconds,
    SettingScope::kRank,
    "seconds a peer of another host may answer no probe before it is declared unreachable"};
const IntSetting kSocketThreads{
    "CHORUS_SOCKET_NTHREADS", 1, 1, 16, SettingScope::kRank, "net transport proxy threads per communicator"};
const IntSetting kSlotBytes{"CHORUS_SLOT_BYTES", 128 * 1024,          4096,
                            int64_t(64) << 20,   SettingScope::kPlan, "payload bytes of one FIFO slot",
                            multipleOf64};
const IntSetting kP2pSlotBytes{
    "CHORUS_P2P_SLOT_BYTES",          32 * 1024,   4096, int64_t(64) << 20, SettingScope::kPlan,
    "slot payload of per-peer FIFOs", multipleOf64};
const IntSetting kDeviceSlotBytes{"CHORUS_DEVICE_SLOT_BYTES",
                                  512 * 1024,
                                  4096,
                                  int64_t(64) << 20,
                                  SettingScope::kPlan,
                                  "payload bytes of one slot of a device ring FIFO",
                                  multipleOf64};
const IntSetting kSlots{"CHORUS_SLOTS", 8, 2, 64, SettingScope::kPlan, "slots per FIFO", powerOfTwo};
const IntSetting kNChannels{"CHORUS_NCHANNELS", 1, 1, 32, SettingScope::kPlan, "rings run in parallel"};
const IntSetting kDeviceChannels{"CHORUS_DEVICE_NCHANNELS",
                                 0,
                                 0,
                                 32,
                                 SettingScope::kPlan,
                                 "the most channels a collective on device buffers runs; 0: from the GPUs"};
// Parsed (and refused when unknown) by the communicator (parseAlgoSetting, parseProtoSetting).
const TextSetting kAlgo{"CHORUS_ALGO", SettingScope::kPlan, "the algorithm of every all-reduce", nullptr, true};
const TextSetting kProto{"CHORUS_PROTO", SettingScope::kPlan, "the protocol of device lanes", nullptr, true};

}  // namespace

const TextSetting kSocketIfname{"CHORUS_SOCKET_IFNAME", SettingScope::kRank,
                                "the interface for bootstrap and socket traffic"};
const TextSetting kDebugLevel{"CHORUS_DEBUG", SettingScope::kRank, "NONE, VERSION, WARN, INFO or TRACE"};

std::string deadlineText(int64_t timeoutNs, const char* variable) {
  if (timeoutNs >= Config::kNoDeadlineSeconds * 1000000000) {
    return std::string("Nothing ends it but an abort (no deadline: ") + variable +
           " is unset under the NCCL drop-in, which waits as NCCL does)";
  }
  return "The timeout ends it after " + std::to_string(timeoutNs / 1000000000) + " s (" + variable + ")";
}

Result<Config> Config::fromEnv() {
  Config c;
  CHORUS_ASSIGN_OR_RETURN(c.env, EnvSnapshot::fromEnv());
  const EnvSnapshot& e = c.env;
  c.timeoutNs = kTimeout.get(e) * 1000000000;
  c.initTimeoutNs = kInitTimeout.get(e) * 1000000000;

  // As NCCL_DEBUG and NCCL_DEBUG_SUBSYS: names match whatever their case, and a value that
  // cannot be used is reported (once the logger exists) rather than refused: logging settings
  // must never stop a job.
  if (const std::string& v = kDebugLevel.get(e); !v.empty()) {
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
      c.envWarnings.push_back("CHORUS_DEBUG=" + v +
                              " is not one of NONE, VERSION, WARN, INFO, TRACE (any case); using WARN");
    }
    c.printVersion = c.printVersion || c.logLevel >= LogLevel::kInfo;
  }
  if (const std::string& v = kDebugSubsys.get(e); !v.empty()) {
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
  c.ll128 = kLl128.get(e);
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
  c.oneCopy = static_cast<int>(kOneCopy.get(e));
  c.socketIfname = kSocketIfname.get(e);
  c.netPlugin = kNetPlugin.get(e);
  c.netName = kNet.get(e);
  c.check = kCheck.get(e);
  c.netChecksum = kNetChecksum.get(e);
  c.warnAfterNs = kWarnAfterMs.get(e) * 1000000;
  c.unreachableAfterNs = kUnreachableAfter.get(e) * 1000000000;
  c.socketThreads = static_cast<int>(kSocketThreads.get(e));
  c.slotBytes = static_cast<size_t>(kSlotBytes.get(e));
  c.peerSlotBytes = static_cast<size_t>(kP2pSlotBytes.get(e));
  c.deviceSlotBytes = static_cast<size_t>(kDeviceSlotBytes.get(e));
  c.slots = static_cast<int>(kSlots.get(e));
  c.nChannels = static_cast<int>(kNChannels.get(e));
  c.deviceChannels = static_cast<int>(kDeviceChannels.get(e));
  c.algo = kAlgo.get(e);
  c.proto = kProto.get(e);
  for (const std::string& w : e.unknownWarnings()) c.envWarnings.push_back(w);
  c.envSettings = e.setLines();
  return c;
}

}  // namespace chorus
