// The device path's numbers on one GPU, in one run (docs/GPU.md, "Performance"):
//   copy        cudaMemcpyAsync device to device: the rate every other line is compared with;
//   lanes copy  the launch kernel (src/device/prims_device.cuh) running one local copy lane per
//               block, the executor's own data movement (16-byte loads and stores);
//   reduce-copy the same with a reduction: out = out + in, two streams read and one written;
//   latency     an 8-byte all-reduce, 2 ranks, with CHORUS_PROTO=ll and simple: the time per call
//               of 1000 calls enqueued back to back, and of one call waited for;
//   host cost   the CPU time to enqueue one call: the CUDA calls a launch is made of (a memcpy,
//               an event, an empty kernel with a word and with a launch's parameters, the
//               launch kernel passed whole and passed as cuda::launch does), and 8-byte
//               all-reduces of Chorus (one rank in place, out of place, pre-multiplied; two
//               ranks) and NCCL (one rank);
//   one rank    every collective (all-reduce, all-gather, reduce-scatter, broadcast, reduce,
//               all-to-all) from 8 B to 1 GiB on a one-rank communicator, in place and out of
//               place, against memcpy of the message and, when NCCL_LIB_DIR holds NCCL's
//               libnccl.so.2, against NCCL's out-of-place call on the same buffers and stream;
//   2, 4 ranks  the same collectives with ranks as threads on this GPU, out of place, with the
//               tuner's choices (algorithm, protocol, blocks: what the flight recorder says ran),
//               with Simple, LL and LL128 forced, and with the one-copy collectives
//               (CHORUS_ALGO=one-copy); time and busbw as nccl-tests report them, and the
//               limit: busbw at memcpy's traffic rate B over the least traffic the collective
//               needs when its ranks share the GPU (for the all-reduce B (n-1) / n^2);
//   by algorithm the all-reduce, 2 and 4 ranks, with each algorithm (ring, tree, direct,
//               one-copy) and protocol (Simple, LL, LL128) forced: what tools/tuning_fit.py device fits the tuning
//               table's rows to;
//   slot size   the ring all-reduce under Simple, 2 ranks, 1 MiB up, with device ring slots of
//               128 KiB to 2 MiB (CHORUS_DEVICE_SLOT_BYTES): what its default is set from.
// Rates are bytes of memory traffic per second (a copy reads and writes its bytes: 2 x size; a
// reduce-copy 3 x size), medians of the timed repetitions. The tables stop at GPU_BENCH_BUDGET
// seconds (default 240), saying so. Not a test: it prints, and exits 77 when there is no GPU.
// `gpu_bench profile` runs one of each kernel that waits on no other, for Nsight Compute
// (tools/ncu_profile.sh).
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "include/chorus/chorus.h"
#include "include/chorus/chorus_cuda.h"
#include "src/algo/schedule.h"
#include "src/device/cuda.h"
#include "src/device/prims_device.h"
#include "tests/grid/cuda_ranks.h"

using namespace chorus;

