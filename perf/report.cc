// The perf tools' table and JSON report, in nccl-tests' layout.
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>

#include "perf/harness.h"

namespace chorus::perf {

const char* programName(const char* argv0) {
  const char* slash = std::strrchr(argv0, '/');
  return slash ? slash + 1 : argv0;
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

namespace {

// The environment is recorded as nccl-tests does, without the values of secrets.
std::string redacted(const std::string& kv) {
  const size_t eq = kv.find('=');
  std::string name = kv.substr(0, eq);
  std::string upper = name;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const char* word : {"SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL"}) {
    if (upper.find(word) != std::string::npos && eq != std::string::npos) return name + "=<redacted>";
  }
  return kv;
}

}  // namespace

bool JsonReport::open(const std::string& path, int argc, char** argv) {
  std::string tryPath = path;
  for (int i = 0; (fd_ = ::open(tryPath.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0; ++i) {
    if (errno != EEXIST || i > 1000) {
      std::printf("# skipping json output; %s not accessible: %s\n", tryPath.c_str(), std::strerror(errno));
      return false;
    }
    tryPath = path + "." + std::to_string(i);
  }
  std::printf("# Writing JSON output to %s\n", tryPath.c_str());
  head_["version"] = 3;
  head_["start_time"] = nowString();
  head_["args"] = Json::array();
  for (int i = 0; i < argc; ++i) head_["args"].push_back(argv[i]);
  head_["env"] = Json::array();
  for (char** e = environ; e && *e; ++e) head_["env"].push_back(redacted(*e));
  int version = 0;
  chorusGetVersion(&version);
  head_["chorus_version"] = version;
  return true;
}

void JsonReport::append(const std::string& text, const char* close) {
  const std::string out = text + close;
  if (::pwrite(fd_, out.data(), out.size(), tailAt_) != static_cast<ssize_t>(out.size())) {
    std::perror("writing the JSON output");
  }
  tailAt_ += static_cast<off_t>(text.size());
}

void JsonReport::writeHead() {
  if (headWritten_) return;
  headWritten_ = true;
  std::string text = head_.dump();
  text.pop_back();  // the closing brace: results follow
  append(text + ",\"results\":[", "]}\n");
}

void JsonReport::config(Json config) {
  std::lock_guard<std::mutex> g(mu_);
  if (fd_ < 0) return;
  head_["config"] = std::move(config);
  writeHead();
}

void JsonReport::row(const Json& row) {
  std::lock_guard<std::mutex> g(mu_);
  if (fd_ < 0) return;
  writeHead();
  append((rows_++ > 0 ? "," : "") + row.dump(), "]}\n");
}

void JsonReport::finish(int64_t wrong, double avgBusBw, bool bwChecked, bool bwOk,
                        const std::vector<std::string>& errors) {
  std::lock_guard<std::mutex> g(mu_);
  if (fd_ < 0) return;
  writeHead();
  Json foot;
  foot["out_of_bounds"] = {{"count", wrong}, {"okay", wrong == 0 ? "true" : "false"}};
  foot["average_bus_bandwidth"] = {{"bandwidth", avgBusBw},
                                   {"okay", !bwChecked ? "unchecked" : (bwOk ? "true" : "false")}};
  foot["errors"] = errors;
  foot["end_time"] = nowString();
  std::string text = foot.dump();
  text[0] = ',';  // joins the top-level object
  append("]" + text, "\n");
  ::close(fd_);
  fd_ = -1;
}

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
  jsonReport().finish(0, 0, false, false, {msg});
  std::fflush(stdout);
  std::_Exit(1);
}

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
  const char* prog = programName(sh.argv[0]);
  std::printf("# Chorus perf tests (nccl-tests flags and table), chorus-headers=%s chorus-library=%s\n",
              versionString(CHORUS_VERSION_CODE).c_str(), versionString(version).c_str());
  std::printf("# Collective test starting: %s\n", prog);
  std::printf(
      "# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %g(%s) warmup iters: %d iters: %d agg iters: %d "
      "validation: %d graph: %d unalign: %d\n",
      o.threads, o.gpus, o.minBytes, o.maxBytes, o.stepFactor > 1 ? o.stepFactor : static_cast<double>(o.stepBytes),
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

}  // namespace chorus::perf
