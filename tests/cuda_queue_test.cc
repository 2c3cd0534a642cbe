// Ranks that share one GPU as threads of one process, and the hardware queues through which CUDA
// feeds the process's streams to the GPU (CUDA_DEVICE_MAX_CONNECTIONS; src/core/device_comm.h,
// sharedGpuWarning). Two ranks, each on a CUDA stream of its own; after a first all-reduce of both
// (which connects them), one thread enqueues rank 0's next two all-reduces, then rank 1's two:
//   - `cuda_queue_test 32`: CUDA's most queues, the two streams made one after the other, each in a
//     queue of its own: the four all-reduces run, every element checked; init warns of nothing.
//   - `cuda_queue_test 1`: one queue, in submission order: rank 0's second kernel waits in it for
//     rank 0's first, which waits for rank 1's first, queued behind the second (or the first call
//     of both already stalls, the event recorded after rank 0's kernel waiting in the queue ahead
//     of rank 1's). Init warns that the queues are few; the stall ends at the deadline
//     (CHORUS_TIMEOUT=3) with both ranks failed, and rank 0's failed entry names
//     CUDA_DEVICE_MAX_CONNECTIONS.
// The variable is read when CUDA makes the process's context, so each count is a process of its
// own (two ctest entries). Needs a CUDA device: without one it says so and exits with 77.
#include <cuda_runtime.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "include/chorus/chorus.h"
#include "include/chorus/chorus_cuda.h"
#include "tests/grid/cuda_ranks.h"
#include "tests/grid/state_dump.h"

