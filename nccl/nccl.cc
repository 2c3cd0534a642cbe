// libnccl.so.2 from Chorus: every function the libnccl.so.2 of NCCL 2.28.9 exports, with its
// signature, over Chorus's public C API (docs/nccl.md). Compiled against the CUDA toolkit's own
// nccl.h and nccl_device.h, so a signature that differs from NCCL's does not compile.
//
// As NCCL does, each function is defined as pnccl<Name> and exported as ncclName too, a weak
// alias a profiler may interpose. ncclComm_t is a chorusComm_t, and every enum and the unique id
// are Chorus's, which match NCCL's numerically (static_asserts below). NCCL_* variables become
// their CHORUS_* twins at the first ncclGetUniqueId, communicator init or ncclMemAlloc, and again
// at ncclResetDebugInit (a CHORUS_* variable the user set wins).
//
// Buffers: device buffers go on the caller's CUDA stream (a chorusStreamFromCuda wrapper, made
// once per stream and kept); host buffers, which NCCL refuses, run synchronously once the stream's
// earlier work is done (the call returns when the operation is complete, or at chorusGroupEnd
// inside a group). The device API of nccl_device.h (DevComm, teams, LSA and GIN barriers, LL
// all-to-all) is not served: those calls fail with ncclInvalidUsage and say so.
#include <nccl.h>
#include <nccl_device.h>

#include <dlfcn.h>
#include <pwd.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "chorus/chorus.h"
#include "chorus/chorus_cuda.h"

static_assert(sizeof(ncclUniqueId) == sizeof(chorusUniqueId));
static_assert(NCCL_UNIQUE_ID_BYTES == CHORUS_UNIQUE_ID_BYTES);
static_assert(ncclSuccess == static_cast<int>(chorusSuccess) && ncclInProgress == static_cast<int>(chorusInProgress) &&
              ncclNumResults == static_cast<int>(chorusNumResults));
static_assert(ncclInt8 == static_cast<int>(chorusInt8) && ncclFloat16 == static_cast<int>(chorusFloat16) &&
              ncclBfloat16 == static_cast<int>(chorusBfloat16) &&
              ncclFloat8e5m2 == static_cast<int>(chorusFloat8e5m2) && ncclNumTypes == static_cast<int>(chorusNumTypes));
static_assert(ncclSum == static_cast<int>(chorusSum) && ncclAvg == static_cast<int>(chorusAvg) &&
              ncclNumOps == static_cast<int>(chorusNumOps));
static_assert(ncclScalarDevice == static_cast<int>(chorusScalarDevice) &&
              ncclScalarHostImmediate == static_cast<int>(chorusScalarHostImmediate));
static_assert(NCCL_SPLIT_NOCOLOR == CHORUS_SPLIT_NOCOLOR && NCCL_SHRINK_ABORT == CHORUS_SHRINK_ABORT &&
              NCCL_REVOKE_DEFAULT == CHORUS_REVOKE_DEFAULT && NCCL_WIN_COLL_SYMMETRIC == CHORUS_WIN_COLL_SYMMETRIC);
static_assert(NCCL_CONFIG_UNDEF_INT == CHORUS_CONFIG_UNDEF_INT);
static_assert(sizeof(ncclSimInfo_t) == sizeof(chorusSimInfo_t) &&
              offsetof(ncclSimInfo_t, estimatedTime) == offsetof(chorusSimInfo_t, estimatedTime));
// ncclConfig_t's fields are the leading fields of chorusConfig_t, in order.
static_assert(offsetof(ncclConfig_t, nvlinkCentricSched) == offsetof(chorusConfig_t, nvlinkCentricSched));

