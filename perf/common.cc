// The perf harness: nccl-tests' flags and table for Chorus.
//
// Launch modes: under chorusrun, torchrun or Slurm each process is a rank (chorusCommInitFromEnv);
// under mpirun too, bootstrapped through MPI_Bcast of the unique id when built with MPI (or through
// CHORUS_COMM_ID when set); otherwise `-t N` runs N ranks as threads of this process.
#include "perf/common.h"

#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
  double stepFactor = 1;
  size_t stepBytes = 1024 * 1024;
  int iters = 20;
  int warmup = 5;
  int check = 1;
  std::string op = "sum";
  std::string type = "float";
  int root = 0;
  int average = 1;
  int threads = 1;
  int gpus = 1;
  int agg = 1;
  int blocking = 0;
  int nullStream = 0;
  int cycles = 1;
  int cpuTime = 0;
  int unaligned = 0;
  int registered = 0;
  int timeoutSec = 0;
  std::string json;
};

size_t parseSize(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  switch (end && *end ? std::toupper(*end) : 0) {
    case 'K':
      v *= 1024;
      break;
    case 'M':
      v *= 1024 * 1024;
      break;
    case 'G':
      v *= 1024.0 * 1024 * 1024;
      break;
    default:
      break;
  }
  return static_cast<size_t>(v);
}

double wallNow() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
double cpuNow() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

void check(chorusResult_t r, const char* what) {
  if (r != chorusSuccess) {
    std::fprintf(stderr, "%s failed: %s: %s\n", what, chorusGetErrorString(r), chorusGetLastError(nullptr));
    std::exit(1);
  }
}

// A barrier over the communicator: an all-reduce of one int.
void barrier(chorusComm_t comm) {
  int x = 0;
  check(chorusAllReduce(&x, &x, 1, chorusInt32, chorusSum, comm, nullptr), "barrier");
}

