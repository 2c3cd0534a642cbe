// Collectives on device memory with ranks as processes, as jobs run them (one process per GPU;
// here several processes share the one GPU), each result checked byte for byte against an exact
// reference (tests/grid/device_values.h):
//
//   cuda_proc_test grid NRANKS [--hosts H] [--staged] [--quick]
//       every collective and send/recv x every type x sum, prod, max, min x sizes from 0 up x in
//       place and not, Simple then LL (where the tuner allows it), between processes of one host
//       over cuda_ipc; --staged sets CHORUS_P2P_DISABLE (the host-staged shm FIFOs); --hosts H
//       spreads the ranks over H pretend hosts (CHORUS_HOSTID), which reach each other over
//       sockets (host-staged FIFOs the proxies poll);
//   cuda_proc_test onecopy NRANKS
//       the one-copy collectives (CHORUS_ONECOPY=1) between processes of one host on buffers of
//       chorusCudaMemAlloc registered on every rank: all-reduce, broadcast, reduce, all-gather and
//       reduce-scatter, every type and op, sizes and in place checked, its log line seen; then
//       the median time per all-reduce from 64 KiB to 64 MiB, one-copy against the FIFO ring on
//       the same buffers (a second communicator without it);
//   cuda_proc_test kill NRANKS [--hosts H]
//       the last rank kills itself (SIGKILL) while every rank's kernel is in a device all-reduce;
//       each survivor's communicator must report the dead rank within 5 s, its kernel ended.
//
// This program forks the ranks and is none of them: it never touches CUDA (a child of a process
// that did could not use it). A rank that finds no GPU exits 77, and so does this program (ctest:
// skipped). Ranks report on a pipe; this program prints what they said and a verdict.
#include <cuda_runtime.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "include/chorus/chorus.h"
#include "include/chorus/chorus_cuda.h"
#include "tests/grid/device_values.h"

using namespace chorus::test;

