// The perf harness: nccl-tests' flags and table for Chorus.
//
// Launch modes: under chorusrun, mpirun (with CHORUS_COMM_ID), torchrun or Slurm each process is a
// rank (chorusCommInitFromEnv); otherwise `-t N` runs N ranks as threads of this process.
#include "perf/common.h"

#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kernels/numeric.h"

namespace chorus::perf {
namespace {

size_t same(size_t c, int) { return c; }
double allReduceFactor(int n) { return n > 1 ? 2.0 * (n - 1) / n : 0.0; }

chorusResult_t runAllReduce(const void* s, void* r, size_t count, chorusDataType_t t, chorusRedOp_t op, int,
                            chorusComm_t comm, chorusStream_t stream) {
  return chorusAllReduce(s, r, count, t, op, comm, stream);
}

// Inputs are small integers, so every op's result is exact in every type at the ranks we run.
double fillValue(int r, size_t j) { return static_cast<double>(static_cast<int>((r * 31 + j * 7) % 5) - 2); }

chorusRedOp_t gOpForExpect = chorusSum;  // set before checking; read by expectReduce

bool expectReduce(int, int n, int, size_t, size_t i, double (*fill)(int, size_t), double* out) {
  double acc = fill(0, i);
  for (int r = 1; r < n; ++r) {
    const double x = fill(r, i);
    switch (gOpForExpect) {
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
  if (gOpForExpect == chorusAvg) acc /= n;
  *out = acc;
  return true;
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

void store(chorusDataType_t t, void* p, double v) {
  switch (t) {
    case chorusInt8:
    case chorusUint8: {
      auto x = static_cast<int8_t>(v);
      std::memcpy(p, &x, 1);
      break;
    }
    case chorusInt32:
    case chorusUint32: {
      auto x = static_cast<int32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case chorusInt64:
    case chorusUint64: {
      auto x = static_cast<int64_t>(v);
      std::memcpy(p, &x, 8);
      break;
    }
    case chorusFloat16: {
      auto x = fromFloat<Half>(static_cast<float>(v));
      std::memcpy(p, &x, 2);
      break;
    }
    case chorusBfloat16: {
      auto x = fromFloat<BFloat16>(static_cast<float>(v));
      std::memcpy(p, &x, 2);
      break;
    }
    case chorusFloat8e4m3: {
      auto x = fromFloat<Fp8E4M3>(static_cast<float>(v));
      std::memcpy(p, &x, 1);
      break;
    }
    case chorusFloat8e5m2: {
      auto x = fromFloat<Fp8E5M2>(static_cast<float>(v));
      std::memcpy(p, &x, 1);
      break;
    }
    case chorusFloat32: {
      auto x = static_cast<float>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    default:
      std::memcpy(p, &v, 8);
      break;
  }
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
  int agg = 1;
  int blocking = 1;
  int nullStream = 0;
  int cycles = 1;
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

// A barrier over the communicator: an all-reduce of one int.
void barrier(chorusComm_t comm) {
  int x = 0;
  chorusAllReduce(&x, &x, 1, chorusInt32, chorusSum, comm, nullptr);
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Shared {
  const CollDesc* desc;
  Options o;
  std::vector<TypeInfo> types;
  std::vector<OpInfo> ops;
  std::atomic<int64_t> wrongTotal{0};
  double bwSum = 0;
  int bwCount = 0;
};

void check(chorusResult_t r, const char* what) {
  if (r != chorusSuccess) {
    std::fprintf(stderr, "%s failed: %s: %s\n", what, chorusGetErrorString(r), chorusGetLastError(nullptr));
    std::exit(1);
  }
}

// Runs the whole sweep as one rank; `print` on exactly one rank.
void rankMain(Shared& sh, chorusComm_t comm, bool print) {
  int rank = 0;
  int n = 1;
  chorusCommUserRank(comm, &rank);
  chorusCommCount(comm, &n);
  const Options& o = sh.o;
  chorusStream_t stream = nullptr;
  if (!o.nullStream) check(chorusStreamCreate(&stream), "chorusStreamCreate");
  const size_t maxElems = o.maxBytes;  // bytes are an upper bound on elements of any type
  std::vector<char> sendBuf(sh.desc->sendElems(maxElems, n) + 64);
  std::vector<char> recvBuf(sh.desc->recvElems(maxElems, n) + 64);
  std::vector<char> expectBuf(64);
  for (const TypeInfo& t : sh.types) {
    for (const OpInfo& op : sh.ops) {
      for (size_t bytes = o.minBytes; bytes <= o.maxBytes;
           bytes = o.stepFactor > 1 ? static_cast<size_t>(bytes * o.stepFactor) : bytes + o.stepBytes) {
        const size_t count = bytes / t.size;
        if (count == 0 && bytes != 0) {
          if (bytes == 0) break;
          continue;
        }
        double times[2] = {0, 0};
        int64_t wrong[2] = {0, 0};
        for (int inPlace = 0; inPlace < 2; ++inPlace) {
          void* sb = sendBuf.data();
          void* rb = inPlace ? sendBuf.data() : recvBuf.data();
          const size_t se = sh.desc->sendElems(count, n);
          for (size_t j = 0; j < se; ++j) store(t.type, static_cast<char*>(sb) + j * t.size, fillValue(rank, j));
          auto launch = [&] {
            if (o.agg > 1) chorusGroupStart();
            for (int a = 0; a < o.agg; ++a) {
              check(sh.desc->run(sb, rb, count, t.type, op.op, o.root, comm, stream), sh.desc->name);
            }
            if (o.agg > 1) check(chorusGroupEnd(), "chorusGroupEnd");
          };
          for (int w = 0; w < o.warmup; ++w) launch();
          check(chorusStreamSynchronize(stream), "chorusStreamSynchronize");
          double best = 0;
          for (int cyc = 0; cyc < o.cycles; ++cyc) {
            barrier(comm);
            const double t0 = now();
            for (int i = 0; i < o.iters; ++i) {
              launch();
              if (!o.blocking) check(chorusStreamSynchronize(stream), "chorusStreamSynchronize");
            }
            check(chorusStreamSynchronize(stream), "chorusStreamSynchronize");
            const double dt = (now() - t0) / (o.iters * o.agg);
            best = cyc == 0 ? dt : std::min(best, dt);
          }
          // Across ranks: rank 0's, the average, the min or the max (-a 0/1/2/3).
          double agg = best;
          chorusRedOp_t red = o.average == 2 ? chorusMin : (o.average == 3 ? chorusMax : chorusSum);
          check(chorusAllReduce(&agg, &agg, 1, chorusFloat64, red, comm, nullptr), "time all-reduce");
          if (o.average == 1) agg /= n;
          if (o.average == 0) {
            double mine = rank == 0 ? best : 0;
            check(chorusAllReduce(&mine, &mine, 1, chorusFloat64, chorusSum, comm, nullptr), "time all-reduce");
            agg = mine;
          }
          times[inPlace] = agg;
          if (o.check) {
            for (size_t j = 0; j < se; ++j) store(t.type, static_cast<char*>(sb) + j * t.size, fillValue(rank, j));
            check(sh.desc->run(sb, rb, count, t.type, op.op, o.root, comm, stream), sh.desc->name);
            check(chorusStreamSynchronize(stream), "chorusStreamSynchronize");
            gOpForExpect = op.op;
            int64_t bad = 0;
            const size_t re = sh.desc->recvElems(count, n);
            for (size_t i = 0; i < re; ++i) {
              double e;
              if (!sh.desc->expect(rank, n, o.root, count, i, fillValue, &e)) break;
              store(t.type, expectBuf.data(), e);
              if (std::memcmp(expectBuf.data(), static_cast<char*>(rb) + i * t.size, t.size) != 0) ++bad;
            }
            check(chorusAllReduce(&bad, &bad, 1, chorusInt64, chorusSum, comm, nullptr), "check all-reduce");
            wrong[inPlace] = bad;
          }
        }
        if (print) {
          const double algbw0 = times[0] > 0 ? bytes / times[0] / 1e9 : 0;
          const double algbw1 = times[1] > 0 ? bytes / times[1] / 1e9 : 0;
          const double f = sh.desc->busFactor(n);
          char root[16];
          std::snprintf(root, sizeof(root), "%d", sh.desc->rooted ? o.root : -1);
          auto wrongStr = [&](int64_t w) { return o.check ? std::to_string(w) : std::string("N/A"); };
          std::printf("%12zu  %12zu  %8s  %6s  %6s  %7.2f  %6.2f  %6.2f  %6s  %7.2f  %6.2f  %6.2f  %6s\n", bytes, count,
                      t.name, sh.desc->reduces ? op.name : "none", root, times[0] * 1e6, algbw0, algbw0 * f,
                      wrongStr(wrong[0]).c_str(), times[1] * 1e6, algbw1, algbw1 * f, wrongStr(wrong[1]).c_str());
          std::fflush(stdout);
          sh.bwSum += algbw0 * f + algbw1 * f;
          sh.bwCount += 2;
          sh.wrongTotal += wrong[0] + wrong[1];
        }
        if (bytes == 0 || bytes == o.maxBytes) break;
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

}  // namespace

const CollDesc& allReduceDesc() {
  static const CollDesc d{"AllReduce", true, false, same, same, allReduceFactor, runAllReduce, expectReduce};
  return d;
}

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
  app.add_option("-N,--run_cycles", o.cycles, "run and print each size this many times (best kept)");
  app.add_option("-c,--check", o.check, "check correctness (0/1)");
  app.add_option("-o,--op", o.op, "reduction op: sum, prod, max, min, avg or all");
  app.add_option("-d,--datatype", o.type, "data type, or all");
  app.add_option("-r,--root", o.root, "root rank");
  app.add_option("-a,--average", o.average, "time across ranks: 0 rank 0, 1 average, 2 min, 3 max");
  app.add_option("-t,--nthreads", o.threads, "ranks as threads of this process (when not under a launcher)");
  app.add_option("-z,--blocking", o.blocking, "synchronize after every operation (1) or only after the loop (0)");
  app.add_option("-y,--null_stream", o.nullStream, "use the NULL stream (synchronous) instead of a host stream");
  CLI11_PARSE(app, argc, argv);
  o.minBytes = parseSize(minB);
  o.maxBytes = parseSize(maxB);
  o.stepBytes = parseSize(stepB);
  if (o.maxBytes < o.minBytes) o.maxBytes = o.minBytes;
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
  if (launcherEnv()) {
    if (o.threads != 1) {
      std::fprintf(stderr, "-t above 1 is for runs without a launcher; under a launcher each process is one rank\n");
      return 2;
    }
    comms.resize(1);
    check(chorusCommInitFromEnv(&comms[0], nullptr), "chorusCommInitFromEnv");
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
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(sh.wrongTotal.load()),
                sh.wrongTotal.load() == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %g \n#\n", sh.bwCount ? sh.bwSum / sh.bwCount : 0.0);
  }
  return sh.wrongTotal.load() == 0 ? 0 : 1;
}

}  // namespace chorus::perf