namespace {

using chorus::test::has;
using chorus::test::readFile;

std::string dump(chorusComm_t comm) { return chorus::test::stateDump(comm, "cuda_queue"); }
std::string line(const std::string& d, const std::string& what) { return chorus::test::dumpLine(d, what); }

constexpr size_t kCount = 1 << 15;  // 128 KiB of floats: a few channels, the same kernel every call

// Rank r's input for call c: small integers, so every sum is exact.
float input(int r, int c, size_t i) { return static_cast<float>((static_cast<int>(i % 97) + 3 * r + 5 * c) % 23); }

void fill(float* dev, int r, int c, cudaStream_t s) {
  std::vector<float> h(kCount);
  for (size_t i = 0; i < kCount; ++i) h[i] = input(r, c, i);
  CUDA_OK(cudaMemcpyAsync(dev, h.data(), kCount * sizeof(float), cudaMemcpyHostToDevice, s));
  CUDA_OK(cudaStreamSynchronize(s));
}

int run(int queues) {
  chorus::test::CudaRanks k(2);
  float* buf[2][2];  // [rank][call]
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 2; ++c) CUDA_OK(cudaMalloc(&buf[r][c], kCount * sizeof(float)));
  }
  // Both ranks at once first: the first operation between two ranks connects them, and each
  // rank's kernels, schedules and FIFOs are in place before the order below is set up.
  for (int r = 0; r < 2; ++r) fill(buf[r][0], r, 0, k.cuda[r]);
  chorusGroupStart();
  for (int r = 0; r < 2; ++r) {
    chorusAllReduce(buf[r][0], buf[r][0], kCount, chorusFloat32, chorusSum, k.comms[r], k.streams[r]);
  }
  EXPECT(chorusGroupEnd() == chorusSuccess, "the first all-reduce: %s", chorusGetLastError(nullptr));
  k.sync();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the device watchdog looks every 50 ms
  chorusResult_t async[2] = {chorusSuccess, chorusSuccess};
  for (int r = 0; r < 2; ++r) EXPECT(chorusCommGetAsyncError(k.comms[r], &async[r]) == chorusSuccess, "async error");
  // One queue may already stall here (each launch is followed on its stream by an event record,
  // which waits in the queue for its kernel): then that call shows the cause, and the order below
  // is not needed to show it.
  const bool stalledFirst = async[0] != chorusSuccess || async[1] != chorusSuccess;
  double seconds = 0;
  if (!stalledFirst) {
    // Rank 0's two calls, then rank 1's, from this one thread: each call returns once enqueued.
    for (int r = 0; r < 2; ++r) {
      for (int c = 0; c < 2; ++c) fill(buf[r][c], r, c + 1, k.cuda[r]);
    }
    for (int r = 0; r < 2; ++r) {
      for (int c = 0; c < 2; ++c) {
        EXPECT(chorusAllReduce(buf[r][c], buf[r][c], kCount, chorusFloat32, chorusSum, k.comms[r], k.streams[r]) ==
                   chorusSuccess,
               "enqueue rank %d's call %d: %s", r, c, chorusGetLastError(nullptr));
      }
    }
    const auto start = std::chrono::steady_clock::now();
    k.sync();  // kernels end at the latest at their deadline
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the device watchdog looks every 50 ms
    for (int r = 0; r < 2; ++r) EXPECT(chorusCommGetAsyncError(k.comms[r], &async[r]) == chorusSuccess, "async");
  }
  std::printf("%d queue(s): %s; ranks' states %d and %d\n", queues,
              stalledFirst ? "the first all-reduce stalled"
                           : ("the four all-reduces ended after " + std::to_string(seconds) + " s").c_str(),
              async[0], async[1]);
  const std::string d = dump(k.comms[0]);
  // The entry that failed first: the one whose kernel gave up (those behind it were not run).
  const std::string l = line(d, stalledFirst ? "device AllReduce seq 1" : "device AllReduce seq 2");
  std::printf("rank 0's entry: %s\n", l.c_str());
  if (queues >= 2) {
    EXPECT(async[0] == chorusSuccess && async[1] == chorusSuccess, "both ranks healthy:\n%s", d.c_str());
    for (int r = 0; r < 2; ++r) {
      for (int c = 0; c < 2; ++c) {
        std::vector<float> h(kCount);
        CUDA_OK(cudaMemcpy(h.data(), buf[r][c], kCount * sizeof(float), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < kCount; ++i) {
          const float want = input(0, c + 1, i) + input(1, c + 1, i);
          if (h[i] != want) {
            EXPECT(false, "rank %d call %d element %zu: %g, want %g", r, c, i, h[i], want);
            break;
          }
        }
      }
    }
  } else {
    EXPECT(async[0] != chorusSuccess && async[1] != chorusSuccess, "both ranks failed at the deadline:\n%s", d.c_str());
    EXPECT(has(l, " failed ") && has(l, "gave up after 3 s") &&
               has(l, "CUDA_DEVICE_MAX_CONNECTIONS, " + std::to_string(queues) + " queues here"),
           "rank 0's entry names the cause: %s\n%s", l.c_str(), d.c_str());
  }
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 2; ++c) cudaFree(buf[r][c]);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int queues = argc > 1 ? std::atoi(argv[1]) : 0;
  if (queues < 1 || queues > 32) {
    std::printf("usage: cuda_queue_test QUEUES (1 to 32: CUDA_DEVICE_MAX_CONNECTIONS for this process)\n");
    return 2;
  }
  // Before the first CUDA call: CUDA reads the variable when it makes the context.
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", argv[1], 1);
  setenv("CHORUS_TIMEOUT", "3", 1);
  setenv("CHORUS_DEBUG", "WARN", 1);
  const std::string log = "/tmp/chorus_cuda_queue_" + std::to_string(::getpid()) + ".log";
  setenv("CHORUS_DEBUG_FILE", log.c_str(), 1);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("SKIP: %s; ranks sharing a GPU's queues were not checked\n",
                chorus::test::cudaSkipReason(e, devices).c_str());
    return 77;
  }
  CUDA_OK(cudaSetDevice(0));
  run(queues);
  const std::string warned = readFile(log);
  std::remove(log.c_str());
  const bool told = has(warned, "2 ranks of this process share this rank's GPU") &&
                    has(warned, "(" + std::to_string(queues) + " here)");
  if (queues < 32) {
    EXPECT(told, "init warns of the few queues; the log:\n%s", warned.c_str());
  } else {
    EXPECT(!has(warned, "ranks of this process share"), "no warning with 32 queues; the log:\n%s", warned.c_str());
  }
  const int failures = chorus::test::expectFailures();
  std::printf("%s: %d failures\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