namespace {

constexpr double kPromptS = 5;  // a death reported within this

double monoNow() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // one clock for every process of the machine
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Options {
  int n = 2;
  int hosts = 1;
  bool staged = false;
  bool quick = false;
};

// A rank's report line, whole (lines of several ranks must not mix).
void say(int fd, const std::string& line) {
  const std::string l = line + "\n";
  (void)!write(fd, l.data(), l.size());
}

#define RANK_CUDA(x)                                                                                                  \
  do {                                                                                                                \
    cudaError_t e_ = (x);                                                                                             \
    if (e_ != cudaSuccess) {                                                                                          \
      say(out,                                                                                                        \
          "rank " + std::to_string(r) + " CUDA error " + cudaGetErrorString(e_) + " at " + std::to_string(__LINE__)); \
      _exit(1);                                                                                                       \
    }                                                                                                                 \
  } while (0)

// The rank's environment and GPU, before anything of CUDA or Chorus runs in it.
void enterRank(int r, const Options& o, int out) {
  if (o.hosts > 1) setenv("CHORUS_HOSTID", ("pretend-host-" + std::to_string(r * o.hosts / o.n)).c_str(), 1);
  if (o.staged) setenv("CHORUS_P2P_DISABLE", "1", 1);
  int devices = 0;
  const cudaError_t counted = cudaGetDeviceCount(&devices);
  if (counted == cudaErrorNoDevice || counted == cudaErrorInsufficientDriver ||
      (counted == cudaSuccess && devices == 0)) {
    say(out, "rank " + std::to_string(r) + " skipped: no CUDA device");
    _exit(77);
  }
  RANK_CUDA(counted);           // any other error is a broken machine, not a missing GPU
  RANK_CUDA(cudaSetDevice(0));  // the communicator binds the device current at init
}

chorusComm_t join(int r, int n, const chorusUniqueId& id, int out) {
  chorusComm_t comm = nullptr;
  if (chorusCommInitRank(&comm, n, id, r) != chorusSuccess) {
    say(out, "rank " + std::to_string(r) + " init failed: " + chorusGetLastError(nullptr));
    _exit(1);
  }
  return comm;
}

// Rank r's part of the grid: one communicator per protocol.
[[noreturn]] void gridRank(int r, const Options& o, const std::vector<chorusUniqueId>& ids, int out) {
  enterRank(r, o, out);
  const int n = o.n;
  const Coll colls[] = {Coll::kAllReduce, Coll::kBroadcast, Coll::kReduce,  Coll::kAllGather, Coll::kReduceScatter,
                        Coll::kAlltoAll,  Coll::kGather,    Coll::kScatter, Coll::kSendRecv};
  const std::vector<size_t> counts =
      o.quick ? std::vector<size_t>{0, 7, 65539} : std::vector<size_t>{0, 1, 7, 1000, 65539, size_t(1) << 20};
  int failures = 0;
  int cases = 0;
  cudaStream_t cs;
  RANK_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
  chorusStream_t stream = nullptr;
  if (chorusStreamFromCuda(cs, &stream) != chorusSuccess) _exit(1);
  // LL128 runs where every rank is on one GPU over CUDA IPC; across --hosts (host-staged FIFOs)
  // the tuner runs LL in its place.
  const char* protos[] = {"simple", "ll", "ll128"};
  for (int pi = 0; pi < 3; ++pi) {
    setenv("CHORUS_PROTO", protos[pi], 1);
    chorusComm_t comm = join(r, n, ids[pi], out);
    for (Coll c : colls) {
      for (int t = 0; t < chorusNumTypes; ++t) {
        for (int op = 0; op < (reduces(c) ? 4 : 1); ++op) {  // avg has no exact reference
          for (size_t count : counts) {
            if (count > 65539 && (t != chorusFloat32 || op != 0)) continue;  // large: float sums
            for (bool inPlace : {false, true}) {
              const int root = static_cast<int>(count % n);
              const std::string label = std::string(kCollName[static_cast<int>(c)]) + " " + kTypeName[t] + " " +
                                        kOpName[op] + " count " + std::to_string(count) + (inPlace ? " in place" : "") +
                                        " proto " + protos[pi];
              const size_t es = kTypeSize[t];
              const size_t ic = inCount(c, count, n, r);
              const size_t oc = outCount(c, count, n, r);
              const bool ip =
                  inPlace && c != Coll::kAlltoAll && c != Coll::kSendRecv && c != Coll::kGather && c != Coll::kScatter;
              const size_t bufCount = std::max(ic, oc);
              const Bytes in = values(t, r, ic);
              Bytes fill(bufCount * es, 0xA5);
              void* buf = nullptr;
              void* inDev = nullptr;
              RANK_CUDA(cudaMalloc(&buf, std::max<size_t>(1, fill.size())));
              RANK_CUDA(cudaMemcpy(buf, fill.data(), fill.size(), cudaMemcpyHostToDevice));
              const void* src = nullptr;
              void* dst = buf;
              Bytes before = fill;
              if (ip) {
                const size_t at = c == Coll::kAllGather ? r * count : 0;
                RANK_CUDA(cudaMemcpy(static_cast<char*>(buf) + at * es, in.data(), in.size(), cudaMemcpyHostToDevice));
                std::memcpy(before.data() + at * es, in.data(), in.size());
                src = static_cast<char*>(buf) + at * es;
                if (c == Coll::kReduceScatter) {
                  dst = static_cast<char*>(buf) + r * count * es;
                  before = Bytes(before.begin() + r * count * es, before.begin() + (r + 1) * count * es);
                }
              } else {
                RANK_CUDA(cudaMalloc(&inDev, std::max<size_t>(1, in.size())));
                RANK_CUDA(cudaMemcpy(inDev, in.data(), in.size(), cudaMemcpyHostToDevice));
                src = inDev;
              }
              before.resize(oc * es);
              // A cudaMemcpy from pageable memory returns once the bytes are staged, maybe before
              // they reach the device, and `cs` (non-blocking) does not wait for the legacy stream's
              // copy: without this the collective could read (and send) inputs not yet written.
              RANK_CUDA(cudaDeviceSynchronize());
              const chorusResult_t rc = issueOne(c, comm, r, n, src, dst, count, t, op, root, stream);
              RANK_CUDA(cudaStreamSynchronize(cs));
              chorusResult_t async = chorusSuccess;
              chorusCommGetAsyncError(comm, &async);
              Bytes got(oc * es);
              if (!got.empty()) RANK_CUDA(cudaMemcpy(got.data(), dst, got.size(), cudaMemcpyDeviceToHost));
              Bytes want;
              std::string why;
              if (rc != chorusSuccess || async != chorusSuccess) {
                why = std::string("the call failed: ") + chorusGetLastError(comm);
              } else if (expected(c, t, op, n, r, root, count, &want, before) && got != want) {
                size_t i = 0;
                while (i < got.size() && got[i] == want[i]) ++i;
                why = "differs from the reference at byte " + std::to_string(i) + " of " + std::to_string(got.size());
              }
              if (!why.empty() && ++failures <= 20)
                say(out, "rank " + std::to_string(r) + " FAIL " + label + ": " + why);
              ++cases;
              RANK_CUDA(cudaFree(buf));
              if (inDev) RANK_CUDA(cudaFree(inDev));
              if (rc != chorusSuccess || async != chorusSuccess) {
                say(out, "rank " + std::to_string(r) + " stops: its communicator failed");
                _exit(1);
              }
            }
          }
        }
      }
    }
    chorusCommDestroy(comm);
  }
  chorusStreamDestroy(stream);
  say(out, "rank " + std::to_string(r) + " done: " + std::to_string(cases) + " cases, " + std::to_string(failures) +
               " failures");
  _exit(failures ? 1 : 0);
}

// Rank r of the kill check: all-reduces on its stream until it fails (the victim: until it dies).
[[noreturn]] void killRank(int r, const Options& o, const chorusUniqueId& id, int out) {
  enterRank(r, o, out);
  setenv("CHORUS_TIMEOUT", "120", 1);  // the kernel's own deadline must not be what ends it
  const int n = o.n;
  const int victim = n - 1;
  chorusComm_t comm = join(r, n, id, out);
  cudaStream_t cs;
  RANK_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
  chorusStream_t stream = nullptr;
  if (chorusStreamFromCuda(cs, &stream) != chorusSuccess) _exit(1);
  const size_t count = size_t(4) << 20;  // 16 MiB of floats
  float* buf = nullptr;
  RANK_CUDA(cudaMalloc(&buf, count * sizeof(float)));
  RANK_CUDA(cudaMemset(buf, 0, count * sizeof(float)));
  for (int round = 0;; ++round) {
    if (chorusAllReduce(buf, buf, count, chorusFloat32, chorusSum, comm, stream) != chorusSuccess) break;
    if (r == victim && round == 5) {
      // Die with the kernel in flight, its peers' kernels waiting on it.
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      char line[96];
      std::snprintf(line, sizeof(line), "rank %d dies at %.6f", r, monoNow());
      say(out, line);
      raise(SIGKILL);
    }
    // Until the kernel ends or the communicator fails (the watchdog's verdict comes while the
    // kernel still waits; the abort word then ends it).
    chorusResult_t async = chorusSuccess;
    while (cudaStreamQuery(cs) == cudaErrorNotReady) {
      chorusCommGetAsyncError(comm, &async);
      if (async != chorusSuccess) break;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (async == chorusSuccess) chorusCommGetAsyncError(comm, &async);
    if (async != chorusSuccess) {
      const double noticed = monoNow();
      const std::string msg = chorusGetLastError(comm);
      const cudaError_t synced = cudaStreamSynchronize(cs);  // the kernel must end
      char line[128];
      std::snprintf(line, sizeof(line), "rank %d failed at %.6f, kernel ended after %.3f s (%s): ", r, noticed,
                    monoNow() - noticed, cudaGetErrorName(synced));
      say(out, line + msg);
      break;
    }
  }
  chorusCommAbort(comm);
  _exit(0);
}

// Rank r of the one-copy check and comparison.
[[noreturn]] void oneCopyRank(int r, const Options& o, const std::vector<chorusUniqueId>& ids, int out) {
  enterRank(r, o, out);
  const int n = o.n;
  const std::string logFile = "/tmp/chorus_onecopy." + std::to_string(getppid()) + "." + std::to_string(r) + ".log";
  setenv("CHORUS_DEBUG", "INFO", 1);
  setenv("CHORUS_DEBUG_SUBSYS", "COLL", 1);
  setenv("CHORUS_DEBUG_FILE", logFile.c_str(), 1);
  setenv("CHORUS_ONECOPY", "1", 1);
  chorusComm_t fast = join(r, n, ids[0], out);
  setenv("CHORUS_ONECOPY", "0", 1);
  unsetenv("CHORUS_DEBUG");
  chorusComm_t ring = join(r, n, ids[1], out);
  cudaStream_t cs;
  RANK_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
  chorusStream_t stream = nullptr;
  if (chorusStreamFromCuda(cs, &stream) != chorusSuccess) _exit(1);
  const size_t maxBytes = size_t(64) << 20;
  void* sendMem = nullptr;
  void* recvMem = nullptr;
  void* handles[2] = {};
  if (chorusCudaMemAlloc(&sendMem, maxBytes) != chorusSuccess ||
      chorusCudaMemAlloc(&recvMem, maxBytes) != chorusSuccess ||
      chorusCommRegister(fast, sendMem, maxBytes, &handles[0]) != chorusSuccess ||
      chorusCommRegister(fast, recvMem, maxBytes, &handles[1]) != chorusSuccess) {
    say(out, "rank " + std::to_string(r) + " FAIL: allocating or registering: " + chorusGetLastError(fast));
    _exit(1);
  }
  int failures = 0;
  int cases = 0;
  for (Coll c : {Coll::kAllReduce, Coll::kBroadcast, Coll::kReduce, Coll::kAllGather, Coll::kReduceScatter}) {
    for (int t = 0; t < chorusNumTypes; ++t) {
      for (int op = 0; op < (reduces(c) ? 4 : 1); ++op) {
        for (size_t count : {size_t(1), size_t(7), size_t(1000), size_t(65539), size_t(1) << 20}) {
          if (count > 65539 && (t != chorusFloat32 || op != 0)) continue;
          for (bool inPlace : {false, true}) {
            const int root = static_cast<int>(count % n);
            const size_t es = kTypeSize[t];
            const size_t ic = inCount(c, count, n, r);
            const size_t oc = outCount(c, count, n, r);
            const Bytes in = values(t, r, ic);
            // Past the allocations' starts, by a few elements: parts of a registered range. In
            // place as NCCL has it: an all-gather's input is this rank's block of its output, a
            // reduce-scatter's output this rank's block of its input.
            char* base = static_cast<char*>(recvMem) + 3 * es;
            const Bytes fill(std::max(ic, oc) * es, 0xA5);
            RANK_CUDA(cudaMemcpy(base, fill.data(), fill.size(), cudaMemcpyHostToDevice));
            char* src = static_cast<char*>(sendMem) + 5 * es;
            char* dst = base;
            if (inPlace) {
              src = c == Coll::kAllGather ? base + r * count * es : base;
              if (c == Coll::kReduceScatter) dst = base + r * count * es;
            }
            RANK_CUDA(cudaMemcpy(src, in.data(), in.size(), cudaMemcpyHostToDevice));
            Bytes before(oc * es);
            RANK_CUDA(cudaMemcpy(before.data(), dst, before.size(), cudaMemcpyDeviceToHost));
            RANK_CUDA(cudaDeviceSynchronize());  // the copy may still be on its way (gridRank)
            const chorusResult_t rc = issueOne(c, fast, r, n, src, dst, count, t, op, root, stream);
            RANK_CUDA(cudaStreamSynchronize(cs));
            chorusResult_t async = chorusSuccess;
            chorusCommGetAsyncError(fast, &async);
            Bytes got(oc * es);
            RANK_CUDA(cudaMemcpy(got.data(), dst, got.size(), cudaMemcpyDeviceToHost));
            Bytes want;
            std::string why;
            if (rc != chorusSuccess || async != chorusSuccess) {
              why = std::string("the call failed: ") + chorusGetLastError(fast);
            } else if (expected(c, t, op, n, r, root, count, &want, before) && got != want) {
              size_t i = 0;
              while (i < got.size() && got[i] == want[i]) ++i;
              why = "differs from the reference at byte " + std::to_string(i) + " of " + std::to_string(got.size());
            }
            if (!why.empty() && ++failures <= 20) {
              say(out, "rank " + std::to_string(r) + " FAIL " + kCollName[static_cast<int>(c)] + " " + kTypeName[t] +
                           " " + kOpName[op] + " count " + std::to_string(count) + (inPlace ? " in place: " : ": ") +
                           why);
            }
            ++cases;
            if (rc != chorusSuccess || async != chorusSuccess) _exit(1);
          }
        }
      }
    }
  }
  // The log must say the one-copy path ran.
  chorusCommDestroy(fast);
  fast = nullptr;
  FILE* f = std::fopen(logFile.c_str(), "r");
  std::string log;
  if (f) {
    char buf[4096];
    for (size_t got; (got = std::fread(buf, 1, sizeof(buf), f)) > 0;) log.append(buf, got);
    std::fclose(f);
  }
  if (log.find("algo one-copy") == std::string::npos) {
    ++failures;
    say(out, "rank " + std::to_string(r) + " FAIL: no 'algo one-copy' line in " + logFile);
  }
  say(out, "rank " + std::to_string(r) + " done: " + std::to_string(cases) + " cases, " + std::to_string(failures) +
               " failures");
  // The comparison: the same registered buffers through a new one-copy communicator and the ring.
  setenv("CHORUS_ONECOPY", "1", 1);
  fast = join(r, n, ids[2], out);
  if (chorusCommRegister(fast, sendMem, maxBytes, &handles[0]) != chorusSuccess ||
      chorusCommRegister(fast, recvMem, maxBytes, &handles[1]) != chorusSuccess) {
    _exit(1);
  }
  cudaEvent_t t0;
  cudaEvent_t t1;
  RANK_CUDA(cudaEventCreate(&t0));
  RANK_CUDA(cudaEventCreate(&t1));
  if (r == 0) say(out, "bytes  one-copy_us  ring_us  ring/one-copy   (median of 20, float sum, out of place)");
  for (size_t bytes = size_t(64) << 10; bytes <= maxBytes; bytes *= 4) {
    double us[2] = {0, 0};
    chorusComm_t comms[2] = {fast, ring};
    for (int which = 0; which < 2; ++which) {
      std::vector<double> times;
      for (int it = 0; it < 25; ++it) {
        RANK_CUDA(cudaEventRecord(t0, cs));
        if (chorusAllReduce(sendMem, recvMem, bytes / 4, chorusFloat32, chorusSum, comms[which], stream) !=
            chorusSuccess) {
          _exit(1);
        }
        RANK_CUDA(cudaEventRecord(t1, cs));
        RANK_CUDA(cudaEventSynchronize(t1));
        float ms = 0;
        RANK_CUDA(cudaEventElapsedTime(&ms, t0, t1));
        if (it >= 5) times.push_back(ms * 1000.0);
      }
      std::sort(times.begin(), times.end());
      us[which] = times[times.size() / 2];
    }
    if (r == 0) {
      char line[160];
      std::snprintf(line, sizeof(line), "%10zu  %10.1f  %8.1f  %6.2f", bytes, us[0], us[1], us[1] / us[0]);
      say(out, line);
    }
  }
  chorusCommDestroy(fast);
  chorusCommDestroy(ring);
  _exit(failures ? 1 : 0);
}

// Forks the ranks (fn(r) each), gathers their report lines until every rank is done, prints them.
// Only `victim` (-1: none) may end by SIGKILL.
template <typename Fn>
int runRanks(int n, int victim, Fn fn, std::string* all) {
  int fds[2];
  if (pipe(fds) != 0) return 1;
  std::fflush(stdout);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t p = fork();
    if (p == 0) {
      close(fds[0]);
      fn(r, fds[1]);
    }
    pids.push_back(p);
  }
  close(fds[1]);
  char buf[4096];
  for (;;) {
    const ssize_t got = read(fds[0], buf, sizeof(buf));
    if (got <= 0) break;
    all->append(buf, static_cast<size_t>(got));
  }
  close(fds[0]);
  int worst = 0;
  for (int r = 0; r < n; ++r) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (code == 77 && worst == 0) worst = 77;
    if (code != 0 && code != 77 && !(r == victim && code == 128 + SIGKILL)) {
      all->append("rank " + std::to_string(r) + " ended with " +
                  (WIFEXITED(st) ? "exit code " + std::to_string(code) : "signal " + std::to_string(WTERMSIG(st))) +
                  "\n");
      worst = code;
    }
  }
  std::fputs(all->c_str(), stdout);
  return worst;
}