// Host memory for a buffer: plain, or from chorusMemAlloc and registered with the communicator
// (-R), so peers in other processes may read it in place.
class Buffer {
 public:
  Buffer(size_t bytes, bool registered, chorusComm_t comm) : registered_(registered), comm_(comm) {
    if (registered) {
      check(chorusMemAlloc(&mem_, bytes + 128), "chorusMemAlloc");
      check(chorusCommRegister(comm_, mem_, bytes + 128, &handle_), "chorusCommRegister");
    } else {
      plain_.resize(bytes + 128);
      mem_ = plain_.data();
    }
  }
  ~Buffer() {
    if (registered_) {
      chorusCommDeregister(comm_, handle_);
      chorusMemFree(mem_);
    }
  }
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

struct Row {
  size_t bytes = 0;
  size_t count = 0;
  std::string type;
  std::string op;
  int root = -1;
  double time[2] = {0, 0};
  double algbw[2] = {0, 0};
  double busbw[2] = {0, 0};
  int64_t wrong[2] = {0, 0};
  bool inPlaceRan = true;
};

struct Shared {
  const CollDesc* desc;
  Options o;
  std::vector<TypeInfo> types;
  std::vector<OpInfo> ops;
  std::vector<int> roots;  // set per run
  std::mutex mu;
  std::vector<Row> rows;  // filled by the printing rank
  int64_t wrongTotal = 0;
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

// Runs the whole sweep as one rank; `print` on exactly one rank.
void rankMain(Shared& sh, chorusComm_t comm, bool print) {
  int rank = 0;
  int n = 1;
  chorusCommUserRank(comm, &rank);
  chorusCommCount(comm, &n);
  const Options& o = sh.o;
  const CollDesc& d = *sh.desc;
  chorusStream_t stream = nullptr;
  if (!o.nullStream) check(chorusStreamCreate(&stream), "chorusStreamCreate");
  const size_t maxElems = o.maxBytes;  // bytes bound elements of any type
  Buffer sendMem(d.sendElems(maxElems, n) * 1 + 64, o.registered, comm);
  Buffer recvMem(std::max(d.recvElems(maxElems, n), d.sendElems(maxElems, n)) + 64, o.registered, comm);
  std::vector<char> expectBytes(8);
  std::vector<int> roots;
  if (d.rooted && o.root == -1) {
    for (int r = 0; r < n; ++r) roots.push_back(r);
  } else {
    roots.push_back(d.rooted ? o.root : 0);
  }
  const size_t mis = o.unaligned ? 1 : 0;
  for (const TypeInfo& t : sh.types) {
    for (const OpInfo& op : sh.ops) {
      for (int root : roots) {
        for (size_t bytes : sweep(o)) {
          const size_t count = d.roundCount(bytes / t.size, n);
          Row row;
          row.bytes = count * t.size;
          row.count = count;
          row.type = t.name;
          row.op = d.reduces ? op.name : "none";
          row.root = d.rooted ? root : -1;
          const size_t per = d.callCount(count, n);
          for (int inPlace = 0; inPlace < 2; ++inPlace) {
            if (inPlace && d.inPlace == InPlace::kNone) {
              row.inPlaceRan = false;
              continue;
            }
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
            auto launch = [&] {
              if (o.agg > 1) chorusGroupStart();
              for (int a = 0; a < o.agg; ++a) check(d.run(sb, rb, per, t.type, op.op, root, comm, stream), d.name);
              if (o.agg > 1) check(chorusGroupEnd(), "chorusGroupEnd");
            };
            for (int w = 0; w < o.warmup; ++w) launch();
            check(chorusStreamSynchronize(stream), "chorusStreamSynchronize");
            double best = 0;
            for (int cyc = 0; cyc < o.cycles; ++cyc) {
              barrier(comm);
              const double t0 = o.cpuTime ? cpuNow() : wallNow();
              for (int i = 0; i < o.iters; ++i) {
                launch();
                if (o.blocking) check(chorusStreamSynchronize(stream), "chorusStreamSynchronize");
              }
              check(chorusStreamSynchronize(stream), "chorusStreamSynchronize");
              const double dt = ((o.cpuTime ? cpuNow() : wallNow()) - t0) / (o.iters * o.agg);
              best = cyc == 0 ? dt : std::min(best, dt);
            }
            // Across ranks: rank 0's (-a 0), the average (1), the min (2) or the max (3).
            double agg = o.average == 0 ? (rank == 0 ? best : 0.0) : best;
            const chorusRedOp_t red = o.average == 2 ? chorusMin : (o.average == 3 ? chorusMax : chorusSum);
            check(chorusAllReduce(&agg, &agg, 1, chorusFloat64, red, comm, nullptr), "time all-reduce");
            if (o.average == 1) agg /= n;
            row.time[inPlace] = agg;
            row.algbw[inPlace] = agg > 0 ? row.bytes / agg / 1e9 : 0;
            row.busbw[inPlace] = row.algbw[inPlace] * d.busFactor(n);
            if (!o.check) continue;
            fill();
            check(d.run(sb, rb, per, t.type, op.op, root, comm, stream), d.name);
            check(chorusStreamSynchronize(stream), "chorusStreamSynchronize");
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
            row.wrong[inPlace] = bad;
          }
          {
            std::lock_guard<std::mutex> g(sh.mu);
            sh.wrongTotal += row.wrong[0] + row.wrong[1];  // all-reduced: every rank has the totals
          }
          if (!print) continue;
          auto wrongStr = [&](int64_t w) { return o.check ? std::to_string(w) : std::string("N/A"); };
          std::printf("%12zu  %12zu  %8s  %6s  %6d  %7.2f  %6.2f  %6.2f  %6s", row.bytes, row.count, t.name,
                      row.op.c_str(), row.root, row.time[0] * 1e6, row.algbw[0], row.busbw[0],
                      wrongStr(row.wrong[0]).c_str());
          if (row.inPlaceRan) {
            std::printf("  %7.2f  %6.2f  %6.2f  %6s\n", row.time[1] * 1e6, row.algbw[1], row.busbw[1],
                        wrongStr(row.wrong[1]).c_str());
          } else {
            std::printf("  %7s  %6s  %6s  %6s\n", "N/A", "N/A", "N/A", "N/A");
          }
          std::fflush(stdout);
          std::lock_guard<std::mutex> g(sh.mu);
          sh.rows.push_back(row);
        }
      }
    }
  }
  if (stream) chorusStreamDestroy(stream);
}

bool launcherEnv() {
  for (const char* v : {"CHORUS_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "RANK"}) {
    if (std::getenv(v)) return true;
  }
  return false;
}

void writeJson(const Shared& sh, int n, const std::string& path) {
  nlohmann::json j;
  j["collective"] = sh.desc->name;
  j["nranks"] = n;
  j["rows"] = nlohmann::json::array();
  for (const Row& r : sh.rows) {
    nlohmann::json row = {{"size", r.bytes}, {"count", r.count}, {"type", r.type}, {"redop", r.op}, {"root", r.root}};
    const char* names[2] = {"out_of_place", "in_place"};
    for (int i = 0; i < 2; ++i) {
      if (i == 1 && !r.inPlaceRan) continue;
      row[names[i]] = {
          {"time_us", r.time[i] * 1e6}, {"algbw_GBps", r.algbw[i]}, {"busbw_GBps", r.busbw[i]}, {"wrong", r.wrong[i]}};
    }
    j["rows"].push_back(row);
  }
  std::ofstream f(path);
  f << j.dump(2) << "\n";
}

}  // namespace

int runPerf(const CollDesc& desc, int argc, char** argv) {
  Shared sh;
  sh.desc = &desc;
  Options& o = sh.o;
  std::string minB = "32M";
  std::string maxB = "32M";
  std::string stepB = "1M";
  CLI::App app{std::string(desc.name) + " performance test (nccl-tests flags)"};
  app.add_option("-b,--minbytes", minB, "minimum size to start with");
  app.add_option("-e,--maxbytes", maxB, "maximum size to end at");
  app.add_option("-i,--stepbytes", stepB, "fixed increment between sizes");
  app.add_option("-f,--stepfactor", o.stepFactor, "multiplication factor between sizes");
  app.add_option("-n,--iters", o.iters, "number of iterations");
  app.add_option("-w,--warmup_iters", o.warmup, "number of warmup iterations");
  app.add_option("-m,--agg_iters", o.agg, "number of operations to aggregate in one group");
  app.add_option("-N,--run_cycles", o.cycles, "run each size this many times and keep the best");
  app.add_option("-c,--check", o.check, "check correctness (0/1)");
  app.add_option("-o,--op", o.op, "reduction op: sum, prod, max, min, avg or all");
  app.add_option("-d,--datatype", o.type, "data type, or all");
  app.add_option("-r,--root", o.root, "root rank, or -1 for every root");
  app.add_option("-a,--average", o.average, "time across ranks: 0 rank 0, 1 average, 2 min, 3 max");
  app.add_option("-t,--nthreads", o.threads, "ranks as threads of this process (when not under a launcher)");
  app.add_option("-g,--ngpus", o.gpus, "ranks per thread (host memory: 1)");
  app.add_option("-z,--blocking", o.blocking, "synchronize after every operation (1) or only after the loop (0)");
  app.add_option("-y,--null_stream", o.nullStream, "use the NULL stream (synchronous) instead of a host stream");
  app.add_option("-C,--report_cputime", o.cpuTime, "report the thread's CPU time instead of wall time");
  app.add_option("-u,--unaligned", o.unaligned, "misalign every buffer by one byte");
  app.add_option("-R,--registered", o.registered, "buffers from chorusMemAlloc, registered with chorusCommRegister");
  app.add_option("-T,--timeout", o.timeoutSec, "seconds before a stuck operation fails (sets CHORUS_TIMEOUT)");
  app.add_option("-J,--json", o.json, "also write every row to this JSON file");
  CLI11_PARSE(app, argc, argv);
  o.minBytes = parseSize(minB);
  o.maxBytes = parseSize(maxB);
  o.stepBytes = parseSize(stepB);
  if (o.maxBytes < o.minBytes) o.maxBytes = o.minBytes;
  if (o.gpus != 1) {
    std::fprintf(stderr, "-g %d: host-memory ranks are one per thread; use -t for more ranks\n", o.gpus);
    return 2;
  }
  if (o.timeoutSec > 0) setenv("CHORUS_TIMEOUT", std::to_string(o.timeoutSec).c_str(), 1);
  for (const auto& t : kTypes) {
    if (o.type == "all" || o.type == t.name) sh.types.push_back(t);
  }
  for (const auto& op : kOps) {
    if (!desc.reduces || o.op == "all" || o.op == op.name) sh.ops.push_back(op);
    if (!desc.reduces) break;
  }
  if (sh.types.empty() || sh.ops.empty()) {
    std::fprintf(stderr, "unknown -d %s or -o %s\n", o.type.c_str(), o.op.c_str());
    return 2;
  }
  std::vector<chorusComm_t> comms;
  bool printer = true;
  bool usedMpi = false;
  if (launcherEnv()) {
    if (o.threads != 1) {
      std::fprintf(stderr, "-t above 1 is for runs without a launcher; under a launcher each process is one rank\n");
      return 2;
    }
    comms.resize(1);
#ifdef CHORUS_PERF_MPI
    if (std::getenv("OMPI_COMM_WORLD_SIZE") && !std::getenv("CHORUS_COMM_ID")) {
      // As nccl-tests: rank 0 makes the id, MPI carries it to the others.
      MPI_Init(&argc, &argv);
      usedMpi = true;
      int mpiRank = 0;
      int mpiSize = 1;
      MPI_Comm_rank(MPI_COMM_WORLD, &mpiRank);
      MPI_Comm_size(MPI_COMM_WORLD, &mpiSize);
      chorusUniqueId id;
      if (mpiRank == 0) check(chorusGetUniqueId(&id), "chorusGetUniqueId");
      MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
      check(chorusCommInitRank(&comms[0], mpiSize, id, mpiRank), "chorusCommInitRank");
    }
#endif
    if (!usedMpi) check(chorusCommInitFromEnv(&comms[0], nullptr), "chorusCommInitFromEnv");
    int r = 0;
    chorusCommUserRank(comms[0], &r);
    printer = r == 0;
  } else {
    comms.resize(o.threads);
    check(chorusCommInitAll(comms.data(), o.threads, nullptr), "chorusCommInitAll");
  }
  int n = 0;
  chorusCommCount(comms[0], &n);
  int version = 0;
  chorusGetVersion(&version);
  if (printer) {
    std::printf(
        "# nThread %d nGpus 1 minBytes %zu maxBytes %zu step: %g(%s) warmup iters: %d iters: %d agg iters: %d "
        "validation: %d graph: 0\n#\n# Using devices\n",
        o.threads, o.minBytes, o.maxBytes, o.stepFactor > 1 ? o.stepFactor : double(o.stepBytes),
        o.stepFactor > 1 ? "factor" : "bytes", o.warmup, o.iters, o.agg, o.check);
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    std::printf("#  %d ranks on host memory (Chorus %d), rank 0 pid %d on %s\n#\n", n, version, getpid(), host);
    std::printf(
        "#                                                              out-of-place                       "
        "in-place          \n");
    std::printf(
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
        "busbw #wrong\n");
    std::printf(
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  "
        "(GB/s)       \n");
  }
  std::vector<std::thread> threads;
  for (size_t i = 0; i < comms.size(); ++i) {
    threads.emplace_back([&, i] { rankMain(sh, comms[i], printer && i == 0); });
  }
  for (auto& t : threads) t.join();
  for (auto c : comms) chorusCommDestroy(c);
  if (printer) {
    double bw = 0;
    int cols = 0;
    for (const Row& r : sh.rows) {
      bw += r.busbw[0];
      ++cols;
      if (r.inPlaceRan) {
        bw += r.busbw[1];
        ++cols;
      }
    }
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(sh.wrongTotal),
                sh.wrongTotal == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %g \n#\n", cols ? bw / cols : 0.0);
    if (!o.json.empty()) writeJson(sh, n, o.json);
  }
#ifdef CHORUS_PERF_MPI
  if (usedMpi) MPI_Finalize();
#endif
  // Every rank knows the total: it was all-reduced with each row.
  return sh.wrongTotal == 0 ? 0 : 1;
}

}  // namespace chorus::perf