// pnccl<name> is the function; nccl<name> a weak alias of it.
#define NCCL_API(ret, name, ...)                                                                   \
  extern "C" ret name(__VA_ARGS__) __attribute__((weak, alias("p" #name), visibility("default"))); \
  extern "C" __attribute__((visibility("default"))) ret p##name(__VA_ARGS__)

namespace {

constexpr unsigned kNcclConfigMagic = 0xcafebeef;
constexpr unsigned kNcclSimInfoMagic = 0x74685283;

// The last error of this process, as NCCL keeps it (debug.cc: one buffer, written at every
// failure on any thread, never cleared): what ncclGetLastError returns, whatever communicator it
// is given.
char gLastError[1024] = "";

std::mutex& lastErrorMutex() {
  static auto* mu = new std::mutex();
  return *mu;
}

void remember(const std::string& what) {
  std::lock_guard<std::mutex> g(lastErrorMutex());
  std::snprintf(gLastError, sizeof(gLastError), "%s", what.c_str());
}

// Chorus's result as NCCL's (the codes are the same); a failure's message is kept for
// ncclGetLastError.
ncclResult_t pass(chorusResult_t r) {
  if (r != chorusSuccess && r != chorusInProgress) remember(chorusGetLastError(nullptr));
  return static_cast<ncclResult_t>(r);
}

ncclResult_t refuse(const char* what) {
  remember(std::string(what) +
           " is NCCL's device API (nccl_device.h), which Chorus's libnccl.so.2 does not serve yet; "
           "use the host API's collectives");
  return ncclInvalidUsage;
}

chorusComm_t chorusOf(ncclComm_t c) { return reinterpret_cast<chorusComm_t>(c); }

// A live communicator, or the error that says it is not (NCCL's CommCheck).
ncclResult_t checkComm(ncclComm_t comm) {
  int n = 0;
  return pass(chorusCommCount(chorusOf(comm), &n));
}

// What the drop-in knows of a communicator beyond Chorus's handle. Revoked: Chorus fails a revoked
// communicator (its operations and its async error say chorusRemoteError); NCCL's revoked one is
// quiescent, not failed: its async error reads ncclSuccess, its attribute queries answer, and an
// operation on it is ncclInvalidUsage (enqueue.cc), which fails the group it is in. Non-blocking
// (ncclConfig_t.blocking = 0, NCCL_COMM_BLOCKING=0, or a split or shrink of one without a config
// of its own): Chorus runs its operations on the calling thread; NCCL launches them in the
// background and answers ncclInProgress until ncclCommGetAsyncError reads ncclSuccess.
struct Marks {
  bool revoked = false;
  bool nonBlocking = false;
};
struct MarkedComms {
  std::mutex mu;
  std::unordered_map<ncclComm_t, Marks> byComm;
  std::atomic<bool> any{false};  // a blocking-only program's operations look no further
};
MarkedComms& markedComms() {
  static auto* m = new MarkedComms();
  return *m;
}
Marks marksOf(ncclComm_t comm) {
  MarkedComms& m = markedComms();
  if (!m.any.load(std::memory_order_acquire)) return {};
  std::lock_guard<std::mutex> g(m.mu);
  auto it = m.byComm.find(comm);
  return it == m.byComm.end() ? Marks{} : it->second;
}
void mark(ncclComm_t comm, bool Marks::*which, bool on) {
  if (!comm) return;
  MarkedComms& m = markedComms();
  std::lock_guard<std::mutex> g(m.mu);
  Marks& marks = m.byComm[comm];
  marks.*which = on;
  if (!marks.revoked && !marks.nonBlocking) m.byComm.erase(comm);
  m.any.store(!m.byComm.empty(), std::memory_order_release);
}
// A destroyed or aborted communicator's handle is never used again.
void forgetMarks(ncclComm_t comm) {
  MarkedComms& m = markedComms();
  std::lock_guard<std::mutex> g(m.mu);
  m.byComm.erase(comm);
  m.any.store(!m.byComm.empty(), std::memory_order_release);
}
bool isRevoked(ncclComm_t comm) { return marksOf(comm).revoked; }
bool isNonBlocking(ncclComm_t comm) { return marksOf(comm).nonBlocking; }
void setNonBlocking(ncclComm_t comm, bool nonBlocking) { mark(comm, &Marks::nonBlocking, nonBlocking); }

// This thread's group depth (ncclGroupStart less ncclGroupEnd).
thread_local int tGroupDepth = 0;
// The code this thread's group ends with whatever Chorus says (ncclSuccess: Chorus's): an operation
// in it on a revoked communicator, or on one still initialising, fails the group as NCCL's fails.
thread_local ncclResult_t tGroupCode = ncclSuccess;
// Whether the group holds an operation on a non-blocking communicator: its end is ncclInProgress.
thread_local bool tGroupNonBlocking = false;
// The splits of this thread's group: NCCL writes a split's *newcomm when its init is done (at the
// group's end, failed or not), NULL until then (init.cc).
thread_local std::vector<std::pair<ncclComm_t*, ncclComm_t>> tGroupSplits;

// NCCL_COMM_BLOCKING as NCCL reads it (an integer; 0: non-blocking), which overrides every
// communicator's config (init.cc, parseCommConfig); -1 when unset.
int commBlockingEnv() {
  const char* v = std::getenv("NCCL_COMM_BLOCKING");
  if (!v) return -1;
  const long long x = std::strtoll(v, nullptr, 0);
  return x == NCCL_CONFIG_UNDEF_INT ? -1 : (x != 0 ? 1 : 0);
}

// Whether a communicator made with `config` (NULL: `parent`'s, or blocking) is non-blocking.
bool nonBlockingConfig(const ncclConfig_t* config, ncclComm_t parent = nullptr) {
  if (const int env = commBlockingEnv(); env >= 0) return env == 0;
  if (!config) return parent && isNonBlocking(parent);
  const bool has = config->size >= offsetof(ncclConfig_t, blocking) + sizeof(config->blocking);
  return has && config->blocking == 0;
}

// An operation's result as NCCL's (enqueue.cc): on a revoked communicator ncclInvalidUsage, on
// one still initialising ncclInvalidArgument (each failing the group it is in); on a non-blocking
// one ncclInProgress outside a group, unless it has nothing to move (no elements, one rank: NCCL
// runs it at once); else Chorus's.
ncclResult_t opResult(ncclComm_t comm, const char* op, chorusResult_t r, size_t count) {
  if (r == chorusSuccess) {
    if (!isNonBlocking(comm)) return ncclSuccess;
    int n = 0;
    if (count == 0 || (chorusCommCount(chorusOf(comm), &n) == chorusSuccess && n == 1)) return ncclSuccess;
    if (tGroupDepth > 0) {
      tGroupNonBlocking = true;
      return ncclSuccess;
    }
    return ncclInProgress;
  }
  ncclResult_t code = ncclSuccess;
  if (isRevoked(comm)) {
    remember(std::string(op) + ": communicator was revoked");
    code = ncclInvalidUsage;
  } else if (chorusResult_t async = chorusSuccess; r == chorusInvalidUsage &&
                                                   chorusCommGetAsyncError(chorusOf(comm), &async) == chorusSuccess &&
                                                   async == chorusInProgress) {
    remember(std::string(op) +
             ": the communicator is still initialising (ncclCommGetAsyncError returns "
             "ncclInProgress); wait until it returns ncclSuccess");
    code = ncclInvalidArgument;
  }
  if (code == ncclSuccess) return pass(r);
  if (tGroupDepth > 0 && tGroupCode == ncclSuccess) tGroupCode = code;
  return code;
}

chorusUniqueId chorusIdOf(const ncclUniqueId& id) {
  chorusUniqueId out;
  std::memcpy(&out, &id, sizeof(out));
  return out;
}
chorusDataType_t typeOf(ncclDataType_t t) { return static_cast<chorusDataType_t>(t); }
// NCCL's scrambling of a communicator's own operators (comm.h, ncclUserRedOpMangle): the value a
// program holds depends on the communicator's address, so that one communicator's operator used
// on another is refused, not run with another operator's scalar. Built-in operators stay as they
// are; the scrambling is its own inverse.
ncclRedOp_t mangled(ncclComm_t comm, ncclRedOp_t op) {
  if (static_cast<int>(op) < static_cast<int>(ncclNumOps)) return op;
  uint64_t h = reinterpret_cast<uint64_t>(comm);
  h ^= h >> 32;
  h *= 0x9e3779b97f4a7c13ull;
  h >>= 32;
  h &= static_cast<uint64_t>(ncclMaxRedOp);
  const int op1 = static_cast<int>(h) ^ static_cast<int>(op);
  return op1 < static_cast<int>(ncclNumOps) ? op : static_cast<ncclRedOp_t>(op1);
}
// The Chorus operator an NCCL operator of `comm` stands for. NCCL has no bitwise operators: a value
// that would name one of Chorus's (chorusBand..chorusBxor) is refused as NCCL refuses an unknown one.
chorusRedOp_t opOf(ncclRedOp_t op, ncclComm_t comm) {
  const auto ours = static_cast<chorusRedOp_t>(mangled(comm, op));
  return ours >= chorusBand && ours <= chorusBxor ? chorusMaxRedOp : ours;
}

// --- The environment: NCCL's variables as Chorus's ---

// The CHORUS_* variables this library set from NCCL_* ones, with the values it set; a later
// mapping may change or remove them, never one the user set (before, or since: a value that is no
// longer the one set here is the user's). Guarded by envMutex().
std::vector<std::pair<std::string, std::string>>& mappedNames() {
  static auto* names = new std::vector<std::pair<std::string, std::string>>();
  return *names;
}

std::mutex& envMutex() {
  static auto* mu = new std::mutex();
  return *mu;
}

void setIfUnset(const char* chorusName, const std::string& value) {
  if (std::getenv(chorusName)) return;
  setenv(chorusName, value.c_str(), 0);
  mappedNames().emplace_back(chorusName, value);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return s;
}

// NCCL_DEBUG as NCCL 2.28 reads it (debug.cc): VERSION, WARN, INFO, ABORT or TRACE in any case;
// unset, or any other value (NONE included), prints nothing at all. Returns the level's name in
// lower case, or "" for silence.
std::string ncclDebugLevel() {
  const char* v = std::getenv("NCCL_DEBUG");
  if (!v) return "";
  const std::string level = lower(v);
  for (const char* known : {"version", "warn", "info", "abort", "trace"}) {
    if (level == known) return level;
  }
  return "";
}

// Says once, on stderr, that an NCCL variable's value has no Chorus counterpart, when NCCL_DEBUG
// asks for warnings.
void cannotMap(const char* name, const char* value, const char* why) {
  const std::string debug = ncclDebugLevel();
  if (debug.empty() || debug == "version") return;
  std::fprintf(stderr, "CHORUS WARN %s=%s: %s; Chorus chooses itself\n", name, value, why);
}

// Says once per setting, on stderr, when the debug level (CHORUS_DEBUG, or NCCL_DEBUG mapped to
// it) is INFO or TRACE, that a setting of NCCL's has no effect here and why.
void noteIgnored(const std::string& setting, const char* why) {
  const char* debug = std::getenv("CHORUS_DEBUG");
  if (!debug || (lower(debug) != "info" && lower(debug) != "trace")) return;
  static auto* said = new std::vector<std::string>();
  static std::mutex mu;
  std::lock_guard<std::mutex> g(mu);
  const std::string name = setting.substr(0, setting.find('='));
  if (std::find(said->begin(), said->end(), name) != said->end()) return;
  said->push_back(name);
  std::fprintf(stderr, "CHORUS INFO %s is ignored: %s\n", setting.c_str(), why);
}

// An NCCL integer setting as NCCL reads it: strtoll in any base, what follows the digits ignored
// (no digits: 0); out of range: -2, which NCCL then takes as its parameter's default (the only
// switch where that matters, NCCL_CUMEM_ENABLE, defaults to -2).
long long ncclInteger(const char* v) {
  errno = 0;
  const long long x = std::strtoll(v, nullptr, 0);
  return errno == ERANGE ? -2 : x;
}

// NCCL_ALGO and NCCL_PROTO as NCCL 2.28 parses them (graph/tuning.cc, parseList): entries
// separated by ';', each "[function:][^]element,element..."; only the first may leave out the
// function, and then sets every function's row. An entry sets its row to exactly its elements, or
// with '^' to all but them. Names match in any case; nothing is trimmed. Returns "" or NCCL's
// complaint, with which every communicator init fails (ncclInvalidUsage).
constexpr const char* kNcclFunctions[] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"};
constexpr int kNcclAllReduce = 4;
constexpr int kNcclFunctionCount = 5;

std::string parseNcclList(const std::string& text, const std::vector<std::string>& elems,
                          std::vector<std::vector<bool>>* rows) {
  auto same = [](const std::string& a, const char* b) { return strcasecmp(a.c_str(), b) == 0; };
  // strtok_r's view of a string: the non-empty pieces between separators.
  auto pieces = [](const std::string& s, char sep) {
    std::vector<std::string> out;
    size_t at = 0;
    while (at <= s.size()) {
      const size_t end = std::min(s.find(sep, at), s.size());
      if (end > at) out.push_back(s.substr(at, end - at));
      at = end + 1;
    }
    return out;
  };
  const std::vector<std::string> entries = pieces(text, ';');
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::vector<std::string> parts = pieces(entries[i], ':');
    std::string prefix, list;
    if (parts.size() < 2) {
      if (i > 0) return "All entries except the first must have a prefix: \"" + text + "\"";
      list = parts.empty() ? "" : parts[0];
    } else {
      prefix = parts[0];
      list = parts[1];
    }
    const bool exclude = !list.empty() && list[0] == '^';
    if (exclude) list.erase(0, 1);
    bool found = false;
    for (int f = 0; f < kNcclFunctionCount; ++f) {
      if (!prefix.empty() && !same(prefix, kNcclFunctions[f])) continue;
      found = true;
      std::vector<bool>& row = (*rows)[f];
      row.assign(elems.size(), exclude);
      for (const std::string& e : pieces(list, ',')) {
        size_t k = 0;
        while (k < elems.size() && !same(e, elems[k].c_str())) ++k;
        if (k == elems.size()) return "Unrecognized element token \"" + e + "\" when parsing \"" + text + "\"";
        row[k] = !exclude;
      }
    }
    if (!found) return "Unrecognized prefix token \"" + prefix + "\" when parsing \"" + text + "\"";
  }
  return "";
}

// Why NCCL_ALGO or NCCL_PROTO makes every init fail, as NCCL's init fails; "" when they parse.
// Guarded by envMutex().
std::string& tuningError() {
  static auto* e = new std::string();
  return *e;
}

// NCCL_ALGO or NCCL_PROTO onto CHORUS_ALGO or CHORUS_PROTO: where the all-reduce's row leaves
// exactly one of the choices Chorus has (Ring or Tree; Simple, LL or LL128), that one; otherwise
// Chorus's tuner chooses, said at INFO.
void mapTuning(const char* name, const char* chorusName, const std::vector<std::string>& elems,
               const std::vector<std::string>& chorusHas) {
  const char* v = std::getenv(name);
  if (!v) return;
  std::vector<std::vector<bool>> rows(kNcclFunctionCount, std::vector<bool>(elems.size(), true));
  if (std::string why = parseNcclList(v, elems, &rows); !why.empty()) {
    tuningError() = name + std::string("=") + v + ": " + why;
    return;
  }
  std::string only;
  int left = 0;
  for (size_t k = 0; k < elems.size(); ++k) {
    if (!rows[kNcclAllReduce][k] || std::find(chorusHas.begin(), chorusHas.end(), elems[k]) == chorusHas.end())
      continue;
    ++left;
    only = lower(elems[k]);
  }
  if (left == 1) {
    setIfUnset(chorusName, only);
  } else {
    noteIgnored(std::string(name) + "=" + v,
                "it leaves the all-reduce no single algorithm or protocol Chorus has; "
                "Chorus's tuner chooses");
  }
}

// Maps NCCL's variables as they are now, first removing what an earlier mapping set. Callers hold
// envMutex().
void mapEnvironment() {
  for (const auto& [name, value] : mappedNames()) {
    const char* now = std::getenv(name.c_str());
    if (now && value == now) unsetenv(name.c_str());
  }
  mappedNames().clear();
  // The log: silent unless NCCL_DEBUG names a level NCCL knows (Chorus alone warns by default);
  // NCCL writes NCCL_DEBUG_FILE only above VERSION.
  const std::string debug = ncclDebugLevel();
  setIfUnset("CHORUS_DEBUG", debug.empty() ? "NONE" : std::getenv("NCCL_DEBUG"));  // a known level as given
  if (const char* v = std::getenv("NCCL_DEBUG_FILE"); v && !debug.empty() && debug != "version") {
    setIfUnset("CHORUS_DEBUG_FILE", v);
  }
  // Taken as they are.
  static const char* const kSame[][2] = {
      {"NCCL_DEBUG_SUBSYS", "CHORUS_DEBUG_SUBSYS"},
      {"NCCL_COMM_ID", "CHORUS_COMM_ID"},
      {"NCCL_SOCKET_IFNAME", "CHORUS_SOCKET_IFNAME"},
      {"NCCL_NET_PLUGIN", "CHORUS_NET_PLUGIN"},
  };
  for (const auto& m : kSame) {
    if (const char* v = std::getenv(m[0])) setIfUnset(m[1], v);
  }
  // With NCCL_NET_PLUGIN unset, NCCL tries libnccl-net.so (plugin/net.cc), where cluster images
  // put their network's plugin (aws-ofi-nccl, cloud providers' own), and uses its built-in
  // networks when there is none. Kept loaded, as NCCL keeps it.
  if (!std::getenv("NCCL_NET_PLUGIN") && !std::getenv("CHORUS_NET_PLUGIN")) {
    if (dlopen("libnccl-net.so", RTLD_NOW | RTLD_LOCAL)) setIfUnset("CHORUS_NET_PLUGIN", "libnccl-net.so");
  }
  // NCCL's switches as NCCL 2.28 reads them (strtol, any base, no check of what follows, so
  // "true" reads as 0), where Chorus's own take 0 or 1 and refuse the rest: NCCL_P2P_DISABLE and
  // NCCL_SHM_DISABLE disable at exactly 1 ("2" leaves them on); NCCL_CUMEM_ENABLE is on at any
  // positive value, automatic at -2 (and for a value out of range), off otherwise ("true" too).
  for (const char* name : {"NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"}) {
    if (const char* v = std::getenv(name)) {
      setIfUnset(name[5] == 'P' ? "CHORUS_P2P_DISABLE" : "CHORUS_SHM_DISABLE", ncclInteger(v) == 1 ? "1" : "0");
    }
  }
  if (const char* v = std::getenv("NCCL_CUMEM_ENABLE")) {
    const long long x = ncclInteger(v);
    if (x != -2) setIfUnset("CHORUS_CUMEM_ENABLE", x > 0 ? "1" : "0");
  }
  // NCCL waits until the program aborts the communicator (PyTorch's watchdog does at its process
  // group's timeout): no deadline of Chorus's own unless CHORUS_TIMEOUT or CHORUS_INIT_TIMEOUT is
  // set. The warnings that name the rank a stuck wait is for stay.
  const std::string never = "1073741824";  // 2^30 s, Chorus's longest: no deadline (Config::kNoDeadlineSeconds)
  setIfUnset("CHORUS_TIMEOUT", never);
  setIfUnset("CHORUS_INIT_TIMEOUT", never);
  // NCCL_NET names one of NCCL's own networks or a plugin's: Chorus's built-in ones by the same
  // names; a plugin's network is chosen by NCCL_NET_PLUGIN instead.
  if (const char* v = std::getenv("NCCL_NET")) {
    const std::string n = lower(v);
    if (n == "ib" || n == "socket") {
      setIfUnset("CHORUS_NET", v);
    } else {
      noteIgnored(std::string("NCCL_NET=") + v,
                  "Chorus's built-in networks are IB and Socket; a plugin's network is the one NCCL_NET_PLUGIN loads");
    }
  }
  // NCCL's IB settings: the text ones as they are; the integers as NCCL reads them (strtol), its
  // "choose for me" values (-1, -2) leaving Chorus's default, NCCL_IB_DISABLE on at any non-zero.
  static const char* const kIbText[][2] = {
      {"NCCL_IB_HCA", "CHORUS_IB_HCA"},
      {"NCCL_IB_ADDR_FAMILY", "CHORUS_IB_ADDR_FAMILY"},
      {"NCCL_IB_ADDR_RANGE", "CHORUS_IB_ADDR_RANGE"},
  };
  for (const auto& m : kIbText) {
    if (const char* v = std::getenv(m[0])) setIfUnset(m[1], v);
  }
  static const char* const kIbInt[][2] = {
      {"NCCL_IB_GID_INDEX", "CHORUS_IB_GID_INDEX"},
      {"NCCL_IB_ROCE_VERSION_NUM", "CHORUS_IB_ROCE_VERSION_NUM"},
      {"NCCL_IB_QPS_PER_CONNECTION", "CHORUS_IB_QPS_PER_CONNECTION"},
      {"NCCL_IB_SPLIT_DATA_ON_QPS", "CHORUS_IB_SPLIT_DATA_ON_QPS"},
      {"NCCL_IB_TIMEOUT", "CHORUS_IB_TIMEOUT"},
      {"NCCL_IB_RETRY_CNT", "CHORUS_IB_RETRY_CNT"},
      {"NCCL_IB_AR_THRESHOLD", "CHORUS_IB_AR_THRESHOLD"},
      {"NCCL_IB_ADAPTIVE_ROUTING", "CHORUS_IB_ADAPTIVE_ROUTING"},
      {"NCCL_IB_SL", "CHORUS_IB_SL"},
      {"NCCL_IB_TC", "CHORUS_IB_TC"},
      {"NCCL_IB_PKEY", "CHORUS_IB_PKEY"},
  };
  for (const auto& m : kIbInt) {
    if (const char* v = std::getenv(m[0])) {
      const long long x = ncclInteger(v);
      if (x >= 0) setIfUnset(m[1], std::to_string(x));
    }
  }
  if (const char* v = std::getenv("NCCL_IB_DISABLE")) setIfUnset("CHORUS_IB_DISABLE", ncclInteger(v) != 0 ? "1" : "0");
  // Settings of NCCL's kernels that Chorus's have no counterpart for.
  if (const char* v = std::getenv("NCCL_NTHREADS")) {
    noteIgnored(std::string("NCCL_NTHREADS=") + v, "Chorus's kernels run 512 threads per block (docs/GPU.md)");
  }
  if (const char* v = std::getenv("NCCL_LAUNCH_MODE")) {
    noteIgnored(std::string("NCCL_LAUNCH_MODE=") + v,
                "Chorus launches each communicator's kernel from the thread that ends the group; there is no mode "
                "to choose");
  }
  // NCCL_ALGO and NCCL_PROTO in NCCL's syntax; what does not parse fails every init, as in NCCL.
  tuningError().clear();
  mapTuning("NCCL_ALGO", "CHORUS_ALGO", {"Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"},
            {"Tree", "Ring"});
  mapTuning("NCCL_PROTO", "CHORUS_PROTO", {"LL", "LL128", "Simple"}, {"LL", "LL128", "Simple"});
  // Channels of the host path: a fixed number (1 unless set, 32 at most); NCCL_MIN_NCHANNELS raises
  // it, NCCL_MAX_NCHANNELS caps what that gives.
  if (const char* v = std::getenv("NCCL_MIN_NCHANNELS")) {
    long n = std::strtol(v, nullptr, 10);
    if (const char* m = std::getenv("NCCL_MAX_NCHANNELS")) n = std::min(n, std::strtol(m, nullptr, 10));
    if (n >= 1) setIfUnset("CHORUS_NCHANNELS", std::to_string(std::min(n, 32L)));
  }
  // NCCL_MAX_NCHANNELS also caps the device path's channels (what the GPU allows, 32 at most).
  if (const char* m = std::getenv("NCCL_MAX_NCHANNELS")) {
    const long n = std::strtol(m, nullptr, 10);
    if (n >= 1) setIfUnset("CHORUS_DEVICE_NCHANNELS", std::to_string(std::min(n, 32L)));
  }
  // NCCL_BUFFSIZE is a FIFO's whole size; Chorus's is CHORUS_SLOTS slots of CHORUS_SLOT_BYTES
  // (a multiple of 64 from 4 KiB to 64 MiB), and on device memory of CHORUS_DEVICE_SLOT_BYTES.
  if (const char* v = std::getenv("NCCL_BUFFSIZE")) {
    char* end = nullptr;
    const unsigned long long bytes = std::strtoull(v, &end, 0);
    const char* slotsText = std::getenv("CHORUS_SLOTS");
    const unsigned long long slots = slotsText ? std::strtoull(slotsText, nullptr, 10) : 8;
    if (end == v || *end != 0 || bytes == 0 || slots == 0) {
      cannotMap("NCCL_BUFFSIZE", v, "not a byte count");
    } else {
      unsigned long long slot = bytes / slots / 64 * 64;
      slot = slot < 4096 ? 4096 : slot > (64ull << 20) ? (64ull << 20) : slot;
      setIfUnset("CHORUS_SLOT_BYTES", std::to_string(slot));
      setIfUnset("CHORUS_DEVICE_SLOT_BYTES", std::to_string(slot));
    }
  }
}

// One of NCCL's configuration files, as NCCL 2.28 reads it (misc/param.cc): KEY=VALUE lines,
// split at the first '=', nothing trimmed or unquoted; '#' in the first column starts a comment;
// a line without '=' is skipped. A variable already set keeps its value. A missing file is no
// error.
void readConfFile(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return;
  char* line = nullptr;
  size_t size = 0;
  ssize_t got;
  while ((got = getline(&line, &size, f)) != -1) {
    if (line[0] == '#') continue;
    if (got > 0 && line[got - 1] == '\n') line[got - 1] = '\0';
    const char* eq = std::strchr(line, '=');
    if (!eq) continue;
    const std::string key(line, std::min<size_t>(static_cast<size_t>(eq - line), 1023));
    const std::string value = std::string(eq + 1).substr(0, 1023);
    if (!key.empty()) setenv(key.c_str(), value.c_str(), 0);
  }
  std::free(line);
  std::fclose(f);
}

// NCCL's site configuration: NCCL_CONF_FILE, or else ~/.nccl.conf (the home directory of the
// user the process runs as, not $HOME), then /etc/nccl.conf; the environment wins over both, and
// the first file over the second.
void readSiteConfiguration() {
  if (const char* user = std::getenv("NCCL_CONF_FILE"); user && *user) {
    readConfFile(user);
  } else if (const passwd* pw = getpwuid(getuid()); pw && pw->pw_dir) {
    readConfFile(std::string(pw->pw_dir) + "/.nccl.conf");
  }
  readConfFile("/etc/nccl.conf");
}

// As NCCL reads its variables at its first initialisation (ncclGetUniqueId or a communicator's
// init), not when it is loaded: a program may set them after loading the library (Python sets
// os.environ after importing torch, which loads it). The configuration files are read then too,
// once per process.
void mapEnvironmentOnce() {
  static bool mapped = false;
  std::lock_guard<std::mutex> g(envMutex());
  if (mapped) return;
  readSiteConfiguration();
  mapEnvironment();
  mapped = true;
}

// An init's answer to an NCCL_ALGO or NCCL_PROTO that does not parse: ncclInvalidUsage with
// NCCL's complaint, as NCCL's init fails (init.cc, ncclTopoTuneModel).
ncclResult_t tuningRefusal() {
  std::lock_guard<std::mutex> g(envMutex());
  if (tuningError().empty()) return ncclSuccess;
  remember(tuningError());
  return ncclInvalidUsage;
}

// ncclResetDebugInit: the variables as they are now, over what an earlier mapping set.
void mapEnvironmentAgain() {
  std::lock_guard<std::mutex> g(envMutex());
  mapEnvironment();
}

// --- Streams and buffers ---

// A wrapper per CUDA stream, made on first use and kept for the process's life (a few bytes
// each; a stream handle reused by a new stream names that stream, as the wrapper does).
chorusResult_t wrapperOf(cudaStream_t s, chorusStream_t* out) {
  static std::mutex mu;
  static auto* wrappers = new std::unordered_map<cudaStream_t, chorusStream_t>();
  std::lock_guard<std::mutex> g(mu);
  auto it = wrappers->find(s);
  if (it != wrappers->end()) {
    *out = it->second;
    return chorusSuccess;
  }
  const chorusResult_t r = chorusStreamFromCuda(s, out);
  if (r == chorusSuccess) wrappers->emplace(s, *out);
  return r;
}

bool onDevice(const void* p) {
  int device = -1;
  return p && chorusPointerGetDevice(p, &device) == chorusSuccess && device >= 0;
}

// Whether this process has loaded the CUDA driver (a program that never touched CUDA has not, and
// then no CUDA stream holds work).
bool cudaLoaded() {
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (h) dlclose(h);
  return h != nullptr;
}

// The Chorus stream for a call on CUDA stream `s` whose buffers are `a` and `b` (either may be
// NULL): the stream's wrapper for device buffers; for host buffers the NULL stream, once the
// CUDA stream's earlier work is done (the legacy default stream's too) in a program that uses
// CUDA.
chorusResult_t streamFor(cudaStream_t s, const void* a, const void* b, chorusStream_t* out) {
  *out = nullptr;
  if (onDevice(a) || onDevice(b)) return wrapperOf(s, out);
  if (!cudaLoaded()) return chorusSuccess;
  // No buffer to tell by (an empty send or receive): the CUDA stream, as NCCL would.
  if (!a && !b) return wrapperOf(s, out);
  chorusStream_t w = nullptr;
  const chorusResult_t r = wrapperOf(s, &w);
  return r == chorusSuccess ? chorusStreamSynchronize(w) : r;
}

// chorusConfig_t from ncclConfig_t, field for field (as far as the caller's ncclConfig_t goes:
// an older NCCL's is shorter).
// NCCL_COMM_BLOCKING over the config's own choice, as NCCL applies it.
ncclResult_t withBlockingEnv(chorusConfig_t* out) {
  if (const int env = commBlockingEnv(); env >= 0) out->blocking = env;
  return ncclSuccess;
}

ncclResult_t configOf(const ncclConfig_t* in, chorusConfig_t* out) {
  chorusConfig_t c = CHORUS_CONFIG_INITIALIZER;
  *out = c;
  if (!in) return withBlockingEnv(out);
  if (in->magic != kNcclConfigMagic) {
    remember("config was not set from NCCL_CONFIG_INITIALIZER (its magic is wrong)");
    return ncclInvalidArgument;
  }
  const size_t have = in->size < sizeof(ncclConfig_t) ? in->size : sizeof(ncclConfig_t);
#define CHORUS_TAKE(field) \
  if (offsetof(ncclConfig_t, field) + sizeof(in->field) <= have) out->field = in->field
  CHORUS_TAKE(blocking);
  CHORUS_TAKE(cgaClusterSize);
  CHORUS_TAKE(minCTAs);
  CHORUS_TAKE(maxCTAs);
  CHORUS_TAKE(netName);
  CHORUS_TAKE(splitShare);
  CHORUS_TAKE(trafficClass);
  CHORUS_TAKE(commName);
  CHORUS_TAKE(collnetEnable);
  CHORUS_TAKE(CTAPolicy);
  CHORUS_TAKE(shrinkShare);
  CHORUS_TAKE(nvlsCTAs);
  CHORUS_TAKE(nChannelsPerNetPeer);
  CHORUS_TAKE(nvlinkCentricSched);
#undef CHORUS_TAKE
  (void)withBlockingEnv(out);
  // Fields of NCCL's kernels and networks that Chorus's have no counterpart for: said once at INFO.
  auto ignoredInt = [&](const char* field, int v, const char* why) {
    if (v != NCCL_CONFIG_UNDEF_INT) noteIgnored(std::string("ncclConfig_t.") + field + "=" + std::to_string(v), why);
  };
  const char* ctas = "Chorus runs one block per channel (CHORUS_NCHANNELS, NCCL_MIN_NCHANNELS) and per peer queue";
  ignoredInt("cgaClusterSize", out->cgaClusterSize, "Chorus's kernels are launched without clusters");
  ignoredInt("minCTAs", out->minCTAs, ctas);
  ignoredInt("maxCTAs", out->maxCTAs, ctas);
  ignoredInt("CTAPolicy", out->CTAPolicy, ctas);
  ignoredInt("nvlsCTAs", out->nvlsCTAs, "Chorus has no NVLink SHARP algorithm");
  ignoredInt("nChannelsPerNetPeer", out->nChannelsPerNetPeer, ctas);
  ignoredInt("nvlinkCentricSched", out->nvlinkCentricSched, "Chorus's tuner chooses by its own model");
  ignoredInt("collnetEnable", out->collnetEnable, "Chorus has no CollNet algorithm");
  ignoredInt("trafficClass", out->trafficClass, "Chorus's sockets set no traffic class");
  if (out->netName != NCCL_CONFIG_UNDEF_PTR) {
    noteIgnored(std::string("ncclConfig_t.netName=") + out->netName,
                "Chorus chooses its network by CHORUS_NET (NCCL_NET), CHORUS_NET_PLUGIN (NCCL_NET_PLUGIN) and "
                "CHORUS_SOCKET_IFNAME (NCCL_SOCKET_IFNAME)");
  }
  return ncclSuccess;
}

}  // namespace

// --- Version, ids, errors ---

NCCL_API(ncclResult_t, ncclGetVersion, int* version) {
  if (!version) {
    remember("version is NULL");
    return ncclInvalidArgument;
  }
  *version = NCCL_VERSION_CODE;  // the NCCL whose interface this library implements
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId* uniqueId) {
  mapEnvironmentOnce();
  return pass(chorusGetUniqueId(reinterpret_cast<chorusUniqueId*>(uniqueId)));
}

// NCCL 2.28's sentences (init.cc), which programs print beside ncclGetLastError; the internal
// error's names this library instead of NCCL's developers.
NCCL_API(const char*, ncclGetErrorString, ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue (this libnccl.so.2 is Chorus's)";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

NCCL_API(const char*, ncclGetLastError, ncclComm_t comm) {
  (void)comm;
  return gLastError;
}

NCCL_API(void, ncclResetDebugInit, void) {
  mapEnvironmentAgain();
  chorusResetDebugInit();
}

// NCCL's own library exports it (without a pnccl name); it resets its debug state as
// ncclResetDebugInit does.
extern "C" __attribute__((visibility("default"))) void ncclResetDebugInitInternal() {
  mapEnvironmentAgain();
  chorusResetDebugInit();
}

// --- Communicators ---

NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  mapEnvironmentOnce();
  if (ncclResult_t r = tuningRefusal(); r != ncclSuccess) return r;
  if (commBlockingEnv() < 0) {
    return pass(chorusCommInitRank(reinterpret_cast<chorusComm_t*>(comm), nranks, chorusIdOf(commId), rank));
  }
  return pncclCommInitRankConfig(comm, nranks, commId, rank, nullptr);  // NCCL_COMM_BLOCKING decides
}

NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
         ncclConfig_t* config) {
  mapEnvironmentOnce();
  if (ncclResult_t r = tuningRefusal(); r != ncclSuccess) return r;
  chorusConfig_t c;
  if (ncclResult_t r = configOf(config, &c); r != ncclSuccess) return r;
  const ncclResult_t r =
      pass(chorusCommInitRankConfig(reinterpret_cast<chorusComm_t*>(comm), nranks, chorusIdOf(commId), rank, &c));
  if (comm && (r == ncclSuccess || r == ncclInProgress)) setNonBlocking(*comm, nonBlockingConfig(config));
  return r;
}

NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* newcomm, int nranks, int myrank, int nId,
         ncclUniqueId* commIds, ncclConfig_t* config) {
  mapEnvironmentOnce();
  if (ncclResult_t r = tuningRefusal(); r != ncclSuccess) return r;
  chorusConfig_t c;
  if (ncclResult_t r = configOf(config, &c); r != ncclSuccess) return r;
  const ncclResult_t r = pass(chorusCommInitRankScalable(reinterpret_cast<chorusComm_t*>(newcomm), nranks, myrank, nId,
                                                         reinterpret_cast<chorusUniqueId*>(commIds), &c));
  if (newcomm && (r == ncclSuccess || r == ncclInProgress)) setNonBlocking(*newcomm, nonBlockingConfig(config));
  return r;
}

NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comm, int ndev, const int* devlist) {
  mapEnvironmentOnce();
  if (ncclResult_t r = tuningRefusal(); r != ncclSuccess) return r;
  // NCCL puts rank i on device i when devlist is NULL (init.cc). A program that has not loaded
  // CUDA has no device to put them on: its ranks stay on host memory.
  std::vector<int> devices;
  if (!devlist && ndev > 0 && cudaLoaded()) {
    for (int i = 0; i < ndev; ++i) devices.push_back(i);
    devlist = devices.data();
  }
  return pass(chorusCommInitAll(reinterpret_cast<chorusComm_t*>(comm), ndev, devlist));
}