namespace {

#define CHORUS_OK(x)                                                                                       \
  do {                                                                                                     \
    if ((x) != chorusSuccess) {                                                                            \
      std::printf("chorus error at %s:%d: %s: %s\n", __FILE__, __LINE__, #x, chorusGetLastError(nullptr)); \
      std::exit(1);                                                                                        \
    }                                                                                                      \
  } while (0)

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds of `run` (which enqueues on `s`), the median of `reps` after one warm-up, by events.
template <typename F>
double timeOn(cudaStream_t s, int reps, F run) {
  cudaEvent_t a, b;
  CUDA_OK(cudaEventCreate(&a));
  CUDA_OK(cudaEventCreate(&b));
  run();
  CUDA_OK(cudaStreamSynchronize(s));
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    CUDA_OK(cudaEventRecord(a, s));
    run();
    CUDA_OK(cudaEventRecord(b, s));
    CUDA_OK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e-3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(t);
}

// A launch of `blocks` lanes, each one step with no peer over its part of n floats: a copy
// (kLocal without the pre-op) or a reduce-copy (kLocalReduce: out = out + in).
device::LaunchParams localLaunch(bool reduce, const float* in, float* out, size_t n, int blocks,
                                 device::DeviceCommState* state, device::DeviceError* error,
                                 const uint32_t* abortWord) {
  device::LaunchParams p;
  p.state = state;
  p.error = error;
  p.abortFlag = abortWord;
  p.commId = 1;
  p.timeoutNs = 10'000'000'000ull;
  p.nblocks = static_cast<uint32_t>(blocks);
  for (int b = 0; b < blocks; ++b) {
    const Block part = partition(n, blocks, b);
    device::DeviceLane& l = p.lanes[b];
    l = device::DeviceLane{};
    l.nsteps = 1;
    l.step = Step{reduce ? Prim::kLocalReduce : Prim::kLocal, part.offset, part.offset, part.count};
    l.step.flags = kLocalNoPre;
    l.type = chorusFloat32;
    // A counter of its own per block (the point-to-point ones: 64 of them here), though a lane
    // with no peer tags no slot.
    l.seqKind = device::SeqKind::kP2pSend;
    l.seqIndex = b;
    l.slotBytes = 1 << 20;
    l.input = reinterpret_cast<const char*>(in);
    l.output = reinterpret_cast<char*>(out);
    p.laneBegin[b] = static_cast<uint16_t>(b);
  }
  p.laneBegin[blocks] = static_cast<uint16_t>(blocks);
  return p;
}

// What a launch of local lanes needs beside its buffers: a stream, the device state (a counter per
// block), the error record and the abort word, kept for the program's life.
struct LaneRig {
  cudaStream_t s = nullptr;
  device::DeviceCommState* state = nullptr;
  device::DeviceError* error = nullptr;
  uint32_t* abortWord = nullptr;
  LaneRig() {
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    device::DeviceCommState hostState{};
    CUDA_OK(cudaMalloc(&hostState.p2pSendSeq, device::kMaxBlocks * sizeof(uint64_t)));
    CUDA_OK(cudaMemset(hostState.p2pSendSeq, 0, device::kMaxBlocks * sizeof(uint64_t)));
    CUDA_OK(cudaMalloc(&state, sizeof(device::DeviceCommState)));
    CUDA_OK(cudaMemcpy(state, &hostState, sizeof(hostState), cudaMemcpyHostToDevice));
    CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&error), sizeof(device::DeviceError), cudaHostAllocMapped));
    CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&abortWord), sizeof(uint32_t), cudaHostAllocMapped));
    *abortWord = 0;
    *error = device::DeviceError{};
  }
  // Copy (or reduce-copy) lanes over n floats on `blocks` blocks, enqueued on s.
  void launch(bool reduce, const float* in, float* out, size_t n, int blocks) const {
    const device::LaunchParams p = localLaunch(reduce, in, out, n, blocks, state, error, abortWord);
    CUDA_OK(cudaError_t(device::launchLanes(p, device::kLaunchThreads, s)));
  }
  void checkFault() const {
    if (error->status != 0) {
      std::printf("the launch kernel failed: fault %u\n", error->status);
      std::exit(1);
    }
  }
};

// memcpy's traffic rate at 1 GiB, GB/s (what the all-reduce lines are held against).
double memoryRates() {
  double largestCopy = 0;
  std::printf("\n== memory: GB/s of traffic (copy: 2 x size, reduce-copy: 3 x size), median of 20\n");
  std::printf("%12s %12s %14s %14s %14s %14s %10s\n", "size (B)", "memcpy D2D", "lanes copy 32", "lanes copy 64",
              "reduce-copy 32", "reduce-copy 64", "rc/memcpy");
  const LaneRig rig;
  const cudaStream_t s = rig.s;
  for (size_t bytes = size_t(1) << 20; bytes <= (size_t(1) << 30); bytes <<= 2) {
    const size_t n = bytes / sizeof(float);
    float *a = nullptr, *b = nullptr;
    CUDA_OK(cudaMalloc(&a, bytes));
    CUDA_OK(cudaMalloc(&b, bytes));
    CUDA_OK(cudaMemset(a, 0, bytes));
    CUDA_OK(cudaMemset(b, 0, bytes));
    const double copy = timeOn(s, 20, [&] { CUDA_OK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s)); });
    double lanes[2][2];
    for (int reduce = 0; reduce < 2; ++reduce) {
      for (int k = 0; k < 2; ++k) {
        const int blocks = k ? 64 : 32;
        lanes[reduce][k] = timeOn(s, 20, [&] { rig.launch(reduce != 0, a, b, n, blocks); });
        rig.checkFault();
      }
    }
    const double gb = bytes / 1e9;
    largestCopy = 2 * gb / copy;
    std::printf("%12zu %12.1f %14.1f %14.1f %14.1f %14.1f %9.0f%%\n", bytes, 2 * gb / copy, 2 * gb / lanes[0][0],
                2 * gb / lanes[0][1], 3 * gb / lanes[1][0], 3 * gb / lanes[1][1],
                100.0 * (3 * gb / std::min(lanes[1][0], lanes[1][1])) / (2 * gb / copy));
    CUDA_OK(cudaFree(a));
    CUDA_OK(cudaFree(b));
  }
  return largestCopy;
}

// The collectives the tables measure, with nccl-tests' sizes and bus factors, and the least memory
// traffic each needs when its n ranks share one GPU (the limit column).
enum class Coll { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce, kAlltoAll };
constexpr Coll kColls[] = {Coll::kAllReduce, Coll::kAllGather, Coll::kReduceScatter,
                           Coll::kBroadcast, Coll::kReduce,    Coll::kAlltoAll};

const char* collName(Coll c) {
  switch (c) {
    case Coll::kAllReduce:
      return "all_reduce";
    case Coll::kAllGather:
      return "all_gather";
    case Coll::kReduceScatter:
      return "reduce_scatter";
    case Coll::kBroadcast:
      return "broadcast";
    case Coll::kReduce:
      return "reduce";
    default:
      return "alltoall";
  }
}

