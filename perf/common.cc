// The perf harness: nccl-tests' flags and table for Chorus.
//
// Launch modes: under chorusrun, torchrun or Slurm each process is a rank (chorusCommInitFromEnv);
// under mpirun too, bootstrapped through MPI_Bcast of the unique id when built with MPI (or through
// CHORUS_COMM_ID when set); otherwise `-t N` runs N ranks as threads of this process.
#include "perf/common.h"

#include <sched.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "kernels/float_elem.h"

#ifdef CHORUS_PERF_MPI
#include <mpi.h>
#endif

namespace chorus::perf {
namespace {

// Inputs are small integers (non-negative for unsigned types), so results are exact wherever the
// type can hold them.
double fillValue(chorusDataType_t t, int r, size_t j) {
  const bool isUnsigned = t == chorusUint8 || t == chorusUint32 || t == chorusUint64;
  return static_cast<double>(static_cast<int>((r * 31 + j * 7) % 5) - (isUnsigned ? 0 : 2));
}

struct TypeInfo {
  const char* name;
  chorusDataType_t type;
  size_t size;
};
const TypeInfo kTypes[] = {
    {"int8", chorusInt8, 1},         {"uint8", chorusUint8, 1},       {"int32", chorusInt32, 4},
    {"uint32", chorusUint32, 4},     {"int64", chorusInt64, 8},       {"uint64", chorusUint64, 8},
    {"half", chorusFloat16, 2},      {"float", chorusFloat32, 4},     {"double", chorusFloat64, 8},
    {"bfloat16", chorusBfloat16, 2}, {"f8e4m3", chorusFloat8e4m3, 1}, {"f8e5m2", chorusFloat8e5m2, 1}};

struct OpInfo {
  const char* name;
  chorusRedOp_t op;
};
const OpInfo kOps[] = {
    {"sum", chorusSum}, {"prod", chorusProd}, {"max", chorusMax}, {"min", chorusMin}, {"avg", chorusAvg}};

// Stores an exact small value (or a reference result) as the type's bits; integers wrap.
void store(chorusDataType_t t, void* p, double v) {
  const auto i = static_cast<uint64_t>(static_cast<int64_t>(v));
  switch (t) {  // integers: the low bytes (little-endian)
    case chorusInt8:
    case chorusUint8:
      std::memcpy(p, &i, 1);
      break;
    case chorusInt32:
    case chorusUint32:
      std::memcpy(p, &i, 4);
      break;
    case chorusInt64:
    case chorusUint64:
      std::memcpy(p, &i, 8);
      break;
    default:
      storeFloatElem(t, p, v);
      break;
  }
}

bool isFloat(chorusDataType_t t) {
  return t == chorusFloat16 || t == chorusFloat32 || t == chorusFloat64 || t == chorusBfloat16 ||
         t == chorusFloat8e4m3 || t == chorusFloat8e5m2;
}

// Relative error a float result may carry: the type's epsilon per rank (sums round at each step,
// avg multiplies each input by a rounded 1/n).
double tolerance(chorusDataType_t t, int n) {
  double eps = 1e-15;
  switch (t) {
    case chorusFloat16:
      eps = 1.0 / 1024;
      break;
    case chorusBfloat16:
      eps = 1.0 / 128;
      break;
    case chorusFloat8e4m3:
      eps = 1.0 / 8;
      break;
    case chorusFloat8e5m2:
      eps = 1.0 / 4;
      break;
    case chorusFloat32:
      eps = 1.2e-7;
      break;
    default:
      break;
  }
  return eps * (n + 1);
}

// The reference reduction over ranks of input element `elem`, in exact arithmetic; integers as
// the type wraps them (sums and products of small values stay exact in int64 first).
double reference(chorusDataType_t t, chorusRedOp_t op, int n, size_t elem) {
  double acc = fillValue(t, 0, elem);
  for (int r = 1; r < n; ++r) {
    const double x = fillValue(t, r, elem);
    switch (op) {
      case chorusProd:
        acc *= x;
        break;
      case chorusMax:
        acc = std::max(acc, x);
        break;
      case chorusMin:
        acc = std::min(acc, x);
        break;
      default:
        acc += x;
        break;
    }
  }
  if (op == chorusAvg) acc = isFloat(t) ? acc / n : std::trunc(acc / n);
  return acc;
}

struct Options {
  size_t minBytes = 32 * 1024 * 1024;
  size_t maxBytes = 32 * 1024 * 1024;
  size_t stepBytes = 1024 * 1024;
  double stepFactor = 1;
  int iters = 20;
  int warmup = 5;
  int agg = 1;
  int cycles = 1;  // 0: until killed
  int parallelInit = 0;
  int check = 1;  // check iterations per size
  std::string op = "sum";
  std::string type = "float";
  int root = 0;
  int blocking = 0;
  int nullStream = 0;
  int timeoutSec = 0;
  int graphLaunches = 0;
  int cpuTime = 0;
  int timestamps = 0;
  std::string json;
  int average = 1;
  int registered = 0;
  int ctaPolicy = -1;
  int deviceImpl = 0;
  int deviceCtas = 16;
  int memoryReport = 0;
  int unalign = 0;  // elements
  int perIter = 0;
  int perIterSkip = 0;
  int threads = 1;
  int gpus = 1;
};

// A size as nccl-tests reads it: a number, then optionally K, M or G (binary units). Anything
// else is refused rather than read as 0.
bool parseSize(const std::string& s, size_t* out) {
  const char* p = s.c_str();
  while (std::isspace(static_cast<unsigned char>(*p))) ++p;
  char* end = nullptr;
  const double v = std::strtod(p, &end);
  if (end == p || !std::isfinite(v) || v < 0) return false;
  double unit = 1;
  switch (std::toupper(static_cast<unsigned char>(*end))) {
    case 'K':
      unit = 1024;
      ++end;
      break;
    case 'M':
      unit = 1024.0 * 1024;
      ++end;
      break;
    case 'G':
      unit = 1024.0 * 1024 * 1024;
      ++end;
      break;
    default:
      break;
  }
  while (std::isspace(static_cast<unsigned char>(*end))) ++end;
  if (*end != '\0' || v * unit > 1e18) return false;
  *out = static_cast<size_t>(v * unit);
  return true;
}

double wallNow() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::string versionString(int code) {
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." + std::to_string(code % 100);
}

std::string nowString() {
  char buf[64];
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// nccl-tests' number cells: two decimals while they fit the width, then fewer, then exponent.
std::string cell(double v, int width) {
  char buf[64];
  for (const char* fmt : {"%*.2f", "%*.1f", "%*.0f"}) {
    if (std::snprintf(buf, sizeof(buf), fmt, width, v) <= width) return buf;
  }
  std::snprintf(buf, sizeof(buf), width >= 7 ? "%*.1e" : "%*.0e", width, v);
  return buf;
}

// Resident memory of this process, for -M.
int64_t residentBytes() {
  std::ifstream f("/proc/self/statm");
  long long pages = 0;
  long long rss = 0;
  f >> pages >> rss;
  return static_cast<int64_t>(rss) * sysconf(_SC_PAGESIZE);
}

std::string memString(int64_t bytes) {
  double v = static_cast<double>(bytes);
  const char* unit = " B";
  if (std::fabs(v) >= 1024.0 * 1024 * 1024) {
    v /= 1024.0 * 1024 * 1024;
    unit = " GB";
  } else if (std::fabs(v) >= 1024.0 * 1024) {
    v /= 1024.0 * 1024;
    unit = " MB";
  } else if (std::fabs(v) >= 1024.0) {
    v /= 1024.0;
    unit = " KB";
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f%s", std::fabs(v) < 10 ? 2 : (std::fabs(v) < 100 ? 1 : 0), v, unit);
  return buf;
}

// The -J file, in nccl-tests' layout (version 3), written as rows finish: after every row the
// file is a whole JSON document (the closing brackets are written, then overwritten by the next
// row), so a run cut short leaves every row it finished.
class JsonReport {
 public:
  using Json = nlohmann::ordered_json;

  // As nccl-tests: never overwrites; an existing PATH becomes PATH.0, PATH.1, ...
  bool open(const std::string& path, int argc, char** argv) {
    std::string tryPath = path;
    for (int i = 0; (f_ = std::fopen(tryPath.c_str(), "wx")) == nullptr; ++i) {
      if (errno != EEXIST || i > 1000) {
        std::printf("# skipping json output; %s not accessible: %s\n", tryPath.c_str(), std::strerror(errno));
        return false;
      }
      tryPath = path + "." + std::to_string(i);
    }
    std::printf("# Writing JSON output to %s\n", tryPath.c_str());
    Json head;
    head["version"] = 3;
    head["start_time"] = nowString();
    head["args"] = Json::array();
    for (int i = 0; i < argc; ++i) head["args"].push_back(argv[i]);
    head["env"] = Json::array();
    for (char** e = environ; e && *e; ++e) head["env"].push_back(redacted(*e));
    int version = 0;
    chorusGetVersion(&version);
    head["chorus_version"] = version;
    head_ = head;
    return true;
  }
  bool active() const { return f_ != nullptr; }

  void config(Json config) {
    if (!f_) return;
    head_["config"] = std::move(config);
    std::string text = head_.dump();
    text.pop_back();  // the closing brace: results follow
    std::fputs(text.c_str(), f_);
    std::fputs(",\"results\":[", f_);
    writeTail();
  }

  void row(const Json& row) {
    if (!f_) return;
    std::lock_guard<std::mutex> g(mu_);
    std::fseek(f_, tailAt_, SEEK_SET);
    if (rows_++ > 0) std::fputc(',', f_);
    std::fputs(row.dump().c_str(), f_);
    writeTail();
  }

  // The summary after the results; `errors` holds what made the run fail, if it did.
  void finish(int64_t wrong, double avgBusBw, double minBw, const std::vector<std::string>& errors) {
    std::lock_guard<std::mutex> g(mu_);
    if (!f_) return;
    std::fseek(f_, tailAt_, SEEK_SET);
    Json foot;
    foot["out_of_bounds"] = {{"count", wrong}, {"okay", wrong == 0 ? "true" : "false"}};
    foot["average_bus_bandwidth"] = {{"bandwidth", avgBusBw},
                                     {"okay", minBw < 0 ? "unchecked" : (avgBusBw >= minBw * 0.9 ? "true" : "false")}};
    foot["errors"] = errors;
    foot["end_time"] = nowString();
    std::string text = foot.dump();
    text[0] = ',';  // joins the top-level object
    std::fputs("]", f_);
    std::fputs(text.c_str(), f_);
    std::fputc('\n', f_);
    std::fflush(f_);
    if (ftruncate(fileno(f_), std::ftell(f_)) != 0) std::perror("ftruncate of the JSON output");
    std::fclose(f_);
    f_ = nullptr;
  }

 private:
  // The environment is recorded as nccl-tests does, without the values of secrets.
  static std::string redacted(const std::string& kv) {
    const size_t eq = kv.find('=');
    std::string name = kv.substr(0, eq);
    std::string upper = name;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    for (const char* word : {"SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL"}) {
      if (upper.find(word) != std::string::npos && eq != std::string::npos) return name + "=<redacted>";
    }
    return kv;
  }
  // Closes the document after what is written so far, then remembers where the next row goes.
  void writeTail() {
    tailAt_ = std::ftell(f_);
    std::fputs("]}\n", f_);
    std::fflush(f_);
  }

  std::FILE* f_ = nullptr;
  Json head_;
  long tailAt_ = 0;
  int rows_ = 0;
  std::mutex mu_;
};

JsonReport& jsonReport() {
  static JsonReport r;
  return r;
}

// A failed call ends the run: the message goes to stderr and into the JSON file's "errors".
void check(chorusResult_t r, const char* what) {
  if (r == chorusSuccess) return;
  const std::string msg =
      std::string(what) + " failed: " + chorusGetErrorString(r) + ": " + chorusGetLastError(nullptr);
  std::fprintf(stderr, "%s\n", msg.c_str());
  static std::mutex mu;
  std::lock_guard<std::mutex> g(mu);
  jsonReport().finish(0, 0, -1, {msg});
  std::fflush(stdout);
  std::_Exit(1);
}

// A barrier over the communicator: an all-reduce of one int.
void barrier(chorusComm_t comm) {
  int x = 0;
  check(chorusAllReduce(&x, &x, 1, chorusInt32, chorusSum, comm, nullptr), "barrier");
}

// Host memory for a buffer: plain, or from chorusMemAlloc and registered with the communicator
// (-R), so peers in other processes may read it in place. Every byte is touched once here, so
// -M's later growth is Chorus's own.
class Buffer {
 public:
  Buffer(size_t bytes, bool registered, chorusComm_t comm) : registered_(registered), comm_(comm) {
    if (registered) {
      check(chorusMemAlloc(&mem_, bytes + 64), "chorusMemAlloc");
      check(chorusCommRegister(comm_, mem_, bytes + 64, &handle_), "chorusCommRegister");
      std::memset(mem_, 0, bytes + 64);
    } else {
      plain_.resize(bytes + 64);
      mem_ = plain_.data();
    }
  }
  ~Buffer() {
    if (registered_) {
      chorusCommDeregister(comm_, handle_);
      chorusMemFree(mem_);
    }
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  char* data(size_t misalign) {
    auto a = (reinterpret_cast<uintptr_t>(mem_) + 63) & ~uintptr_t(63);
    return reinterpret_cast<char*>(a) + misalign;
  }

 private:
  bool registered_;
  chorusComm_t comm_;
  void* handle_ = nullptr;
  void* mem_ = nullptr;
  std::vector<char> plain_;
};

// Per-iteration statistics of -I, over the iterations after -K.
struct IterStats {
  double min = 0, max = 0, avg = 0, p50 = 0, p95 = 0, p99 = 0, stdev = 0;
};
IterStats iterStats(std::vector<double> t) {
  IterStats s;
  if (t.empty()) return s;
  std::sort(t.begin(), t.end());
  const int n = static_cast<int>(t.size());
  auto pct = [&](int p) { return t[std::min(n - 1, (n * p + 99) / 100 - 1)]; };  // nearest rank
  s.min = t.front();
  s.max = t.back();
  s.p50 = t[n / 2];
  s.p95 = pct(95);
  s.p99 = pct(99);
  for (double x : t) s.avg += x;
  s.avg /= n;
  for (double x : t) s.stdev += (x - s.avg) * (x - s.avg);
  s.stdev = std::sqrt(s.stdev / n);
  return s;
}

struct Shared {
  const CollDesc* desc;
  Options o;
  int argc;
  char** argv;
  std::vector<TypeInfo> types;
  std::vector<OpInfo> ops;
  std::vector<std::string> notes;  // flags that do not apply on host memory
  std::mutex mu;
  int64_t wrongTotal = 0;  // all-reduced with every row: every rank has it
  double busBwSum = 0;
  int busBwCount = 0;
  int64_t initBytes = 0;  // -M: resident growth across init (this process)
  int64_t userBytes = 0;
  int64_t collBytes = 0;
};

// One rank's line of the device report, as nccl-tests prints it, with host memory for the device.
std::string rankLine(int rank, int group) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  char line[256];
  std::snprintf(line, sizeof(line), "#  Rank %2d Group %2d Pid %6d on %10s device host [cpu %d] host memory", rank,
                group, static_cast<int>(getpid()), host, sched_getcpu());
  return line;
}

void printHeader(Shared& sh, int n, const std::vector<std::string>& lines) {
  const Options& o = sh.o;
  int version = 0;
  chorusGetVersion(&version);
  const char* prog = sh.argv[0];
  if (const char* slash = std::strrchr(prog, '/')) prog = slash + 1;
  std::printf("# Chorus perf tests (nccl-tests flags and table), chorus-headers=%s chorus-library=%s\n",
              versionString(CHORUS_VERSION_CODE).c_str(), versionString(version).c_str());
  std::printf("# Collective test starting: %s\n", prog);
  std::printf(
      "# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: %d "
      "validation: %d graph: %d unalign: %d\n",
      o.threads, o.gpus, o.minBytes, o.maxBytes, o.stepFactor > 1 ? static_cast<size_t>(o.stepFactor) : o.stepBytes,
      o.stepFactor > 1 ? "factor" : "bytes", o.warmup, o.iters, o.agg, o.check, o.graphLaunches, o.unalign);
  if (o.blocking == 1) std::printf("# Blocking Enabled: wait and barrier after each inner iteration (-m) \n");
  if (o.blocking == 2) std::printf("# Blocking Enabled: wait after each inner iteration (-m), no barrier \n");
  if (o.blocking == 3) {
    std::printf("# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier \n");
  }
  if (o.perIter) {
    std::printf("# Per-Iteration Report: host-clock timing on the stream; i_* uses max over ranks");
    if (o.perIterSkip) std::printf("; summary skips first %d iterations", o.perIterSkip);
    std::printf(" \n");
  }
  if (o.parallelInit) std::printf("# Parallel Init Enabled: threads call into chorusCommInitRank concurrently \n");
  for (const std::string& note : sh.notes) std::printf("# Note: %s\n", note.c_str());
  std::printf("#\n# Using devices\n");
  for (const std::string& l : lines) std::printf("%s\n", l.c_str());
  std::printf("#  %d ranks on host memory\n", n);

  using Json = JsonReport::Json;
  Json config;
  config["nthreads"] = o.threads;
  config["ngpus"] = o.gpus;
  config["minimum_bytes"] = o.minBytes;
  config["maximum_bytes"] = o.maxBytes;
  if (o.stepFactor > 1) {
    if (o.stepFactor == std::floor(o.stepFactor)) {
      config["step_factor"] = static_cast<size_t>(o.stepFactor);
    } else {
      config["step_factor"] = o.stepFactor;
    }
  } else {
    config["step_bytes"] = o.stepBytes;
  }
  config["warmup_iters"] = o.warmup;
  config["iterations"] = o.iters;
  config["aggregated_iterations"] = o.agg;
  config["validation"] = o.check;
  config["graph"] = o.graphLaunches;
  // nccl-tests writes these flags as the strings "true" and "false".
  config["blocking_collectives"] = o.blocking ? "true" : "false";
  config["per_iter_timing"] = o.perIter ? "true" : "false";
  config["per_iter_skip"] = o.perIterSkip;
  config["parallel_init"] = o.parallelInit ? "true" : "false";
  config["devices"] = Json::array();
  for (const std::string& l : lines) {
    int rank = 0;
    int group = 0;
    int pid = 0;
    int cpu = -1;
    char host[256] = {0};
    std::sscanf(l.c_str(), "#  Rank %d Group %d Pid %d on %255s device host [cpu %d]", &rank, &group, &pid, host, &cpu);
    config["devices"].push_back({{"rank", rank},
                                 {"group", group},
                                 {"pid", pid},
                                 {"hostname", host},
                                 {"device", -1},
                                 {"device_hex", "host"},
                                 {"device_info", "host memory, cpu " + std::to_string(cpu)}});
  }
  jsonReport().config(std::move(config));

  const char* timeStr = o.cpuTime ? "cputime" : "time";
  const char* tsLbl = o.timestamps ? "timestamp" : "";
  const int tsPad = o.timestamps ? 19 : 0;
  const char* tsFmt = o.timestamps ? "%Y-%m-%d %H:%M:%S" : "";
  std::printf("#\n");
  if (o.perIter) {
    std::printf(
        "# %10s  %12s  %8s  %6s  %6s              out-of-place (+ per-iteration)                                "
        "in-place (+ per-iteration)\n",
        "", "", "", "", "");
    std::printf(
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s "
        "%*s\n",
        "size", "count", "type", "redop", "root", timeStr, "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99",
        "i_cv%", timeStr, "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%", tsPad, tsLbl);
    std::printf(
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s "
        "%*s\n",
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)", "(us)",
        "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)", tsPad, tsFmt);
  } else {
    std::printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "",
                "", "", "");
    std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "size", "count", "type",
                "redop", "root", timeStr, "algbw", "busbw", "#wrong", timeStr, "algbw", "busbw", "#wrong", tsPad,
                tsLbl);
    std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "(B)", "(elements)", "",
                "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", tsPad, tsFmt);
  }
  std::fflush(stdout);
}