// NCCL's finalize of NULL does nothing and succeeds; after a revoke it is refused (init.cc).
NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  if (comm && isRevoked(comm)) {
    remember(
        "ncclCommFinalize: the communicator was revoked; destroy it (calling ncclCommFinalize after "
        "ncclCommRevoke is invalid)");
    return ncclInvalidArgument;
  }
  return comm ? pass(chorusCommFinalize(chorusOf(comm))) : pass(chorusSuccess);
}
NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
  const ncclResult_t r = pass(chorusCommDestroy(chorusOf(comm)));
  if (r == ncclSuccess) forgetMarks(comm);
  return r;
}
NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
  const ncclResult_t r = pass(chorusCommAbort(chorusOf(comm)));
  if (r == ncclSuccess) forgetMarks(comm);
  return r;
}
// As NCCL 2.28 (init.cc): revoking NULL does nothing; a second revoke is refused.
NCCL_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags) {
  if (!comm) return ncclSuccess;
  if (revokeFlags == NCCL_REVOKE_DEFAULT && isRevoked(comm)) {
    remember("ncclCommRevoke: the communicator was revoked already");
    return ncclInvalidArgument;
  }
  const ncclResult_t r = pass(chorusCommRevoke(chorusOf(comm), revokeFlags));
  if (r == ncclSuccess) mark(comm, &Marks::revoked, true);
  return r;
}

NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  if (ncclResult_t r = tuningRefusal(); r != ncclSuccess) return r;
  chorusConfig_t c;
  if (ncclResult_t r = configOf(config, &c); r != ncclSuccess) return r;
  if (!newcomm) return pass(chorusCommSplit(chorusOf(comm), color, key, nullptr, config ? &c : nullptr));
  ncclComm_t made = nullptr;
  const ncclResult_t r =
      pass(chorusCommSplit(chorusOf(comm), color, key, reinterpret_cast<chorusComm_t*>(&made), config ? &c : nullptr));
  setNonBlocking(made, nonBlockingConfig(config, comm));
  if (tGroupDepth == 0) {
    *newcomm = made;
  } else {
    *newcomm = nullptr;
    if (made) tGroupSplits.emplace_back(newcomm, made);
  }
  return r;
}

NCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
         ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  // NCCL 2.28 (init.cc) refuses a shrink that excludes no rank before anything runs, leaving
  // *newcomm as it was (Chorus's own shrink takes it as a copy). Refused through Chorus, whose
  // shrink refuses a negative count at once, so that an enclosing group fails too, as NCCL's does.
  if (newcomm && (!excludeRanksList || excludeRanksCount <= 0)) {
    if (ncclResult_t r = checkComm(comm); r != ncclSuccess) return r;
    const ncclComm_t kept = *newcomm;
    (void)chorusCommShrink(chorusOf(comm), nullptr, -1, reinterpret_cast<chorusComm_t*>(newcomm), nullptr, 0);
    *newcomm = kept;
    remember(!excludeRanksList ? "ncclCommShrink : excludeRanksList argument is NULL"
                               : "ncclCommShrink : excludeRanksCount is " + std::to_string(excludeRanksCount) +
                                     "; a shrink excludes at least one rank");
    return ncclInvalidArgument;
  }
  if (ncclResult_t r = tuningRefusal(); r != ncclSuccess) return r;
  chorusConfig_t c;
  if (ncclResult_t r = configOf(config, &c); r != ncclSuccess) return r;
  const ncclResult_t r =
      pass(chorusCommShrink(chorusOf(comm), excludeRanksList, excludeRanksCount,
                            reinterpret_cast<chorusComm_t*>(newcomm), config ? &c : nullptr, shrinkFlags));
  if (newcomm && (r == ncclSuccess || r == ncclInProgress)) setNonBlocking(*newcomm, nonBlockingConfig(config, comm));
  return r;
}

NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* asyncError) {
  const ncclResult_t r = pass(chorusCommGetAsyncError(chorusOf(comm), reinterpret_cast<chorusResult_t*>(asyncError)));
  // A revoked communicator is quiescent once ncclCommRevoke returned: ncclSuccess, as NCCL's.
  if (r == ncclSuccess && isRevoked(comm)) *asyncError = ncclSuccess;
  // The failure a communicator's own threads met: Chorus hands its message to the caller's thread.
  if (r == ncclSuccess && *asyncError != ncclSuccess && *asyncError != ncclInProgress) {
    remember(chorusGetLastError(nullptr));
  }
  return r;
}

// NCCL's attribute queries first make sure the communicator is ready (ncclCommEnsureReady): a
// failed one returns its error, one still initialising ncclInvalidArgument. Chorus's own answer
// for a failed communicator too.
ncclResult_t ensureReady(ncclComm_t comm) {
  chorusResult_t async = chorusSuccess;
  const chorusResult_t r = chorusCommGetAsyncError(chorusOf(comm), &async);
  if (r != chorusSuccess) return pass(r);
  if (isRevoked(comm)) return ncclSuccess;  // quiescent, as NCCL's revoked communicator
  if (async == chorusInProgress) {
    remember(
        "the communicator is still initialising: wait until ncclCommGetAsyncError stops returning "
        "ncclInProgress");
    return ncclInvalidArgument;
  }
  return pass(async);
}

NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count) {
  if (ncclResult_t r = ensureReady(comm); r != ncclSuccess) return r;
  return pass(chorusCommCount(chorusOf(comm), count));
}

NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int* device) {
  if (ncclResult_t r = ensureReady(comm); r != ncclSuccess) return r;
  return pass(chorusCommCuDevice(chorusOf(comm), device));
}

NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank) {
  if (ncclResult_t r = ensureReady(comm); r != ncclSuccess) return r;
  return pass(chorusCommUserRank(chorusOf(comm), rank));
}

// --- Memory and registration ---

// Device memory on the current device where the program has a GPU (as NCCL's); host memory that
// peers can map otherwise.
NCCL_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
  mapEnvironmentOnce();
  // A failed device allocation (out of memory) is an error, never host memory in its place.
  return pass(cudaLoaded() ? chorusCudaMemAlloc(ptr, size) : chorusMemAlloc(ptr, size));
}

NCCL_API(ncclResult_t, ncclMemFree, void* ptr) {
  return pass(onDevice(ptr) ? chorusCudaMemFree(ptr) : chorusMemFree(ptr));
}

NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size, void** handle) {
  return pass(chorusCommRegister(chorusOf(comm), buff, size, handle));
}

// NCCL 2.28 takes a NULL handle, and a window of NULL or 0 bytes, as nothing to do (Chorus's own
// API refuses them, saying so).
NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) {
  if (ncclResult_t r = checkComm(comm); r != ncclSuccess || !handle) return r;
  const chorusResult_t r = chorusCommDeregister(chorusOf(comm), handle);
  // On a live communicator Chorus refuses only a handle it did not return (or one deregistered
  // already); NCCL finds no such handle in its cache and calls that ncclInvalidUsage (register.cc).
  if (r == chorusInvalidArgument) {
    remember(std::string("ncclCommDeregister: ") + chorusGetLastError(nullptr));
    return ncclInvalidUsage;
  }
  return pass(r);
}

NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
         int winFlags) {
  if (win && (!buff || size == 0)) {
    *win = nullptr;
    return checkComm(comm);
  }
  return pass(chorusCommWindowRegister(chorusOf(comm), buff, size, reinterpret_cast<chorusWindow_t*>(win), winFlags));
}

NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  if (!win) return checkComm(comm);
  return pass(chorusCommWindowDeregister(chorusOf(comm), reinterpret_cast<chorusWindow_t>(win)));
}

// --- Reduction operators ---

NCCL_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
         ncclScalarResidence_t residence, ncclComm_t comm) {
  const ncclResult_t r =
      pass(chorusRedOpCreatePreMulSum(reinterpret_cast<chorusRedOp_t*>(op), scalar, typeOf(datatype),
                                      static_cast<chorusScalarResidence_t>(residence), chorusOf(comm)));
  if (r == ncclSuccess) *op = mangled(comm, *op);
  return r;
}

NCCL_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) {
  return pass(chorusRedOpDestroy(opOf(op, comm), chorusOf(comm)));
}

// --- Collectives and point-to-point ---

#define CHORUS_STREAM(a, b)                                                    \
  chorusStream_t cs = nullptr;                                                 \
  if (chorusResult_t sr = streamFor(stream, a, b, &cs); sr != chorusSuccess) { \
    return pass(sr);                                                           \
  }

NCCL_API(ncclResult_t, ncclReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  CHORUS_STREAM(sendbuff, recvbuff);
  return opResult(comm, "ncclReduce",
                  chorusReduce(sendbuff, recvbuff, count, typeOf(datatype), opOf(op, comm), root, chorusOf(comm), cs),
                  count);
}

NCCL_API(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
         cudaStream_t stream) {
  CHORUS_STREAM(buff, nullptr);
  return opResult(comm, "ncclBcast", chorusBcast(buff, count, typeOf(datatype), root, chorusOf(comm), cs), count);
}

NCCL_API(ncclResult_t, ncclBroadcast, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream) {
  CHORUS_STREAM(sendbuff, recvbuff);
  return opResult(comm, "ncclBroadcast",
                  chorusBroadcast(sendbuff, recvbuff, count, typeOf(datatype), root, chorusOf(comm), cs), count);
}

NCCL_API(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  CHORUS_STREAM(sendbuff, recvbuff);
  return opResult(comm, "ncclAllReduce",
                  chorusAllReduce(sendbuff, recvbuff, count, typeOf(datatype), opOf(op, comm), chorusOf(comm), cs),
                  count);
}

NCCL_API(ncclResult_t, ncclReduceScatter, const void* sendbuff, void* recvbuff, size_t recvcount,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  CHORUS_STREAM(sendbuff, recvbuff);
  return opResult(
      comm, "ncclReduceScatter",
      chorusReduceScatter(sendbuff, recvbuff, recvcount, typeOf(datatype), opOf(op, comm), chorusOf(comm), cs),
      recvcount);
}

NCCL_API(ncclResult_t, ncclAllGather, const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
         ncclComm_t comm, cudaStream_t stream) {
  CHORUS_STREAM(sendbuff, recvbuff);
  return opResult(comm, "ncclAllGather",
                  chorusAllGather(sendbuff, recvbuff, sendcount, typeOf(datatype), chorusOf(comm), cs), sendcount);
}

NCCL_API(ncclResult_t, ncclAlltoAll, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         ncclComm_t comm, cudaStream_t stream) {
  CHORUS_STREAM(sendbuff, recvbuff);
  return opResult(comm, "ncclAlltoAll", chorusAlltoAll(sendbuff, recvbuff, count, typeOf(datatype), chorusOf(comm), cs),
                  count);
}

NCCL_API(ncclResult_t, ncclGather, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream) {
  CHORUS_STREAM(sendbuff, recvbuff);
  return opResult(comm, "ncclGather",
                  chorusGather(sendbuff, recvbuff, count, typeOf(datatype), root, chorusOf(comm), cs), count);
}

NCCL_API(ncclResult_t, ncclScatter, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream) {
  CHORUS_STREAM(sendbuff, recvbuff);
  return opResult(comm, "ncclScatter",
                  chorusScatter(sendbuff, recvbuff, count, typeOf(datatype), root, chorusOf(comm), cs), count);
}