// nccl-tests' busbw = algbw x this (its per-collective "bus factor").
double busFactor(Coll c, int n) {
  switch (c) {
    case Coll::kAllReduce:
      return 2.0 * (n - 1) / n;
    case Coll::kBroadcast:
    case Coll::kReduce:
      return 1;
    default:
      return double(n - 1) / n;
  }
}

// The bytes every rank together must read and write for one call of `size` (nccl-tests' size: the
// message of an all-reduce, broadcast or reduce; an all-gather's output and a reduce-scatter's
// input; an all-to-all's buffer), over `size`: an all-reduce rank reads n shares and writes n
// shares of 1/n (2n in all); an all-gather rank writes its output and reads the others' shares of
// it (2n); a reduce-scatter rank reads its input and writes 1/n (n + 1); a broadcast writes and
// reads the message at every rank but the root (2(n-1)); a reduce reads n messages and writes one
// (n + 1); an all-to-all rank reads and writes its buffer (2n). The limit of busbw is then
// busFactor x B / this, B being memcpy's traffic rate: for the all-reduce B (n-1) / n^2.
double trafficFactor(Coll c, int n) {
  switch (c) {
    case Coll::kReduceScatter:
    case Coll::kReduce:
      return n + 1.0;
    case Coll::kBroadcast:
      return 2.0 * (n - 1);
    default:
      return 2.0 * n;
  }
}

// Ranks as threads on GPU 0 (tests/grid/cuda_ranks.h), every collective as one group.
struct Ranks : test::CudaRanks {
  using CudaRanks::CudaRanks;
  // One call of nccl-tests' `size` bytes on every rank, from send[r] into recv[r] (float sum, root 0).
  void run(Coll c, size_t size, const std::vector<float*>& send, const std::vector<float*>& recv) {
    const int n = static_cast<int>(comms.size());
    const size_t count = size / sizeof(float);
    const size_t share = count / n;  // all-gather's send, reduce-scatter's receive, all-to-all's per peer
    CHORUS_OK(chorusGroupStart());
    for (int r = 0; r < n; ++r) {
      switch (c) {
        case Coll::kAllReduce:
          CHORUS_OK(chorusAllReduce(send[r], recv[r], count, chorusFloat32, chorusSum, comms[r], streams[r]));
          break;
        case Coll::kAllGather:
          CHORUS_OK(chorusAllGather(send[r], recv[r], share, chorusFloat32, comms[r], streams[r]));
          break;
        case Coll::kReduceScatter:
          CHORUS_OK(chorusReduceScatter(send[r], recv[r], share, chorusFloat32, chorusSum, comms[r], streams[r]));
          break;
        case Coll::kBroadcast:
          CHORUS_OK(chorusBroadcast(send[r], recv[r], count, chorusFloat32, 0, comms[r], streams[r]));
          break;
        case Coll::kReduce:
          CHORUS_OK(chorusReduce(send[r], recv[r], count, chorusFloat32, chorusSum, 0, comms[r], streams[r]));
          break;
        case Coll::kAlltoAll:
          CHORUS_OK(chorusAlltoAll(send[r], recv[r], share, chorusFloat32, comms[r], streams[r]));
          break;
      }
    }
    CHORUS_OK(chorusGroupEnd());
  }
  // What rank 0's last device collective ran, from its flight recorder: "algo ring proto Simple
  // blocks 16" (the tuner's choice as the communicator planned it).
  std::string lastChoice() {
    char path[] = "/tmp/chorus-gpu-bench.XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) return "?";
    close(fd);
    std::string choice = "?";
    if (chorusCommDumpState(comms[0], path) == chorusSuccess) {
      std::ifstream in(path);
      std::string line;
      while (std::getline(in, line)) {
        const size_t a = line.find(" algo ");
        const size_t b = line.find(" on GPU ");
        if (line.find(" device ") != std::string::npos && a != std::string::npos && b != std::string::npos && b > a) {
          choice = line.substr(a + 6, b - a - 6);
        }
      }
    }
    unlink(path);
    return choice;
  }
};

// Seconds per call: one call to warm up and size the loop, then `reps` loops of calls enqueued
// back to back on every rank's stream (enough for about 10 ms each, at most 200), all waited for;
// the median per call.
template <typename F>
double timeCalls(Ranks& k, F call, int reps = 3) {
  auto loop = [&](int iters) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) call();
    k.sync();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
  };
  const double first = loop(1);
  const int iters = std::clamp(static_cast<int>(0.01 / std::max(first, 1e-7)), 1, 200);
  std::vector<double> t;
  for (int rep = 0; rep < reps; ++rep) t.push_back(loop(iters));
  return median(t);
}