// One column pair (out-of-place or in-place) of a row.
struct Measured {
  bool ran = false;
  double timeUs = 0;
  double algBw = 0;
  double busBw = 0;
  int64_t wrong = 0;
  std::vector<double> iterUs;  // -I: each iteration, the max over ranks
};

// The sizes of the sweep, in bytes.
std::vector<size_t> sweep(const Options& o) {
  std::vector<size_t> v;
  for (size_t b = o.minBytes; b <= o.maxBytes;) {
    v.push_back(b);
    size_t next = o.stepFactor > 1 ? static_cast<size_t>(static_cast<double>(b) * o.stepFactor) : b + o.stepBytes;
    if (next <= b) next = b + 1;
    b = next;
  }
  return v;
}

// Prints one row of the table (both column pairs) and streams it to the -J file.
void printRow(const Options& o, const CollDesc& d, size_t count, int n, const TypeInfo& t, const OpInfo& op, int root,
              const Measured m[2]) {
  using Json = JsonReport::Json;
  char rootName[16];
  std::snprintf(rootName, sizeof(rootName), "%6i", d.rooted ? root : -1);
  const char* opName = d.reduces ? op.name : "none";
  const size_t callCount = d.callCount(count, n);
  const size_t bytes = count * t.size;
  std::string text;
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%12zu  %12zu  %8s  %6s  %6s", bytes, callCount, t.name, opName, rootName);
  text += buf;
  Json row;
  row["size"] = bytes;
  row["count"] = callCount;
  row["type"] = t.name;
  row["redop"] = opName;
  row["root"] = rootName;
  const char* keys[2] = {"out_of_place", "in_place"};
  for (int i = 0; i < 2; ++i) {
    const Measured& r = m[i];
    if (!r.ran) {
      std::snprintf(buf, sizeof(buf), "  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
      text += buf;
      if (o.perIter) {
        std::snprintf(buf, sizeof(buf), "  %7s  %7s  %7s  %7s", "N/A", "N/A", "N/A", "N/A");
        text += buf;
      }
      row[keys[i]] = nullptr;
      continue;
    }
    if (o.check) {
      std::snprintf(buf, sizeof(buf), "  %7s  %6s  %6s  %6g", cell(r.timeUs, 7).c_str(), cell(r.algBw, 6).c_str(),
                    cell(r.busBw, 6).c_str(), static_cast<double>(r.wrong));
    } else {
      std::snprintf(buf, sizeof(buf), "  %7s  %6s  %6s    N/A", cell(r.timeUs, 7).c_str(), cell(r.algBw, 6).c_str(),
                    cell(r.busBw, 6).c_str());
    }
    text += buf;
    row[keys[i]] = {{o.cpuTime ? "cpu_time" : "time", r.timeUs},
                    {"alg_bw", r.algBw},
                    {"bus_bw", r.busBw},
                    {"nwrong", o.check ? Json(static_cast<double>(r.wrong)) : Json(nullptr)}};
    if (o.perIter) {
      const std::vector<double> kept(r.iterUs.begin() + o.perIterSkip, r.iterUs.end());
      const IterStats s = iterStats(kept);
      const double cv = s.avg > 0 ? s.stdev / s.avg * 100 : 0;
      std::snprintf(buf, sizeof(buf), "  %7s  %7s  %7s  %7s", cell(s.min, 7).c_str(), cell(s.max, 7).c_str(),
                    cell(s.p99, 7).c_str(), cell(cv, 7).c_str());
      text += buf;
      row[std::string(keys[i]) + "_per_iter"] = {{"skipped_iterations", o.perIterSkip},
                                                 {"min_us", s.min},
                                                 {"max_us", s.max},
                                                 {"avg_us", s.avg},
                                                 {"p50_us", s.p50},
                                                 {"p95_us", s.p95},
                                                 {"p99_us", s.p99},
                                                 {"stdev_us", s.stdev},
                                                 {"cv_pct", cv},
                                                 {"times_us", r.iterUs}};
    }
  }
  if (o.timestamps) {
    std::snprintf(buf, sizeof(buf), "%21s", nowString().c_str());
    text += buf;
  }
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
  row["actual_iterations"] = o.iters;
  row["experiment_name"] = "";
  jsonReport().row(row);
}

// Runs the whole sweep as one rank; `print` on exactly one rank.
void rankMain(Shared& sh, chorusComm_t comm, bool print) {
  int rank = 0;
  int n = 1;
  chorusCommUserRank(comm, &rank);
  chorusCommCount(comm, &n);
  const Options& o = sh.o;
  const CollDesc& d = *sh.desc;

  // The device report: every rank's line, gathered to the printing rank.
  constexpr size_t kLine = 256;
  std::vector<char> mine(kLine, 0);
  const std::string line = rankLine(rank, 0);
  std::memcpy(mine.data(), line.data(), std::min(line.size(), kLine - 1));
  std::vector<char> all(kLine * n, 0);
  check(chorusAllGather(mine.data(), all.data(), kLine, chorusUint8, comm, nullptr), "device report all-gather");
  if (print) {
    std::vector<std::string> lines;
    for (int r = 0; r < n; ++r) lines.emplace_back(all.data() + r * kLine);
    printHeader(sh, n, lines);
  }

  chorusStream_t stream = nullptr;
  if (!o.nullStream) check(chorusStreamCreate(&stream), "chorusStreamCreate");
  const size_t slack = static_cast<size_t>(o.unalign) * 8;
  const size_t sendBytes = d.sendElems(o.maxBytes, n) + slack;
  const size_t recvBytes = std::max(d.recvElems(o.maxBytes, n), d.sendElems(o.maxBytes, n)) + slack;
  Buffer sendMem(sendBytes, o.registered, comm);
  Buffer recvMem(recvBytes, o.registered, comm);
  barrier(comm);
  int64_t rssBefore = 0;
  if (print) {
    rssBefore = residentBytes();
    std::lock_guard<std::mutex> g(sh.mu);
    sh.userBytes = static_cast<int64_t>(sendBytes + recvBytes) * (o.threads > 1 ? o.threads : 1);
  }
  std::vector<char> expectBytes(8);
  int64_t wrong = 0;
  double busBwSum = 0;
  int busBwCount = 0;
  std::vector<int> roots;
  if (d.rooted && o.root == -1) {
    for (int r = 0; r < n; ++r) roots.push_back(r);
  } else {
    roots.push_back(d.rooted ? o.root : 0);
  }
  // -I: host-clock stamps taken on the stream between iterations (the host-stream counterpart
  // of nccl-tests' CUDA events).
  std::vector<double> stamps(static_cast<size_t>(o.iters) * 2 + 2);
  struct Stamp {
    double* at;
  };
  std::vector<Stamp> stampArgs(stamps.size());
  for (size_t i = 0; i < stamps.size(); ++i) stampArgs[i].at = &stamps[i];
  auto stampOnStream = [&](size_t i) {
    if (!stream) {
      stamps[i] = wallNow();
      return;
    }
    check(chorusLaunchHostFunc(
              stream, [](void* p) { *static_cast<Stamp*>(p)->at = wallNow(); }, &stampArgs[i]),
          "chorusLaunchHostFunc");
  };

  for (const TypeInfo& t : sh.types) {
    const size_t mis = static_cast<size_t>(o.unalign) * t.size;
    for (const OpInfo& op : sh.ops) {
      for (int root : roots) {
        int repeat = o.cycles;
        do {
          for (size_t bytes : sweep(o)) {
            const size_t count = d.roundCount(bytes / t.size, n);
            const size_t per = d.callCount(count, n);
            Measured m[2];
            for (int inPlace = 0; inPlace < 2; ++inPlace) {
              if (inPlace && d.inPlace == InPlace::kNone) continue;
              Measured& r = m[inPlace];
              r.ran = true;
              char* rb = recvMem.data(mis);
              char* sb = sendMem.data(mis);
              if (inPlace) {
                switch (d.inPlace) {
                  case InPlace::kSame:
                    sb = rb;
                    break;
                  case InPlace::kSendInRecvBlock:
                    if (!d.rooted || rank == root) sb = rb + size_t(rank) * per * t.size;
                    break;
                  case InPlace::kRecvInSendBlock:
                    rb = sb + (!d.rooted || rank == root ? size_t(rank) * per * t.size : 0);
                    if (d.rooted && rank != root) rb = recvMem.data(mis);
                    break;
                  case InPlace::kNone:
                    break;
                }
              }
              const size_t se = d.sendElems(count, n);
              auto fill = [&] {
                for (size_t j = 0; j < se; ++j) store(t.type, sb + j * t.size, fillValue(t.type, rank, j));
              };
              fill();
              auto sync = [&] { check(chorusStreamSynchronize(stream), "chorusStreamSynchronize"); };
              // One outer iteration: -m operations, in a group when more than one.
              auto launch = [&] {
                if (o.agg > 1) chorusGroupStart();
                for (int a = 0; a < o.agg; ++a) {
                  check(d.run(sb, rb, per, t.type, op.op, root, comm, stream), d.name);
                  if (o.blocking == 1 || o.blocking == 2) {
                    if (o.agg <= 1) sync();
                    if (o.blocking == 1 && o.agg <= 1) barrier(comm);
                  }
                }
                if (o.agg > 1) check(chorusGroupEnd(), "chorusGroupEnd");
                if ((o.blocking == 1 || o.blocking == 2) && o.agg > 1) {
                  sync();
                  if (o.blocking == 1) barrier(comm);
                }
              };
              for (int w = 0; w < o.warmup; ++w) launch();
              sync();
              barrier(comm);
              double collOnly = 0;
              const double t0 = wallNow();
              for (int i = 0; i < o.iters; ++i) {
                const double it0 = wallNow();
                if (o.perIter) stampOnStream(2 * i);
                launch();
                if (o.blocking == 3) {
                  sync();
                  if (o.perIter) stampOnStream(2 * i + 1);
                  collOnly += wallNow() - it0;
                  barrier(comm);
                } else if (o.perIter) {
                  stampOnStream(2 * i + 1);
                }
              }
              // -C: the time to issue the operations, before waiting for them (nccl-tests' cputime).
              const double issued = o.blocking == 3 ? collOnly : wallNow() - t0;
              sync();
              const double done = o.blocking == 3 ? collOnly : wallNow() - t0;
              double dt = (o.cpuTime ? issued : done) / (static_cast<double>(o.iters) * o.agg);
              // Across ranks: rank 0's (-a 0), the average (1), the min (2) or the max (3).
              double agg = o.average == 0 ? (rank == 0 ? dt : 0.0) : dt;
              const chorusRedOp_t red = o.average == 2 ? chorusMin : (o.average == 3 ? chorusMax : chorusSum);
              check(chorusAllReduce(&agg, &agg, 1, chorusFloat64, red, comm, nullptr), "time all-reduce");
              if (o.average == 1) agg /= n;
              r.timeUs = agg * 1e6;
              r.algBw = agg > 0 ? static_cast<double>(count * t.size) / agg / 1e9 : 0;
              r.busBw = r.algBw * d.busFactor(n);
              if (o.perIter) {
                r.iterUs.resize(o.iters);
                for (int i = 0; i < o.iters; ++i) r.iterUs[i] = (stamps[2 * i + 1] - stamps[2 * i]) * 1e6;
                check(chorusAllReduce(r.iterUs.data(), r.iterUs.data(), r.iterUs.size(), chorusFloat64, chorusMax, comm,
                                      nullptr),
                      "per-iteration all-reduce");
              }
              for (int c = 0; c < o.check; ++c) {
                fill();
                check(d.run(sb, rb, per, t.type, op.op, root, comm, stream), d.name);
                sync();
                int64_t bad = 0;
                const size_t re = d.recvElems(count, n);
                for (size_t i = 0; i < re; ++i) {
                  int src = 0;
                  size_t elem = 0;
                  bool reduced = false;
                  if (!d.source(rank, n, root, count, i, &src, &elem, &reduced)) break;
                  const double want = reduced ? reference(t.type, op.op, n, elem) : fillValue(t.type, src, elem);
                  const char* got = rb + i * t.size;
                  store(t.type, expectBytes.data(), want);
                  if (std::memcmp(expectBytes.data(), got, t.size) == 0) continue;
                  if (isFloat(t.type) && reduced &&
                      std::fabs(loadFloatElem(t.type, got) - want) <=
                          tolerance(t.type, n) * std::max(1.0, std::fabs(want)) * 4) {
                    continue;
                  }
                  ++bad;
                }
                check(chorusAllReduce(&bad, &bad, 1, chorusInt64, chorusSum, comm, nullptr), "check all-reduce");
                r.wrong = bad;
                if (bad) break;
              }
            }
            // Times and counts were all-reduced: every rank holds the same totals.
            for (const Measured& r : m) {
              if (!r.ran) continue;
              wrong += r.wrong;
              busBwSum += r.busBw;
              ++busBwCount;
            }
            if (print) printRow(o, d, count, n, t, op, root, m);
          }
        } while (--repeat != 0);
      }
    }
  }
  if (stream) chorusStreamDestroy(stream);
  barrier(comm);
  std::lock_guard<std::mutex> g(sh.mu);
  sh.wrongTotal = wrong;
  sh.busBwSum = busBwSum;
  sh.busBwCount = busBwCount;
  if (print) sh.collBytes = residentBytes() - rssBefore;
}

}  // namespace

