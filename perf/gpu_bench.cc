// The device path's numbers on one GPU, in one run (docs/GPU.md, "Measurements"):
//   copy        cudaMemcpyAsync device to device: the rate every other line is compared with;
//   lanes copy  the launch kernel (src/device/prims_device.cuh) running one local copy lane per
//               block, the executor's own data movement (16-byte loads and stores);
//   reduce-copy the same with a reduction: out = out + in, two streams read and one written;
//   all-reduce  chorusAllReduce on device buffers, 1, 2 and 4 ranks as threads on this GPU, float
//               sum, the tuner's choices, algorithm and bus bandwidth as nccl-tests report them,
//               in place and (1 rank) out of place; beside each, the limit B (n-1) / n^2 of the
//               bus bandwidth (B: memcpy's traffic rate at 1 GiB; each rank reads and writes n
//               shares of 1/n of the data), and for 1 rank the time over memcpy's;
//   latency     an 8-byte all-reduce, 2 ranks, with CHORUS_PROTO=ll and simple: the time per call
//               of 1000 calls enqueued back to back, and of one call waited for.
// Rates are bytes of memory traffic per second (a copy reads and writes its bytes: 2 x size; a
// reduce-copy 3 x size), medians of the timed repetitions. Not a test: it prints, and exits 77
// when there is no GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "include/chorus/chorus.h"
#include "include/chorus/chorus_cuda.h"
#include "src/algo/schedule.h"
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

// memcpy's traffic rate at 1 GiB, GB/s (what the all-reduce lines are held against).
double memoryRates() {
  double largestCopy = 0;
  std::printf("\n== memory: GB/s of traffic (copy: 2 x size, reduce-copy: 3 x size), median of 20\n");
  std::printf("%12s %12s %14s %14s %14s %14s %10s\n", "size (B)", "memcpy D2D", "lanes copy 32", "lanes copy 64",
              "reduce-copy 32", "reduce-copy 64", "rc/memcpy");
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  device::DeviceCommState* state = nullptr;
  device::DeviceError* error = nullptr;
  uint32_t* abortWord = nullptr;
  device::DeviceCommState hostState{};
  CUDA_OK(cudaMalloc(&hostState.p2pSendSeq, device::kMaxBlocks * sizeof(uint64_t)));
  CUDA_OK(cudaMemset(hostState.p2pSendSeq, 0, device::kMaxBlocks * sizeof(uint64_t)));
  CUDA_OK(cudaMalloc(&state, sizeof(device::DeviceCommState)));
  CUDA_OK(cudaMemcpy(state, &hostState, sizeof(hostState), cudaMemcpyHostToDevice));
  CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&error), sizeof(device::DeviceError), cudaHostAllocMapped));
  CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&abortWord), sizeof(uint32_t), cudaHostAllocMapped));
  *abortWord = 0;
  *error = device::DeviceError{};
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
        const device::LaunchParams p = localLaunch(reduce != 0, a, b, n, blocks, state, error, abortWord);
        lanes[reduce][k] =
            timeOn(s, 20, [&] { CUDA_OK(cudaError_t(device::launchLanes(p, device::kLaunchThreads, s))); });
        if (error->status != 0) {
          std::printf("the launch kernel failed: fault %u\n", error->status);
          std::exit(1);
        }
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
  cudaStreamDestroy(s);
  return largestCopy;
}

// The ranks of tests/grid/cuda_ranks.h, with the bench's grouped all-reduce.
struct Ranks : test::CudaRanks {
  using CudaRanks::CudaRanks;
  // In place, or from `in` into `buf` when given.
  void allReduce(const std::vector<float*>& buf, size_t count, const std::vector<float*>* in = nullptr) {
    CHORUS_OK(chorusGroupStart());
    for (size_t r = 0; r < comms.size(); ++r) {
      CHORUS_OK(chorusAllReduce(in ? (*in)[r] : buf[r], buf[r], count, chorusFloat32, chorusSum, comms[r], streams[r]));
    }
    CHORUS_OK(chorusGroupEnd());
  }
};