// Zeroed buffers on the GPU, one per rank, freed with it.
struct Buffers {
  std::vector<float*> p;
  Buffers(int n, size_t bytes) : p(n) {
    for (float*& b : p) {
      CUDA_OK(cudaMalloc(&b, bytes));
      CUDA_OK(cudaMemset(b, 0, bytes));
    }
  }
  ~Buffers() {
    for (float* b : p) cudaFree(b);
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
};

// The sizes every table measures: 8 B to 1 GiB, by 8.
std::vector<size_t> tableSizes() {
  std::vector<size_t> s;
  for (size_t b = 8; b <= (size_t(1) << 30); b <<= 3) s.push_back(b);
  return s;
}

// Forced LL and LL128 are measured up to this size: past it they only show that they lose.
constexpr size_t kForcedLLMaxBytes = size_t(64) << 20;

struct Budget {
  std::chrono::steady_clock::time_point end;
  bool said = false;
  bool spent() {
    if (std::chrono::steady_clock::now() < end) return false;
    if (!said) std::printf("(GPU_BENCH_BUDGET spent: the rows after this one were not measured)\n");
    said = true;
    return true;
  }
};

// NCCL itself (NCCL_LIB_DIR/libnccl.so.2, loaded by path beside Chorus), one rank: the reference
// line for the one-rank table. Its entry points by their NCCL 2.x C ABI (nccl.h's declarations).
struct Nccl {
  void* lib = nullptr;
  ncclComm_t comm = nullptr;
  decltype(&ncclCommInitAll) initAll = nullptr;
  decltype(&ncclCommDestroy) destroy = nullptr;
  decltype(&ncclAllReduce) allReduce = nullptr;
  decltype(&ncclAllGather) allGather = nullptr;
  decltype(&ncclReduceScatter) reduceScatter = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclReduce) reduce = nullptr;
  decltype(&ncclAlltoAll) alltoAll = nullptr;  // NCCL 2.28 has it; older ones: no all-to-all line

  Nccl() {
    const char* dir = std::getenv("NCCL_LIB_DIR");
    if (!dir || !*dir) return;
    const std::string path = std::string(dir) + "/libnccl.so.2";
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      std::printf("NCCL not loaded from %s: %s\n", path.c_str(), dlerror());
      return;
    }
    auto sym = [&](auto* f, const char* name) {
      *f = reinterpret_cast<std::remove_pointer_t<decltype(f)>>(dlsym(lib, name));
    };
    sym(&initAll, "ncclCommInitAll");
    sym(&destroy, "ncclCommDestroy");
    sym(&allReduce, "ncclAllReduce");
    sym(&allGather, "ncclAllGather");
    sym(&reduceScatter, "ncclReduceScatter");
    sym(&broadcast, "ncclBroadcast");
    sym(&reduce, "ncclReduce");
    sym(&alltoAll, "ncclAlltoAll");
    int dev = 0;
    if (!initAll || !destroy || !allReduce || !allGather || !reduceScatter || !broadcast || !reduce ||
        initAll(&comm, 1, &dev) != ncclSuccess) {
      std::printf("NCCL at %s: an entry point is missing or ncclCommInitAll failed\n", path.c_str());
      comm = nullptr;
    }
  }
  ~Nccl() {
    if (comm) destroy(comm);
  }
  bool ok() const { return comm != nullptr; }
  // One call on `s`; false when this NCCL has no such collective.
  bool run(Coll c, size_t size, const float* send, float* recv, cudaStream_t s) {
    const size_t count = size / sizeof(float);
    switch (c) {
      case Coll::kAllReduce:
        return allReduce(send, recv, count, ncclFloat32, ncclSum, comm, s) == ncclSuccess;
      case Coll::kAllGather:
        return allGather(send, recv, count, ncclFloat32, comm, s) == ncclSuccess;
      case Coll::kReduceScatter:
        return reduceScatter(send, recv, count, ncclFloat32, ncclSum, comm, s) == ncclSuccess;
      case Coll::kBroadcast:
        return broadcast(send, recv, count, ncclFloat32, 0, comm, s) == ncclSuccess;
      case Coll::kReduce:
        return reduce(send, recv, count, ncclFloat32, ncclSum, 0, comm, s) == ncclSuccess;
      case Coll::kAlltoAll:
        return alltoAll && alltoAll(send, recv, count, ncclFloat32, comm, s) == ncclSuccess;
    }
    return false;
  }
};