int runPerf(const CollDesc& desc, int argc, char** argv) {
  Shared sh;
  sh.desc = &desc;
  sh.argc = argc;
  sh.argv = argv;
  Options& o = sh.o;
  std::string minB = "32M";
  std::string maxB = "32M";
  std::string stepB = "1M";
  CLI::App app{std::string(desc.name) + " performance test, with nccl-tests' flags, table and JSON output"};
  app.add_option("-t,--nthreads", o.threads, "ranks as threads of this process (when not under a launcher)");
  app.add_option("-g,--ngpus", o.gpus, "ranks per thread (host memory: 1)");
  app.add_option("-b,--minbytes", minB, "minimum size to start with (K, M, G: binary units)");
  app.add_option("-e,--maxbytes", maxB, "maximum size to end at");
  app.add_option("-i,--stepbytes", stepB, "fixed increment between sizes");
  app.add_option("-f,--stepfactor", o.stepFactor, "multiplication factor between sizes");
  app.add_option("-n,--iters", o.iters, "number of iterations");
  app.add_option("-m,--agg_iters", o.agg, "number of operations aggregated in one group");
  app.add_option("-w,--warmup_iters", o.warmup, "number of warmup iterations (per size)");
  app.add_option("-N,--run_cycles", o.cycles, "run and print each sweep this many times (0: until killed)");
  app.add_option("-p,--parallel_init", o.parallelInit, "threads call chorusCommInitRank concurrently (0/1)");
  app.add_option("-c,--check", o.check, "check iterations per size (0: no check)");
  app.add_option("-o,--op", o.op, "reduction op: sum, prod, max, min, avg or all");
  app.add_option("-d,--datatype", o.type, "data type, or all");
  app.add_option("-r,--root", o.root, "root rank, or -1 for every root");
  app.add_option("-z,--blocking", o.blocking,
                 "1: wait and barrier after each operation (-m group); 2: wait, no barrier; 3: wait and barrier "
                 "after each iteration (-n), time excludes the barrier");
  app.add_option("-y,--stream_null", o.nullStream, "use the NULL stream (synchronous) instead of a host stream");
  app.add_option("-T,--timeout", o.timeoutSec, "seconds before a stuck operation fails (sets CHORUS_TIMEOUT)");
  app.add_option("-G,--cudagraph", o.graphLaunches, "CUDA graph launches (GPU buffers only; ignored here)");
  app.add_option("-C,--report_cputime", o.cpuTime, "report the time to issue the operations, not to complete them");
  app.add_option("-S,--report_timestamps", o.timestamps, "print a timestamp at the end of each row");
  app.add_option("-J,--output_file", o.json, "also write the run to this JSON file (nccl-tests' layout)");
  app.add_option("-a,--average", o.average, "time across ranks: 0 rank 0, 1 average, 2 min, 3 max");
  app.add_option("-R,--local_register", o.registered,
                 "1: buffers from chorusMemAlloc, registered with chorusCommRegister (2: the same on host memory)");
  app.add_option("-x,--cta_policy", o.ctaPolicy, "CTA policy (GPU kernels only; ignored here)");
  app.add_option("-D,--device_implementation", o.deviceImpl, "device implementation (GPU kernels only; ignored here)");
  app.add_option("-V,--device_cta_count", o.deviceCtas, "CTAs of a device implementation (ignored here)");
  app.add_option("-M,--memory", o.memoryReport, "report the memory the run used (0/1)");
  app.add_option("-u,--unalign", o.unalign, "misalign every buffer by this many elements");
  app.add_option("-I,--per_iter_timing", o.perIter, "time every iteration and report min, max, p99 and cv (0/1)");
  app.add_option("-K,--per_iter_skip", o.perIterSkip, "leave the first K iterations out of -I's summary");
  CLI11_PARSE(app, argc, argv);

  auto usage = [](const std::string& msg) {
    std::fprintf(stderr, "%s\n", msg.c_str());
    return 2;
  };
  if (!parseSize(minB, &o.minBytes)) {
    return usage("invalid size '" + minB +
                 "' for -b (minbytes): give bytes, optionally with K, M or G, e.g. 8, 64K, 1M");
  }
  if (!parseSize(maxB, &o.maxBytes)) {
    return usage("invalid size '" + maxB +
                 "' for -e (maxbytes): give bytes, optionally with K, M or G, e.g. 8, 64K, 1M");
  }
  if (!parseSize(stepB, &o.stepBytes)) {
    return usage("invalid size '" + stepB + "' for -i (stepbytes): give bytes, optionally with K, M or G");
  }
  if (o.minBytes > o.maxBytes) {
    return usage("invalid sizes: -b " + std::to_string(o.minBytes) + " is more than -e " + std::to_string(o.maxBytes));
  }
  if (!std::isfinite(o.stepFactor) || o.stepFactor < 0) return usage("-f (stepfactor) must be 1 or more");
  if (o.stepFactor <= 1 && o.stepBytes == 0) return usage("-i 0 without -f: the sweep would not advance");
  if (o.iters < 1) return usage("-n (iters) must be at least 1");
  if (o.warmup < 0) return usage("-w (warmup_iters) must be 0 or more");
  if (o.agg < 1) return usage("-m (agg_iters) must be at least 1");
  if (o.cycles < 0) return usage("-N (run_cycles) must be 0 (until killed) or more");
  if (o.check < 0) return usage("-c (check) must be 0 or more");
  if (o.average < 0 || o.average > 3) return usage("-a (average) must be 0, 1, 2 or 3");
  if (o.blocking < 0 || o.blocking > 3) return usage("-z (blocking) must be 0, 1, 2 or 3");
  if (o.registered < 0 || o.registered > 2) return usage("-R (local_register) must be 0, 1 or 2");
  if (o.unalign < 0) return usage("-u (unalign) must be 0 or more");
  if (o.threads < 1) return usage("-t (nthreads) must be at least 1");
  if (o.gpus != 1) {
    return usage("-g " + std::to_string(o.gpus) + ": host-memory ranks are one per thread; use -t for more ranks");
  }
  double minBw = -1;
  if (const char* v = std::getenv("NCCL_TESTS_MIN_BW")) {
    char* end = nullptr;
    minBw = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(minBw >= 0)) {
      return usage(std::string("NCCL_TESTS_MIN_BW=") + v + " is not a bandwidth in GB/s (a number, 0 or more)");
    }
  }
  // What nccl-tests itself disables with a message, so do we.
  if (o.perIter != 0 && o.perIter != 1) {
    sh.notes.push_back("-I only takes 0 or 1; per-iteration timing is off");
    o.perIter = 0;
  }
  if (o.perIterSkip < 0 || o.perIterSkip >= o.iters) {
    if (o.perIterSkip != 0) sh.notes.push_back("-K must be between 0 and -n minus 1; no iterations are skipped");
    o.perIterSkip = 0;
  }
  if (o.perIterSkip && !o.perIter) {
    sh.notes.push_back("-K needs -I 1; no iterations are skipped");
    o.perIterSkip = 0;
  }
  // Flags for GPU buffers and kernels: accepted so command lines carry over, and said to be unused.
  if (o.graphLaunches > 0) {
    sh.notes.push_back("-G " + std::to_string(o.graphLaunches) +
                       " (CUDA graphs) applies to GPU buffers; host streams run each operation as issued, so "
                       "it is ignored");
    o.graphLaunches = 0;
  }
  if (o.ctaPolicy != -1) sh.notes.push_back("-x (CTA policy) applies to GPU kernels; ignored");
  if (o.deviceImpl != 0) sh.notes.push_back("-D (device implementation) applies to GPU kernels; ignored");
  if (o.deviceCtas != 16) sh.notes.push_back("-V (device CTA count) applies to GPU kernels; ignored");
  if (o.registered == 2) {
    sh.notes.push_back("-R 2 (symmetric registration) is for GPU memory; host buffers are registered as with -R 1");
  }
  if (o.timeoutSec > 0) setenv("CHORUS_TIMEOUT", std::to_string(o.timeoutSec).c_str(), 1);
  for (const auto& t : kTypes) {
    if (o.type == "all" || o.type == t.name) sh.types.push_back(t);
  }
  for (const auto& op : kOps) {
    if (!desc.reduces || o.op == "all" || o.op == op.name) sh.ops.push_back(op);
    if (!desc.reduces) break;
  }
  if (sh.types.empty()) {
    std::string names;
    for (const auto& t : kTypes) names += std::string(" ") + t.name;
    return usage("unknown -d " + o.type + "; the types are" + names + " and all");
  }
  if (sh.ops.empty()) return usage("unknown -o " + o.op + "; the ops are sum prod max min avg and all");

  const int64_t rssStart = residentBytes();
  std::vector<chorusComm_t> comms;
  bool usedMpi = false;
