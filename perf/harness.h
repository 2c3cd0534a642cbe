// The perf harness's shared pieces (perf/common.cc runs the sweep, perf/report.cc prints the
// table and writes the -J file): the options, what is measured, and the report.
#pragma once

#include <sys/types.h>
#include <cstdint>

#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "perf/common.h"

namespace chorus::perf {

struct TypeInfo {
  const char* name;
  chorusDataType_t type;
  size_t size;
};
struct OpInfo {
  const char* name;
  chorusRedOp_t op;
};
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

// Per-iteration statistics of -I, over the iterations after -K.
struct IterStats {
  double min = 0, max = 0, avg = 0, p50 = 0, p95 = 0, p99 = 0, stdev = 0;
};
IterStats iterStats(std::vector<double> t);

// One column pair (out-of-place or in-place) of a row.
struct Measured {
  bool ran = false;
  double timeUs = 0;
  double algBw = 0;
  double busBw = 0;
  int64_t wrong = 0;
  std::vector<double> iterUs;  // -I: each iteration, the max over ranks
};

struct Shared {
  const CollDesc* desc;
  Options o;
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

// The local time as nccl-tests writes it: "YYYY-MM-DD HH:MM:SS".
std::string nowString();

// The -J file, in nccl-tests' layout (version 3), written as rows finish: after every row the
// file is a whole JSON document (the closing brackets are written, then overwritten by the next
// row), so a run cut short leaves every row it finished.
class JsonReport {
 public:
  using Json = nlohmann::ordered_json;

  // As nccl-tests: never overwrites; an existing PATH becomes PATH.0, PATH.1, ...
  bool open(const std::string& path, int argc, char** argv);
  // The run's settings and devices, before the first row.
  void config(Json config);
  void row(const Json& row);
  // The summary after the results; `errors` holds what made the run fail, if it did. Also
  // without config() (a run that failed before its header): the document is whole either way.
  void finish(int64_t wrong, double avgBusBw, bool bwChecked, bool bwOk, const std::vector<std::string>& errors);

 private:
  // Writes `text` where the closing brackets are, then the closing brackets after it, in one
  // write: the file is a whole JSON document before and after.
  void append(const std::string& text, const char* close);
  void writeHead();  // the head and the config, once

  int fd_ = -1;
  Json head_;
  bool headWritten_ = false;
  off_t tailAt_ = 0;
  int rows_ = 0;
  std::mutex mu_;
};

JsonReport& jsonReport();
// A failed call ends the run: the message goes to stderr and into the JSON file's "errors".
void check(chorusResult_t r, const char* what);
double wallNow();
// "all_reduce_perf" of "build/perf/all_reduce_perf".
const char* programName(const char* argv0);
std::string versionString(int code);
// nccl-tests' number cells: two decimals while they fit the width, then fewer, then exponent.
std::string cell(double v, int width);
// Resident memory of this process, for -M.
int64_t residentBytes();
std::string memString(int64_t bytes);
// One rank's line of the device report, as nccl-tests prints it, with host memory for the device.
std::string rankLine(int rank, int group);
// The header (version, settings, notes, one line per rank, column titles); also the -J config.
void printHeader(Shared& sh, int n, const std::vector<std::string>& lines);
// One row of the table (both column pairs), streamed to the -J file too.
void printRow(const Options& o, const CollDesc& d, size_t count, int n, const TypeInfo& t, const OpInfo& op, int root,
              const Measured m[2]);

}  // namespace chorus::perf