// One rank: nothing to carry, so every collective is at most a copy. In place and out of place
// against memcpy of the message, and NCCL's out-of-place time when NCCL_LIB_DIR has it.
void oneRankTable(Budget& budget) {
  Nccl nccl;
  std::printf("\n== one rank on the GPU, every collective, float sum, the tuner's choices: us per call%s\n",
              nccl.ok() ? "; NCCL: NCCL_LIB_DIR's libnccl.so.2, the same buffers and stream"
                        : " (NCCL_LIB_DIR unset: no NCCL column)");
  std::printf("%-15s %12s %-26s %12s %12s %12s %10s %12s %10s\n", "collective", "size (B)", "choice", "in place",
              "out of place", "memcpy", "out/memcpy", "NCCL out", "out/NCCL");
  Ranks k(1);
  const size_t maxBytes = tableSizes().back();
  const Buffers aBufs(1, maxBytes), bBufs(1, maxBytes);
  const std::vector<float*>& a = aBufs.p;
  const std::vector<float*>& b = bBufs.p;
  for (Coll c : kColls) {
    for (size_t size : tableSizes()) {
      if (budget.spent()) break;
      const double in = timeCalls(k, [&] { k.run(c, size, b, b); });
      const double out = timeCalls(k, [&] { k.run(c, size, a, b); });
      const std::string choice = k.lastChoice();
      const double copy =
          timeCalls(k, [&] { CUDA_OK(cudaMemcpyAsync(b[0], a[0], size, cudaMemcpyDeviceToDevice, k.cuda[0])); });
      double theirs = 0;
      if (nccl.ok() && nccl.run(c, size, a[0], b[0], k.cuda[0])) {
        theirs = timeCalls(k, [&] { nccl.run(c, size, a[0], b[0], k.cuda[0]); });
      }
      std::printf("%-15s %12zu %-26s %12.2f %12.2f %12.2f %10.2f", collName(c), size, choice.c_str(), in * 1e6,
                  out * 1e6, copy * 1e6, out / copy);
      if (theirs > 0) {
        std::printf(" %12.2f %10.2f\n", theirs * 1e6, out / theirs);
      } else {
        std::printf(" %12s %10s\n", "-", "-");
      }
    }
  }
}

// n ranks as threads on the GPU: every collective at every size with the tuner's choices, then
// with Simple, LL and LL128 forced and with one-copy (communicators of their own: CHORUS_PROTO and
// CHORUS_ALGO are read at init), out of place; busbw as nccl-tests computes it beside its limit.
void ranksTable(int n, double copyRate, Budget& budget) {
  std::printf(
      "\n== %d ranks on one GPU, every collective, float sum, out of place: time (us) and busbw (GB/s); "
      "limit = busbw at memcpy's rate (%.0f GB/s) over the least traffic the collective needs\n",
      n, copyRate);
  std::printf("%-15s %12s %-26s %10s %9s %10s %9s %10s %9s %10s %9s %10s %9s %9s %8s\n", "collective", "size (B)",
              "tuner's choice", "time", "busbw", "simple", "busbw", "ll", "busbw", "ll128", "busbw", "one-copy",
              "busbw", "limit", "best %");
  constexpr int kModes = 5;
  std::vector<std::unique_ptr<Ranks>> modes;
  for (const char* proto : {"", "simple", "ll", "ll128"}) {
    if (*proto) setenv("CHORUS_PROTO", proto, 1);
    modes.push_back(std::make_unique<Ranks>(n));
    unsetenv("CHORUS_PROTO");
  }
  setenv("CHORUS_ALGO", "one-copy", 1);  // offered on every collective on channels
  modes.push_back(std::make_unique<Ranks>(n));
  unsetenv("CHORUS_ALGO");
  const size_t maxBytes = tableSizes().back();
  const Buffers sendBufs(n, maxBytes), recvBufs(n, maxBytes);
  const std::vector<float*>& send = sendBufs.p;
  const std::vector<float*>& recv = recvBufs.p;
  for (Coll c : kColls) {
    for (size_t size : tableSizes()) {
      if (budget.spent()) break;
      if (size < sizeof(float) * n) continue;  // a share of at least one element
      double t[kModes] = {0, 0, 0, 0, 0};
      std::string choice;
      for (int m = 0; m < kModes; ++m) {
        if ((m == 2 || m == 3) && size > kForcedLLMaxBytes) continue;
        if (m == 4 && c == Coll::kAlltoAll) continue;  // not a collective on channels
        Ranks& k = *modes[m];
        t[m] = timeCalls(k, [&] { k.run(c, size, send, recv); });
        if (m == 0) choice = k.lastChoice();
      }
      auto bus = [&](double secs) { return secs > 0 ? size / secs / 1e9 * busFactor(c, n) : 0.0; };
      const double limit = busFactor(c, n) * copyRate / trafficFactor(c, n);
      const double best = std::max({bus(t[0]), bus(t[1]), bus(t[2]), bus(t[3]), bus(t[4])});
      std::printf("%-15s %12zu %-26s %10.2f %9.2f %10.2f %9.2f", collName(c), size, choice.c_str(), t[0] * 1e6,
                  bus(t[0]), t[1] * 1e6, bus(t[1]));
      for (int m = 2; m < kModes; ++m) {
        if (t[m] > 0) {
          std::printf(" %10.2f %9.2f", t[m] * 1e6, bus(t[m]));
        } else {
          std::printf(" %10s %9s", "-", "-");
        }
      }
      std::printf(" %9.1f %7.0f%%\n", limit, 100.0 * best / limit);
    }
  }
}