#ifdef CHORUS_PERF_MPI
  if (std::getenv("OMPI_COMM_WORLD_SIZE") && !std::getenv("CHORUS_COMM_ID")) {
    // As nccl-tests: rank 0 makes the id, MPI carries it to the others.
    if (o.threads != 1)
      return usage("-t above 1 is for runs without a launcher; under mpirun each process is one rank");
    MPI_Init(&argc, &argv);
    usedMpi = true;
    int mpiRank = 0;
    int mpiSize = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &mpiRank);
    MPI_Comm_size(MPI_COMM_WORLD, &mpiSize);
    chorusUniqueId id;
    if (mpiRank == 0) check(chorusGetUniqueId(&id), "chorusGetUniqueId");
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    comms.resize(1);
    check(chorusCommInitRank(&comms[0], mpiSize, id, mpiRank), "chorusCommInitRank");
  }
#endif
  if (!usedMpi) {
    // Under a launcher, this process's rank of the job; with none, a job of one rank. -t then
    // asks for that many ranks as threads instead.
    comms.resize(1);
    check(chorusCommInitFromEnv(&comms[0], nullptr), "chorusCommInitFromEnv");
    int n = 0;
    chorusCommCount(comms[0], &n);
    if (o.threads > 1) {
      if (n > 1) {
        chorusCommDestroy(comms[0]);
        return usage("-t above 1 is for runs without a launcher; under a launcher each process is one rank");
      }
      check(chorusCommDestroy(comms[0]), "chorusCommDestroy");
      comms.assign(o.threads, nullptr);
      if (o.parallelInit) {
        chorusUniqueId id;
        check(chorusGetUniqueId(&id), "chorusGetUniqueId");
        std::vector<std::thread> init;
        for (int r = 0; r < o.threads; ++r) {
          init.emplace_back([&, r] { check(chorusCommInitRank(&comms[r], o.threads, id, r), "chorusCommInitRank"); });
        }
        for (auto& t : init) t.join();
      } else {
        check(chorusCommInitAll(comms.data(), o.threads, nullptr), "chorusCommInitAll");
      }
    }
  }
  sh.initBytes = residentBytes() - rssStart;
  int rank = 0;
  chorusCommUserRank(comms[0], &rank);
  const bool printer = rank == 0;
  if (printer && !o.json.empty()) jsonReport().open(o.json, argc, argv);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < comms.size(); ++i) {
    threads.emplace_back([&, i] { rankMain(sh, comms[i], printer && i == 0); });
  }
  for (auto& t : threads) t.join();
  for (auto c : comms) chorusCommDestroy(c);
  const double avgBw = sh.busBwCount ? sh.busBwSum / sh.busBwCount : 0.0;
  const bool bwLow = minBw >= 0 && avgBw < minBw * 0.9;
  if (printer) {
    std::printf("# %-20s : %lld %s\n", "Out of bounds values", static_cast<long long>(sh.wrongTotal),
                sh.wrongTotal == 0 ? "OK" : "FAILED");
    std::printf("# %-20s : %g %s\n", "Avg bus bandwidth", avgBw, minBw < 0 ? "" : (bwLow ? "FAILED" : "OK"));
    if (bwLow) {
      std::printf("# %-20s : %g GB/s (NCCL_TESTS_MIN_BW), less 10%%\n", "Required at least", minBw);
    }
    if (o.memoryReport) {
      std::printf("# %-20s : Initialization %s | User-Allocated %s | Collective %s | Total  %s\n", "Host memory usage",
                  memString(sh.initBytes).c_str(), memString(sh.userBytes).c_str(), memString(sh.collBytes).c_str(),
                  memString(sh.initBytes + sh.userBytes + sh.collBytes).c_str());
    }
    std::printf("#\n");
    const char* prog = std::strrchr(argv[0], '/') ? std::strrchr(argv[0], '/') + 1 : argv[0];
    std::printf("# Collective test concluded: %s\n#\n", prog);
    std::fflush(stdout);
    jsonReport().finish(sh.wrongTotal, avgBw, minBw, {});
  }
#ifdef CHORUS_PERF_MPI
  if (usedMpi) MPI_Finalize();
#endif
  // Every rank knows both results: the counts and times were all-reduced with each row.
  if (sh.wrongTotal != 0) return 1;
  return bwLow ? 3 : 0;
}

}  // namespace chorus::perf