NCCL_API(ncclResult_t, ncclSend, const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
         cudaStream_t stream) {
  CHORUS_STREAM(sendbuff, nullptr);
  return opResult(comm, "ncclSend", chorusSend(sendbuff, count, typeOf(datatype), peer, chorusOf(comm), cs), count);
}

NCCL_API(ncclResult_t, ncclRecv, void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
         cudaStream_t stream) {
  CHORUS_STREAM(recvbuff, nullptr);
  return opResult(comm, "ncclRecv", chorusRecv(recvbuff, count, typeOf(datatype), peer, chorusOf(comm), cs), count);
}

#undef CHORUS_STREAM

// --- Groups ---

NCCL_API(ncclResult_t, ncclGroupStart, void) {
  const ncclResult_t r = pass(chorusGroupStart());
  if (r == ncclSuccess) ++tGroupDepth;
  return r;
}

// The end of this thread's group (ncclGroupEnd, ncclGroupSimulateEnd). At the outermost end: the
// group's splits get their handles, and the answer is NCCL's: the code an operation in it failed
// with on this side (Chorus has dropped the group's work already), or ncclInProgress for a group on
// a non-blocking communicator.
ncclResult_t groupEnded(chorusResult_t r) {
  if (tGroupDepth > 0 && --tGroupDepth > 0) return pass(r);
  for (const auto& [where, comm] : tGroupSplits) *where = comm;
  tGroupSplits.clear();
  const ncclResult_t code = tGroupCode;
  const bool nonBlocking = tGroupNonBlocking;
  tGroupCode = ncclSuccess;
  tGroupNonBlocking = false;
  if (code != ncclSuccess) return code;
  const ncclResult_t ended = pass(r);
  return ended == ncclSuccess && nonBlocking ? ncclInProgress : ended;
}

NCCL_API(ncclResult_t, ncclGroupEnd, void) { return groupEnded(chorusGroupEnd()); }

NCCL_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t* simInfo) {
  // As NCCL: without simInfo, the group ends as ncclGroupEnd ends it; with a simInfo not from its
  // initializer, the group is still ended (its operations dropped) and the call refused.
  if (!simInfo) return groupEnded(chorusGroupEnd());
  chorusSimInfo_t info = CHORUS_SIM_INFO_INITIALIZER;
  const chorusResult_t r = chorusGroupSimulateEnd(&info);
  const ncclResult_t ended = groupEnded(r);
  if (simInfo->magic != kNcclSimInfoMagic || simInfo->size < sizeof(ncclSimInfo_t)) {
    remember("simInfo was not set from NCCL_SIM_INFO_INITIALIZER; the group was ended and nothing ran");
    return ncclInvalidArgument;
  }
  if (ended == ncclSuccess) simInfo->estimatedTime = info.estimatedTime;
  return ended;
}

// --- The device API (nccl_device.h): not served ---

NCCL_API(ncclResult_t, ncclDevCommCreate, ncclComm_t, ncclDevCommRequirements_t const*, ncclDevComm_t*) {
  return refuse("ncclDevCommCreate");
}

NCCL_API(ncclResult_t, ncclDevCommDestroy, ncclComm_t, ncclDevComm_t const*) { return refuse("ncclDevCommDestroy"); }

NCCL_API(ncclResult_t, ncclGinBarrierCreateRequirement, ncclComm_t, ncclTeam_t, int, ncclGinBarrierHandle_t*,
         ncclDevResourceRequirements_t*) {
  return refuse("ncclGinBarrierCreateRequirement");
}

NCCL_API(ncclResult_t, ncclLsaBarrierCreateRequirement, ncclTeam_t, int, ncclLsaBarrierHandle_t*,
         ncclDevResourceRequirements_t*) {
  return refuse("ncclLsaBarrierCreateRequirement");
}

NCCL_API(ncclResult_t, ncclLLA2ACreateRequirement, int, int, ncclLLA2AHandle_t*, ncclDevResourceRequirements_t*) {
  return refuse("ncclLLA2ACreateRequirement");
}

// Functions of the device API that return no result: an empty answer, and ncclGetLastError says
// why.
NCCL_API(int, ncclLLA2ACalcSlots, int, int) {
  (void)refuse("ncclLLA2ACalcSlots");
  return 0;
}

NCCL_API(ncclTeam_t, ncclTeamWorld, ncclComm_t) {
  (void)refuse("ncclTeamWorld");
  return ncclTeam_t{};
}

NCCL_API(ncclTeam_t, ncclTeamLsa, ncclComm_t) {
  (void)refuse("ncclTeamLsa");
  return ncclTeam_t{};
}

NCCL_API(ncclTeam_t, ncclTeamRail, ncclComm_t) {
  (void)refuse("ncclTeamRail");
  return ncclTeam_t{};
}

NCCL_API(int, ncclTeamRankToWorld, ncclComm_t, ncclTeam_t, int) {
  (void)refuse("ncclTeamRankToWorld");
  return -1;
}

NCCL_API(int, ncclTeamRankToLsa, ncclComm_t, ncclTeam_t, int) {
  (void)refuse("ncclTeamRankToLsa");
  return -1;
}

// --- NCCL 2.29's functions: refused ---
//
// This library implements NCCL 2.28.9's API (ncclGetVersion: 22809). A program built against a
// newer NCCL that calls a function 2.28 lacks must not reach another libnccl.so.2 with one of this
// library's communicators (under LD_PRELOAD beside PyTorch's own NCCL, the dynamic linker would
// bind the names missing here to that library): each function NCCL 2.29 added that takes a
// communicator or a window is exported here and refused, saying so. Their arguments are not read.

namespace {
ncclResult_t newerNccl(const char* what) {
  remember(std::string(what) +
           " is NCCL 2.29's; this libnccl.so.2 (Chorus's) implements NCCL 2.28.9's API (ncclGetVersion: 22809)");
  return ncclInvalidUsage;
}
}  // namespace

NCCL_API(ncclResult_t, ncclCommGetUniqueId, ncclComm_t, ncclUniqueId*) { return newerNccl("ncclCommGetUniqueId"); }
NCCL_API(ncclResult_t, ncclCommGrow, ncclComm_t, int, const ncclUniqueId*, int, ncclComm_t*, ncclConfig_t*) {
  return newerNccl("ncclCommGrow");
}
NCCL_API(ncclResult_t, ncclCommMemStats, ncclComm_t, int, uint64_t*) { return newerNccl("ncclCommMemStats"); }
NCCL_API(ncclResult_t, ncclCommSuspend, ncclComm_t, int) { return newerNccl("ncclCommSuspend"); }
NCCL_API(ncclResult_t, ncclCommResume, ncclComm_t) { return newerNccl("ncclCommResume"); }
NCCL_API(ncclResult_t, ncclPutSignal, const void*, size_t, ncclDataType_t, int, ncclWindow_t, size_t, int, int,
         unsigned int, ncclComm_t, cudaStream_t) {
  return newerNccl("ncclPutSignal");
}
NCCL_API(ncclResult_t, ncclSignal, int, int, int, unsigned int, ncclComm_t, cudaStream_t) {
  return newerNccl("ncclSignal");
}
NCCL_API(ncclResult_t, ncclWaitSignal, int, void*, ncclComm_t, cudaStream_t) { return newerNccl("ncclWaitSignal"); }
NCCL_API(ncclResult_t, ncclWinGetUserPtr, ncclComm_t, ncclWindow_t, void**) { return newerNccl("ncclWinGetUserPtr"); }