// The all-reduce with each algorithm and protocol forced (CHORUS_ALGO, CHORUS_PROTO; communicators
// of their own), out of place: the times tools/tuning_fit.py device fits the tuning table's device
// rows to, in one run. Forced LL, LL128 and direct stop at kForcedLLMaxBytes. The one-copy all-reduce
// has no protocol of its own: one column (its lanes are the same under either).
void algoTable(int n, Budget& budget) {
  struct Column {
    const char* algo;
    const char* proto;
  };
  static const Column kColumns[] = {
      {"ring", "simple"}, {"ring", "ll"},       {"ring", "ll128"}, {"tree", "simple"},  {"tree", "ll"},
      {"tree", "ll128"},  {"direct", "simple"}, {"direct", "ll"},  {"direct", "ll128"}, {"one-copy", "simple"}};
  std::printf(
      "\n== all-reduce by algorithm, %d ranks on one GPU, out of place: us per call (tools/tuning_fit.py device)\n", n);
  std::printf("%12s", "size (B)");
  for (const Column& c : kColumns) std::printf(" %12s", (std::string(c.algo) + "/" + c.proto).c_str());
  std::printf("\n");
  std::vector<std::unique_ptr<Ranks>> comms;
  for (const Column& c : kColumns) {
    setenv("CHORUS_ALGO", c.algo, 1);
    setenv("CHORUS_PROTO", c.proto, 1);
    comms.push_back(std::make_unique<Ranks>(n));
  }
  unsetenv("CHORUS_ALGO");
  unsetenv("CHORUS_PROTO");
  const size_t maxBytes = tableSizes().back();
  const Buffers sendBufs(n, maxBytes), recvBufs(n, maxBytes);
  const std::vector<float*>& send = sendBufs.p;
  const std::vector<float*>& recv = recvBufs.p;
  for (size_t size : tableSizes()) {
    if (budget.spent()) break;
    std::printf("%12zu", size);
    for (size_t i = 0; i < comms.size(); ++i) {
      const bool ll = std::strncmp(kColumns[i].proto, "ll", 2) == 0;
      const bool direct = std::strcmp(kColumns[i].algo, "direct") == 0;
      if ((ll || direct) && size > kForcedLLMaxBytes) {
        std::printf(" %12s", "-");
        continue;
      }
      Ranks& k = *comms[i];
      std::printf(" %12.2f", timeCalls(k, [&] { k.run(Coll::kAllReduce, size, send, recv); }) * 1e6);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
}

// The ring all-reduce under Simple at 2 ranks with each device ring slot size
// (CHORUS_DEVICE_SLOT_BYTES; communicators of their own), out of place, from 1 MiB: what the
// default is set from. busbw as nccl-tests computes it.
void slotTable(Budget& budget) {
  static const size_t kSlots[] = {size_t(128) << 10, size_t(256) << 10, size_t(512) << 10, size_t(1) << 20,
                                  size_t(2) << 20};
  const int n = 2;
  std::printf(
      "\n== all-reduce, ring, Simple, %d ranks on one GPU, out of place, by device slot size "
      "(CHORUS_DEVICE_SLOT_BYTES): busbw (GB/s)\n",
      n);
  std::printf("%12s", "size (B)");
  for (size_t s : kSlots) std::printf(" %10zuK", s >> 10);
  std::printf("\n");
  std::vector<std::unique_ptr<Ranks>> comms;
  setenv("CHORUS_ALGO", "ring", 1);
  setenv("CHORUS_PROTO", "simple", 1);
  for (size_t s : kSlots) {
    setenv("CHORUS_DEVICE_SLOT_BYTES", std::to_string(s).c_str(), 1);
    comms.push_back(std::make_unique<Ranks>(n));
  }
  unsetenv("CHORUS_DEVICE_SLOT_BYTES");
  unsetenv("CHORUS_PROTO");
  unsetenv("CHORUS_ALGO");
  const size_t maxBytes = tableSizes().back();
  const Buffers sendBufs(n, maxBytes), recvBufs(n, maxBytes);
  for (size_t size = size_t(1) << 20; size <= maxBytes; size <<= 2) {
    if (budget.spent()) break;
    std::printf("%12zu", size);
    for (auto& k : comms) {
      const double t = timeCalls(*k, [&] { k->run(Coll::kAllReduce, size, sendBufs.p, recvBufs.p); });
      std::printf(" %11.1f", static_cast<double>(size) / t / 1e9 * busFactor(Coll::kAllReduce, n));
    }
    std::printf("\n");
    std::fflush(stdout);
  }
}

void latency() {
  std::printf("\n== 8-byte all-reduce (2 floats), 2 ranks on one GPU: us per call\n");
  std::printf("%8s %26s %22s\n", "proto", "1000 back to back (median)", "one, waited (median)");
  for (const char* proto : {"ll", "simple"}) {
    setenv("CHORUS_PROTO", proto, 1);
    {
      Ranks k(2);
      std::vector<float*> buf(2);
      for (auto& b : buf) {
        CUDA_OK(cudaMalloc(&b, 8));
        CUDA_OK(cudaMemset(b, 0, 8));
      }
      auto loop = [&](int iters) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) k.run(Coll::kAllReduce, 8, buf, buf);
        k.sync();
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
      };
      loop(10);
      std::vector<double> many, one;
      for (int rep = 0; rep < 7; ++rep) many.push_back(loop(1000));
      for (int rep = 0; rep < 201; ++rep) one.push_back(loop(1));
      std::printf("%8s %26.2f %22.2f\n", proto, median(many) * 1e6, median(one) * 1e6);
      for (auto b : buf) CUDA_OK(cudaFree(b));
    }
    unsetenv("CHORUS_PROTO");
  }
}

