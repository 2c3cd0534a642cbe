// The perf harness: nccl-tests' flags and table for Chorus.
//
// Launch modes: under chorusrun, torchrun or Slurm each process is a rank (chorusCommInitFromEnv);
// under mpirun too, bootstrapped through MPI_Bcast of the unique id when built with MPI (or through
// CHORUS_COMM_ID when set); otherwise `-t N` runs N ranks as threads of this process.
#include "perf/harness.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
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

const TypeInfo kTypes[] = {
    {"int8", chorusInt8, 1},         {"uint8", chorusUint8, 1},       {"int32", chorusInt32, 4},
    {"uint32", chorusUint32, 4},     {"int64", chorusInt64, 8},       {"uint64", chorusUint64, 8},
    {"half", chorusFloat16, 2},      {"float", chorusFloat32, 4},     {"double", chorusFloat64, 8},
    {"bfloat16", chorusBfloat16, 2}, {"f8e4m3", chorusFloat8e4m3, 1}, {"f8e5m2", chorusFloat8e5m2, 1}};

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
    sh.userBytes = static_cast<int64_t>(sendBytes + recvBytes) * o.threads;
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
  std::vector<double> stamps(static_cast<size_t>(o.iters) * 2);
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
                for (int a = 0; a < o.agg; ++a) check(d.run(sb, rb, per, t.type, op.op, root, comm, stream), d.name);
                if (o.agg > 1) check(chorusGroupEnd(), "chorusGroupEnd");
                if (o.blocking == 1 || o.blocking == 2) {
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
  const struct {
    const char* flag;
    const std::string& text;
    size_t* bytes;
  } sizes[] = {{"-b (minbytes)", minB, &o.minBytes},
               {"-e (maxbytes)", maxB, &o.maxBytes},
               {"-i (stepbytes)", stepB, &o.stepBytes}};
  for (const auto& s : sizes) {
    if (!parseSize(s.text, s.bytes)) {
      return usage("invalid size '" + s.text + "' for " + s.flag +
                   ": give bytes, optionally with K, M or G, e.g. 8, 64K, 1M");
    }
  }
  if (o.minBytes > o.maxBytes) {
    return usage("invalid sizes: -b " + std::to_string(o.minBytes) + " is more than -e " + std::to_string(o.maxBytes));
  }
  if (!std::isfinite(o.stepFactor) || o.stepFactor < 0) {
    return usage("-f (stepfactor) must not be negative (1 or less: steps of -i bytes)");
  }
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

  int64_t rssStart = residentBytes();
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
    // asks for that many ranks as threads instead: the library alone knows launchers, so this
    // one-rank communicator is how the tool asks (a few milliseconds, left out of -M's figures).
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
      rssStart = residentBytes();
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
    std::printf("# Collective test concluded: %s\n#\n", programName(argv[0]));
    std::fflush(stdout);
    jsonReport().finish(sh.wrongTotal, avgBw, minBw >= 0, !bwLow, {});
  }
#ifdef CHORUS_PERF_MPI
  if (usedMpi) MPI_Finalize();
#endif
  // Every rank knows both results: the counts and times were all-reduced with each row.
  if (sh.wrongTotal != 0) return 1;
  return bwLow ? 3 : 0;
}

}  // namespace chorus::perf