int usage() {
  std::printf(
      "usage: cuda_proc_test grid NRANKS [--hosts H] [--staged] [--quick]\n"
      "       cuda_proc_test onecopy NRANKS\n"
      "       cuda_proc_test kill NRANKS [--hosts H]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  const std::string mode = argv[1];
  Options o;
  o.n = std::atoi(argv[2]);
  for (int i = 3; i < argc; ++i) {
    if (std::strcmp(argv[i], "--hosts") == 0 && i + 1 < argc) {
      o.hosts = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--staged") == 0) {
      o.staged = true;
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      o.quick = true;
    } else {
      return usage();
    }
  }
  if (o.n < 2 || o.n > 8 || o.hosts < 1 || o.hosts > o.n || (mode != "grid" && mode != "kill" && mode != "onecopy")) {
    return usage();
  }
  std::printf("cuda_proc_test %s, %d ranks as processes on one GPU, %d host%s%s\n", mode.c_str(), o.n, o.hosts,
              o.hosts > 1 ? "s (sockets, host-staged)" : " (cuda_ipc)",
              o.staged ? ", P2P disabled (shm, host-staged)" : "");
  const auto t0 = std::chrono::steady_clock::now();
  std::string all;
  int rc = 0;
  if (mode == "onecopy") {
    std::vector<chorusUniqueId> ids(3);
    for (auto& id : ids) {
      if (chorusGetUniqueId(&id) != chorusSuccess) return 1;
    }
    rc = runRanks(
        o.n, -1, [&](int r, int out) { oneCopyRank(r, o, ids, out); }, &all);
  } else if (mode == "grid") {
    // The roots run in this process, which outlives every rank.
    std::vector<chorusUniqueId> ids(3);
    for (auto& id : ids) {
      if (chorusGetUniqueId(&id) != chorusSuccess) return 1;
    }
    rc = runRanks(
        o.n, -1, [&](int r, int out) { gridRank(r, o, ids, out); }, &all);
  } else {
    chorusUniqueId id;
    if (chorusGetUniqueId(&id) != chorusSuccess) return 1;
    rc = runRanks(
        o.n, o.n - 1, [&](int r, int out) { killRank(r, o, id, out); }, &all);
    if (rc == 0) {
      // Every survivor failed within kPromptS of the death, naming the dead rank.
      double died = 0;
      int victim = -1;
      std::vector<double> noticed(o.n, -1);
      std::vector<bool> named(o.n, false);
      size_t at = 0;
      while (at < all.size()) {
        const size_t end = all.find('\n', at);
        const std::string l = all.substr(at, end - at);
        at = end == std::string::npos ? all.size() : end + 1;
        int r = -1;
        double t = 0;
        if (std::sscanf(l.c_str(), "rank %d dies at %lf", &r, &t) == 2) {
          victim = r;
          died = t;
        } else if (std::sscanf(l.c_str(), "rank %d failed at %lf", &r, &t) == 2 && r >= 0 && r < o.n) {
          noticed[r] = t;
          named[r] = l.find("rank " + std::to_string(o.n - 1) + " ") != std::string::npos &&
                     l.find("cudaSuccess") != std::string::npos;
        }
      }
      for (int r = 0; r < o.n - 1; ++r) {
        const double took = noticed[r] - died;
        const bool ok = victim == o.n - 1 && noticed[r] >= 0 && took < kPromptS && named[r];
        std::printf("rank %d: %s", r, ok ? "ok" : "FAIL");
        if (noticed[r] >= 0) std::printf(", noticed %.3f s after the death", took);
        std::printf("%s\n", named[r] ? "" : " (no error naming the dead rank, or its kernel did not end cleanly)");
        if (!ok) rc = 1;
      }
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (rc == 77) {
    std::printf("SKIP: no CUDA device; the multi-process device checks were compiled but not run\n");
    return 77;
  }
  std::printf("%s: %.1f s\n", rc == 0 ? "PASSED" : "FAILED", s);
  return rc == 0 ? 0 : 1;
}