// Kernels for the host-cost table: nothing to do, with a word of parameters and with a launch's
// (device::LaunchParams, what every Chorus kernel launch passes).
__global__ void emptyWord(uint64_t) {}
__global__ void emptyLaunchParams(device::LaunchParams) {}

// CPU time to enqueue one call, us: the median over 7 loops of 200 calls back to back on `s`, each
// loop's work waited for outside its timing (the GPU's time is not in it unless a driver queue
// filled, which 200 small calls do not).
template <typename Wait, typename F>
double hostCostWaiting(Wait wait, F call) {
  call();
  wait();
  std::vector<double> per;
  for (int rep = 0; rep < 7; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 200; ++i) call();
    per.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 200);
    wait();
  }
  return median(per) * 1e6;
}
template <typename F>
double hostCost(cudaStream_t s, F call) {
  return hostCostWaiting([s] { CUDA_OK(cudaStreamSynchronize(s)); }, call);
}

// Where a small call's time goes on the host (docs/records/2026-11-29-gpu-next.md, "The call's
// fixed cost"): the CUDA calls a launch is made of, alone, beside Chorus's and NCCL's calls of 8
// bytes. Differences between lines place the cost; nothing here is a test.
void hostCostTable() {
  std::printf("\n== host cost of one call: CPU time to enqueue it, us (200 back to back, median of 7 loops)\n");
  Ranks k(1);
  const Buffers a(1, 64), b(1, 64);
  cudaStream_t s = k.cuda[0];
  cudaEvent_t ev;
  CUDA_OK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  static device::LaunchParams params;  // 27 KB: not on the stack
  auto line = [](const std::string& what, double us) { std::printf("%-72s %8.2f\n", what.c_str(), us); };
  line("cudaMemcpyAsync, 8 B device to device",
       hostCost(s, [&] { CUDA_OK(cudaMemcpyAsync(b.p[0], a.p[0], 8, cudaMemcpyDeviceToDevice, s)); }));
  line("cudaEventRecord", hostCost(s, [&] { CUDA_OK(cudaEventRecord(ev, s)); }));
  line("cudaStreamWaitEvent", hostCost(s, [&] {
                                CUDA_OK(cudaEventRecord(ev, s));
                                CUDA_OK(cudaStreamWaitEvent(s, ev, 0));
                              }) - hostCost(s, [&] { CUDA_OK(cudaEventRecord(ev, s)); }));
  line("cudaStreamQuery", hostCost(s, [&] { (void)cudaStreamQuery(s); }));
  line("cudaPointerGetAttributes", hostCost(s, [&] {
         cudaPointerAttributes attr;
         CUDA_OK(cudaPointerGetAttributes(&attr, a.p[0]));
       }));
  line("empty kernel, 8 B of parameters", hostCost(s, [&] {
         emptyWord<<<1, 32, 0, s>>>(0);
         CUDA_OK(cudaGetLastError());
       }));
  line("empty kernel, 1 block, LaunchParams (" + std::to_string(sizeof(device::LaunchParams)) + " B of parameters)",
       hostCost(s, [&] {
         emptyLaunchParams<<<1, 32, 0, s>>>(params);
         CUDA_OK(cudaGetLastError());
       }));
  {
    // The collective kernel itself, one block copying 8 bytes (gpu_bench's copy lane): passing the
    // whole struct (the runtime's launch) and only the bytes it reads (cuda::launch, the driver's).
    const LaneRig rig;
    const device::LaunchParams one = localLaunch(false, a.p[0], b.p[0], 2, 1, rig.state, rig.error, rig.abortWord);
    line("launch kernel, 1 lane, whole LaunchParams (runtime launch)",
         hostCost(rig.s, [&] { CUDA_OK(cudaError_t(device::launchLanes(one, device::kLaunchThreads, rig.s))); }));
    line("launch kernel, 1 lane, " + std::to_string(device::launchParamsBytes(one)) +
             " B of parameters (cuda::launch, driver)",
         hostCost(rig.s, [&] {
           const Status st = cuda::launch(one, rig.s);
           if (!st.isOk()) {
             std::printf("cuda::launch: %s\n", st.message().c_str());
             std::exit(1);
           }
         }));
    rig.checkFault();
  }
  line("chorusAllReduce, one rank, 8 B, in place (no data to move)", hostCost(s, [&] {
         CHORUS_OK(chorusAllReduce(b.p[0], b.p[0], 2, chorusFloat32, chorusSum, k.comms[0], k.streams[0]));
       }));
  line("chorusAllReduce, one rank, 8 B, out of place (a copy)", hostCost(s, [&] {
         CHORUS_OK(chorusAllReduce(a.p[0], b.p[0], 2, chorusFloat32, chorusSum, k.comms[0], k.streams[0]));
       }));
  line("the same in chorusGroupStart/End", hostCost(s, [&] {
         CHORUS_OK(chorusGroupStart());
         CHORUS_OK(chorusAllReduce(a.p[0], b.p[0], 2, chorusFloat32, chorusSum, k.comms[0], k.streams[0]));
         CHORUS_OK(chorusGroupEnd());
       }));
  {
    // A pre-multiplied sum multiplies even on one rank: the one-rank call that runs the kernel.
    float two = 2.0f;
    chorusRedOp_t premul;
    CHORUS_OK(chorusRedOpCreatePreMulSum(&premul, &two, chorusFloat32, chorusScalarHostImmediate, k.comms[0]));
    line("chorusAllReduce, one rank, 8 B, pre-multiplied sum out of place (a kernel)", hostCost(s, [&] {
           CHORUS_OK(chorusAllReduce(a.p[0], b.p[0], 2, chorusFloat32, premul, k.comms[0], k.streams[0]));
         }));
    CHORUS_OK(chorusRedOpDestroy(premul, k.comms[0]));
  }
  {
    Nccl nccl;
    if (nccl.ok()) {
      line("ncclAllReduce, one rank, 8 B, in place",
           hostCost(s, [&] { (void)nccl.allReduce(b.p[0], b.p[0], 2, ncclFloat32, ncclSum, nccl.comm, s); }));
      line("ncclAllReduce, one rank, 8 B, out of place",
           hostCost(s, [&] { (void)nccl.allReduce(a.p[0], b.p[0], 2, ncclFloat32, ncclSum, nccl.comm, s); }));
    } else {
      std::printf("(NCCL_LIB_DIR unset or NCCL not loaded: no NCCL lines)\n");
    }
  }
  {
    Ranks two(2);
    const Buffers c(2, 64);
    // Both ranks' calls in one group from this thread: the kernels run while the loop enqueues.
    const double both = hostCostWaiting([&] { two.sync(); }, [&] { two.run(Coll::kAllReduce, 8, c.p, c.p); });
    line("chorusAllReduce, 2 ranks in one group, 8 B (per call of both ranks)", both);
  }
  CUDA_OK(cudaEventDestroy(ev));
}

}  // namespace