// Seconds per all-reduce of `count` floats: `iters` enqueued back to back on every rank's stream,
// then all waited for; the median of `reps`.
double allReduceTime(Ranks& k, const std::vector<float*>& buf, size_t count, int iters, int reps,
                     const std::vector<float*>* in = nullptr) {
  k.allReduce(buf, count, in);
  k.sync();
  std::vector<double> t;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) k.allReduce(buf, count, in);
    k.sync();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters);
  }
  return median(t);
}

void allReduceBandwidth(int n, double copyRate) {
  const bool oneRank = n == 1;
  std::printf("\n== all-reduce, %d rank%s on one GPU, float sum, the tuner's choices%s\n", n, oneRank ? "" : "s",
              oneRank ? ": in place and out of place (no bus: the out-of-place time against memcpy's)"
                      : ", in place; limit = memcpy's traffic rate x (n-1)/n^2");
  if (oneRank) {
    std::printf("%12s %14s %14s %14s %14s\n", "size (B)", "in place (us)", "out (us)", "memcpy (us)", "out/memcpy");
  } else {
    std::printf("%12s %12s %12s %12s %12s %10s\n", "size (B)", "time (us)", "algbw GB/s", "busbw GB/s", "limit GB/s",
                "of limit");
  }
  Ranks k(n);
  const size_t maxBytes = size_t(256) << 20;
  std::vector<float*> buf(n);
  std::vector<float*> in(n);
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaMalloc(&buf[r], maxBytes));
    CUDA_OK(cudaMemset(buf[r], 0, maxBytes));
    in[r] = nullptr;
    if (oneRank) {
      CUDA_OK(cudaMalloc(&in[r], maxBytes));
      CUDA_OK(cudaMemset(in[r], 0, maxBytes));
    }
  }
  cudaStream_t s = nullptr;
  if (oneRank) CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (size_t bytes = 8; bytes <= maxBytes; bytes <<= 3) {
    const size_t count = bytes / sizeof(float);
    const int iters = bytes <= (size_t(1) << 20) ? 200 : 10;
    const double t = allReduceTime(k, buf, count, iters, 5);
    if (oneRank) {
      const double out = allReduceTime(k, buf, count, iters, 5, &in);
      const double copy =
          timeOn(s, 20, [&] { CUDA_OK(cudaMemcpyAsync(buf[0], in[0], bytes, cudaMemcpyDeviceToDevice, s)); });
      std::printf("%12zu %14.2f %14.2f %14.2f %14.2f\n", bytes, t * 1e6, out * 1e6, copy * 1e6, out / copy);
      continue;
    }
    const double alg = bytes / t / 1e9;
    const double bus = alg * 2.0 * (n - 1) / n;
    const double limit = copyRate * (n - 1) / (double(n) * n);
    std::printf("%12zu %12.2f %12.2f %12.2f %12.1f %9.0f%%\n", bytes, t * 1e6, alg, bus, limit, 100.0 * bus / limit);
  }
  if (s) cudaStreamDestroy(s);
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaFree(buf[r]));
    if (in[r]) CUDA_OK(cudaFree(in[r]));
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
      const double many = allReduceTime(k, buf, 2, 1000, 7);
      const double one = allReduceTime(k, buf, 2, 1, 201);
      std::printf("%8s %26.2f %22.2f\n", proto, many * 1e6, one * 1e6);
      for (auto b : buf) CUDA_OK(cudaFree(b));
    }
    unsetenv("CHORUS_PROTO");
  }
}

}  // namespace

int main() {
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
  const double copyRate = memoryRates();
  latency();
  allReduceBandwidth(1, copyRate);
  allReduceBandwidth(2, copyRate);
  allReduceBandwidth(4, copyRate);
  return 0;
}