// `gpu_bench profile`, for Nsight Compute (tools/ncu_profile.sh): one launch each of the copy and
// reduce-copy lanes on 64 blocks over 256 MiB and one one-rank all-reduce of 256 MiB out of place
// (kernels that wait on no other kernel: a profiler that replays kernels one at a time would hang
// ranks that wait on each other), each checked.
int profile() {
  const size_t bytes = size_t(256) << 20;
  const size_t n = bytes / sizeof(float);
  const LaneRig rig;
  const Buffers in(1, bytes), out(1, bytes);
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000);
  CUDA_OK(cudaMemcpy(in.p[0], host.data(), bytes, cudaMemcpyHostToDevice));
  auto expect = [&](const char* what, float factor) {
    std::vector<float> got(n);
    CUDA_OK(cudaMemcpy(got.data(), out.p[0], bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) {
      if (got[i] != factor * host[i]) {
        std::printf("profile: %s: element %zu is %g, not %g\n", what, i, got[i], factor * host[i]);
        std::exit(1);
      }
    }
    std::printf("profile: %s of %zu B checked\n", what, bytes);
  };
  rig.launch(false, in.p[0], out.p[0], n, 64);
  CUDA_OK(cudaStreamSynchronize(rig.s));
  rig.checkFault();
  expect("lanes copy, 64 blocks", 1.0f);
  rig.launch(true, in.p[0], out.p[0], n, 64);  // out = out + in
  CUDA_OK(cudaStreamSynchronize(rig.s));
  rig.checkFault();
  expect("lanes reduce-copy, 64 blocks", 2.0f);
  Ranks k(1);
  k.run(Coll::kAllReduce, bytes, in.p, out.p);
  k.sync();
  expect("one-rank all-reduce", 1.0f);
  return 0;
}

int main(int argc, char** argv) {
  chorus::test::useAllCudaQueues();
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("SKIP: %s; nothing to measure\n", chorus::test::cudaSkipReason(e, devices).c_str());
    return 77;
  }
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device 0: %s, %d SMs, compute capability %d.%d\n", prop.name, prop.multiProcessorCount, prop.major,
              prop.minor);
  if (argc > 1 && std::strcmp(argv[1], "profile") == 0) return profile();
  const double copyRate = memoryRates();
  latency();
  hostCostTable();
  // The tables stop where the budget ends (GPU_BENCH_BUDGET seconds from here, default 240),
  // saying so: what ran is printed as it ran.
  const char* b = std::getenv("GPU_BENCH_BUDGET");
  Budget budget{std::chrono::steady_clock::now() + std::chrono::seconds(b ? std::atoi(b) : 240)};
  oneRankTable(budget);
  algoTable(2, budget);
  algoTable(4, budget);
  slotTable(budget);
  ranksTable(2, copyRate, budget);
  ranksTable(4, copyRate, budget);
  return 0;
}
